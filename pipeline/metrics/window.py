"""What happens now: frames and their latencies over the last `WINDOW_S` seconds.

A lifetime average hides an outage (a 30 fps camera read 27 fps while it reconnected)
and a lifetime percentile never forgets start-up; the live page, `/api/cameras` and the
periodic log show these recent figures instead, 0 fps once a camera has sent nothing for
the whole window. One-second slots, each with a frame count and a latency histogram:
recording is one increment and one histogram record, memory stays fixed, and slots of
several cameras merge by adding.
"""
from __future__ import annotations

import math
import threading

from pipeline.metrics.histogram import Histogram

WINDOW_S = 10  # seconds the recent figures cover


class Window:
    def __init__(self, started: float):
        """`started`: when counting began (time.monotonic()); before a full window has
        passed since, the rate is over the time since then."""
        self.seconds = WINDOW_S
        self.started = started
        self._second = [-1] * WINDOW_S  # the second (of the monotonic clock) each slot holds
        self._frames = [0] * WINDOW_S
        self._latency: list[Histogram | None] = [None] * WINDOW_S  # made at a slot's first frame
        self._lock = threading.Lock()

    def record(self, now: float, latency_s: float) -> None:
        second = math.floor(now)
        k = second % self.seconds
        with self._lock:
            if self._second[k] != second:
                self._second[k], self._frames[k], self._latency[k] = second, 0, Histogram()
            self._frames[k] += 1
            self._latency[k].record(latency_s)  # type: ignore[union-attr]  (made above)

    def _live(self, now: float) -> list[int]:
        """The slots inside the window ending at `now`."""
        oldest = math.floor(now) - self.seconds + 1
        return [k for k, s in enumerate(self._second) if oldest <= s <= now]

    def span(self, now: float) -> float:
        """The seconds the window covers at `now`: up to `seconds`, less just after `started`."""
        return max(0.0, now - max(self.started, math.floor(now) - self.seconds + 1))

    def frames(self, now: float) -> int:
        with self._lock:
            return sum(self._frames[k] for k in self._live(now))

    def rate(self, now: float) -> float:
        """Frames per second over the window (0 when none came in it)."""
        span = self.span(now)
        return self.frames(now) / span if span > 0 else 0.0

    def latency(self, now: float) -> Histogram:
        """The latencies recorded in the window, as one histogram."""
        merged = Histogram()
        with self._lock:
            for k in self._live(now):
                merged.merge(self._latency[k])  # type: ignore[arg-type]  (a live slot has had a frame)
        return merged
