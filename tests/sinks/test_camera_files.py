"""A recorded file camera run again into the same folder: its earlier recordings stay,
and so do the rows that point into them (the JSON lines are appended, never overwritten),
so the playback of an earlier recording still finds its boxes."""
from __future__ import annotations

import os

from conftest import read_jsonl, run_pipeline
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
