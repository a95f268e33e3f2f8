"""Synthetic clips with exact ground truth: real object pictures (scikit-image's photos)
moved along known straight paths over a plain background, encoded as H.264."""
from __future__ import annotations

from dataclasses import dataclass

import av
import cv2
import numpy as np


@dataclass
class Mover:
    picture: np.ndarray          # BGR
    start: tuple[float, float]   # top-left corner at frame 0
    end: tuple[float, float]     # top-left corner at the last frame

    def corner(self, i: int, frames: int) -> tuple[int, int]:
        t = i / max(1, frames - 1)
        return (round(self.start[0] + t * (self.end[0] - self.start[0])),
                round(self.start[1] + t * (self.end[1] - self.start[1])))


X264 = ("libx264", {"crf": "16", "preset": "veryfast"})


def render(movers: list[Mover], path: str, frames: int = 60, size: tuple[int, int] = (640, 360),
           fps: int = 15, codec: tuple[str, dict[str, str]] = X264) -> list[list[tuple[int, int, int, int]]]:
    """Write the clip (H.264 unless `codec` names another encoder and its options);
    returns each frame's ground-truth boxes (x1, y1, x2, y2) per mover."""
    w, h = size
    truth = []
    with av.open(path, "w") as out:
        s = out.add_stream(codec[0], rate=fps)
        s.width, s.height, s.pix_fmt = w, h, "yuv420p"
        s.options = codec[1]
        for i in range(frames):
            canvas = np.full((h, w, 3), 96, np.uint8)
            boxes = []
            for m in movers:
                x, y = m.corner(i, frames)
                ph, pw = m.picture.shape[:2]
                canvas[y:y + ph, x:x + pw] = m.picture
                boxes.append((x, y, x + pw, y + ph))
            truth.append(boxes)
            vf = av.VideoFrame.from_ndarray(canvas, format="bgr24").reformat(format="yuv420p")
            vf.pts = i
            for p in s.encode(vf):
                out.mux(p)
        for p in s.encode(None):
            out.mux(p)
    return truth


def picture(name: str, height: int) -> np.ndarray:
    """A scikit-image photo (RGB) as BGR, scaled to `height`."""
    import skimage.data

    img = getattr(skimage.data, name)()[:, :, ::-1]
    scale = height / img.shape[0]
    return cv2.resize(np.ascontiguousarray(img), (round(img.shape[1] * scale), height), interpolation=cv2.INTER_AREA)
