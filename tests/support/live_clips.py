"""Clips for the live stream's tests: H.264 with a B-pyramid (pts != dts) whose every
picture shows its frame number, and what an fMP4 made of a live stream's messages shows."""
from __future__ import annotations

import io
from fractions import Fraction

import av
import numpy as np

from pipeline.config import SourceConfig
from pipeline.live.subscriber import INIT, FRAGMENT, Subscriber
from pipeline.sources.connection import Connection

FPS = 10
STEP = 8  # grey levels between frame numbers


def numbered_clip(path: str, frames: int = 30, gop: int = 10, codec: str = "libx264") -> str:
    """`frames` pictures at FPS, picture i grey 8 + STEP * i, a keyframe every `gop`,
    three B-frames in a pyramid between references (x264's)."""
    out = av.open(path, "w")
    s = out.add_stream(codec, rate=FPS)
    s.width, s.height, s.pix_fmt = 64, 48, "yuv420p"
    s.time_base = Fraction(1, FPS)
    options = {"preset": "ultrafast", "g": str(gop), "bf": "3", "b-pyramid": "normal", "b-adapt": "0",
               "sc_threshold": "0"} if codec == "libx264" else {"x265-params": "log-level=error:bframes=0"}
    s.codec_context.options = options
    for i in range(frames):
        img = np.full((48, 64, 3), 8 + STEP * i, np.uint8)
        vf = av.VideoFrame.from_ndarray(img, format="bgr24").reformat(format="yuv420p")
        vf.pts, vf.time_base = i, Fraction(1, FPS)
        for p in s.encode(vf):
            out.mux(p)
    for p in s.encode(None):
        out.mux(p)
    out.close()
    return path


def number(picture: av.VideoFrame) -> int:
    return round((picture.to_ndarray(format="gray").mean() - 8) / STEP)


def play(stream, path: str, until: int | None = None, subscribe_at: int | None = None,
         *subs: Subscriber) -> list[tuple[int, float | None]]:
    """One connection of a camera reading `path`, its live stream tapping it (viewers
    `subs` subscribe after picture `subscribe_at`): each picture's number and media time."""
    connection = Connection(SourceConfig(id="cam", uri=path), lambda why: None, also=stream)
    shown = []
    try:
        for vf in connection.frames(lambda: False):
            shown.append((number(vf), stream.media_time(vf)))
            if len(shown) == subscribe_at:
                assert all(stream.subscribe(sub) is None for sub in subs)
            if until is not None and len(shown) >= until:
                break
    finally:
        connection.close()
    return shown


def fmp4_of(messages: list) -> bytes:
    """The init segment and fragments a viewer got, as one file (from its newest init on)."""
    inits = [i for i, (kind, _) in enumerate(messages) if kind == INIT]
    return b"".join(payload for kind, payload in messages[inits[-1]:] if kind in (INIT, FRAGMENT))


def pictures(fmp4: bytes) -> list[tuple[int, float]]:
    """Each picture an fMP4 shows: its number and its media time (pts * time_base)."""
    with av.open(io.BytesIO(fmp4)) as c:
        v = c.streams.video[0]
        return [(number(f), float(f.pts * v.time_base)) for f in c.decode(v)]


def packets(path_or_bytes) -> list[bytes]:
    """The video packets' bytes, in decode order."""
    src = io.BytesIO(path_or_bytes) if isinstance(path_or_bytes, bytes) else path_or_bytes
    with av.open(src) as c:
        return [bytes(p) for p in c.demux(c.streams.video[0]) if p.size]
