"""The ingress: where cameras' frames enter the graph, in front of its first batcher.

One lane per camera, each with its own capacity and policy (the idea of DeepStream's
`nvstreammux`): a live camera's lane drops its oldest frame (latency stays flat), a
file's lane blocks (lossless). Lanes are read oldest frame first across cameras, so no
camera waits longer than another and the frame that sets the latency tail goes next.

Files are read on demand (read admission): a file camera reads its next frame only when
its lane has room, fewer than `read_budget` file frames are being read or wait in all
lanes together, and no camera has waited longer. A frame's latency then starts when it
can go on at once, and cameras take turns. Each waiting reader has a condition of its
own: only the head can go, so only the head is woken.
"""
from __future__ import annotations

import threading
import time
from collections import deque
from typing import Callable

from pipeline.frames import EndOfStream, Item
from pipeline.runtime.queues import BoundedQueue, DropHook, QueueClosed


class _Lane(BoundedQueue):
    """A camera's lane, sharing the ingress's condition so one wait covers every camera."""

    def __init__(self, name: str, size: int, policy: str, cond: threading.Condition, on_drop: DropHook | None):
        super().__init__(name, size, policy, on_drop)
        self._cond = cond

    def head_time(self) -> float | None:
        """Capture time of the frame at the head (an end of stream: at once); None when empty."""
        if not self._items:
            return None
        return getattr(self._items[0], "t_capture", float("-inf"))

    def pop(self) -> Item:
        return self._items.popleft()

    def has_room(self) -> bool:
        return len(self._items) < self.size

    def shut(self) -> None:
        """Closed with the ingress (the caller holds the shared lock)."""
        self._closed = True
        self._items.clear()


class CameraPort:
    """What a camera's reader holds: its lane, and for a file its turns to read."""

    def __init__(self, ingress: "Ingress", camera: str, on_demand: bool):
        self.camera = camera
        self.on_demand = on_demand  # a file read on demand (block policy): it takes turns
        self._ingress = ingress
        self._lane = ingress._lanes[camera]

    def put(self, item: Item) -> None:
        self._lane.put(item)

    def wait_turn(self) -> None:
        """Wait until this camera may read its next frame (at once for a live camera)."""
        if self.on_demand:
            self._ingress.wait_turn(self.camera)

    def end_turn(self) -> None:
        """The frame read in this turn is in the lane (or was skipped): the next camera may read."""
        if self.on_demand:
            self._ingress.end_turn(self.camera)


class Ingress:
    def __init__(self, name: str, read_budget: int = 1, on_drop: DropHook | None = None):
        self.name = name
        self.read_budget = read_budget  # file frames being read or waiting, all lanes together
        self.on_drop = on_drop
        self._lanes: dict[str, _Lane] = {}
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)  # the batcher (and a producer facing a full lane) waits here
        self._closed = False
        self._reading: set[str] = set()  # file cameras given their turn whose frame is not in yet
        self._readers: deque[tuple[str, threading.Condition]] = deque()  # waiting for a turn, first come first

    def add_camera(self, camera: str, size: int, policy: str) -> CameraPort:
        with self._cond:
            self._lanes[camera] = _Lane(f"{self.name}[{camera}]", size, policy, self._cond, self.on_drop)
        return CameraPort(self, camera, on_demand=policy == "block")

    def remove_camera(self, camera: str) -> None:
        """A camera ended: its (empty) lane goes."""
        with self._cond:
            self._lanes.pop(camera, None)
            self._read_done(camera)

    def put(self, item: Item) -> None:
        self._lanes[item.camera].put(item)

    def wait_turn(self, camera: str) -> None:
        lane = self._lanes[camera]
        me = (camera, threading.Condition(self._lock))
        with self._lock:
            self._reading.discard(camera)  # a turn taken for a frame that never came (the end of a pass)
            self._readers.append(me)
            try:
                while not self._may_read(me, lane):
                    me[1].wait(0.1)
                self._reading.add(camera)
            finally:
                self._readers.remove(me)
                self._wake_reader()

    def _may_read(self, me: tuple[str, threading.Condition], lane: _Lane) -> bool:
        if self._closed:
            raise QueueClosed(self.name)
        waiting = sum(len(q) for q in self._lanes.values() if q.policy == "block")
        return self._readers[0] is me and lane.has_room() and waiting + len(self._reading) < self.read_budget

    def end_turn(self, camera: str) -> None:
        with self._lock:
            self._read_done(camera)

    def _read_done(self, camera: str) -> None:
        self._reading.discard(camera)
        self._wake_reader()

    def _wake_reader(self) -> None:
        """Room may have been made: let the first waiting reader look (lock held)."""
        if self._readers:
            self._readers[0][1].notify()

    def depth(self) -> int:
        return sum(len(q) for q in self._lanes.values())

    __len__ = depth

    @property
    def dropped(self) -> int:
        return sum(q.dropped for q in self._lanes.values())

    @property
    def high_water(self) -> int:
        return max((q.high_water for q in self._lanes.values()), default=0)

    def _heads(self, room: bool, free: Callable[[Item], bool] | None) -> list[tuple[float, _Lane]]:
        """The lanes whose head may be taken now: any, with `room` for work; else those
        whose head is `free` (needs no room)."""
        heads = [(t, lane) for lane in self._lanes.values() if (t := lane.head_time()) is not None]
        if room or free is None:
            return heads
        return [(t, lane) for t, lane in heads if free(lane._items[0])]

    def _take_oldest(self, limit: int, out: list, room: bool, free: Callable[[Item], bool] | None) -> bool:
        """Move up to `limit` items into `out`, oldest capture first across the lanes; True
        when an end of stream was taken (it flushes the batch)."""
        while len(out) < limit:
            heads = self._heads(room, free)
            if not heads:
                return False
            item = min(heads, key=lambda h: h[0])[1].pop()
            out.append(item)
            if isinstance(item, EndOfStream):
                return True
        return False

    def collect(self, max_items: int, max_wait_s: float = 0.0, hold: Callable[[], bool] | None = None,
                poll_s: float = 0.1, ready: Callable[[], bool] | None = None,
                free: Callable[[Item], bool] | None = None) -> list:
        """One batch of up to `max_items`, oldest frames first. Waits up to `poll_s` for a first
        item (else returns an empty list, so the caller can check for stop). With fewer
        than `max_items` waiting it returns at once, unless `hold()` says holding costs
        nothing now (every worker is busy anyway): then it waits for more, at most until
        `max_wait_s` after the first item was seen. An end of stream flushes what is held.
        With `ready` (is there room for work: an engine's credit) items that are not
        `free` (need no work) are taken only while there is room; a lane whose head needs
        room waits, its camera's order kept. Whoever makes room calls `wake()`."""
        out: list = []
        with self._cond:
            room = ready is None or ready()
            while not self._heads(room, free):
                if self._closed:
                    raise QueueClosed(self.name)
                if not self._cond.wait(poll_s):
                    return out
                room = ready is None or ready()
            deadline = time.monotonic() + max_wait_s
            while True:
                ended = self._take_oldest(max_items, out, room, free)
                self._cond.notify_all()  # room made: a producer facing a full lane
                self._wake_reader()
                work = free is None or not all(free(item) for item in out)
                if ended or len(out) >= max_items or hold is None or not work or not hold():
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
            for lane in self._lanes.values():
                lane.shut()
            self._cond.notify_all()
            for _, reader in self._readers:
                reader.notify()
