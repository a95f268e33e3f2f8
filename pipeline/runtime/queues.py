"""Bounded queues with an explicit overflow policy.

`block` makes the producer wait (files: nothing is lost). `drop_oldest` never blocks the
producer: the oldest waiting frame is discarded and counted, so a live camera's latency
stays flat when the pipeline is slower than the camera (GStreamer's `leaky=downstream`).
End-of-stream markers are never dropped, and never displace a frame: a full
`drop_oldest` queue takes its end after its last frame (one over its size), so a live
camera that stops keeps the frame it read last. The per-camera lanes in front of the
detector are in `ingress`.
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
        self._wakeups = 0
        self.dropped = 0
        self.high_water = 0

    def put(self, item: T, force: bool = False) -> None:
        """Append `item`, waiting for room (or dropping, per policy). `force` appends at once
        even when full: for producers that bound their own count and must never wait
        (engine completion callbacks, bounded by the engine's in-flight credits)."""
        force = force or (self.policy == "drop_oldest" and isinstance(item, EndOfStream))
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
        """The next item, or None when `timeout` passes (or `wake()` is called) first."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            wakeups = self._wakeups
            while not self._items:
                if self._closed:
                    raise QueueClosed(self.name)
                remaining = None if deadline is None else deadline - time.monotonic()
                if (remaining is not None and remaining <= 0) or self._wakeups != wakeups:
                    return None
                self._cond.wait(remaining if remaining is not None else 0.1)
            item = self._items.popleft()
            self._cond.notify_all()
            return item

    def take(self, limit: int) -> list[T]:
        """Up to `limit` items from the front, without waiting (none when empty): for a
        consumer that sends in batches and waits on a condition of its own. What it took
        is out of the queue, so the drop policy can no longer reach it."""
        with self._cond:
            items = [self._items.popleft() for _ in range(min(limit, len(self._items)))]
            if items:
                self._cond.notify_all()
            return items

    def wake(self) -> None:
        """Wake a waiting `get` early (it returns None when nothing arrived)."""
        with self._cond:
            self._wakeups += 1
            self._cond.notify_all()

    def close(self) -> None:
        """Wake every waiter with `QueueClosed` (abort path); pending items are discarded."""
        with self._cond:
            self._closed = True
            self._items.clear()
            self._cond.notify_all()

    def __len__(self) -> int:
        return len(self._items)

