"""Retention keeps an output folder within its budget: oldest finished files first, never
an open one, never a file the run did not write; every removal counted."""
import os
import time

from pipeline.sinks.retention import Retention


def make(path, size: int, age_s: float) -> str:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(b"x" * size)
    t = time.time() - age_s
    os.utime(path, (t, t))
    return str(path)


def test_the_oldest_finished_files_go_first_until_the_folder_fits(tmp_path):
    old = make(tmp_path / "cam.20260101T000000Z.mp4", 400, 300)
    mid = make(tmp_path / "events" / "cam" / "a.jpg", 400, 200)
    new = make(tmp_path / "cam.20260101T010000Z.mp4", 400, 100)
    open_now = make(tmp_path / "cam.20260101T020000Z.mp4", 400, 500)  # oldest, but still being written
    other = make(tmp_path / "notes.txt", 4000, 1000)                   # not ours
    r = Retention(str(tmp_path), max_bytes=900, max_age_s=None, is_open=lambda p: p == open_now)
    removed = r.sweep()
    assert removed == [old, mid]
    assert os.path.exists(new) and os.path.exists(open_now) and os.path.exists(other)
    assert (r.stats.removed_files, r.stats.removed_bytes, r.stats.kept_bytes) == (2, 800, 800)


def test_files_older_than_the_age_limit_go_whatever_the_size(tmp_path):
    old = make(tmp_path / "cam.jsonl", 10, 3 * 86400)
    fresh = make(tmp_path / "cam.part1.jsonl", 10, 60)
    r = Retention(str(tmp_path), max_bytes=None, max_age_s=86400)
    assert r.sweep() == [old] and os.path.exists(fresh)


def test_a_runs_retention_leaves_events_to_its_own_and_reports_in_every_view(tmp_path):
    from pipeline.config import parse_config
    from pipeline.metrics.prometheus import SnapshotCollector
    from pipeline.metrics.registry import Metrics
    from pipeline.metrics.report import summary_table
    from pipeline.sinks.retention import OutputRetention

    data = {"sources": [{"id": "cam", "uri": "rtsp://127.0.0.1:1/x"}],
            "models": {"det": {"path": __file__, "layout": "yolox", "input_size": 416}},
            "graph": [{"detect": {"model": "det"}}],
            "outputs": {"dir": str(tmp_path), "retain": {"max_gb": 1e-6}, "events": {"retain": {"max_days": 1}}}}
    outputs = parse_config(data, tmp_path).outputs
    segment = make(tmp_path / "cam.20260101T000000Z.mp4", 3000, 100)
    make(tmp_path / "cam.20260101T000100Z.mp4", 10, 40)  # the newest segment: never removed
    evidence = make(tmp_path / "events" / "cam" / "a.jpg", 3000, 200)  # over the byte budget, but not outputs'
    old_evidence = make(tmp_path / "events" / "cam" / "b.jpg", 10, 2 * 86400)
    metrics = Metrics()
    run = OutputRetention(outputs, lambda path: False, metrics)
    assert [part.sweep() for part in run.parts] == [[segment], [old_evidence]]
    assert os.path.exists(evidence)
    snap = metrics.snapshot()
    assert snap.retention["outputs"].removed_bytes == 3000 and snap.retention["events"].removed_files == 1
    assert "retention outputs: removed 1 file(s)" in summary_table(snap)
    exported = {s.name: s.value for m in SnapshotCollector(lambda: snap).collect() for s in m.samples
                if s.labels.get("folder") == "outputs"}
    assert exported["pipeline_retention_removed_files_total"] == 1


def test_the_newest_segment_of_each_camera_stays_whoever_writes_it(tmp_path):
    """On a cluster another host writes it: this process's `is_open` cannot know."""
    older = make(tmp_path / "cam1.20260101T000000Z.mp4", 100, 300)
    newest = make(tmp_path / "cam1.20260101T010000Z.mp4", 100, 200)
    lines = make(tmp_path / "cam1.20260101T010000Z.jsonl", 10, 200)
    other = make(tmp_path / "cam2.20260101T000000Z.mp4", 100, 250)
    r = Retention(str(tmp_path), max_bytes=0, max_age_s=None)
    assert r.sweep() == [older] and all(os.path.exists(p) for p in (newest, lines, other))
