"""Where a camera's analytics decide events: its counting lines and the edges of its
zones, as segments, each with the classes it counts. Behind a detection rate, the
detector's gate (`sources.detect_gate`) sends every frame to the detector while motion
touches one of them, or a moving track is about to cross one or has just crossed it
(`near`): whether a crossing counts is decided over a few frames (`analytics.min_frames`),
and a track lost or swapped in a crowd right at the line loses or doubles an event.
Everywhere else the rate holds.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from pipeline.config.stages import CameraAnalyticsSpec, LineSpec
from pipeline.frames import ClassNames


@dataclass(frozen=True)
class Borders:
    """Segments (k, 2, 2) in frame pixels; per segment, the detector's class ids it counts
    (None: every class)."""

    segments: np.ndarray = field(default_factory=lambda: np.zeros((0, 2, 2), np.float64))
    classes: tuple[frozenset[int] | None, ...] = ()

    @classmethod
    def of(cls, spec: CameraAnalyticsSpec | None, names: ClassNames) -> "Borders":
        """A camera's lines and the edges of its zones (none without analytics)."""
        segments, classes = [], []
        for item in (spec.lines + spec.zones) if spec is not None else []:
            points = item.points if isinstance(item, LineSpec) else [*item.polygon, item.polygon[0]]
            ids = frozenset(int(i) for i in names.ids(item.classes)) if item.classes else None
            for a, b in zip(points, points[1:]):
                segments.append((a, b))
                classes.append(ids)
        return cls(np.array(segments, np.float64).reshape(-1, 2, 2), tuple(classes))

    def within(self, width: int, height: int) -> "Borders":
        """Without the segments along the picture's edges (a zone reaching to the edge of
        the frame): an anchor inside the picture never crosses them."""
        (x0, y0), (x1, y1) = self.segments[:, 0].T, self.segments[:, 1].T
        edge = (((x0 <= 1) & (x1 <= 1)) | ((y0 <= 1) & (y1 <= 1)) | ((x0 >= width - 2) & (x1 >= width - 2))
                | ((y0 >= height - 2) & (y1 >= height - 2)))
        return Borders(self.segments[~edge], tuple(c for c, e in zip(self.classes, edge) if not e))

    def __bool__(self) -> bool:
        return len(self.segments) > 0

    def touched(self, boxes: np.ndarray) -> bool:
        """Whether a box (motion, frame pixels) overlaps a segment (Liang-Barsky clipping
        of each segment to each box)."""
        if not len(boxes) or not self:
            return False
        b = boxes.astype(np.float64)[:, None, :]                                 # (n, 1, 4)
        (x0, y0), (dx, dy) = self.segments[:, 0].T, (self.segments[:, 1] - self.segments[:, 0]).T
        lo, hi = np.zeros((len(boxes), len(self.segments))), np.ones((len(boxes), len(self.segments)))
        for p, q in ((-dx, x0 - b[..., 0]), (dx, b[..., 2] - x0), (-dy, y0 - b[..., 1]), (dy, b[..., 3] - y0)):
            p = np.broadcast_to(p, q.shape)
            with np.errstate(divide="ignore", invalid="ignore"):
                r = q / p
            hi = np.where(p > 0, np.minimum(hi, r), hi)
            lo = np.where(p < 0, np.maximum(lo, r), lo)
            lo = np.where((p == 0) & (q < 0), 2.0, lo)  # parallel to this side and outside it
        return bool((lo <= hi).any())

    def near(self, boxes: np.ndarray, velocity: np.ndarray, class_id: np.ndarray, within_s: float) -> bool:
        """Whether a track's anchor (the bottom centre of its box, as analytics takes it)
        reaches a segment it counts within `within_s` seconds, or left it less than
        `within_s` ago, at its speed across it (pixels a second); beside a segment's ends
        it crosses nothing."""
        if not len(boxes) or not self:
            return False
        anchor = np.stack([(boxes[:, 0] + boxes[:, 2]) / 2, boxes[:, 3]], axis=1).astype(np.float64)
        a, d = self.segments[:, 0], self.segments[:, 1] - self.segments[:, 0]   # (k, 2)
        length = np.maximum(np.hypot(d[:, 0], d[:, 1]), 1e-9)
        normal = np.stack([-d[:, 1], d[:, 0]], axis=1) / length[:, None]
        rel = anchor[:, None, :] - a[None, :, :]                                 # (n, k, 2)
        along = (rel * d[None]).sum(-1) / (length ** 2)[None]
        across = np.abs((rel * normal[None]).sum(-1))
        speed = np.abs(velocity.astype(np.float64) @ normal.T)                  # (n, k)
        counted = np.array([[ids is None or int(c) in ids for ids in self.classes] for c in class_id], bool)
        return bool((counted & (along >= 0) & (along <= 1) & (across <= speed * within_s)).any())
