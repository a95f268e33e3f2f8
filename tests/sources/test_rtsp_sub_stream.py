"""A live camera analysed on its sub-stream (`detect_uri`) and recorded from its main
stream, against real GStreamer RTSP servers: a dead sub-stream never ends the recording
(the camera retries it past `give_up_s` while its main stream is recorded, and gives up
once both are gone), and the rows' boxes stay in the main stream's pixels while the main
stream is away (said where its size was never known)."""
from __future__ import annotations

import os
import time

import numpy as np
import pytest

from conftest import read_jsonl
from pipeline.recording.segments import segment_files
from recordings import null_detector
from test_rtsp import RtspServer, free_port, live_pipeline, server, wait_for  # noqa: F401 (the fixture)

pytestmark = pytest.mark.rtsp
GIVE_UP_S = 1.5


def fixed_box_detector(folder) -> dict:
    """A detector that sees one box, the same on every picture: where it lands in the
    frame's pixels depends on the picture's size only."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    box = numpy_helper.from_array(np.array([[[8, 12, 40, 36, 0.9, 0]]], np.float32), "box")
    axes = numpy_helper.from_array(np.array([1, 2, 3], np.int64), "axes")
    last = numpy_helper.from_array(np.array([3], np.int64), "last")
    zero = numpy_helper.from_array(np.array(0, np.float32), "zero")
    nodes = [helper.make_node("ReduceSum", ["images", "axes"], ["sum"], keepdims=1),  # [b, 1, 1, 1]
             helper.make_node("Squeeze", ["sum", "last"], ["per_image"]),             # [b, 1, 1]
             helper.make_node("Mul", ["per_image", "zero"], ["nothing"]),
             helper.make_node("Add", ["nothing", "box"], ["output"])]                 # [b, 1, 6]
    graph = helper.make_graph(nodes, "fixed_box",
                              [helper.make_tensor_value_info("images", TensorProto.FLOAT, ["batch", 3, 64, 64])],
                              [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["batch", 1, 6])],
                              [box, axes, last, zero])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = os.path.join(str(folder), "fixed_box.onnx")
    onnx.save(model, path)
    return {**null_detector(folder), "path": path}


def camera(folder, main_url: str, sub_url: str, detector: dict) -> dict:
    return {"sources": [{"id": "door", "uri": main_url, "detect_uri": sub_url,
                         "reconnect": {"initial_s": 0.2, "max_s": 0.5, "give_up_s": GIVE_UP_S}}],
            "models": {"det": detector}, "graph": [{"detect": {"model": "det"}}],
            "outputs": {"dir": str(folder / "out"), "video": {"enabled": False},
                        "jsonl": {"filename": "{camera}.jsonl"}, "record": {"enabled": True, "segment_s": 0}}}


def test_a_dead_sub_stream_never_ends_the_recording_and_the_camera_gives_up_once_both_are_gone(
        tmp_path, server, write_config):
    main, sub = server("--size", "320x240"), server("--size", "160x120")
    p = live_pipeline(camera(tmp_path, main.url, sub.url, null_detector(tmp_path)), write_config)
    door = p.metrics.camera("door")
    restarted: list[RtspServer] = []
    try:
        wait_for(lambda: door.processed >= 10, 30, "the camera to stream")
        rec = door.recording
        assert rec is not None
        sub.kill()
        wait_for(lambda: door.state == "reconnecting", 15, "the analysis to notice")
        time.sleep(GIVE_UP_S + 1.0)  # past give_up_s without a frame of the analysis
        written = rec.bytes
        wait_for(lambda: rec.bytes > written + 10_000, 15, "the recording to go on past give_up_s")
        assert door.state == "reconnecting" and rec.state == "recording"
        restarted.append(RtspServer("--size", "160x120").start(sub.port))
        wait_for(lambda: door.state == "streaming", 30, "the sub-stream to come back")
        n = door.processed
        main.kill()  # the main stream gives up after give_up_s: the recording stops, the analysis goes on
        wait_for(lambda: rec.state == "failed", 15, "the recording to give up")
        wait_for(lambda: door.processed >= n + 10, 15, "the analysis to go on")
        restarted[0].kill()  # now both are gone: the camera gives up, and the run ends
        wait_for(lambda: door.state == "failed", GIVE_UP_S + 15, "the camera to give up")
        assert p.wait(30)
    finally:
        p.stop()
        p.wait(60)
        p.close()
        for s in restarted:
            s.kill()
    assert "give_up_s" in door.detail


def test_rows_keep_the_main_streams_pixels_while_it_is_away_and_say_theirs_before_it_was_ever_seen(
        tmp_path, server, write_config):
    sub = server("--size", "160x120")
    port = free_port()
    cfg = camera(tmp_path, f"rtsp://127.0.0.1:{port}/cam", sub.url, fixed_box_detector(tmp_path))
    cfg["sources"][0]["reconnect"]["give_up_s"] = 0
    p = live_pipeline(cfg, write_config)
    door = p.metrics.camera("door")
    main: RtspServer | None = None
    try:
        wait_for(lambda: door.processed >= 5, 30, "the analysis to start without the main stream")
        main = RtspServer("--size", "320x240").start(port)
        wait_for(lambda: door.recording is not None and door.recording.state == "recording", 30, "the recording")
        n = door.processed
        wait_for(lambda: door.processed >= n + 10, 15, "rows with a recording")
        main.kill()
        wait_for(lambda: door.recording.state == "reconnecting", 15, "the recording to notice")
        n = door.processed
        wait_for(lambda: door.processed >= n + 10, 15, "rows while the main stream is away")
    finally:
        p.stop()
        p.wait(60)
        p.close()
        if main is not None:
            main.kill()
    rows = [row for _, path in segment_files(str(tmp_path / "out" / "door.{start}.jsonl")) for row in read_jsonl(path)]
    # the main stream's size is known once its recording has a file: from then on every row
    # (a frame from before the file's first picture too) is in its pixels
    first = next(i for i, r in enumerate(rows) if "pixels" not in r)
    before, seen = rows[:first], rows[first:]
    recorded = next(i for i, r in enumerate(seen) if r["recording"] is not None)
    away = [r for r in seen[recorded:] if r["recording"] is None]
    assert len(before) >= 5 and len(away) >= 5 and len(seen) - recorded - len(away) >= 10
    (sub_box,) = {tuple(d["box"]) for r in before for d in r["detections"]}
    assert all(r["pixels"] == [160, 120] for r in before)  # the sub-stream's, said
    for r in seen:  # recorded or not: the main stream's pixels, as the recording's
        assert "pixels" not in r and [d["box"] for d in r["detections"]] == [pytest.approx(
            [2 * v for v in sub_box], abs=0.05)], r
