"""Timestamps a camera's stream lacks, made before its packets are decoded: a B-frame
stream without any (a raw `.h264` or `.hevc`) or with all of them 0 (an MP4) is recorded
in display order at the frame rate, each row pointing at its own picture, the first
included; a camera that reconnects before anything was recorded has no gap in its
recording."""
from __future__ import annotations

import os
from fractions import Fraction

import av
import numpy as np
import pytest

from conftest import read_jsonl, run_pipeline
from pipeline.config import SourceConfig
from pipeline.config.outputs import RecordConfig
from pipeline.recording.recorder import Recording
from pipeline.sources.connection import Connection
from recordings import frames_by_time, null_detector, segments, times
from synthetic import Mover, picture, render

X265 = "log-level=error:open-gop=0"


def made(folder, codec: str, fps: int, frames: int, **options: str) -> str:
    """A clip of a moving picture, every frame different, with B-frames as asked."""
    path = str(folder / f"made.{'mkv' if codec == 'libx265' else 'mp4'}")
    render([Mover(picture("chelsea", 40), (0, 10), (150, 50))], path, frames=frames, size=(192, 96), fps=fps,
           codec=(codec, {"preset": "veryfast", **options}))
    return path


def restamped(src: str, path: str, fmt: str, stamp) -> str:
    """`src`'s packets, byte for byte, in `fmt`, their timestamps set by `stamp` (a raw
    elementary stream keeps none)."""
    with av.open(src) as s, av.open(path, "w", format=fmt) as d:
        out = d.add_stream_from_template(s.streams.video[0])
        for p in s.demux(video=0):
            if p.size:
                p.stream = out
                p.pts, p.dts = stamp(p)
                d.mux(p)
    return path


def pictures(path: str) -> list[np.ndarray]:
    with av.open(path) as c:
        return [f.to_ndarray(format="bgr24") for f in c.decode(video=0)]


KINDS = {  # (encoder, frame rate, frames, its options, container, timestamps)
    "raw h264, 2 B-frames": ("libx264", 10, 30, {"bf": "2", "g": "10", "b-adapt": "0"}, "h264", "none"),
    "raw h264, B-pyramid": ("libx264", 12, 40, {"bf": "3", "g": "24"}, "h264", "none"),
    "raw hevc, 4 B-frames": ("libx265", 15, 32, {"x265-params": f"{X265}:bframes=4:keyint=16"}, "hevc", "none"),
    "mp4 of zeros, B-frames": ("libx264", 8, 30, {"bf": "2", "g": "12"}, "mp4", "zero"),
    "raw h264, no B-frames": ("libx264", 10, 20, {"bf": "0", "g": "7"}, "h264", "none"),
}


@pytest.mark.parametrize("kind", KINDS)
def test_a_stream_without_timestamps_is_recorded_in_display_order_and_every_row_names_its_picture(
        tmp_path, write_config, kind):
    codec, fps, frames, options, fmt, stamps = KINDS[kind]
    source = made(tmp_path, codec, fps, frames, **options)
    uri = restamped(source, str(tmp_path / f"cam.{fmt}"), fmt, lambda p: (0, 0) if stamps == "zero" else (None, None))
    out = str(tmp_path / "out")
    snap = run_pipeline({"sources": [{"id": "cam", "uri": uri}], "models": {"det": null_detector(tmp_path)},
                         "graph": [{"detect": {"model": "det"}}],
                         "outputs": {"video": {"enabled": False}, "jsonl": {"filename": "{camera}.jsonl"},
                                     "record": {"enabled": True}}}, write_config, out)
    assert snap.cameras["cam"].processed == frames
    (recorded,) = segments(out, "cam")
    filmed = pictures(source)
    shown = times(recorded)
    assert len(shown) == frames and all(b - a == Fraction(1, fps) for a, b in zip(shown, shown[1:]))
    assert all(np.array_equal(a, b) for a, b in zip(pictures(recorded), filmed))  # in the order filmed
    rows = read_jsonl(os.path.join(out, "cam.jsonl"))
    by_time = frames_by_time(recorded)
    assert [r["recording"] for r in rows] == [os.path.relpath(recorded, out)] * frames  # the first row included
    assert all(np.array_equal(by_time[r["recording_time"]], filmed[r["seq"]]) for r in rows)
    assert [r["time"] for r in rows] == pytest.approx([i / fps for i in range(frames)], abs=1e-6)


