"""A fixed-memory latency histogram with ~2.5% relative precision on percentiles.

Log-spaced buckets from 0.1 ms to ~1000 s: recording is one log and one increment,
memory stays constant over a run of days, and histograms of several cameras merge by
adding counts.
"""
from __future__ import annotations

import math
import threading

import numpy as np

_LOW = 1e-4
_RATIO = 1.05
_BUCKETS = int(math.ceil(math.log(1e3 / _LOW) / math.log(_RATIO))) + 1
_LOG_RATIO = math.log(_RATIO)


class Histogram:
    def __init__(self) -> None:
        self.counts = np.zeros(_BUCKETS + 1, np.int64)
        self.count = 0
        self.total = 0.0
        self.max = 0.0
        self._lock = threading.Lock()

    def record(self, seconds: float) -> None:
        i = 0 if seconds <= _LOW else min(_BUCKETS, int(math.log(seconds / _LOW) / _LOG_RATIO) + 1)
        with self._lock:
            self.counts[i] += 1
            self.count += 1
            self.total += seconds
            if seconds > self.max:
                self.max = seconds

    def percentile(self, q: float) -> float | None:
        """The q-th percentile (0..100) in seconds, the upper edge of its bucket; None if empty."""
        if self.count == 0:
            return None
        rank = max(1, math.ceil(self.count * q / 100.0))
        i = int(np.searchsorted(np.cumsum(self.counts), rank))
        return min(self.max, _LOW * _RATIO ** i)

    @classmethod
    def from_counts(cls, counts: list[int], total: float, maximum: float) -> "Histogram":
        """A histogram rebuilt from another process's counts (to merge them)."""
        h = cls()
        h.counts = np.asarray(counts, np.int64)
        h.count = int(h.counts.sum())
        h.total, h.max = total, maximum
        return h

    def mean(self) -> float | None:
        return self.total / self.count if self.count else None

    def merge(self, other: "Histogram") -> None:
        with self._lock:
            self.counts += other.counts
            self.count += other.count
            self.total += other.total
            self.max = max(self.max, other.max)
