"""What a camera's tracker knew, handed back to the camera's own thread at a fixed lag:
the detector's gate (`sources.detect_gate`) runs the detector while a track still moves
and cuts regions around the moving tracks, and its decisions must not depend on how far
the rest of the graph has got.

So the gate of a frame at time t reads the tracks as they stood after the tracker's
update on one exact earlier frame: the newest frame the camera handed on at least `LAG_S`
seconds of its own time before t. A file camera waits for that update if the tracker has
not made it yet (the same file gives the same decisions on a fast machine and on a loaded
one; it waits only when it runs more than `LAG_S` ahead of its tracker); a live camera
never waits and takes the newest update up to that frame (its frames may be dropped on
the way anyway). The tracker publishes after every frame it updates on.
"""
from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

LAG_S = 0.5  # the gate sees the tracks as they stood this much of the camera's time ago


@dataclass(frozen=True)
class TrackView:
    """A camera's confirmed tracks after the tracker's update on frame `seq` (at `t`
    seconds of the camera's time): boxes (frame pixels), velocities of their centres
    (pixels a second), which of them still move (not settled: `stages.track.SETTLED_S`), and their classes
    (the detector's ids)."""

    seq: int
    t: float
    boxes: np.ndarray = field(default_factory=lambda: np.zeros((0, 4), np.float32))
    velocity: np.ndarray = field(default_factory=lambda: np.zeros((0, 2), np.float32))
    moving: np.ndarray = field(default_factory=lambda: np.zeros((0,), bool))
    class_id: np.ndarray = field(default_factory=lambda: np.zeros((0,), np.int64))

    def moving_at(self, t: float) -> np.ndarray:
        """The moving tracks' boxes carried on to time `t` along their velocities."""
        step = (self.velocity[self.moving] * max(0.0, t - self.t)).astype(np.float32)
        return self.boxes[self.moving] + np.concatenate([step, step], axis=1)


class TrackFeedback:
    """One camera's: published by its tracker, read by its camera's thread."""

    def __init__(self, wait: bool):
        self.wait = wait  # a file camera waits for the update it needs; a live one takes what there is
        self._views: deque[TrackView] = deque()
        self._cond = threading.Condition()
        self._closed = False

    def publish(self, view: TrackView) -> None:
        """The tracker's update on frame `view.seq` (frames come in the camera's order)."""
        with self._cond:
            self._views.append(view)
            self._cond.notify_all()

    def close(self) -> None:
        """Nothing more will be published (the camera or the run ends)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def view(self, seq: int, stopping: Callable[[], bool]) -> TrackView | None:
        """The tracks after the update on frame `seq` (None: no update yet on it or before
        it). A waiting reader gives up when `stopping()` says so or nothing more comes;
        older views are dropped (the reader asks for later frames only)."""
        with self._cond:
            while self.wait and not self._closed and not stopping() and not self._reached(seq):
                self._cond.wait(0.1)
            found = None
            while self._views and self._views[0].seq <= seq:
                found = self._views.popleft()
            if found is not None:
                self._views.appendleft(found)  # the next frame may need the same update
            return found

    def _reached(self, seq: int) -> bool:
        return bool(self._views) and self._views[-1].seq >= seq


class TrackFeedbacks:
    """Every camera's feedback, made when the camera starts (None where the graph has no
    tracker: the gate then decides on motion and time alone)."""

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self._cameras: dict[str, TrackFeedback] = {}
        self._lock = threading.Lock()

    def open(self, camera: str, wait: bool) -> TrackFeedback | None:
        if not self.enabled:
            return None
        with self._lock:
            old = self._cameras.get(camera)
            if old is not None:
                old.close()
            feedback = self._cameras[camera] = TrackFeedback(wait)
            return feedback

    def get(self, camera: str) -> TrackFeedback | None:
        return self._cameras.get(camera)

    def close(self, camera: str) -> None:
        with self._lock:
            feedback = self._cameras.pop(camera, None)
        if feedback is not None:
            feedback.close()
