"""Synthetic clips with exact ground truth: real object pictures (scikit-image's photos)
moved along known straight paths over a plain or given background, encoded as H.264.
A mover may appear for some frames only (`first`, `last`) and stay where it stopped
(`stays`: a parked car); sensor noise makes the still stretches of a clip look like a
real camera's."""
from __future__ import annotations

from dataclasses import dataclass

import av
import cv2
import numpy as np


@dataclass
class Mover:
    picture: np.ndarray          # BGR
    start: tuple[float, float]   # top-left corner at its first frame
    end: tuple[float, float]     # top-left corner at its last frame
    first: int = 0               # the frame it appears on
    last: int | None = None      # the frame it reaches `end` (None: the clip's last)
    stays: bool = False          # after `last` it stays at `end` (else it is gone)

    def corner(self, i: int, frames: int) -> tuple[int, int] | None:
        """Its top-left corner on frame `i` (None: not in the picture)."""
        last = frames - 1 if self.last is None else self.last
        if i < self.first or (i > last and not self.stays):
            return None
        t = min(1.0, (i - self.first) / max(1, last - self.first))
        return (round(self.start[0] + t * (self.end[0] - self.start[0])),
                round(self.start[1] + t * (self.end[1] - self.start[1])))


X264 = ("libx264", {"crf": "16", "preset": "veryfast"})


def render(movers: list[Mover], path: str, frames: int = 60, size: tuple[int, int] = (640, 360),
           fps: int = 15, codec: tuple[str, dict[str, str]] = X264, background: np.ndarray | None = None,
           noise: float = 0.0, seed: int = 0) -> list[list[tuple[int, int, int, int] | None]]:
    """Write the clip (H.264 unless `codec` names another encoder and its options) over a
    plain grey or the given `background` (BGR, of `size`), with sensor noise of standard
    deviation `noise`; returns each frame's ground-truth boxes (x1, y1, x2, y2) per mover
    (None where it is not in the picture)."""
    w, h = size
    truth = []
    rng = np.random.default_rng(seed)
    base = np.full((h, w, 3), 96, np.uint8) if background is None else background
    with av.open(path, "w") as out:
        s = out.add_stream(codec[0], rate=fps)
        s.width, s.height, s.pix_fmt = w, h, "yuv420p"
        s.options = codec[1]
        for i in range(frames):
            canvas = base.copy()
            boxes: list[tuple[int, int, int, int] | None] = []
            for m in movers:
                corner = m.corner(i, frames)
                if corner is None:
                    boxes.append(None)
                    continue
                boxes.append(paste(canvas, m.picture, *corner))
            if noise:
                canvas = np.clip(canvas + rng.normal(0, noise, canvas.shape), 0, 255).astype(np.uint8)
            truth.append(boxes)
            vf = av.VideoFrame.from_ndarray(canvas, format="bgr24").reformat(format="yuv420p")
            vf.pts = i
            for p in s.encode(vf):
                out.mux(p)
        for p in s.encode(None):
            out.mux(p)
    return truth


def paste(canvas: np.ndarray, pic: np.ndarray, x: int, y: int) -> tuple[int, int, int, int] | None:
    """`pic` drawn with its top-left corner at (x, y), cut by the canvas's edges; the box
    of what shows (None: nothing)."""
    h, w = canvas.shape[:2]
    ph, pw = pic.shape[:2]
    x1, y1, x2, y2 = max(x, 0), max(y, 0), min(x + pw, w), min(y + ph, h)
    if x2 <= x1 or y2 <= y1:
        return None
    canvas[y1:y2, x1:x2] = pic[y1 - y:y2 - y, x1 - x:x2 - x]
    return (x1, y1, x2, y2)


def picture(name: str, height: int) -> np.ndarray:
    """A scikit-image photo (RGB) as BGR, scaled to `height`."""
    import skimage.data

    img = getattr(skimage.data, name)()[:, :, ::-1]
    scale = height / img.shape[0]
    return cv2.resize(np.ascontiguousarray(img), (round(img.shape[1] * scale), height), interpolation=cv2.INTER_AREA)
