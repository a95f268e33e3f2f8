"""Which frames are shown, and the picture each is shown in: the annotated video at its
size and rate (`outputs.video`: `max_height`, `fps`), the live view while someone watches
the camera (`Preview.wants`), an event's snapshot at the frame's full size.

The video's picture is the frame's own (drawn on in place, as it has always been) while
the video keeps the frame's size; with `max_height` below it, a copy scaled down from the
decoded picture (`pictures.scaled_bgr`: cheaper than converting the full-size picture),
drawn on with its coordinates scaled, while the frame keeps its full-size picture,
untouched, for crops and snapshots. `fps` skips frames in the video only (on the camera's
timeline, like `max_fps`); every frame still reaches the JSON lines. A frame nobody shows
gets no picture: with the video off and nobody watching, no frame is converted to BGR to
be shown (`converts_every_frame` tells the detector's preprocessing when one is anyway).

Decided once per frame, in each camera's order, by the graph's annotate stage, which then
draws on it (`annotated`), or by the sink where the graph draws nothing.
"""
from __future__ import annotations

from fractions import Fraction
from typing import Callable

import cv2
import numpy as np

from pipeline.config import AnnotateSpec, ClassifySpec, Config, VideoOutputConfig
from pipeline.drawing import draw
from pipeline.frames import Frame, View
from pipeline.pictures import scaled_bgr
from pipeline.sources.gate import FrameGate


def annotates(config: Config) -> bool:
    """Whether the graph draws on the frames (it has an annotate stage)."""
    return any(isinstance(s, AnnotateSpec) for s in config.graph)


def converts_every_frame(config: Config) -> bool:
    """Whether every frame's full-size BGR picture is made anyway: a video at the frame's
    size, or classifier crops."""
    video = config.outputs.video
    return (video.enabled and video.max_height is None) or any(isinstance(s, ClassifySpec) for s in config.graph)


def shown_size(width: int, height: int, max_height: int | None) -> tuple[int, int]:
    """A frame's size in a video of at most `max_height` rows (widths stay even for 4:2:0)."""
    if max_height is None or height <= max_height:
        return width, height
    return max(2, 2 * round(width * max_height / height / 2)), max_height


class Views:
    def __init__(self, video: VideoOutputConfig, annotated: bool = False,
                 wants: Callable[[str], bool] | None = None):
        self.video = video.enabled
        self.max_height = video.max_height
        self.fps = video.fps
        self.annotated = annotated  # the annotate stage decides and draws; else the sink decides
        self.wants = wants          # the live view: whether it takes this camera's next frame
        self._gates: dict[str, FrameGate] = {}

    def show(self, frame: Frame) -> View | None:
        """The picture `frame` is shown in (also kept as `frame.view`), or None: nobody shows it."""
        video = self.video and self._due(frame)
        if video or (self.wants is not None and self.wants(frame.camera)):
            frame.view = self._view(frame, video)
        return frame.view

    def video_picture(self, frame: Frame) -> np.ndarray | None:
        """The picture of `frame` the annotated video takes (None: it skips the frame),
        decided here where the graph has no annotate stage to decide."""
        view = frame.view if self.annotated else self.show(frame)
        return view.image if view is not None and view.video else None

    def _due(self, frame: Frame) -> bool:
        if self.fps is None:
            return True
        gate = self._gates.setdefault(frame.camera, FrameGate(1, self.fps))
        t = frame.pts_seconds
        if t is None:
            t = float(frame.seq / (frame.rate or Fraction(25)))
        return gate.reject(frame.seq, t) is None

    def _view(self, frame: Frame, video: bool) -> View:
        w, h = frame.size
        sw, sh = shown_size(w, h, self.max_height)
        if (sw, sh) == (w, h):
            return View(frame.image, 1.0, video)
        if frame.converted or frame.picture is None:  # type: ignore[attr-defined]
            image = cv2.resize(frame.image, (sw, sh), interpolation=cv2.INTER_AREA)
        else:
            image = scaled_bgr(frame.picture, sw, sh, cv2.INTER_AREA)
        return View(image, sh / h, video)

    def snapshot(self, frame: Frame) -> np.ndarray:
        """The frame at its full size with its results drawn (where the graph draws), for
        an event's snapshot: its video picture where that is the frame itself, else a copy."""
        if (frame.view is not None and frame.view.scale == 1.0) or not self.annotated:
            return frame.image
        image = frame.image.copy()
        draw(image, frame)
        return image

    def end(self, camera: str) -> None:
        """A camera ended: one that returns starts its video's rate afresh."""
        self._gates.pop(camera, None)
