"""A stream FFmpeg opens as 0x0 without parameter sets (a transport stream joined
mid-GOP, probed before its first keyframe, as a live stream probed for half a second
can be): recorded with the size and parameter sets its first keyframe shows, and never
deciding for another camera whether its stream can be recorded."""
from __future__ import annotations

import av
import pytest

from pipeline.config import SourceConfig
from pipeline.recording.keyframe_params import parameter_sets
from pipeline.sources.connection import Connection
from test_recorder import X265, clip, files, recording

PROBE_NOTHING = {"probesize": "32", "analyzeduration": "0"}  # the probe ends before the first keyframe


def joined_mid_gop(folder, codec: str, size: tuple[int, int], frames: int, skip: int) -> str:
    """A transport stream of a clip whose first `skip` packets are gone (its first
    keyframe, with the parameter sets, comes later)."""
    source = clip(folder, f"{codec}-{size[0]}.mp4", codec, size=size, frames=frames, bf="0",
                  **(X265 if codec == "libx265" else {}))
    path = str(folder / f"{codec}-{size[0]}.ts")
    with av.open(source) as src, av.open(path, "w", format="mpegts") as dst:
        out = dst.add_stream_from_template(src.streams.video[0])
        for i, p in enumerate(q for q in src.demux(video=0) if q.size):
            if i >= skip:
                p.stream = out
                dst.mux(p)
    with av.open(path, options=PROBE_NOTHING) as c:
        assert (c.streams.video[0].width, c.streams.video[0].height) == (0, 0)  # as FFmpeg opens it
    return path


def record(folder, uri: str, options: dict) -> tuple[list[str], list[BaseException]]:
    rec, failures = recording(folder, segment_s=1)
    connection = Connection(SourceConfig(id="cam", uri=uri, options=options), lambda why: None, tap=rec)
    try:
        sum(1 for _ in connection.frames(lambda: False))
    finally:
        connection.close()
        rec.close()
    return (files(folder) if folder.exists() else []), failures


def pictures(paths: list[str]) -> list[tuple[int, int]]:
    sizes = []
    for path in paths:
        with av.open(path) as c:
            sizes += [(f.width, f.height) for f in c.decode(video=0)]
    return sizes


@pytest.mark.parametrize("codec, size, frames, skip", [("libx264", (160, 96), 40, 3), ("libx265", (192, 112), 33, 2)])
@pytest.mark.parametrize("odd_first", [True, False])
def test_a_stream_opened_as_0x0_is_recorded_at_its_keyframes_size_and_decides_for_no_other(tmp_path, codec, size,
                                                                                            frames, skip, odd_first):
    odd = joined_mid_gop(tmp_path, codec, size, frames, skip)
    healthy = clip(tmp_path, "healthy.mp4", codec, size=(128, 80), frames=20, **(X265 if codec == "libx265" else {}))
    runs = [("odd", odd, PROBE_NOTHING), ("healthy", healthy, {})]
    got = {name: record(tmp_path / name, uri, options) for name, uri, options in (runs if odd_first else runs[::-1])}
    (odd_files, odd_failures), (healthy_files, healthy_failures) = got["odd"], got["healthy"]
    assert not odd_failures and not healthy_failures
    first_key = -(-skip // 5) * 5  # the clip's keyframes: every 5 frames
    assert pictures(odd_files) == [size] * (frames - first_key)  # every picture from the first keyframe on
    assert pictures(healthy_files) == [(128, 80)] * 20


def test_the_parameter_sets_are_taken_from_an_annex_b_keyframe(tmp_path):
    with av.open(clip(tmp_path, "a.mp4")) as src, av.open(str(tmp_path / "a.h264"), "w", format="h264") as dst:
        out = dst.add_stream_from_template(src.streams.video[0])
        for p in src.demux(video=0):
            if p.size:
                p.stream = out
                dst.mux(p)
    with av.open(str(tmp_path / "a.h264")) as c:
        key = bytes(next(p for p in c.demux(video=0) if p.is_keyframe))
    units = parameter_sets("h264", key).split(b"\x00\x00\x00\x01")[1:]
    assert sorted(u[0] & 0x1F for u in units) == [7, 8]  # an SPS and a PPS
    assert all(u in key for u in units)
    assert parameter_sets("h264", key[4:]) == b"" and parameter_sets("vp8", key) == b""
