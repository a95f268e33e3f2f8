"""A camera's timeline: the presentation time each frame gets, and when a paced file's
frame is due.

- Files keep their own timestamps. Timestamps that do not increase (all 0 in some HEVC,
  MP4 and WebM files, or missing) are replaced by the frame rate's steps, said once.
- A looped file continues one frame after the previous pass, so time keeps increasing
  (its first pass keeps the file's own timestamps, as a file read once does). Each pass's
  first time is kept (`pass_first`, `passes`): a sub-stream's frame is matched to its main
  stream by its time after it.
- A network camera gets a continuous 1/90000 timeline across reconnects: a camera that
  restarts its clock (or has none) never rewinds the output video. A camera's clock that
  steps back within a connection is bridged by one frame interval (as measured on the
  connection), then its own timestamps go on from there.
- A paced file (`realtime`) plays a camera: frame k is due `(pts_k - pts_0)` after the
  start, and its capture time is that due time (or later, when we get to it late):
  latency is measured from when a real camera would have delivered the frame.
"""
from __future__ import annotations

import logging
import time
from fractions import Fraction
from functools import lru_cache
from typing import Callable

from pipeline.frames import seconds

log = logging.getLogger("pipeline.source")

LIVE_TIME_BASE = Fraction(1, 90000)


@lru_cache(maxsize=64)
def _step(rate: Fraction, time_base: Fraction) -> int:
    """A frame's interval in time-base units (at least one), for each stream's rate and base."""
    return max(1, round(1 / (rate * time_base)))


class Timeline:
    def __init__(self, camera: str, network: bool, loop: bool, clock: Callable[[], float] = time.perf_counter,
                 phase_s: float = 0.0):
        self.camera = camera
        self.network = network
        self.loop = loop
        self.clock = clock
        self.started = clock()
        self.phase_s = phase_s  # a paced file's first frame is due this long after the start
        self._last: int | None = None          # last pts handed out (in the output time base)
        self._connection_base: int | None = None
        self._pass_base: int | None = None
        self._paced_origin: int | None = None
        self._stepping = False                 # timestamps replaced by frame-rate steps
        self._shown = (0, 0)                   # a live connection's first pts and frames after it: its interval
        self.passes = 0                        # connections begun (a file's passes)
        self.pass_first: int | None = None     # the first pts this connection handed out

    def new_connection(self) -> None:
        """A (re)connection or a new pass over a file begins."""
        self._connection_base = None
        self._pass_base = None
        self.passes += 1
        self.pass_first = None

    def time_base(self, stream_time_base: Fraction) -> Fraction:
        return LIVE_TIME_BASE if self.network else stream_time_base

    def pts(self, raw: int | None, time_base: Fraction, rate: Fraction) -> int:
        """The frame's presentation time in `self.time_base(time_base)` units."""
        pts = self._live(raw, time_base) if self.network else self._file(raw, time_base, rate)
        if self.pass_first is None:
            self.pass_first = pts
        return pts

    def _file(self, raw: int | None, time_base: Fraction, rate: Fraction) -> int:
        step = _step(rate, time_base)
        if self.loop and raw is not None:
            if self._pass_base is None:  # the first pass keeps the file's timestamps, as its recording does
                self._pass_base = 0 if self._last is None else self._last + step - raw
            raw += self._pass_base
        if raw is None or (self._last is not None and raw <= self._last):
            if not self._stepping:
                self._stepping = True
                log.warning("camera %s: timestamps do not increase (%s after %s): timing frames by the frame rate "
                            "(%.3g fps) from here", self.camera, raw, self._last, float(rate))
            raw = 0 if self._last is None else self._last + step
        self._last = raw
        return raw

    def _live(self, raw: int | None, time_base: Fraction) -> int:
        wall = round((self.clock() - self.started) / LIVE_TIME_BASE)
        if raw is None:
            pts = wall
        else:
            scaled = round(raw * time_base / LIVE_TIME_BASE)
            if self._connection_base is None:
                start = wall if self._last is None else max(wall, self._last + 1)
                self._connection_base = start - scaled
                self._shown = (start, 0)
            pts = self._connection_base + scaled
            if self._last is not None and pts <= self._last and self._shown[1]:  # the camera's clock stepped back
                bridged = self._last + max(1, round((self._last - self._shown[0]) / self._shown[1]))
                self._connection_base += bridged - pts
                pts = bridged
            self._shown = (self._shown[0], self._shown[1] + 1)
        if self._last is not None and pts <= self._last:
            pts = self._last + 1
        self._last = pts
        return pts

    def due(self, pts: int, time_base: Fraction) -> float:
        """When a paced frame is due on the clock (the first frame: at the start)."""
        if self._paced_origin is None:
            self._paced_origin = pts
        return self.started + self.phase_s + seconds(pts - self._paced_origin, time_base)
