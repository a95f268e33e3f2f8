"""A file camera analysed on its sub-stream (`detect_uri`) and recorded from its main stream:
each row points at the main stream's picture of the same moment, whatever either file's
first timestamp (an MPEG-TS file's start after 0) and, looped, whatever their lengths
(each pass matched to the same pass of the other, on their first pictures).

The clips show one flat grey level per frame, the same in both files, so a picture tells
which frame of the pass it is."""
from __future__ import annotations

import glob
import os
from fractions import Fraction

import av
import numpy as np
import pytest

from conftest import read_jsonl, run_pipeline
from recordings import null_detector, segments

FPS = 10
MAIN, SUB = (320, 192), (160, 96)


def level(i: int) -> int:
    """The grey of a pass's frame `i`."""
    return 16 + 6 * i


def level_clip(path: str, frames: int, size: tuple[int, int], start_s: float = 0.0) -> str:
    """A clip whose frame i is flat grey `level(i)`, with B-frames; its timestamps start
    `start_s` later than the container's own start (an MPEG-TS file's is 1.4 s)."""
    with av.open(path, "w") as c:
        stream = c.add_stream("libx264", rate=FPS, options={"bf": "2", "g": "10", "preset": "ultrafast"})
        stream.width, stream.height, stream.pix_fmt = size[0], size[1], "yuv420p"
        stream.codec_context.time_base = Fraction(1, FPS)
        first = round(start_s * FPS)
        for i in range(frames):
            picture = np.full((size[1], size[0], 3), level(i), np.uint8)
            vf = av.VideoFrame.from_ndarray(picture, format="bgr24")
            vf.pts, vf.time_base = first + i, Fraction(1, FPS)
            c.mux(stream.encode(vf))
        c.mux(stream.encode(None))
    return path


def levels(path: str) -> dict[float, float]:
    """Each picture's time in the file (as a player shows it) and its grey."""
    with av.open(path) as c:
        return {float(f.pts * f.time_base): float(f.to_ndarray(format="gray").mean()) for f in c.decode(video=0)}


def run(tmp_path, write_config, main: str, sub: str, frames: int, **more) -> tuple[str, list[dict]]:
    source = {"id": "cam", "uri": main, "detect_uri": sub, **more}
    config = {"sources": [source], "models": {"det": null_detector(tmp_path)}, "graph": [{"detect": {"model": "det"}}],
              "outputs": {"video": {"enabled": False}, "record": {"enabled": True}}}
    out = str(tmp_path / "out")
    run_pipeline(config, write_config, out, max_frames=frames)
    return out, [row for f in sorted(glob.glob(os.path.join(out, "*.jsonl"))) for row in read_jsonl(f)]


def shown(out: str, row: dict, pictures: dict[str, dict[float, float]]) -> float | None:
    """The grey of the recording's picture at the row's `recording_time` (None: no picture there)."""
    if row["recording"] not in pictures:
        pictures[row["recording"]] = levels(os.path.join(out, row["recording"]))
    near = [grey for t, grey in pictures[row["recording"]].items() if abs(t - row["recording_time"]) < 1e-4]
    return near[0] if near else None


@pytest.mark.parametrize("main_start,sub_start", [("mp4", "ts"), ("ts", "mp4"), ("ts", "ts+2.5"), ("mp4+0", "ts+0.7")])
def test_each_row_points_at_the_main_streams_picture_of_its_moment_whatever_each_files_first_timestamp(
        tmp_path, write_config, main_start, sub_start):
    """A sub-stream written as MPEG-TS starts at 1.4 s (FFmpeg's default), its main stream
    as MP4 at 0 (or the reverse, or any other offset): the rows are matched on the two
    files' first pictures, not on their timestamps."""
    def clip(name: str, spec: str, size) -> str:
        ext, _, extra = spec.partition("+")
        return level_clip(str(tmp_path / f"{name}.{ext}"), 30, size, float(extra or 0))

    main, sub = clip("main", main_start, MAIN), clip("sub", sub_start, SUB)
    out, rows = run(tmp_path, write_config, main, sub, 30)
    assert len(rows) == 30
    (recorded,) = segments(out, "cam")
    end = max(levels(recorded))
    pictures: dict[str, dict[float, float]] = {}
    for row in rows:
        assert row["recording"] is not None and 0 <= row["recording_time"] <= end, row
        assert shown(out, row, pictures) == pytest.approx(level(row["seq"]), abs=2), row


@pytest.mark.parametrize("main_frames,sub_frames,passes,paced", [(30, 29, 5, False), (29, 30, 5, False),
                                                                  (30, 27, 5, False), (20, 21, 3, True)])
def test_looped_main_and_sub_streams_of_other_lengths_match_each_pass_on_its_first_pictures(
        tmp_path, write_config, main_frames, sub_frames, passes, paced):
    """Looped files a frame or more apart in length do not drift, read as fast as the
    analysis goes or paced as a camera: each pass of the sub-stream is matched to the same
    pass of the main stream; a frame past the main stream's pass lies in no picture of it
    (`recording: null`)."""
    main = level_clip(str(tmp_path / "main.mp4"), main_frames, MAIN)
    sub = level_clip(str(tmp_path / "sub.ts"), sub_frames, SUB)
    out, rows = run(tmp_path, write_config, main, sub, passes * sub_frames, loop=True, realtime=paced)
    assert len(rows) == passes * sub_frames
    pictures: dict[str, dict[float, float]] = {}
    for row in rows:
        i = row["seq"] % sub_frames  # the frame of its pass
        if i >= main_frames:
            assert row["recording"] is None, row
            continue
        assert row["recording"] is not None, row
        assert shown(out, row, pictures) == pytest.approx(level(i), abs=2), row
