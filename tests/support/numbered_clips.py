"""A camera's encoded packets whose every picture shows its frame number, and the numbers
a clip shows: which of the camera's moments an event clip holds, read back from its pictures."""
from __future__ import annotations

from fractions import Fraction

import av
import numpy as np

from pipeline.recording.packets import Held

FPS = 10


def encoder(path: str, gop: int):
    """A camera's H.264 encoder at FPS, 64x48, a keyframe every `gop` frames, muxing to `path`."""
    out = av.open(path, "w")
    s = out.add_stream("libx264", rate=FPS)
    s.width, s.height, s.pix_fmt = 64, 48, "yuv420p"
    s.time_base = Fraction(1, FPS)
    s.codec_context.options = {"preset": "ultrafast", "g": str(gop), "bf": "0"}
    s.codec_context.open()
    return out, s


def numbered_packets(folder, n: int, gop: int = FPS) -> tuple[list[Held], object]:
    """A camera's packets (a keyframe every `gop` frames, a second by default) of `n` frames,
    frame i showing its number: the top of the picture grey 5 + 6 (i % 40), the bottom
    5 + 30 (i // 40); and their stream."""
    out, stream = encoder(str(folder / "cam.mp4"), gop=gop)
    held = []
    for i in range(n):
        img = np.empty((48, 64, 3), np.uint8)
        img[:32], img[32:] = 5 + 6 * (i % 40), 5 + 30 * (i // 40)
        vf = av.VideoFrame.from_ndarray(img, format="bgr24").reformat(format="yuv420p")
        vf.pts, vf.time_base = i, Fraction(1, FPS)
        held += [Held.of(p) for p in stream.encode(vf)]
    held += [Held.of(p) for p in stream.encode(None)]
    for h in held:
        out.mux(h.packet())  # the camera's own video: its stream's codec headers are complete once one is muxed
    out.close()
    return held, stream


def shown(path: str) -> list[int]:
    """The camera's frame numbers a clip shows, in the order it plays them (decoding all of it)."""
    with av.open(path) as c:
        pictures = [f.to_ndarray(format="gray") for f in c.decode(video=0)]
    return [round((g[:32].mean() - 5) / 6) + 40 * round((g[32:].mean() - 5) / 30) for g in pictures]
