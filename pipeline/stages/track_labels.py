"""Per-track classification (`classify.per_track`): which rows of a frame are cropped, and
the label every row of a track gets, smoothed by the track's accumulated scores.

A track is classified when it appears and again only every `reclassify_interval` frames
or when its box grows by `regrow` (area ratio); its other rows take the track's label.

Labels are reproducible: a row's label is the vote of exactly the classifications of its
track submitted up to its frame, counted in submission order, whatever order the engine
completes them in (two runs of the same file give the same labels, on a fast machine or
a loaded one). A row whose votes are not all back waits for them; its frame waits with it.

Time is counted in updates (the frames of a camera that reach the stage), the tracker's
unit: with `stride` or `max_fps` a camera's `seq` advances by several frames per update,
so a window counted in `seq` would be checked on only some frames, and a camera that
runs for months would keep every track it ever saw.
"""
from __future__ import annotations

import threading
from collections import defaultdict
from dataclasses import dataclass, field
import numpy as np

from pipeline.config import ClassifySpec
from pipeline.frames import Frame

FORGET_AFTER = 300  # updates of its camera after which a vanished track's label state is dropped
FORGET_CHECK_EVERY = 30  # updates of a camera between two looks for vanished tracks


@dataclass
class PendingFrame:
    """A frame in the classify stage and the labels it still waits for (counted up by the
    feeding thread, down by completion threads); it starts with the feeder's own hold."""

    frame: Frame
    remaining: int = 1
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def more(self) -> None:
        with self._lock:
            self.remaining += 1

    def done(self) -> bool:
        """One awaited label (or the hold) is in; True when it was the last."""
        with self._lock:
            self.remaining -= 1
            return self.remaining == 0


@dataclass
class TrackLabel:
    """One track's classifications: submitted, back (possibly out of order), and counted."""

    votes: dict[int, float] = field(default_factory=lambda: defaultdict(float))
    submitted: int = 0  # classifications of this track submitted so far
    counted: int = 0    # of them, counted in `votes` (the first `counted`, in submission order)
    back: dict[int, tuple[int, float]] = field(default_factory=dict)  # submission -> label, ahead of an earlier one
    waiting: list[tuple[int, PendingFrame, int]] = field(default_factory=list)  # (votes needed, frame, row)
    last_seq: int = -10**9
    last_area: float = 0.0
    seen: int = 0  # the camera's update the track was last on

    def best(self) -> tuple[int, float]:
        """The label so far (-1 before any classification succeeded) and its share of the votes."""
        if not self.votes:
            return -1, 0.0
        cls = max(self.votes, key=self.votes.__getitem__)
        return cls, self.votes[cls] / sum(self.votes.values())

    @property
    def settled(self) -> bool:
        return self.counted == self.submitted and not self.waiting


@dataclass
class _CameraTracks:
    tracks: dict[int, TrackLabel] = field(default_factory=dict)
    updates: int = 0


Labelled = list[tuple[PendingFrame, int, int, float]]  # (frame, row, class id, score)


def forget_stale(tracks: dict[int, TrackLabel], update: int) -> None:
    """Drop the labels of tracks gone for a while (a live camera runs for months), unless
    one of their classifications is still under way."""
    for tid in [t for t, st in tracks.items() if update - st.seen > FORGET_AFTER and st.settled]:
        del tracks[tid]


class TrackLabels:
    def __init__(self, spec: ClassifySpec, counters: dict[str, int]):
        self.reclassify_interval = spec.reclassify_interval
        self.regrow = spec.regrow
        self.counters = counters  # `calls_saved`: rows labelled without a crop of their own
        self._cameras: dict[str, _CameraTracks] = defaultdict(_CameraTracks)
        self._lock = threading.Lock()  # the feeding thread and the engine's completion threads

    def update(self, camera: str) -> None:
        """One more update of the camera; every `FORGET_CHECK_EVERY`, its vanished tracks
        are forgotten, whether or not this frame has anything to classify."""
        cam = self._cameras[camera]
        cam.updates += 1
        if cam.updates % FORGET_CHECK_EVERY == 0:
            with self._lock:
                forget_stale(cam.tracks, cam.updates)

    def end(self, camera: str) -> None:
        self._cameras.pop(camera, None)

    def tracks(self, camera: str) -> dict[int, TrackLabel]:
        return self._cameras[camera].tracks

    def choose(self, frame: Frame, rows: np.ndarray, waiter: PendingFrame) -> tuple[list[tuple[int, TrackLabel, int]],
                                                                            Labelled]:
        """The rows to crop, each with its track and its submission number; and the rows
        labelled at once. The other rows of confirmed tracks wait (their frame waits for
        each) for the votes submitted before them; tentative rows (no track id
        yet) are left for their track to be confirmed; predicted rows (the tracker's
        boxes, no new sight of the object) are never cropped: they take their track's votes."""
        det = frame.detections
        assert det is not None and det.track_id is not None
        cam = self._cameras[frame.camera]
        chosen, now = [], []
        with self._lock:
            for r in rows:
                tid = int(det.track_id[r])
                if tid < 0:
                    continue
                x1, y1, x2, y2 = det.xyxy[r]
                area = float((x2 - x1) * (y2 - y1))
                state = cam.tracks.setdefault(tid, TrackLabel())
                state.seen = cam.updates
                predicted = det.predicted is not None and bool(det.predicted[r])  # labelled from its votes only
                if predicted and not state.submitted:
                    continue
                if not predicted and (not state.submitted or frame.seq - state.last_seq >= self.reclassify_interval
                                      or area > self.regrow * max(state.last_area, 1.0)):
                    state.last_seq, state.last_area = frame.seq, area
                    chosen.append((int(r), state, state.submitted))
                    state.submitted += 1
                    continue
                self.counters["calls_saved"] += 1
                waiter.more()  # every labelled row is one label its frame waits for, given at once or later
                if state.counted == state.submitted:
                    now.append((waiter, int(r), *state.best()))
                else:
                    state.waiting.append((state.submitted, waiter, int(r)))
        return chosen, now

    def back(self, state: TrackLabel, number: int, waiter: PendingFrame, row: int, cls: int, score: float) -> Labelled:
        """Classification `number` of the track came back (`cls` -1: it failed) for `row`
        of the waiting frame: the rows whose votes are now all counted, with their labels."""
        with self._lock:
            state.back[number] = (cls, score)
            state.waiting.append((number + 1, waiter, row))
            labelled: Labelled = []
            while state.counted in state.back:
                c, s = state.back.pop(state.counted)
                if c >= 0:
                    state.votes[c] += s
                state.counted += 1
                still = []
                for need, w, r in state.waiting:
                    if need <= state.counted:
                        labelled.append((w, r, *state.best()))
                    else:
                        still.append((need, w, r))
                state.waiting = still
            return labelled
