"""Which of a camera's frames the detector sees (`detect.fps`, `motion`, `refresh_s`),
decided in the camera's thread, frame by frame, from the frame's time on the camera's
timeline and the frame's own motion only: the same file gives the same detector runs on
a fast machine and on a loaded one. The frames it leaves out still go through the whole
graph; the tracker predicts on them.

The detection rate takes the first frame in each slot of `1 / fps` seconds of the
camera's timeline (a 15 fps camera at `fps: 5` gives every third frame; a 25 fps one at
`fps: 4` alternates 6 and 7 frames, 4 a second; a camera that moved to another host
keeps the same slots). With `motion`, a frame of the rate
goes to the detector only when its picture shows motion, or `refresh_s` has passed
since the detector last ran on the camera (the first frame always goes); so on a still
scene the detector runs once per `refresh_s`. Motion is measured only on the frames of
the rate: what moves between two of them shows in the second. With `regions`, a run for
motion looks only at square crops around it where that is cheaper (`sources.regions`).
"""
from __future__ import annotations

import math

import av

from pipeline.config import MotionConfig
from pipeline.config.stages import DetectRate
from pipeline.frames import DetectPlan
from pipeline.sources.motion_detector import MotionDetector
from pipeline.sources.regions import plan_regions

_EPS = 1e-6  # timestamps in a time base are not exact in binary


class DetectGate:
    """`least`: a region's smallest side (the model's input); `budget`: the regions one run
    may take (the cost rule, `sources.regions`)."""

    def __init__(self, rate: DetectRate, motion: MotionConfig, least: int = 0, budget: int = 1):
        self.rate = rate
        self.motion = MotionDetector(motion) if rate.motion else None
        self.least, self.budget = least, budget
        self._slot: int | None = None  # the slot of the rate's last frame
        self._last_run: float | None = None

    def _due(self, t: float) -> bool:
        """Whether the frame at `t` is the first of its slot of the detection rate."""
        if self.rate.fps is None:
            return True
        slot = math.floor(t * self.rate.fps + _EPS)
        if self._slot is not None and slot <= self._slot:
            return False
        self._slot = slot
        return True

    def plan(self, picture: av.VideoFrame, t: float) -> DetectPlan:
        """Whether the detector runs on `picture`, shown at `t` seconds of the camera's time."""
        if not self._due(t):
            return DetectPlan(False, "rate")
        if self.motion is None:
            return DetectPlan(True, "every")
        motion = self.motion(picture, t)
        if self._last_run is None:
            reason = "first"
        elif motion.moving:
            reason = "motion"
        elif t - self._last_run >= self.rate.refresh_s - _EPS:
            reason = "refresh"
        else:
            return DetectPlan(False, "still", motion)
        self._last_run = t
        regions = None
        if reason == "motion" and self.rate.regions:  # a first run and a refresh look at everything
            regions = plan_regions(motion.boxes, (picture.width, picture.height), self.least, self.budget)
        return DetectPlan(True, reason, motion, regions)
