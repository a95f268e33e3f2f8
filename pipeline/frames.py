"""The data that flows between stages: frames, their detections, and end-of-stream markers.

Detections are struct-of-arrays (one numpy array per field) so that decoding, NMS,
mapping back to frame pixels and tracking stay vectorised; a frame carries exactly one
`Detections` for its whole life and stages fill in columns (track ids, secondary labels).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np


@dataclass
class Detections:
    """Boxes in frame pixels (x1, y1, x2, y2) with their scores and class ids."""

    xyxy: np.ndarray
    score: np.ndarray
    class_id: np.ndarray
    track_id: np.ndarray | None = None
    sub_class_id: np.ndarray | None = None
    sub_score: np.ndarray | None = None

    @classmethod
    def empty(cls) -> "Detections":
        return cls(
            xyxy=np.zeros((0, 4), np.float32),
            score=np.zeros((0,), np.float32),
            class_id=np.zeros((0,), np.int64),
        )

    def __len__(self) -> int:
        return int(self.xyxy.shape[0])

    def select(self, keep: np.ndarray) -> "Detections":
        """Rows picked by an index or boolean mask, every filled column kept aligned."""

        def pick(a: np.ndarray | None) -> np.ndarray | None:
            return None if a is None else a[keep]

        return Detections(
            xyxy=self.xyxy[keep],
            score=self.score[keep],
            class_id=self.class_id[keep],
            track_id=pick(self.track_id),
            sub_class_id=pick(self.sub_class_id),
            sub_score=pick(self.sub_score),
        )

    def ensure_sub_labels(self) -> None:
        """Create the secondary-label columns (-1 = not classified) before a classifier fills them."""
        if self.sub_class_id is None:
            self.sub_class_id = np.full((len(self),), -1, np.int64)
            self.sub_score = np.zeros((len(self),), np.float32)


@dataclass
class Letterbox:
    """How a frame was fitted into the model input, to map boxes back to frame pixels.

    input = frame * (scale_x, scale_y) + (pad_x, pad_y)
    """

    scale_x: float
    scale_y: float
    pad_x: float
    pad_y: float
    frame_w: int
    frame_h: int

    def to_frame(self, xyxy: np.ndarray) -> np.ndarray:
        out = np.empty_like(xyxy, dtype=np.float32)
        out[:, [0, 2]] = (xyxy[:, [0, 2]] - self.pad_x) / self.scale_x
        out[:, [1, 3]] = (xyxy[:, [1, 3]] - self.pad_y) / self.scale_y
        out[:, [0, 2]] = np.clip(out[:, [0, 2]], 0, self.frame_w)  # (fancy indexing copies: assign back)
        out[:, [1, 3]] = np.clip(out[:, [1, 3]], 0, self.frame_h)
        return out

    def to_input(self, xyxy: np.ndarray) -> np.ndarray:
        out = np.empty_like(xyxy, dtype=np.float32)
        out[:, [0, 2]] = xyxy[:, [0, 2]] * self.scale_x + self.pad_x
        out[:, [1, 3]] = xyxy[:, [1, 3]] * self.scale_y + self.pad_y
        return out


@dataclass
class Frame:
    """One decoded picture of one camera on its way through the graph.

    `seq` counts decoded frames per camera (gaps mean drops); `order` is assigned when the
    frame enters the first batching stage and is gap-free per camera, which is what the
    reorder buffers after asynchronous stages wait on.
    """

    camera: str
    seq: int
    pts: int | None
    time_base: Fraction | None
    image: np.ndarray
    t_capture: float
    rate: Fraction | None = None
    order: int = -1
    tensor: object | None = None  # the model input (`ModelInput`) until the detector has run
    letterbox: Letterbox | None = None
    detections: Detections | None = None
    events: list[dict] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    stamps: dict[str, float] = field(default_factory=dict)

    def stamp(self, boundary: str) -> None:
        self.stamps[boundary] = time.perf_counter()

    @property
    def pts_seconds(self) -> float | None:
        if self.pts is None or self.time_base is None:
            return None
        return float(self.pts * self.time_base)


@dataclass
class EndOfStream:
    """Marks the end of one camera's frames; it flows through the graph behind them.

    `reason` is "eof", "stopped" (signal) or "failed" (source error, in `error`).
    """

    camera: str
    reason: str = "eof"
    error: str | None = None
    order: int = -1


Item = Frame | EndOfStream
