"""Bounded queues with an explicit overflow policy.

`block` makes the producer wait (files: nothing is lost). `drop_oldest` never blocks the
producer: the oldest waiting frame is discarded and counted, so a live camera's latency
stays flat when the pipeline is slower than the camera (GStreamer's `leaky=downstream`).
End-of-stream markers are never dropped.

`LaneQueue` is the fan-in in front of a batcher: one lane per camera, each with its own
capacity and policy (the idea of DeepStream's `nvstreammux`), read oldest frame first
across the lanes, so no camera waits longer than another and the oldest frame, the
one that sets the latency tail, always goes next.
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


class LaneQueue:
    """Per-camera lanes read oldest frame first; `collect` forms one dynamic batch."""

    def __init__(self, name: str, on_drop: DropHook | None = None):
        self.name = name
        self.on_drop = on_drop
        self._lanes: dict[str, BoundedQueue] = {}
        lock = threading.Lock()
        self._cond = threading.Condition(lock)  # the batcher (and a producer facing a full lane) waits here
        self._lock = lock
        self._closed = False
        self.read_budget = 1          # frames of file cameras being read or waiting, all lanes together
        self._reading: set[str] = set()  # file cameras given their turn whose frame is not in yet
        # File cameras waiting for their turn to read, first come first, each on a condition
        # of its own: only the head can go, so only the head is woken (when frames are taken).
        self._readers: deque[tuple[str, threading.Condition]] = deque()

    def add_lane(self, key: str, size: int, policy: str) -> None:
        with self._cond:
            self._lanes[key] = _Lane(f"{self.name}[{key}]", size, policy, self._cond, self.on_drop)

    def lane(self, key: str) -> "BoundedQueue":
        return self._lanes[key]

    def remove_lane(self, key: str) -> None:
        """A camera ended: its (empty) lane goes."""
        with self._cond:
            self._lanes.pop(key, None)
            self._read_done(key)

    def wait_turn(self, key: str) -> None:
        """A file camera may read its next frame: its lane has room, fewer than
        `read_budget` file frames are being read or wait in all lanes together, and no
        camera has waited longer. Files read this way are read on demand: a frame's latency
        starts when it can go on at once, and cameras take turns. A turn lasts until
        `end_turn`: the camera has handed its frame over (or skipped it)."""
        lane = self._lanes[key]
        me = (key, threading.Condition(self._lock))
        with self._lock:
            self._reading.discard(key)  # a turn taken for a frame that never came (the end of a pass)
            self._readers.append(me)
            try:
                while True:
                    if self._closed:
                        raise QueueClosed(self.name)
                    waiting = sum(len(q._items) for q in self._lanes.values() if q.policy == "block")
                    if (self._readers[0] is me and len(lane._items) < lane.size
                            and waiting + len(self._reading) < self.read_budget):
                        self._reading.add(key)
                        return
                    me[1].wait(0.1)
            finally:
                self._readers.remove(me)
                self._wake_reader()

    def end_turn(self, key: str) -> None:
        """The camera's frame is in its lane (or was skipped): the next camera may read."""
        with self._lock:
            self._read_done(key)

    def _read_done(self, key: str) -> None:
        self._reading.discard(key)
        self._wake_reader()

    def _wake_reader(self) -> None:
        """Room may have been made (frames taken, a lane gone, a turn ended): let the
        first waiting reader look. Called with the lock held."""
        if self._readers:
            self._readers[0][1].notify()

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

    def _take_oldest(self, limit: int, out: list) -> bool:
        """Move up to `limit` items into `out`, always the oldest waiting frame across the
        lanes (earliest capture first: the latency-optimal order, and fair between cameras
        in time); True when an end of stream was taken (it flushes the batch)."""
        while len(out) < limit:
            best, best_t = None, None
            for lane in self._lanes.values():
                if lane._items:
                    head = lane._items[0]
                    t = getattr(head, "t_capture", float("-inf"))  # an end of stream: at once
                    if best_t is None or t < best_t:
                        best, best_t = lane, t
            if best is None:
                return False
            item = best._items.popleft()
            out.append(item)
            if isinstance(item, EndOfStream):
                return True
        return False

    def collect(self, max_items: int, max_wait_s: float = 0.0, hold: Callable[[], bool] | None = None,
                poll_s: float = 0.1) -> list:
        """One batch of up to `max_items`, oldest frames first. Waits up to `poll_s` for a first
        item (else returns an empty list, so the caller can check for stop). With fewer
        than `max_items` waiting it returns at once, unless `hold()` says holding costs
        nothing now (every worker is busy anyway): then it waits for more, at most until
        `max_wait_s` after the first item was seen. An end of stream flushes what is held."""
        out: list = []
        with self._cond:
            while not any(q._items for q in self._lanes.values()):
                if self._closed:
                    raise QueueClosed(self.name)
                if not self._cond.wait(poll_s):
                    return out
            deadline = time.monotonic() + max_wait_s
            while True:
                ended = self._take_oldest(max_items, out)
                self._cond.notify_all()  # room made: a producer facing a full lane, the next reader
                self._wake_reader()
                if ended or len(out) >= max_items or hold is None or not hold():
                    break
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self._closed:
                    break
                self._cond.wait(remaining)
        return out

    def wake(self) -> None:
        """Re-evaluate a held batch (a worker has freed up)."""
        with self._cond:
            self._cond.notify_all()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            for q in self._lanes.values():
                q._closed = True
                q._items.clear()
            self._cond.notify_all()
            for _, reader in self._readers:
                reader.notify()


class _Lane(BoundedQueue):
    """A lane sharing its parent's condition, so one wait covers every camera."""

    def __init__(self, name: str, size: int, policy: str, cond: threading.Condition, on_drop: DropHook | None):
        super().__init__(name, size, policy, on_drop)
        self._cond = cond
