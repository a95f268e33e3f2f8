"""Which of a camera's frames the detector sees (`detect.fps`, `motion`, `refresh_s`),
decided in the camera's thread, frame by frame, from the frame's time on the camera's
timeline, the frame's own motion and the camera's tracks at a fixed lag: the same file
gives the same detector runs on a fast machine and on a loaded one. The frames it leaves
out still go through the whole graph; the tracker predicts on them.

The detection rate takes the first frame in each slot of `1 / fps` seconds of the
camera's timeline (a 15 fps camera at `fps: 5` gives every third frame; a 25 fps one at
`fps: 4` alternates 6 and 7 frames, 4 a second; a camera that moved to another host
keeps the same slots). Each camera's slots start at a phase of its own, from its id
(`phase_of`): cameras whose timelines start together (files, cameras connected at one
start) would otherwise all want the detector in the same frame interval, a burst the
engine's few in-flight runs cannot take before the next frames come (a live camera's
lane keeps one frame), while the cores wait idle between the bursts. With `motion`, a
frame of the rate goes to the detector only when its picture shows motion, a track still
moves (the tracker's view `LAG_S` ago, `runtime.track_feedback`), or `refresh_s` has
passed since the detector last ran on the camera (the first frame always goes); so on a
still scene the detector runs once per `refresh_s`. Motion lying on a settled track (one
whose box has stayed put for `stages.track.SETTLED_S`: a person who stopped, not yet
faded into the background) is that object's own and runs nothing (`off_settled`); so does
motion that did not change since the rate's frame before (`Motion.live`: the picture of an
object that stopped, or the trace one left, both fading into the background over
`background_s`, while nothing there moves). Motion is measured only on the frames
of the rate: what moves between two of them shows in the second. With `regions`, a run for motion looks only at square crops
around it and the moving tracks where that is cheaper (`sources.regions`).

Behind a rate, a frame between the rate's frames still goes to the detector while the
motion of the rate's last frame touches a counting line or a zone's edge, or a moving
track (the same lagged view, carried on) crosses one within `border_s` seconds, before or
after (`sources.borders`): events are decided there at the camera's full rate, and the
rate holds everywhere else.
"""
from __future__ import annotations

import math
import zlib
from collections import deque
from typing import Callable

import av
import numpy as np

from pipeline.config import MotionConfig
from pipeline.config.stages import DetectRate
from pipeline.decoders.nms import area, intersections
from pipeline.frames import DetectPlan, Motion
from pipeline.runtime.track_feedback import LAG_S, TrackFeedback, TrackView
from pipeline.sources.borders import Borders
from pipeline.sources.motion_detector import MotionDetector
from pipeline.sources.regions import plan_regions

_EPS = 1e-6  # timestamps in a time base are not exact in binary
_NONE = np.zeros((0, 4), np.float32)  # no boxes
SETTLED_GROW = 0.25  # a settled track's box, grown by this share of its size each way, holds its own motion
SETTLED_COVER = 0.7  # motion that much inside it is the settled object's


def phase_of(camera: str) -> float:
    """Where in a slot of the detection rate the camera's slots start (0-1), from its id:
    the same on every host and in every run."""
    return zlib.crc32(camera.encode()) / 2 ** 32


