"""One writer per camera's outputs: a writer whose lease was taken over (its host was
presumed dead and its camera moved) never writes again, and the files stay whole; an id
that returns in the same run continues in new files, never overwriting."""
from __future__ import annotations

from fractions import Fraction

import numpy as np

from conftest import frame_count, read_jsonl
from pipeline.config import parse_config
from pipeline.frames import Frame, Resume
from pipeline.metrics.registry import Metrics
from pipeline.sinks.camera_files import CameraOutputs
from pipeline.sinks.lease import Lease


def outputs_config(tmp_path):
    data = {"sources": [{"id": "cam", "uri": "rtsp://127.0.0.1:1/x"}],
            "models": {"det": {"path": __file__, "layout": "yolox", "input_size": 416}},
            "graph": [{"detect": {"model": "det"}}],
            "outputs": {"dir": str(tmp_path / "out"), "jsonl": {"filename": "{camera}.jsonl", "flush_s": 0},
                        "video": {"fragmented": True, "segment_s": 0}}}  # one file per run (and .partN)
    return parse_config(data, tmp_path).outputs


def frame(seq: int) -> Frame:
    image = np.full((48, 64, 3), seq % 255, np.uint8)
    return Frame("cam", seq, seq * 3600, Fraction(1, 90000), image, 0.0, Fraction(25))


def test_a_fenced_writer_never_writes_again_and_leaves_whole_files(tmp_path):
    out = outputs_config(tmp_path)
    old = CameraOutputs(out, Metrics())
    old.open("cam", live=True, resume=Resume(epoch=Lease.grant(out.dir, "cam")))
    for seq in range(60):  # more than a fragment (1 s at 25 fps) reaches the disk
        old.write(frame(seq))
    Lease.grant(out.dir, "cam")  # the driver fences the old host before the camera moves
    new = CameraOutputs(out, Metrics())
    new.open("cam", live=True, resume=Resume(seq=60, segment=1, append=True, epoch=Lease.grant(out.dir, "cam")))
    before = (tmp_path / "out" / "cam.mp4").read_bytes()
    for seq in range(60, 100):
        old.write(frame(seq))  # the stale host wakes up and carries on
        new.write(frame(seq))
    old.close("cam", last=True)
    new.close("cam", last=True)
    assert old.fenced == {"cam"} and not old.failed
    seqs = [r["seq"] for r in read_jsonl(str(tmp_path / "out" / "cam.jsonl"))]
    assert seqs == list(range(100))  # each seq once: nothing from the stale writer after the fence
    assert (tmp_path / "out" / "cam.mp4").read_bytes() == before  # not a byte more, still playable
    assert 0 < frame_count(str(tmp_path / "out" / "cam.mp4")) <= 60
    assert frame_count(str(tmp_path / "out" / "cam.part1.mp4")) == 40


def test_an_id_that_returns_continues_in_new_files(tmp_path):
    out = outputs_config(tmp_path)
    files = CameraOutputs(out, Metrics())
    for run in range(2):
        files.open("cam", live=False)
        for seq in range(10):
            files.write(frame(seq))
        files.close("cam", last=True)
    assert len(read_jsonl(str(tmp_path / "out" / "cam.jsonl"))) == 20  # appended, not truncated
    assert frame_count(str(tmp_path / "out" / "cam.mp4")) == 10
    assert frame_count(str(tmp_path / "out" / "cam.part1.mp4")) == 10


def test_a_pipeline_camera_added_again_under_its_id_continues_its_files(tmp_path, short_clips, model_path,
                                                                        write_config):
    from conftest import detector_model
    from pipeline.config import load_config
    from pipeline.graph import Pipeline

    cfg = {"sources": [{"id": "cam", "uri": short_clips["bikes"]}], "models": {"det": detector_model(model_path)},
           "graph": [{"detect": {"model": "det"}}],
           "outputs": {"dir": str(tmp_path / "out"), "jsonl": {"filename": "{camera}.jsonl"}}}
    config = load_config(write_config(cfg))
    p = Pipeline(config)
    p.start()
    try:
        assert p.wait(120)
        p.add_camera(config.sources[0])  # the same id again (was: its 40 frames overwritten)
        assert p.wait(120)
    finally:
        p.close()
    assert len(read_jsonl(str(tmp_path / "out" / "cam.jsonl"))) == 80
    assert frame_count(str(tmp_path / "out" / "cam.mp4")) == 40
    assert frame_count(str(tmp_path / "out" / "cam.part1.mp4")) == 40
