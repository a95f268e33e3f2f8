"""Multi-object tracking per camera, ByteTrack-style.

Why our own: the well-kept implementations (supervision, yolox/bytetrack) pull in the
non-headless OpenCV or a deep-learning framework; the algorithm itself is small.

Per frame and camera: every track's Kalman filter (constant velocity on centre x/y,
aspect ratio and height) predicts its box; detections are split by score; the first
association matches confirmed and lost tracks to high-score detections by IoU, the
second matches the tracks still unmatched to low-score detections (objects that are
partly hidden keep their id), then unconfirmed tracks try the remaining high-score
detections. Unmatched high-score detections start tentative tracks, confirmed on their
second consecutive match (on a camera's first frame at once); tracks unseen for
`max_age` updates (the frames the camera passes on: with `stride` N, every Nth) are
removed. Matching is greedy by IoU, highest first: with the few objects per camera it
agrees with the optimal assignment in practice and needs no solver.
Detections keep their boxes; matched rows get the track id (-1 while tentative).
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from enum import Enum
from typing import Iterable

import numpy as np

from pipeline.config import TrackSpec
from pipeline.decoders.nms import iou_matrix
from pipeline.frames import EndOfStream, Frame, Item
from pipeline.metrics.registry import Metrics
from pipeline.runtime.stage import InlineStage
from pipeline.stages.build import BuildContext

_CHI = 1.0 / 20
_VEL = 1.0 / 160


class KalmanBox:
    """Constant-velocity Kalman filter on (cx, cy, aspect, h), as in SORT/ByteTrack."""

    F = np.eye(8)
    F[:4, 4:] = np.eye(4)
    H = np.eye(4, 8)

    def __init__(self, xyxy: np.ndarray):
        self.x = np.zeros(8)
        self.x[:4] = self.to_xyah(xyxy)
        h = self.x[3]
        std = np.array([2 * _CHI * h, 2 * _CHI * h, 1e-2, 2 * _CHI * h,
                        10 * _VEL * h, 10 * _VEL * h, 1e-5, 10 * _VEL * h])
        self.P = np.diag(std ** 2)

    @staticmethod
    def to_xyah(b: np.ndarray) -> np.ndarray:
        w, h = b[2] - b[0], max(b[3] - b[1], 1e-3)
        return np.array([b[0] + w / 2, b[1] + h / 2, w / h, h])

    def box(self) -> np.ndarray:
        cx, cy, a, h = self.x[:4]
        w = a * h
        return np.array([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2])

    def predict(self) -> None:
        h = self.x[3]
        q = np.array([_CHI * h, _CHI * h, 1e-2, _CHI * h, _VEL * h, _VEL * h, 1e-5, _VEL * h])
        self.x = self.F @ self.x
        self.P = self.F @ self.P @ self.F.T + np.diag(q ** 2)

    def update(self, xyxy: np.ndarray) -> None:
        h = self.x[3]
        r = np.diag(np.array([_CHI * h, _CHI * h, 1e-1, _CHI * h]) ** 2)
        s = self.H @ self.P @ self.H.T + r
        k = self.P @ self.H.T @ np.linalg.inv(s)
        self.x = self.x + k @ (self.to_xyah(xyxy) - self.H @ self.x)
        self.P = (np.eye(8) - k @ self.H) @ self.P


class TrackState(Enum):
    TENTATIVE = "tentative"  # seen once; confirmed by a second match, dropped otherwise
    TRACKED = "tracked"      # matched on the last frame
    LOST = "lost"            # unmatched for `missed` updates; kept up to `max_age` to be found again


@dataclass
class Track:
    id: int
    kf: KalmanBox
    class_id: int
    state: TrackState = TrackState.TENTATIVE
    missed: int = 0

    def box(self) -> np.ndarray:
        return self.kf.box()


def greedy_match(iou: np.ndarray, threshold: float) -> list[tuple[int, int]]:
    """Pairs (row, col) with IoU >= threshold, best pairs first, each row and col once."""
    pairs = []
    if iou.size == 0:
        return pairs
    rows, cols = np.nonzero(iou >= threshold)
    order = np.argsort(-iou[rows, cols], kind="stable")
    used_r, used_c = set(), set()
    for k in order:
        r, c = int(rows[k]), int(cols[k])
        if r not in used_r and c not in used_c:
            used_r.add(r)
            used_c.add(c)
            pairs.append((r, c))
    return pairs


@dataclass
class ByteTracker:
    """The tracker state of one camera (its parameters: `TrackSpec`)."""

    spec: TrackSpec
    tracks: list[Track] = field(default_factory=list)
    frames: int = 0
    _ids: Iterable[int] = field(default_factory=lambda: itertools.count(1))

    def _iou(self, tracks: list[Track], boxes: np.ndarray, classes: np.ndarray, rows: np.ndarray) -> np.ndarray:
        if not tracks or not len(rows):
            return np.zeros((len(tracks), len(rows)))
        iou = iou_matrix(np.stack([t.box() for t in tracks]), boxes[rows])
        if self.spec.class_aware:
            same = np.array([t.class_id for t in tracks])[:, None] == classes[rows][None, :]
            iou = np.where(same, iou, 0.0)
        return iou

    def update(self, boxes: np.ndarray, scores: np.ndarray, classes: np.ndarray) -> np.ndarray:
        """Track ids for each detection row (-1: tentative or unmatched)."""
        self.frames += 1
        ids = np.full((len(boxes),), -1, np.int64)
        for t in self.tracks:
            t.kf.predict()
        high = np.nonzero(scores >= self.spec.high_threshold)[0]
        low = np.nonzero(scores < self.spec.high_threshold)[0]
        confirmed = [t for t in self.tracks if t.state is not TrackState.TENTATIVE]
        tentative = [t for t in self.tracks if t.state is TrackState.TENTATIVE]
        was_tracked = {id(t) for t in self.tracks if t.state is TrackState.TRACKED}
        matched: set[int] = set()

        def assign(tracks: list[Track], rows: np.ndarray, threshold: float) -> tuple[list[Track], np.ndarray]:
            pairs = greedy_match(self._iou(tracks, boxes, classes, rows), threshold)
            for ti, di in pairs:
                t, row = tracks[ti], int(rows[di])
                t.kf.update(boxes[row])
                t.missed = 0
                t.state = TrackState.TRACKED
                ids[row] = t.id
                matched.add(id(t))
            used = {di for _, di in pairs}
            left_rows = np.array([r for i, r in enumerate(rows) if i not in used], np.int64)
            return [t for t in tracks if id(t) not in matched], left_rows

        unmatched, high_left = assign(confirmed, high, self.spec.match_iou)
        # a track lost in the first pass that was there a frame ago may be partly hidden now
        unmatched, _ = assign([t for t in unmatched if id(t) in was_tracked], low, self.spec.low_match_iou)
        _, high_left = assign(tentative, high_left, self.spec.match_iou)
        for t in self.tracks:
            if id(t) not in matched:
                t.missed += 1
                if t.state is TrackState.TRACKED:
                    t.state = TrackState.LOST
        self.tracks = [t for t in self.tracks if id(t) in matched
                       or (t.state is TrackState.LOST and t.missed <= self.spec.max_age)]
        for row in high_left:
            if scores[row] >= self.spec.new_track_threshold:
                # on a camera's first frame every object is there already: tracked at once
                state = TrackState.TRACKED if self.frames == 1 else TrackState.TENTATIVE
                t = Track(next(self._ids), KalmanBox(boxes[row]), int(classes[row]), state)
                self.tracks.append(t)
                if state is TrackState.TRACKED:
                    ids[row] = t.id
        return ids


class TrackStage(InlineStage):
    """Per-camera trackers; frames arrive in order (the detector restores it)."""

    def __init__(self, spec: TrackSpec, metrics: Metrics):
        super().__init__(spec.stage_name, metrics)
        self.spec = spec
        self.trackers: dict[str, ByteTracker] = {}

    @classmethod
    def from_spec(cls, spec: TrackSpec, ctx: BuildContext) -> "TrackStage":
        return cls(spec, ctx.metrics)

    def process(self, frame: Frame) -> Iterable[Item]:
        det = frame.detections
        if det is not None:
            tracker = self.trackers.get(frame.camera)
            if tracker is None:
                tracker = self.trackers[frame.camera] = ByteTracker(self.spec)
            det.track_id = tracker.update(det.xyxy, det.score, det.class_id)
        return (frame,)

    def end(self, eos: EndOfStream) -> Iterable[Item]:
        self.trackers.pop(eos.camera, None)
        return (eos,)
