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
    """Segments (k, 2, 2) in frame pixels, and which classes each counts: `counts[c, j]`
    for the detector's class id c, its last row for any other id (true only where a
    segment counts every class)."""

    segments: np.ndarray = field(default_factory=lambda: np.zeros((0, 2, 2), np.float64))
    counts: np.ndarray = field(default_factory=lambda: np.zeros((1, 0), bool))

    @classmethod
    def of(cls, spec: CameraAnalyticsSpec | None, names: ClassNames) -> "Borders":
        """A camera's lines and the edges of its zones (none without analytics; a
        polygon's repeated point, as in one closed by hand, makes no edge)."""
        segments, classes = [], []
        for item in (spec.lines + spec.zones) if spec is not None else []:
            points = item.points if isinstance(item, LineSpec) else [*item.polygon, item.polygon[0]]
            ids = [int(i) for i in names.ids(item.classes)] if item.classes else None
            for a, b in zip(points, points[1:]):
                if a != b:
                    segments.append((a, b))
                    classes.append(ids)
        counts = np.zeros((max([max(c) for c in classes if c] or [-1]) + 2, len(classes)), bool)
        for j, ids in enumerate(classes):
            counts[ids if ids is not None else slice(None), j] = True
        return cls(np.array(segments, np.float64).reshape(-1, 2, 2), counts)

    def within(self, width: int, height: int) -> "Borders":
        """Without the segments along the picture's left, top and right edges (a zone
        reaching to the edge of the frame): an anchor, the bottom centre of a box inside
        the picture, never crosses them. It reaches the bottom edge, so that one stays."""
        (x0, y0), (x1, y1) = self.segments[:, 0].T, self.segments[:, 1].T
        edge = ((x0 <= 1) & (x1 <= 1)) | ((y0 <= 1) & (y1 <= 1)) | ((x0 >= width - 2) & (x1 >= width - 2))
        return Borders(self.segments[~edge], self.counts[:, ~edge])

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
        """Whether a track's anchor (the bottom centre of its box, as analytics takes it),
        carried along its velocity (pixels a second), crosses a segment of its class
        within `within_s` seconds from now, or crossed it less than `within_s` ago. An
        anchor moving along a segment, or still, crosses nothing."""
        if not len(boxes) or not self:
            return False
        p = np.stack([(boxes[:, 0] + boxes[:, 2]) / 2, boxes[:, 3]], axis=1).astype(np.float64)[:, None]  # (n, 1, 2)
        v = velocity.astype(np.float64)[:, None]
        a, d = self.segments[None, :, 0], self.segments[None, :, 1] - self.segments[None, :, 0]          # (1, k, 2)
        cross = lambda u, w: u[..., 0] * w[..., 1] - u[..., 1] * w[..., 0]  # noqa: E731
        denom = cross(v, d)                                                                               # (n, k)
        moving = np.abs(denom) > 1e-9
        with np.errstate(divide="ignore", invalid="ignore"):
            when = np.where(moving, cross(a - p, d) / denom, np.inf)   # p + v * when lies on the segment's line
            where = np.where(moving, cross(a - p, v) / denom, -1.0)    # ... at a + d * where
        ids = np.where((class_id >= 0) & (class_id < len(self.counts) - 1), class_id, len(self.counts) - 1)
        return bool((self.counts[ids] & (np.abs(when) <= within_s) & (where >= 0) & (where <= 1)).any())
