"""Outputs fail separately and loudly: a video writer that breaks at run time stops that
camera's video (one error line, the camera's detail, exit status 1) while its JSON lines
go on; the other camera is untouched."""
from __future__ import annotations

import logging

from conftest import detector_model, frame_count, read_jsonl


def test_a_failing_video_writer_stops_its_video_only(tmp_path, short_clips, model_path, write_config, caplog):
    from pipeline.config import load_config
    from pipeline.graph import Pipeline

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