class DetectGate:
    """`least`: a region's smallest side (the model's input); `budget`: the regions one run
    may take (the cost rule, `sources.regions`); `feedback`: the camera's tracks, at a
    fixed lag (None: no tracker); `borders`: the camera's lines and zone edges, watched
    behind a rate (`border_s`); `phase`: where the camera's slots start (`phase_of`)."""

    def __init__(self, rate: DetectRate, motion: MotionConfig, least: int = 0, budget: int = 1,
                 feedback: TrackFeedback | None = None, borders: Borders | None = None, phase: float = 0.0):
        self.rate = rate
        self.phase = phase
        self.motion = MotionDetector(motion) if rate.motion else None
        self.least, self.budget = least, budget
        self.borders = borders if rate.at_borders and borders is not None else Borders()
        self.feedback = feedback if rate.motion or self.borders else None
        self._handed: deque[tuple[int, float]] = deque()  # (seq, time) of frames handed on, newest last
        self._slot: int | None = None  # the slot of the rate's last frame
        self._last_run: float | None = None
        self._watched = self.borders  # the borders inside the picture, once it is seen
        self._size: tuple[int, int] | None = None
        self._at_border = _NONE  # the motion of the rate's last frame, where it touched a border

    def watch(self, borders: Borders) -> bool:
        """New lines and zone edges (a reload), watched from the next frame. False when
        they cannot be: whether the camera reads its tracks is set when it starts, and
        borders need them read, while a gate without motion reads them only for borders."""
        if not self.rate.at_borders:
            return True  # no rate to hold: every frame is seen anyway
        reads = self.feedback is not None
        if (borders and not reads) or (not borders and reads and not self.rate.motion):
            return False
        self.borders, self._watched, self._size = borders, borders, None
        return True

    def handed(self, seq: int, t: float) -> None:
        """Frame `seq` (at `t`) went on to the graph: its tracker will publish on it."""
        if self.feedback is not None:
            self._handed.append((seq, t))

    def _due(self, t: float) -> bool:
        """Whether the frame at `t` is the first of its slot of the detection rate."""
        if self.rate.fps is None:
            return True
        slot = math.floor(t * self.rate.fps + self.phase + _EPS)
        if self._slot is not None and slot <= self._slot:
            return False
        self._slot = slot
        return True

    def _tracks(self, t: float, stopping: Callable[[], bool]) -> TrackView | None:
        """The tracks after the update on the newest frame handed on `LAG_S` before `t`."""
        if self.feedback is None:
            return None
        target = None
        while self._handed and self._handed[0][1] <= t - LAG_S + _EPS:
            target = self._handed.popleft()
        if target is None:
            return None
        self._handed.appendleft(target)  # a later frame may have to take the same update
        return self.feedback.view(target[0], stopping)

    def plan(self, picture: av.VideoFrame, t: float, stopping: Callable[[], bool] = lambda: False) -> DetectPlan:
        """Whether the detector runs on `picture`, shown at `t` seconds of the camera's time."""
        if self.borders and picture is not None and (picture.width, picture.height) != self._size:
            self._size = (picture.width, picture.height)  # a live camera's picture may change size
            self._watched = self.borders.within(*self._size)
        if not self._due(t):
            tracks = self._tracks(t, stopping) if self.borders else None  # read even when none is watched: it drains
            if len(self._at_border) or (tracks is not None and self._near(t, tracks)):
                return self._run(picture, t, "border", None, tracks, self._at_border)
            return DetectPlan(False, "rate")
        if self.motion is None:
            if self.borders:
                self._tracks(t, stopping)  # read on every frame, as its tracker publishes
            return DetectPlan(True, "every")
        motion = self.motion(picture, t)
        tracks = self._tracks(t, stopping)
        moved = off_settled(motion.live_boxes, tracks)
        self._at_border = moved if self._watched.touched(moved) else _NONE
        moving = tracks.moving_at(t) if tracks is not None else _NONE
        if self._last_run is None:
            reason = "first"
        elif len(moved):
            reason = "motion"
        elif len(moving):
            reason = "tracks"
        elif t - self._last_run >= self.rate.refresh_s - _EPS:
            reason = "refresh"
        else:
            return DetectPlan(False, "still", motion)
        return self._run(picture, t, reason, motion, tracks, moved)

    def _near(self, t: float, tracks: TrackView) -> bool:
        """Whether a moving track, carried on to `t`, crosses a line or zone edge within `border_s`, either way."""
        moving = tracks.moving
        return self._watched.near(
            tracks.moving_at(t), tracks.velocity[moving], tracks.class_id[moving], self.rate.border_s)

    def _run(self, picture: av.VideoFrame, t: float, reason: str, motion: Motion | None,
             tracks: TrackView | None, moved: np.ndarray) -> DetectPlan:
        """A run on the frame: with `regions`, one for motion (`moved`), moving tracks or a
        border looks at them only; a first run and a refresh look at everything."""
        self._last_run = t
        regions = None
        if reason in ("motion", "tracks", "border") and self.rate.regions:
            moving = tracks.moving_at(t) if tracks is not None else _NONE
            regions = plan_regions(_to_cover(moved, moving, tracks), (picture.width, picture.height),
                                   self.least, self.budget)
        return DetectPlan(True, reason, motion, regions)


def off_settled(motion: np.ndarray, tracks: TrackView | None) -> np.ndarray:
    """The motion boxes not lying on a settled track: a box mostly (`SETTLED_COVER` of its
    area) inside one settled track's box, grown by `SETTLED_GROW` of its size each way, is
    an object that stopped (its picture fades into the background only over `background_s`
    and more, all the while seen as motion), already tracked: it runs nothing. Motion off
    every settled track, or reaching well past one, still does."""
    if tracks is None or not len(motion) or tracks.moving.all():
        return motion
    still = tracks.boxes[~tracks.moving]
    size = still[:, 2:] - still[:, :2]
    grown = still + np.concatenate([-size, size], axis=1) * SETTLED_GROW
    covered = intersections(motion, grown).max(axis=1) / np.maximum(area(motion), 1e-6)
    return motion[covered < SETTLED_COVER]


def _to_cover(motion: np.ndarray, moving: np.ndarray, tracks: TrackView | None) -> np.ndarray:
    """What a run's regions must hold: the motion, the moving tracks where they are now,
    and whole every other track the motion touches (a still object motion reaches is
    looked at again, and never cut by a region's border)."""
    parts = [motion, moving]
    if tracks is not None and len(motion):
        still = tracks.boxes[~tracks.moving]
        touch = ((still[:, None, 0] < motion[None, :, 2]) & (still[:, None, 2] > motion[None, :, 0])
                 & (still[:, None, 1] < motion[None, :, 3]) & (still[:, None, 3] > motion[None, :, 1])).any(axis=1)
        parts.append(still[touch])
    return np.concatenate(parts).astype(np.float32)
