"""A tracker's candidates (tentative tracks): the evidence each needs before it is
confirmed, and when one fails.

Detectors calibrate their scores differently (a small, far or blurred person may score
0.45 all along), so what tells a person from a false positive is mostly where and how
often a box comes back: two sightings in a row at 0.45 (`confirm_score`) confirm; a
candidate is kept through one miss (or a frame with only a weak box), but each miss asks
for `confirm_score` more, and a second miss in a row drops it, so a box that flickers
every other frame never adds up. One that starts mostly inside a track just matched (a
part of a person, a second box on them) or where a candidate seen more than once failed
lately (false positives fire again on the same background) needs more evidence
(`_ON_TRACK_NEED`, `_HAUNT_NEED`). So does every candidate of a camera where such places
turn up again and again lately (`_REPEATING`): its detector's false positives repeat, so
two sightings prove less there; a confident person (0.75 and up) is still confirmed on
their second frame. Where false positives do not repeat (a candidate from one is seen
once and gone), a person scored 0.45 is confirmed on their second frame.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from pipeline.config import TrackSpec
from pipeline.decoders.nms import area, intersections, iou_matrix
from pipeline.stages.track_table import Tracks, TrackState, column

_CANDIDATE_MISSES = 1   # a candidate is kept through this many updates in a row without a match
_MISS_NEED = 1.0        # times `confirm_score` a candidate needs more after each miss
_ON_TRACK = 0.5         # this share of a candidate's box inside a track of its class just matched (a part of it, ...
_ON_TRACK_NEED = 1.5    # ... a second box on it): times `confirm_score` it needs
_HAUNT_IOU = 0.3        # a candidate on a place where one seen more than once failed (IoU) ...
_HAUNT_MEMORY = 30      # ... within this many updates ...
_HAUNT_NEED = 2.0       # ... needs this many times `confirm_score`
_REPEATING = 3          # as many haunted places within `_HAUNT_MEMORY` updates: the camera's false positives repeat ...
_REPEATING_NEED = 5 / 3  # ... and each candidate needs this many times `confirm_score` (two sightings at 0.75)


@dataclass
class Haunts:
    """The last boxes of candidates that failed (missed before they were confirmed), and
    the update each failed on: a detector's false positives fire again where they fired."""

    boxes: np.ndarray = column(4)
    at: np.ndarray = column(dtype=np.int64)

    def add(self, boxes: np.ndarray, update: int) -> None:
        self.boxes = np.concatenate([self.boxes, boxes])
        self.at = np.concatenate([self.at, np.full(len(boxes), update, np.int64)])

    def near(self, boxes: np.ndarray, update: int) -> np.ndarray:
        """Per box: whether it is on a place haunted within `_HAUNT_MEMORY` updates."""
        recent = self.at > update - _HAUNT_MEMORY
        self.boxes, self.at = self.boxes[recent], self.at[recent]
        if not len(self.at) or not len(boxes):
            return np.zeros(len(boxes), bool)
        return (iou_matrix(boxes, self.boxes) >= _HAUNT_IOU).any(axis=1)


@dataclass
class Candidates:
    """One camera's rules for its candidates (`spec`: its `confirm_score`, `class_aware`)."""

    spec: TrackSpec
    haunted: Haunts = field(default_factory=Haunts)

    def need(self, tracks: Tracks, boxes: np.ndarray, classes: np.ndarray, update: int) -> np.ndarray:
        """Per new candidate box, the scores it must add up to be confirmed: more where false
        positives fire, mostly inside a track matched just now (of its class) or on a
        haunted place, and on a camera with haunted places here and there."""
        t = tracks
        on = np.nonzero((t.state == TrackState.TRACKED) & (t.missed == 0))[0]
        inside = intersections(boxes, t.seen[on]) / np.maximum(area(boxes), 1e-9)[:, None]
        if self.spec.class_aware:
            inside = np.where(classes[:, None] == t.class_id[on][None, :], inside, 0.0)
        doubt = np.where((inside >= _ON_TRACK).any(axis=1), _ON_TRACK_NEED, 1.0)
        haunted = self.haunted.near(boxes, update)
        if len(self.haunted.at) >= _REPEATING:  # this camera's false positives fire again and again lately
            doubt = doubt * _REPEATING_NEED
        return np.where(haunted, _HAUNT_NEED, doubt) * self.spec.confirm_score

    def missed(self, tracks: Tracks, unmatched: np.ndarray, update: int) -> np.ndarray:
        """The `unmatched` candidates (their `missed` counted already) need a sighting more;
        the rows of those missed twice in a row, which fail (their place remembered as
        haunted where they were seen more than once)."""
        t = tracks
        tentative = unmatched & (t.state == TrackState.TENTATIVE)
        t.need[tentative] += self.spec.confirm_score * _MISS_NEED
        failed = tentative & (t.missed > _CANDIDATE_MISSES)
        self.haunted.add(t.seen[failed & (t.score > t.last_score)], update)
        return failed
