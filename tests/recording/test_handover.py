"""What belongs in a segment after its cut goes into it: an open-GOP stream's leading
pictures (shown before the keyframe that cut, decodable only with the GOP before) and
audio the demuxer delivers after the video of a later time, both into the file the
rows of their time name; audio later than the previous file waits for is counted."""
from __future__ import annotations

import logging
from fractions import Fraction

import av
import numpy as np
import pytest

from pipeline.config import SourceConfig
from pipeline.recording.handover import LATE_S
from pipeline.sources.connection import Connection
from recordings import frames_by_time, packets
from test_recorder import clip, files, recording

OPEN_GOP = {"libx264": {"x264-params": "open-gop=1:scenecut=0", "bf": "3"},
            "libx265": {"x265-params": "log-level=error"}}  # x265's defaults: open GOPs


def leading_pictures(path: str) -> int:
    """Pictures that follow a keyframe (not the first) in decode order and show before it."""
    with av.open(path) as c:
        sent = [(p.pts, bool(p.is_keyframe)) for p in c.demux(video=0) if p.size]
    count, key = 0, None
    for i, (pts, is_key) in enumerate(sent):
        if is_key:
            key = pts if i else None
        elif key is not None and pts < key:
            count += 1
        else:
            key = None
    return count


def recorded_as_rows_see_it(tmp_path, source: str, segment_s: float):
    """The recording of `source` as a file camera, and each decoded frame's time on its timeline."""
    rec, failures = recording(tmp_path / "out", segment_s=segment_s)
    connection = Connection(SourceConfig(id="cam", uri=source), lambda why: None, tap=rec)
    try:
        shown = [(f.pts + connection.link.offset) * connection.link.seconds  # as the camera's frames carry it
                 for f in connection.frames(lambda: False)]
    finally:
        connection.close()
        rec.close()
    assert not failures
    return rec, shown


@pytest.mark.parametrize("codec, gop, frames, segment_s", [("libx264", 10, 40, 1), ("libx264", 7, 53, 2),
                                                           ("libx265", 12, 50, 1)])
def test_an_open_gops_leading_pictures_decode_in_the_file_their_rows_name(tmp_path, codec, gop, frames, segment_s):
    source = clip(tmp_path, "open.mp4", codec, frames=frames, g=str(gop), **OPEN_GOP[codec])
    assert leading_pictures(source) > 0  # the kind of stream under test
    original = frames_by_time(source)
    rec, shown = recorded_as_rows_see_it(tmp_path, source, segment_s)
    assert len(shown) == frames and len(files(tmp_path / "out")) >= 3
    in_files = {path: frames_by_time(path) for path in files(tmp_path / "out")}
    for t in shown:
        spot = rec.spot(t)
        assert spot is not None, t
        picture = in_files[str(tmp_path / "out" / spot.file)].get(spot.time)
        assert picture is not None, (t, spot)  # decodable where the row says
        assert np.array_equal(picture, original[round(t, 6)])


def late_audio(video: str, path: str, lag_s: float, seconds: float, rate: int = 16000) -> str:
    """`video` with AAC beside it that the demuxer delivers `lag_s` after the video of its
    time (Matroska keeps the order packets were written in)."""
    with av.open(video) as src, av.open(path, "w", options={"max_interleave_delta": "1"}) as dst:
        v = dst.add_stream_from_template(src.streams.video[0])
        a = dst.add_stream("aac", rate=rate, layout="mono")  # type: ignore[call-overload]
        sound = []
        for i in range(int(seconds * rate) // 1024):
            tone = (np.sin(np.arange(i * 1024, (i + 1) * 1024) * 0.05) * 8000)[None].astype("float32")
            frame = av.AudioFrame.from_ndarray(tone, format="fltp", layout="mono")
            frame.sample_rate, frame.pts = rate, i * 1024
            sound += a.encode(frame)
        sound += a.encode(None)
        sent = [(p.dts * p.time_base, 0, p, v) for p in src.demux(video=0) if p.size]
        sent += [(q.dts * q.time_base + Fraction(lag_s), 1, q, a) for q in sound]
        for _, _, p, stream in sorted(sent, key=lambda s: s[:2]):
            p.stream = stream
            dst.mux(p)
    return path


def audio_in(paths: list[str]) -> int:
    return sum(len(packets(p, "audio")) for p in paths)


def first_picture_s(path: str) -> float:
    with av.open(path) as c:
        return min(float(p.dts * p.time_base) for p in c.demux(video=0) if p.size)


@pytest.mark.parametrize("lag_s, frames, segment_s", [(1.5, 60, 1), (0.4, 45, 1), (3.0, 80, 2), (-1.5, 60, 1),
                                                       (-0.3, 45, 1)])
def test_audio_delivered_apart_from_its_video_goes_into_the_segment_of_its_time(tmp_path, lag_s, frames, segment_s):
    """After the video of a later time (`lag_s` > 0) or before the video of its time (< 0)."""
    video = clip(tmp_path, "v.mp4", frames=frames, bf="0")
    source = late_audio(video, str(tmp_path / "late.mkv"), lag_s, frames / 10)
    rec, _ = recorded_as_rows_see_it(tmp_path, source, segment_s)
    recorded = files(tmp_path / "out")
    assert len(recorded) >= 3
    with av.open(source) as c:
        start = first_picture_s(source)
        expected = sum(1 for p in c.demux(audio=0) if p.size and p.dts * p.time_base >= start)
    assert audio_in(recorded) == expected and rec.stats.audio == "copied"
    for path in recorded:  # each file's sound starts and ends with its pictures
        with av.open(path) as c:
            sound = [float(p.pts * p.time_base) for p in c.demux(audio=0) if p.size]
        with av.open(path) as c:
            shown = [float(p.pts * p.time_base) for p in c.demux(video=0) if p.size]
        assert sound and 0 <= sound[0] < 0.2 and sound[-1] < max(shown) + 0.2, (path, sound[:2], sound[-2:], shown[-1:])


def test_audio_later_than_the_previous_file_waits_for_is_counted_and_said_once(tmp_path, caplog):
    lag_s = LATE_S + 2
    video = clip(tmp_path, "v.mp4", frames=int(lag_s + 6) * 10, bf="0")
    source = late_audio(video, str(tmp_path / "late.mkv"), lag_s, lag_s + 6)
    with caplog.at_level(logging.WARNING, "pipeline.recording"):
        rec, _ = recorded_as_rows_see_it(tmp_path, source, 1)
    with av.open(source) as c:
        start = first_picture_s(source)
        expected = sum(1 for p in c.demux(audio=0) if p.size and p.dts * p.time_base >= start)
    late = rec.writer.files.late_audio
    assert late > 0 and audio_in(files(tmp_path / "out")) + late == expected  # nothing lost uncounted
    assert rec.stats.audio == f"copied; {late} packet(s) left out, delivered after their segment was closed"
    assert sum("audio delivered" in r.message for r in caplog.records) == 1
