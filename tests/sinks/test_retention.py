"""Retention keeps what the run writes within its budget: oldest finished files first,
never an open one, never a file the run did not write (its record and the names of its
cameras' files both say so), never a symlink or anything outside the folder; every
removal counted."""
import os
import time

from pipeline.config import parse_config
from pipeline.metrics.registry import Metrics
from pipeline.sinks.retention import OutputRetention
from pipeline.sinks.written import INDEX, WrittenIndex


def make(path, size: int, age_s: float, index: WrittenIndex | None = None, camera: str = "cam") -> str:
    """A file `age_s` old; entered in the run's record when `index` is given (the run wrote it)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(b"x" * size)
    t = time.time() - age_s
    os.utime(path, (t, t))
    if index is not None:
        index.add(camera, str(path))
    return str(path)


def outputs(tmp_path, cameras=("cam",), **more):
    data = {"sources": [{"id": c, "uri": "rtsp://127.0.0.1:1/x"} for c in cameras],
            "models": {"det": {"path": __file__, "layout": "yolox", "input_size": 416}},
            "graph": [{"detect": {"model": "det"}}],
            "outputs": {"dir": str(tmp_path), "jsonl": {"filename": "{camera}.jsonl"}, **more}}
    return parse_config(data, tmp_path).outputs


def retention(tmp_path, cameras=("cam",), is_open=lambda path: False, **more) -> tuple[OutputRetention, Metrics]:
    metrics = Metrics()
    return OutputRetention(outputs(tmp_path, cameras, **more), is_open, metrics, WrittenIndex(str(tmp_path)),
                           cameras=lambda: dict.fromkeys(cameras)), metrics


def test_the_oldest_finished_files_go_first_until_the_folder_fits(tmp_path):
    index = WrittenIndex(str(tmp_path))
    old = make(tmp_path / "cam.20260101T000000Z.mp4", 400, 300, index)
    mid = make(tmp_path / "cam.jsonl", 400, 200, index)
    new = make(tmp_path / "cam.20260101T010000Z.mp4", 400, 100, index)
    open_now = make(tmp_path / "cam.20260101T020000Z.mp4", 400, 500, index)  # oldest, but still being written
    run, _ = retention(tmp_path, is_open=lambda p: p == open_now, retain={"max_gb": 900e-9})
    (part,) = run.parts
    assert part.sweep() == [old, mid]
    assert os.path.exists(new) and os.path.exists(open_now)
    assert (part.stats.removed_files, part.stats.removed_bytes, part.stats.kept_bytes) == (2, 800, 800)


def test_files_older_than_the_age_limit_go_whatever_the_size(tmp_path):
    index = WrittenIndex(str(tmp_path))
    old = make(tmp_path / "cam.jsonl", 10, 3 * 86400, index)
    fresh = make(tmp_path / "cam.part1.mp4", 10, 60, index)
    run, _ = retention(tmp_path, retain={"max_days": 1})
    assert run.parts[0].sweep() == [old] and os.path.exists(fresh)


def test_retention_removes_only_the_files_the_run_wrote_for_its_cameras(tmp_path):
    """The files of the hostile round: the user's own, another camera's, look-alikes the
    run never wrote, a symlink to a big file outside, a folder linked outside."""
    out, outside = tmp_path / "out", tmp_path / "outside"
    index = WrittenIndex(str(out))
    ours = [make(out / "campus.20200101T000000Z.mp4", 1000, 900, index, "campus"),
            make(out / "campus.20200101T000000Z.jsonl", 100, 900, index, "campus"),
            make(out / "events" / "campus" / "20200101T000000.000Z_1.jpg", 100, 900, index, "campus"),
            make(out / "events" / "campus" / "20200101T000000.000Z_1_0_crossing_path_in_t3.crop.jpg", 50, 900, index,
                 "campus"),
            make(out / "events" / "campus" / "20200101T000000.000Z_1.mp4", 500, 900, index, "campus")]
    newest = [make(out / "campus.20200101T000100Z.mp4", 1000, 800, index, "campus"),  # being written, maybe elsewhere
              make(out / "campus.20200101T000100Z.jsonl", 100, 800, index, "campus")]
    theirs = [make(out / "holiday.mp4", 1000, 10**6, None), make(out / "mydata.jsonl", 1000, 10**6, None),
              make(out / "sub" / "wedding.jpg", 1000, 10**6, None),
              make(out / "oldcam.20200101T000000Z.mp4", 1000, 10**6, index, "oldcam"),  # a camera not in this run
              make(out / "campus.20190101T000000Z.mp4", 1000, 10**6, None),  # our name, but never written by us
              make(out / "events" / "holiday.jpg", 1000, 10**6, None),
              make(out / "events" / "campus" / "my-own-clip.mp4", 1000, 10**6, None),
              make(out / "events" / "othercam" / "20200101T000000.000Z_1.jpg", 1000, 10**6, index, "othercam")]
    big = make(outside / "big.bin", 10**6, 10**6)
    os.symlink(big, out / "campus.20200101T000001Z.mp4")  # a name of ours, in the record, but a link
    index.add("campus", str(out / "campus.20200101T000001Z.mp4"))
    os.makedirs(outside / "yard")
    yard = make(outside / "yard" / "20200101T000000.000Z_1.jpg", 1000, 10**6)
    os.symlink(outside / "yard", out / "events" / "yard")  # a folder of ours that leads outside
    index.add("yard", str(out / "events" / "yard" / "20200101T000000.000Z_1.jpg"))
    index.add("campus", str(out / "sub" / ".." / ".." / "outside" / "big.bin"))  # a record pointing out

    run, metrics = retention(out, cameras=("campus", "yard"), retain={"max_gb": 1e-9},
                             events={"retain": {"max_gb": 1e-9}})
    removed = [path for part in run.parts for path in part.sweep()]
    assert sorted(removed) == sorted(ours)
    assert all(os.path.exists(p) for p in theirs + newest + [big, yard])
    assert os.path.islink(out / "campus.20200101T000001Z.mp4") and os.path.islink(out / "events" / "yard")
    assert metrics.snapshot().retention["outputs"].kept_bytes == 1100  # the newest segment: the link's target
    assert metrics.snapshot().retention["events"].kept_bytes == 0      # is nobody's budget


def test_the_record_survives_a_restart_and_stays_small(tmp_path):
    first = WrittenIndex(str(tmp_path))
    files = [make(tmp_path / f"cam.20260101T{i // 60:02d}{i % 60:02d}00Z.mp4", 10, 10**5 - i, first) for i in range(200)]
    with open(tmp_path / INDEX, "ab") as f:
        f.write(b'{"camera":"cam","pa')  # a line torn by a power cut: skipped, the next ones start anew
    make(tmp_path / "cam.20260102T000000Z.mp4", 10, 10, WrittenIndex(str(tmp_path)))
    run, _ = retention(tmp_path, retain={"max_gb": 1e-9})  # a new process: only the record says what is ours
    assert run.parts[0].sweep() == files
    assert list(WrittenIndex(str(tmp_path)).entries()) == ["cam.20260102T000000Z.mp4"]
    assert len((tmp_path / INDEX).read_text().splitlines()) < 10  # rewritten without what is gone


def test_a_runs_retention_leaves_events_to_its_own_and_reports_in_every_view(tmp_path):
    from pipeline.metrics.prometheus import SnapshotCollector
    from pipeline.metrics.report import summary_table

    index = WrittenIndex(str(tmp_path))
    segment = make(tmp_path / "cam.20260101T000000Z.mp4", 3000, 100, index)
    make(tmp_path / "cam.20260101T000100Z.mp4", 10, 40, index)  # the newest segment: never removed
    evidence = make(tmp_path / "events" / "cam" / "20260101T000000.000Z_1.jpg", 3000, 200, index)  # not outputs'
    old_evidence = make(tmp_path / "events" / "cam" / "20260101T000000.000Z_2.jpg", 10, 2 * 86400, index)
    run, metrics = retention(tmp_path, retain={"max_gb": 1e-6}, events={"retain": {"max_days": 1}})
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
    index = WrittenIndex(str(tmp_path))
    older = make(tmp_path / "cam1.20260101T000000Z.mp4", 100, 300, index, "cam1")
    newest = make(tmp_path / "cam1.20260101T010000Z.mp4", 100, 200, index, "cam1")
    lines = make(tmp_path / "cam1.20260101T010000Z.jsonl", 10, 200, index, "cam1")
    other = make(tmp_path / "cam2.20260101T000000Z.mp4", 100, 250, index, "cam2")
    run, _ = retention(tmp_path, cameras=("cam1", "cam2"), retain={"max_gb": 1e-9})
    assert run.parts[0].sweep() == [older] and all(os.path.exists(p) for p in (newest, lines, other))


def test_recordings_cut_shorter_than_the_video_are_swept_at_their_own_pace(tmp_path):
    """`record.segment_s: 1` under an hour-long annotated video: a sweep a minute let the
    folder grow to many times its budget."""
    index = WrittenIndex(str(tmp_path))
    for i in range(4):
        make(tmp_path / f"cam.20260101T00000{i}Z.mp4", 1000, 10 - i, index)
    run, metrics = retention(tmp_path, retain={"max_gb": 2.5e-6}, video={"segment_s": 3600},
                             record={"enabled": True, "segment_s": 1})
    run.start()
    deadline = time.time() + 20
    while time.time() < deadline and len(os.listdir(tmp_path)) > 3:  # the record and the 2 that fit stay
        time.sleep(0.2)
    kept = sorted(os.listdir(tmp_path))  # before close(), which sweeps once more
    run.close()
    assert kept == [INDEX, "cam.20260101T000002Z.mp4", "cam.20260101T000003Z.mp4"]


def test_the_counts_at_the_end_are_the_folders(tmp_path):
    """A run shorter than a sweep's interval still reports what it keeps, and ends within its budget."""
    index = WrittenIndex(str(tmp_path))
    make(tmp_path / "cam.20260101T000000Z.mp4", 3000, 100, index)
    make(tmp_path / "cam.20260101T000100Z.mp4", 500, 40, index)
    run, metrics = retention(tmp_path, retain={"max_gb": 1e-6})
    run.start()
    run.close()
    stats = metrics.snapshot().retention["outputs"]
    assert (stats.removed_files, stats.kept_bytes) == (1, 500)


def test_the_newest_of_a_series_is_told_by_its_stamp_and_suffix_not_by_the_names_text():
    """A recording named in a second already taken gets `-N` (the clock went back): `-10`
    is newer than `-2`, and both newer than the second's first file, though their text
    sorts the other way round."""
    from pipeline.sinks.retention import newest_segments

    names = ["door.rec.20261207T010000Z.mp4", "door.rec.20261207T010000Z-2.mp4", "door.rec.20261207T010000Z-10.mp4",
             "gate.rec.20261207T005959Z.mp4"]
    assert newest_segments(names) == {"door.rec.20261207T010000Z-10.mp4", "gate.rec.20261207T005959Z.mp4"}
