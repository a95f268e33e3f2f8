"""Bounded queues with an explicit overflow policy.

`block` makes the producer wait (files: nothing is lost). `drop_oldest` never blocks the
producer: the oldest waiting frame is discarded and counted, so a live camera's latency
stays flat when the pipeline is slower than the camera (GStreamer's `leaky=downstream`).
End-of-stream markers are never dropped.

`LaneQueue` is the fan-in in front of a batcher: one lane per camera, each with its own
capacity and policy, read round-robin so one busy camera cannot starve the others
(the idea of DeepStream's `nvstreammux`).
"""
from __future__ import annotations

import threading
import time
from collections import deque
from typing import Callable, Generic, TypeVar

from pipeline.frames import EndOfStream

T = TypeVar("T")

DropHook = Callable[[object, str], None]


class QueueClosed(Exception):
    """The queue was closed for an abort; whoever waits on it should stop."""


class BoundedQueue(Generic[T]):
    def __init__(self, name: str, size: int, policy: str = "block", on_drop: DropHook | None = None):
        if policy not in ("block", "drop_oldest"):
            raise ValueError(f"unknown queue policy {policy!r}")
        self.name = name
        self.size = size
        self.policy = policy
        self.on_drop = on_drop
        self._items: deque = deque()
        self._cond = threading.Condition()
        self._closed = False
        self.dropped = 0
        self.high_water = 0

    def put(self, item: T, force: bool = False) -> None:
        """Append `item`, waiting for room (or dropping, per policy). `force` appends at once
        even when full: for producers that bound their own count and must never wait
        (engine completion callbacks, bounded by the engine's in-flight credits)."""
        with self._cond:
            while len(self._items) >= self.size and not self._closed and not force:
                if self.policy == "drop_oldest" and self._drop_one():
                    break
                self._cond.wait(0.1)
            if self._closed:
                raise QueueClosed(self.name)
            self._items.append(item)
            self.high_water = max(self.high_water, len(self._items))
            self._cond.notify_all()

    def _drop_one(self) -> bool:
        for i, old in enumerate(self._items):
            if not isinstance(old, EndOfStream):
                del self._items[i]
                self.dropped += 1
                if self.on_drop:
                    self.on_drop(old, "queue_full")
                return True
        return False

    def get(self, timeout: float | None = None) -> T | None:
        """The next item, or None when `timeout` passes first."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while not self._items:
                if self._closed:
                    raise QueueClosed(self.name)
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return None
                self._cond.wait(remaining if remaining is not None else 0.1)
            item = self._items.popleft()
            self._cond.notify_all()
            return item

    def close(self) -> None:
        """Wake every waiter with `QueueClosed` (abort path); pending items are discarded."""
        with self._cond:
            self._closed = True
            self._items.clear()
            self._cond.notify_all()

    def __len__(self) -> int:
        return len(self._items)


class LaneQueue:
    """Per-camera lanes read round-robin; `collect` forms one dynamic batch."""

    def __init__(self, name: str, on_drop: DropHook | None = None):
        self.name = name
        self.on_drop = on_drop
        self._lanes: dict[str, BoundedQueue] = {}
        self._order: list[str] = []
        self._next = 0
        self._cond = threading.Condition()
        self._closed = False

    def add_lane(self, key: str, size: int, policy: str) -> None:
        with self._cond:
            self._lanes[key] = _Lane(f"{self.name}[{key}]", size, policy, self._cond, self.on_drop)
            self._order.append(key)

    def lane(self, key: str) -> "BoundedQueue":
        return self._lanes[key]

    def put(self, key: str, item: object) -> None:
        self._lanes[key].put(item)

    def depth(self) -> int:
        return sum(len(q) for q in self._lanes.values())

    __len__ = depth

    @property
    def dropped(self) -> int:
        return sum(q.dropped for q in self._lanes.values())

    @property
    def high_water(self) -> int:
        return max((q.high_water for q in self._lanes.values()), default=0)

    def _take_round_robin(self, limit: int, out: list) -> bool:
        """Move up to `limit` items into `out`, one lane at a time; True when an EOS was taken."""
        progressed = True
        while len(out) < limit and progressed:
            progressed = False
            for _ in range(len(self._order)):
                key = self._order[self._next % len(self._order)]
                self._next += 1
                lane = self._lanes[key]
                if lane._items:
                    item = lane._items.popleft()
                    out.append(item)
                    progressed = True
                    if isinstance(item, EndOfStream):
                        return True
                    if len(out) >= limit:
                        break
        return False

    def collect(self, max_items: int, max_wait_s: float, poll_s: float = 0.1) -> list:
        """One batch: returns as soon as `max_items` are held, the first item has waited
        `max_wait_s`, or an end-of-stream marker arrives (it flushes what is held). Returns
        an empty list after `poll_s` with nothing to do, so the caller can check for stop."""
        out: list = []
        with self._cond:
            while not any(q._items for q in self._lanes.values()):
                if self._closed:
                    raise QueueClosed(self.name)
                if not self._cond.wait(poll_s):
                    return out
            deadline = time.monotonic() + max_wait_s
            while True:
                if self._take_round_robin(max_items, out):
                    break
                self._cond.notify_all()
                if len(out) >= max_items:
                    break
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self._closed:
                    break
                self._cond.wait(remaining)
            self._cond.notify_all()
        return out

    def close(self) -> None:
        with self._cond:
            self._closed = True
            for q in self._lanes.values():
                q._closed = True
                q._items.clear()
            self._cond.notify_all()


class _Lane(BoundedQueue):
    """A lane sharing its parent's condition, so one wait covers every camera."""

    def __init__(self, name: str, size: int, policy: str, cond: threading.Condition, on_drop: DropHook | None):
        super().__init__(name, size, policy, on_drop)
        self._cond = cond
