"""When a live camera tries again, when it gives up, and how long it was down.

Every way a connection can fail (refused, timed out, opened but broken before its first
frame, broken mid-stream) goes through the same policy: wait with exponential backoff
and jitter, never longer than `max_s` (the attempt itself, up to `open_timeout_s`, comes
on top); reset the backoff only once frames flowed again; give up after `give_up_s`
without a frame. Downtime is the real time without frames: from the last frame before
an outage to the first frame after it. A refused camera is retried many times an
outage: each backoff step is news (a log line) once, not each attempt; at the longest
step, a reminder with the attempt count is news a minute after the last line, then at
doubling intervals up to `REMIND_MAX_S`, so a camera down for days still says so
without a line per attempt.
"""
from __future__ import annotations

import random
import time
from dataclasses import dataclass
from typing import Callable

from pipeline.config import ReconnectConfig

REMIND_FIRST_S = 60.0  # at the longest backoff step: the first reminder this long after the last line
REMIND_MAX_S = 900.0   # the reminders' interval doubles up to this


@dataclass(frozen=True)
class Retry:
    """The next attempt: the wait before it, whether it is news worth a log line (the
    outage's first wait, a longer backoff step than the last one said, or a reminder),
    and how many attempts failed since the last frame."""

    delay: float
    news: bool
    attempt: int


class Reconnect:
    def __init__(self, config: ReconnectConfig, clock: Callable[[], float] = time.monotonic,
                 jitter: Callable[[], float] = lambda: random.uniform(0.8, 1.2)):
        self.config = config
        self.clock = clock
        self.jitter = jitter
        self._backoff = config.initial_s
        self.last_frame = clock()       # the start counts as the last sign of life
        self.outage_since: float | None = None
        self.downtime_s = 0.0
        self.reconnects = 0
        self.streamed = False           # frames have flowed at least once
        self.attempts = 0               # failed attempts since the last frame
        self._said: float | None = None  # the backoff step last said in this outage
        self._said_at = 0.0             # when the last line was news
        self._remind_s = REMIND_FIRST_S

    def frame(self) -> None:
        """A frame arrived: the camera is up; an outage (if any) ends here."""
        now = self.clock()
        if self.outage_since is not None:
            self.downtime_s += now - self.outage_since
            self.outage_since = None
            self.reconnects += 1
        self.last_frame = now
        self.streamed = True
        self._backoff = self.config.initial_s
        self.attempts = 0
        self._said, self._remind_s = None, REMIND_FIRST_S

    def lost(self) -> None:
        """The stream ended or broke: an outage starts at its last frame."""
        if self.outage_since is None and self.streamed:
            self.outage_since = self.last_frame

    def total_downtime(self) -> float:
        """Downtime so far, the outage going on now included."""
        ongoing = self.clock() - self.outage_since if self.outage_since is not None else 0.0
        return self.downtime_s + ongoing

    def down_for(self) -> float:
        return self.clock() - self.last_frame

    def gave_up(self) -> bool:
        return bool(self.config.give_up_s) and self.down_for() >= self.config.give_up_s

    def retry(self) -> Retry:
        """An attempt failed: the wait before the next one, and whether it is news (a new
        backoff step, or a reminder that is due)."""
        now, step = self.clock(), min(self._backoff, self.config.max_s)
        self.attempts += 1
        news = step != self._said
        if not news and now - self._said_at >= self._remind_s:
            news, self._remind_s = True, min(self._remind_s * 2, REMIND_MAX_S)
        if news:
            self._said, self._said_at = step, now
        return Retry(self.next_delay(), news, self.attempts)

    def next_delay(self) -> float:
        """How long to wait before the next attempt: jittered, at most `max_s`, never past
        the give-up time."""
        delay = min(min(self._backoff, self.config.max_s) * self.jitter(), self.config.max_s)
        self._backoff = min(self._backoff * 2, self.config.max_s)
        if self.config.give_up_s and not self.gave_up():  # (past it: a camera that goes on retrying, its recording on)
            delay = min(delay, max(0.05, self.config.give_up_s - self.down_for()))
        return delay
