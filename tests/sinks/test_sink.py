"""Outputs fail separately and loudly: a video writer that breaks at run time stops that
camera's video (one error line, the camera's detail, exit status 1) while its JSON lines
go on; the other camera is untouched."""
from __future__ import annotations

import logging

from conftest import detector_model, frame_count, read_jsonl


def test_a_failing_video_writer_stops_its_video_only(tmp_path, short_clips, model_path, write_config, caplog,
                                                     monkeypatch):
    from pipeline.config import load_config
    from pipeline.graph import Pipeline
    from pipeline.sinks import encoder

    # a file already there is never written over (the video goes to its next free part):
    # here the writer is made to open the path it was given, which is a folder
    monkeypatch.setattr(encoder, "free_file", lambda path, base, segment: (path, segment))

    out = tmp_path / "out"
    cfg = {"sources": [{"id": "broken", "uri": short_clips["bikes"]}, {"id": "fine", "uri": short_clips["vtest"]}],
           "models": {"det": detector_model(model_path)}, "graph": [{"detect": {"model": "det"}}],
           "outputs": {"dir": str(out)}}
    p = Pipeline(load_config(write_config(cfg)))
    (out / "broken.mp4").mkdir(parents=True)  # after the checks, the video path is taken: opening it fails
    with caplog.at_level(logging.ERROR, logger="pipeline.sink"):
        p.start()
        assert p.wait(120)
        p.close()
    snap = p.snapshot()
    broken = snap.cameras["broken"]
    assert broken.processed == 40 and "IsADirectoryError" in broken.output_errors["video"]
    assert broken.video_frames_lost == 40 and broken.jsonl_lines_lost == 0  # counted, each frame once
    errors = [r for r in caplog.records if "broken: video output failed" in r.getMessage()]
    assert len(errors) == 1  # said once, not per frame
    records = read_jsonl(str(out / "detections.jsonl"))
    assert sum(r["camera"] == "broken" for r in records) == 40  # its JSON lines went on
    assert frame_count(str(out / "fine.mp4")) == 40


def test_the_cli_exits_1_when_an_output_was_lost(tmp_path, short_clips, model_path):
    """`run` checks outputs before starting, so here the folder breaks while it runs."""
    import subprocess
    import sys

    import yaml

    from conftest import ROOT

    out = tmp_path / "out"
    cfg = {"sources": [{"id": "cam", "uri": short_clips["bikes"], "realtime": True}],
           "models": {"det": detector_model(model_path)}, "graph": [{"detect": {"model": "det"}}],
           "outputs": {"dir": str(out), "video": {"filename": "videos/{camera}.mp4"}}}
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    out.mkdir()
    (out / "videos").write_text("a file where the video folder should be")  # opening the first video fails
    r = subprocess.run([sys.executable, "-m", "pipeline", "run", "--config", str(tmp_path / "c.yaml"), "-q"],
                       capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 1, r.stderr
    assert "camera cam: video output failed" in r.stderr and "video output failed" in r.stdout
    assert len(read_jsonl(str(out / "detections.jsonl"))) == 40


def test_a_full_disk_leaves_whole_lines_and_playable_video_and_counts_what_was_lost(tmp_path, small_disk, short_clips,
                                                                                     model_path):
    """The file default (plain MP4) on a disk that fills mid-run: every file is whole, and
    the summary, the report and /metrics say how many frames and lines did not make it."""
    import json
    import subprocess
    import sys

    import av
    import yaml

    from conftest import ROOT
    from pipeline.metrics.prometheus import SnapshotCollector
    from pipeline.metrics.snapshot import CameraSnapshot, Snapshot

    disk = small_disk("400k")  # the videos take about 680 kB
    small_disk("16k", "disk/lines")  # the JSON lines about 36 kB
    cfg = {"sources": [{"id": "campus", "uri": short_clips["vtest"]}, {"id": "street", "uri": short_clips["bikes"]}],
           "models": {"det": detector_model(model_path)}, "graph": [{"detect": {"model": "det"}}],
           "outputs": {"dir": str(disk), "jsonl": {"filename": "lines/{camera}.jsonl", "flush_s": 0}}}
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    r = subprocess.run([sys.executable, "-m", "pipeline", "run", "--config", str(tmp_path / "c.yaml"), "-q",
                        "--report", str(tmp_path / "r.json")], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 1, r.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    for cam, c in report["cameras"].items():
        lines = disk / "lines" / f"{cam}.jsonl"
        data = lines.read_bytes() if lines.exists() else b""
        assert not data or data.endswith(b"\n"), cam  # whole lines only
        assert len(data.splitlines()) + c["jsonl_lines_lost"] == c["processed"] == 40, (cam, c)
        frames = 0
        for video in sorted(disk.glob(f"{cam}*.mp4")):
            with av.open(str(video)) as f:
                frames += sum(1 for _ in f.decode(video=0))  # every file plays, to its end
        assert frames + c["video_frames_lost"] == 40, (cam, c)
    lost = {cam: (c["video_frames_lost"], c["jsonl_lines_lost"]) for cam, c in report["cameras"].items()}
    assert sum(v for v, _ in lost.values()) > 0 and sum(n for _, n in lost.values()) > 0, lost
    assert "LOST" in r.stdout and "video frame(s)" in r.stdout
    seen = Snapshot(cameras={cam: CameraSnapshot(video_frames_lost=v, jsonl_lines_lost=n)
                             for cam, (v, n) in lost.items()})
    exported = {(s.name, s.labels.get("camera")): s.value for m in SnapshotCollector(lambda: seen).collect()
                for s in m.samples}
    assert all(exported[("pipeline_camera_video_frames_lost_total", cam)] == v for cam, (v, _) in lost.items())
    assert all(exported[("pipeline_camera_jsonl_lines_lost_total", cam)] == n for cam, (_, n) in lost.items())
