"""A camera run again into the same folder: its earlier recordings stay, and so do the
rows that point into them (the JSON lines are appended, never overwritten), so the
playback of an earlier recording still finds its boxes; without recordings too, its
JSON lines are appended, its annotated video goes beside the earlier one (said), and a
rebuild of the store holds both runs."""
from __future__ import annotations

import logging
import os
import sqlite3
import subprocess

from conftest import detector_model, frame_count, read_jsonl, run_pipeline
from pipeline.web.recordings import RecordingFiles
from recordings import null_detector, segments
from synthetic import Mover, picture, render


def test_a_rerun_beside_its_recordings_keeps_the_rows_of_the_earlier_ones(tmp_path, write_config):
    clip = str(tmp_path / "cam.mp4")
    render([Mover(picture("chelsea", 40), (0, 10), (150, 50))], clip, frames=12, size=(192, 96), fps=10)
    out = str(tmp_path / "out")
    cfg = {"sources": [{"id": "cam", "uri": clip}], "models": {"det": null_detector(tmp_path)},
           "graph": [{"detect": {"model": "det"}}],
           "outputs": {"video": {"enabled": False}, "jsonl": {"filename": "{camera}.jsonl"},
                       "record": {"enabled": True}}}
    for _ in range(2):
        assert run_pipeline(dict(cfg), write_config, out).cameras["cam"].processed == 12
    first, second = (os.path.relpath(p, out) for p in segments(out, "cam"))
    rows = read_jsonl(os.path.join(out, "cam.jsonl"))
    assert [r["recording"] for r in rows] == [first] * 12 + [second] * 12
    files = RecordingFiles(out, lambda: ["{camera}.rec.{start}.mp4"], "{camera}.jsonl")
    for recording in (first, second):  # what GET /api/boxes?recording=... answers
        boxes = files.boxes(recording)
        assert boxes is not None and [b["seq"] for b in boxes] == list(range(12))


def tracks_per_run(db) -> list[tuple[int, int]]:
    with sqlite3.connect(str(db)) as conn:
        return conn.execute("SELECT run, count(*) FROM tracks GROUP BY run ORDER BY run").fetchall()


def test_a_rerun_without_recordings_appends_its_lines_keeps_the_first_video_and_rebuilds_both_runs(
        tmp_path, write_config, short_clips, model_path, pipeline_cmd, caplog):
    out = tmp_path / "out"
    cfg = {"sources": [{"id": "cam", "uri": short_clips["vtest"]}],
           "models": {"det": detector_model(model_path, score_threshold=0.2)},
           "graph": [{"detect": {"model": "det"}}, {"track": {}}],
           "outputs": {"jsonl": {"filename": "{camera}.jsonl"}}}
    run_pipeline(dict(cfg), write_config, str(out))
    first = (out / "cam.jsonl").read_text()
    first_video = (out / "cam.mp4").read_bytes()
    with caplog.at_level(logging.INFO, logger="pipeline.sink"):
        run_pipeline(dict(cfg), write_config, str(out))
    rows = read_jsonl(str(out / "cam.jsonl"))
    assert (out / "cam.jsonl").read_text().startswith(first)
    assert [r["seq"] for r in rows] == list(range(40)) * 2
    assert (out / "cam.mp4").read_bytes() == first_video and frame_count(str(out / "cam.part1.mp4")) == 40
    said = [r.getMessage() for r in caplog.records if "cam.mp4" in r.getMessage()]
    assert len(said) == 1 and "cam.part1.mp4" in said[0], said
    live = tracks_per_run(out / "store.db")
    assert [run for run, _ in live] == [1, 2] and live[0][1] > 0
    done = subprocess.run([*pipeline_cmd, "store", "rebuild", "--dir", str(out), "--to", str(tmp_path / "re.db")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert tracks_per_run(tmp_path / "re.db") == live
