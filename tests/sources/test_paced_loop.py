"""A paced, looped file camera plays a camera that never stops (the density bench's
cameras, each a fraction of a frame late: `phase_s`): its loops continue the timeline
seamlessly, in its recording and in its rows' `recording_time`, whether it records the
file it analyses or another one beside it (`detect_uri`), and a loop is no gap or stall.
A paced camera whose detector lags drops frames as a camera does (counted), never the
last one it read: its end comes after it."""
from __future__ import annotations

import glob
import os

import pytest

from conftest import read_jsonl, run_pipeline
from onnx_models import make_slow_model
from recordings import null_detector, segments, times
from synthetic import Mover, picture, render

FPS = 10
FRAMES = 10  # a pass of one second
PASSES = 3
PHASE_S = 0.35
CODEC = ("libx264", {"bf": "2", "g": "5", "preset": "ultrafast"})


def clips(folder, ext: str) -> tuple[str, str]:
    """A main stream and its sub-stream: the same second of video at two sizes (an MPEG-TS
    file's timestamps start after 0, an MP4's at 0)."""
    main, sub = str(folder / f"main.{ext}"), str(folder / f"sub.{ext}")
    render([Mover(picture("chelsea", 60), (0, 40), (200, 60))], main, frames=FRAMES, size=(320, 192), fps=FPS,
           codec=CODEC)
    render([Mover(picture("chelsea", 30), (0, 20), (100, 30))], sub, frames=FRAMES, size=(160, 96), fps=FPS,
           codec=CODEC)
    return main, sub


def paced_loop(tmp_path, write_config, main: str, sub: str | None):
    source = {"id": "cam", "uri": main, "live": True, "realtime": True, "loop": True, "phase_s": PHASE_S}
    if sub:
        source["detect_uri"] = sub
    config = {"sources": [source], "models": {"det": null_detector(tmp_path)}, "graph": [{"detect": {"model": "det"}}],
              "outputs": {"video": {"enabled": False}, "record": {"enabled": True}}}
    out = str(tmp_path / "out")
    snap = run_pipeline(config, write_config, out, max_frames=PASSES * FRAMES)
    return out, snap, [row for f in sorted(glob.glob(os.path.join(out, "*.jsonl"))) for row in read_jsonl(f)]


@pytest.mark.parametrize("ext,sub_stream", [("mp4", False), ("mp4", True), ("ts", True)],
                         ids=["recorded", "detect_uri", "detect_uri-ts"])
def test_a_paced_looped_files_loops_continue_its_recording_and_rows_seamlessly(tmp_path, write_config, ext,
                                                                                sub_stream):
    main, sub = clips(tmp_path, ext)
    out, snap, rows = paced_loop(tmp_path, write_config, main, sub if sub_stream else None)
    # every frame read has its row, but for the frames a live lane dropped, counted (its
    # detector more than a frame interval late: a machine loaded many times over)
    late = snap.cameras["cam"].dropped
    assert set(late) <= {"queue_full"} and len(rows) + sum(late.values()) == PASSES * FRAMES
    assert rows[-1]["seq"] == PASSES * FRAMES - 1  # never the last one: the camera's end comes after it
    (recorded,) = segments(out, "cam")
    assert [r["recording"] for r in rows] == [os.path.relpath(recorded, out)] * len(rows)  # none null
    row_times = [r["recording_time"] for r in rows]
    first = row_times[0] - rows[0]["seq"] / FPS
    assert row_times == pytest.approx([first + r["seq"] / FPS for r in rows], abs=1e-6)
    # the recording holds every picture of the passes, a frame apart across each loop (no
    # jump, nothing lost), and each row's time is one of its pictures
    shown = [round(float(t), 6) for t in times(recorded) if first - 1e-6 <= t <= row_times[-1] + 1e-6]
    assert shown == pytest.approx([first + i / FPS for i in range(PASSES * FRAMES)], abs=1e-6)
    stats = snap.cameras["cam"].recording
    assert (stats.gaps, stats.stalls, stats.dropped) == (0, 0, 0)


def test_a_paced_camera_whose_detector_lags_drops_frames_counted_but_never_its_last(tmp_path, write_config):
    """A hundredth of a second of video at 1000 fps, a detector busy for longer with its first
    frame: the lane holds the last frame when the camera's end comes."""
    main = str(tmp_path / "fast.mp4")
    render([Mover(picture("chelsea", 60), (0, 40), (200, 60))], main, frames=FRAMES, size=(320, 192), fps=1000,
           codec=CODEC)
    slow = {"path": make_slow_model(str(tmp_path / "slow.onnx"), matmuls=200, shared=True), "layout": "e2e",
            "input_size": 64, "batching": {"max_batch": 1, "max_wait_ms": 0}, "engine": {"workers": 1}}
    config = {"sources": [{"id": "cam", "uri": main, "live": True, "realtime": True}], "models": {"det": slow},
              "graph": [{"detect": {"model": "det"}}], "outputs": {"video": {"enabled": False}}}
    out = str(tmp_path / "out")
    snap = run_pipeline(config, write_config, out)
    rows = [row for f in sorted(glob.glob(os.path.join(out, "*.jsonl"))) for row in read_jsonl(f)]
    dropped = snap.cameras["cam"].dropped
    assert set(dropped) <= {"queue_full"} and len(rows) + sum(dropped.values()) == FRAMES
    assert rows[-1]["seq"] == FRAMES - 1  # the frame it read last, held when its end of stream came
