"""One camera's tracks as columns of arrays, one row per track: what the tracker's passes
read and write all at once (one Kalman call for every track, one IoU matrix a pass)."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from pipeline.stages import motion


class TrackState:
    """A track's state (`Tracks.state`): plain ints, which a column compares with at numpy's
    speed (an enum member costs numpy a few attribute look-ups at every comparison)."""

    TENTATIVE = 0  # seen, not yet confirmed; dropped at its second miss in a row
    TRACKED = 1    # matched on the last update
    LOST = 2       # unmatched on the last `missed` updates; kept up to `max_age` to be found again


def column(*shape: int, dtype: type = np.float64):
    """A dataclass field: an empty array of rows of `shape`."""
    return field(default_factory=lambda: np.zeros((0, *shape), dtype))


@dataclass
class Tracks:
    """One camera's tracks as columns, one row per track."""

    id: np.ndarray = column(dtype=np.int64)
    class_id: np.ndarray = column(dtype=np.int64)
    state: np.ndarray = column(dtype=np.int8)
    missed: np.ndarray = column(dtype=np.int64)  # updates since the last match
    score: np.ndarray = column()                 # the matched detections' scores, added up
    mean: np.ndarray = column(8)                 # the Kalman filter
    cov: np.ndarray = column(3, 4)               # per axis: `motion`'s blocks
    seen: np.ndarray = column(4)                 # the last matched box, and the filter just after it
    seen_mean: np.ndarray = column(8)
    seen_cov: np.ndarray = column(3, 4)
    seen_at: np.ndarray = column(dtype=np.int64)  # the frame of the last match
    last_score: np.ndarray = column()            # the last matched detection's score
    need: np.ndarray = column()                  # a tentative track's scores to add up before it is confirmed
    born: np.ndarray = column(dtype=np.int64)    # the update of the first detection, and its box
    first: np.ndarray = column(4)

    def __len__(self) -> int:
        return len(self.id)

    def first_of(self, ids: np.ndarray) -> np.ndarray:
        """The first detected box of each track of `ids` (NaN for an id no track has)."""
        row = {int(t): r for r, t in enumerate(self.id)}
        out = np.full((len(ids), 4), np.nan)
        for i, t in enumerate(ids.tolist()):
            if t in row:
                out[i] = self.first[row[t]]
        return out

    def keep(self, rows: np.ndarray) -> None:
        for name in self.__dataclass_fields__:
            setattr(self, name, getattr(self, name)[rows])

    def add(self, ids: np.ndarray, class_id: np.ndarray, state: int, boxes: np.ndarray,
            scores: np.ndarray, need: np.ndarray, update: int, frame: int) -> None:
        mean, cov = motion.initiate(boxes)
        new = dict(id=ids, class_id=class_id, state=np.full(len(ids), state, np.int8),
                   missed=np.zeros(len(ids), np.int64), score=scores, mean=mean, cov=cov,
                   seen=boxes, seen_mean=mean, seen_cov=cov, seen_at=np.full(len(ids), frame, np.int64),
                   last_score=scores, born=np.full(len(ids), update, np.int64), first=boxes, need=need)
        for name, value in new.items():
            setattr(self, name, np.concatenate([getattr(self, name), value]))