def test_a_camera_that_reconnects_before_anything_was_recorded_has_no_gap(tmp_path):
    """A live camera whose connections end before their first keyframe went on (here
    opened and closed at once): reconnects, never a gap in what was recorded."""
    path = made(tmp_path, "libx264", 10, 10, bf="0")
    cfg = RecordConfig(enabled=True)
    out = str(tmp_path / "out")
    rec = Recording("cam", out, cfg, None, True, path=lambda stamp: os.path.join(out, f"cam.rec.{stamp}.mp4"),
                    on_failure=lambda e: None)
    for _ in range(3):
        Connection(SourceConfig(id="cam", uri=path), lambda why: None, tap=rec).close()
    assert rec.stats.gaps == 0 and rec.stats.packets == 0
    connection = Connection(SourceConfig(id="cam", uri=path), lambda why: None, tap=rec)
    assert sum(1 for _ in connection.frames(lambda: False)) == 10
    connection.close()
    rec.close()
    assert rec.stats.gaps == 0 and rec.stats.packets == 10


def test_a_main_stream_without_timestamps_beside_a_sub_stream_is_recorded_in_display_order(tmp_path, write_config):
    """The main stream is only demuxed (the analysis reads the sub-stream): the recording
    puts its pictures in display order with a decoder of its own."""
    codec, fps, frames, options, fmt, _ = KINDS["raw h264, B-pyramid"]
    source = made(tmp_path, codec, fps, frames, **options)
    uri = restamped(source, str(tmp_path / "main.h264"), fmt, lambda p: (None, None))
    sub = str(tmp_path / "sub.mp4")
    render([Mover(picture("chelsea", 20), (0, 5), (75, 25))], sub, frames=frames, size=(96, 48), fps=fps)
    out = str(tmp_path / "out")
    run_pipeline({"sources": [{"id": "cam", "uri": uri, "detect_uri": sub}], "models": {"det": null_detector(tmp_path)},
                  "graph": [{"detect": {"model": "det"}}],
                  "outputs": {"video": {"enabled": False}, "jsonl": {"filename": "{camera}.jsonl"},
                              "record": {"enabled": True}}}, write_config, out)
    (recorded,) = segments(out, "cam")
    shown = times(recorded)
    assert len(shown) == frames and all(b - a == Fraction(1, fps) for a, b in zip(shown, shown[1:]))
    assert all(np.array_equal(a, b) for a, b in zip(pictures(recorded), pictures(source)))


@pytest.mark.parametrize("kind", ["mp4 of zeros, B-frames", "raw h264, B-pyramid"])
def test_a_looped_file_without_timestamps_goes_on_one_frame_after_each_pass(tmp_path, write_config, kind):
    codec, fps, frames, options, fmt, stamps = KINDS[kind]
    source = made(tmp_path, codec, fps, frames, **options)
    uri = restamped(source, str(tmp_path / f"cam.{fmt}"), fmt, lambda p: (0, 0) if stamps == "zero" else (None, None))
    out = str(tmp_path / "out")
    run_pipeline({"sources": [{"id": "cam", "uri": uri, "loop": True}], "models": {"det": null_detector(tmp_path)},
                  "graph": [{"detect": {"model": "det"}}],
                  "outputs": {"video": {"enabled": False}, "jsonl": {"filename": "{camera}.jsonl"},
                              "record": {"enabled": True}}}, write_config, out, max_frames=3 * frames)
    (recorded,) = segments(out, "cam")
    shown = times(recorded)
    assert len(shown) == 3 * frames and {b - a for a, b in zip(shown, shown[1:])} == {Fraction(1, fps)}
    filmed = pictures(source)
    assert all(np.array_equal(a, filmed[i % frames]) for i, a in enumerate(pictures(recorded)))
