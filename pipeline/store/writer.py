"""The store's one writer: the sink offers each frame's record and returns at once; a
thread of its own builds the rows (`rows.RowBuilder`) and writes them every `flush_s` in
one transaction (`flusher.Flusher`), off the frame path. The thread takes the records
waiting every `DRAIN_S`, not one wake per record: waking a thread costs more CPU than
building a frame's rows, and the rows wait for the flush anyway. Control items (a
removal, a camera's end, the close) wake it at once.

Nothing waits on the database: the queue is bounded (`outputs.store.queue`) and a full
one drops the frame's record, counted lost for its camera (summary, metrics, exit
status; the JSON lines still hold it, `pipeline store rebuild` recovers it); rows the
database refuses are tried again for `buffer_s`, then counted lost. Retention's removals
(`forget`) and a camera's end travel through the same queue, in order with the frames,
and are never dropped (they wait for room instead); a removal returns once no row names
the files. Once a minute tracks and events older than `max_days`, and counts older than
`counts_max_days`, leave the store; with `recordings_kept: motion` (or `active_objects`)
the run's cameras' recording segments older than `recordings_days` that had no motion
(no objects) are removed and forgotten, each camera's newest kept (Frigate's retain
modes, from the segments' activity): only plain files inside the folder named as this
run's records name the camera's recordings (`paths.removal_problem`), whatever a row says.
"""
from __future__ import annotations

import logging
import math
import os
import queue
import re
import socket
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Callable, Iterator

from pipeline.errors import one_line
from pipeline.store.backend import Backend
from pipeline.store.flusher import Flusher, OnLost
from pipeline.store.paths import removal_problem, series
from pipeline.store.rows import RowBuilder
from pipeline.store.runlog import RunLog
from pipeline.store.tables import StoreError

log = logging.getLogger("pipeline.store")

CONTROL_WAIT_S = 5.0  # a removal or a camera's end waits this long for room in a full queue
DRAIN_S = 0.2  # the writer takes the records waiting this often (at most; and at each flush)


@dataclass(frozen=True)
class Budget:
    """How long the store keeps what (None: for ever): tracks and events (`rows_s`), counts
    (`counts_s`); recording segments older than `idle_s` only where they had `activity`
    ("motion_s" or "objects_s"; None: all kept). Applied every `every_s`."""

    rows_s: float | None = None
    counts_s: float | None = None
    activity: str | None = None
    idle_s: float | None = None
    every_s: float = 60.0

    def __bool__(self) -> bool:
        return self.rows_s is not None or self.counts_s is not None or self.activity is not None


def remove_idle(flusher: Flusher, root: str, names: dict[str, list[re.Pattern]], activity: str,
                ended_before: float, said: set[tuple[str, str]]) -> list[str]:
    """Remove the recording segments of the cameras in `names` (each with the series of
    its recordings' names) that ended before `ended_before` without `activity` (each
    camera's newest kept), the store forgetting them; the paths removed. A row naming a
    file the store may not remove leaves it, said once (`said`) naming the file and camera."""
    removed = []
    for camera, relative in [(c, p) for c in sorted(names) for p in flusher.idle_segments([c], ended_before, activity)]:
        problem = removal_problem(root, relative, camera, names[camera])
        if problem is not None:
            if (camera, relative) not in said:
                said.add((camera, relative))
                log.error("store: camera %s's segment row names %s: not removed, %s", camera, relative, problem)
            continue
        try:
            os.remove(os.path.join(root, relative))
        except FileNotFoundError:
            pass  # gone already: forgotten all the same
        except OSError as e:
            log.warning("store: cannot remove %s: %s", relative, e.strerror or e)
            continue
        removed.append(relative)
    if removed:
        flusher.forget(removed)
        log.info("store: removed %d recording segment(s) without %s", len(removed), activity.removesuffix("_s"))
    return removed


class Inbox:
    """The writer's queue: the frames' records are taken in batches, every `DRAIN_S` at
    most (`wait`); a control item wakes the writer at once."""

    def __init__(self, size: int):
        self.queue: queue.Queue = queue.Queue(size)
        self._urgent = threading.Event()

    def offer(self, item: tuple) -> bool:
        """Queue a frame's item without waiting (False: full, not queued)."""
        try:
            self.queue.put_nowait(item)
        except queue.Full:
            return False
        return True

    def control(self, item: tuple, timeout: float | None = CONTROL_WAIT_S) -> bool:
        """Queue a control item, waiting `timeout` at most for room (None: as long as it
        takes), and wake the writer."""
        try:
            self.queue.put(item, timeout=timeout)
        except queue.Full:
            return False
        self._urgent.set()
        return True

    def wait(self, seconds: float) -> None:
        """Until a control item comes, `seconds` pass, or `DRAIN_S` at most."""
        self._urgent.wait(max(0.0, min(DRAIN_S, seconds)))
        self._urgent.clear()  # before taking: a control item queued from here on sets it again

    def take(self) -> Iterator[tuple]:
        """Every item waiting, in order."""
        while True:
            try:
                yield self.queue.get_nowait()
            except queue.Empty:
                return


class StoreWriter:
    """`connect` opens the store (again, after a failure); `root` is `outputs.dir`."""

    def __init__(self, connect: Callable[[], Backend], root: str, on_lost: OnLost, queue_size: int = 10000,
                 flush_s: float = 0.5, buffer_s: float = 30.0, config_path: str | None = None,
                 budget: Budget = Budget()):
        self.flusher = Flusher(connect, on_lost, buffer_s)
        self.on_lost = on_lost
        self.root = root
        self.flush_s = flush_s
        self.config_path = config_path
        self.budget = budget
        self.names: dict[str, dict[str, re.Pattern]] = {}  # camera -> the series its recordings' names took here
        self._recording: dict[str, str] = {}  # camera -> its latest recording file named
        self._refused: set[tuple[str, str]] = set()  # rows naming files not to remove: said once
        self.runlog = RunLog(root)
        self.inbox = Inbox(queue_size)
        self.rows: RowBuilder | None = None
        self.key = uuid.uuid4().hex  # the run's name in the run log
        self.origins: dict[str, float] = {}  # camera -> its clock's origin in this run (set by the sink's thread)
        self._logged: set[tuple[str, float]] = set()
        self._aged = -math.inf
        self._thread: threading.Thread | None = None

    def open(self) -> None:
        """Open the store and enter the run; `StoreError` (one line) where it cannot be had.
        Done as the run is built, so a store that cannot be opened stops it before any
        camera starts."""
        backend = self.flusher.open()
        started, host = time.time(), socket.gethostname()
        try:
            run = backend.begin_run(started, self.config_path, host)
        except Exception as e:
            backend.close()
            raise StoreError(f"{backend.where}: the run cannot be entered: {one_line(e)}") from None
        self.rows = RowBuilder(run, self.root)
        self.runlog.begin(self.key, started, host, self.config_path)

    def start(self) -> None:
        if self.rows is None:
            self.open()
        self._thread = threading.Thread(target=self._loop, name="store-writer", daemon=True)
        self._thread.start()

    def offer(self, record: dict, captured: float | None = None) -> None:
        """A frame's record, from the sink's thread: queued, or dropped and counted.
        `captured`: when the frame was read, on the wall clock (default: now). A camera's
        clock is set at its first frame from when that frame was read, not from when it
        reached the sink (that first frame waits for the models to warm up), so the
        store's times agree with the recordings', whose names say when they began."""
        cam, t = record["camera"], record.get("time")
        origin = self.origins.get(cam)
        if origin is None and t is not None:
            origin = self.origins[cam] = (time.time() if captured is None else captured) - t
        if not self.inbox.offer(("frame", cam, origin, record)):
            self.on_lost(cam, 1)

    def camera_ended(self, cam: str) -> None:
        """The camera's files are final: its tracks and segments too (a camera that returns
        starts on a new clock)."""
        self.origins.pop(cam, None)
        self._control(("end", cam))

    def forget(self, paths: list[str]) -> None:
        """Files retention removed (relative to `outputs.dir`): no row names them once this
        returns (it waits for the writer, a bounded time)."""
        if paths and self._thread is not None:
            done = threading.Event()
            self._control(("forget", list(paths), done))
            if not done.wait(CONTROL_WAIT_S * 2):
                log.error("store: the writer did not forget %d removed file(s) in time", len(paths))

    def _control(self, item: tuple) -> None:
        if not self.inbox.control(item):
            log.error("store: its writer is stuck; %s not applied", item[0])

    def close(self, timeout: float = 30.0) -> None:
        """Write what waits and close the store (rows the database refuses now are lost, counted)."""
        if self._thread is None:
            self.flusher.close()  # opened, never started (a run that failed to start)
            return
        self.inbox.control(("stop",), timeout=None)
        self._thread.join(timeout)
        self._thread = None

    def _loop(self) -> None:
        assert self.rows is not None
        next_flush = time.monotonic() + self.flush_s
        while True:
            self.inbox.wait(next_flush - time.monotonic())
            if self._drain():
                break
            if time.monotonic() >= next_flush:
                self.flusher.write(self.rows.take())
                self._age()
                next_flush = time.monotonic() + self.flush_s
        self.flusher.write(self.rows.take(), final=True)
        self.flusher.close()

    def _drain(self) -> bool:
        """Apply every item waiting, in order; True at the close's "stop"."""
        for item in self.inbox.take():
            if item[0] == "stop":
                return True
            self._apply(item)
        return False

    def _apply(self, item: tuple) -> None:
        assert self.rows is not None
        if item[0] == "frame":
            _, cam, origin, record = item
            if origin is None:
                return  # no frame of the camera had a time yet
            if (cam, origin) not in self._logged:
                self._logged.add((cam, origin))
                self.runlog.origin(self.key, cam, origin)
            self.rows.add(record, origin)
            self._learn(cam, record.get("recording"))
        elif item[0] == "end":
            self.rows.end_camera(item[1])
        else:
            self.flusher.write(self.rows.take())  # the rows first: they may name the files
            self.rows.forget(item[1])  # and none built later
            self.flusher.forget(item[1])
            item[2].set()

    def _learn(self, cam: str, path: object) -> None:
        """The series of names the camera's recordings take in this run: the only files whose
        rows may have them removed (a file of another camera, the camera's video, never)."""
        assert self.rows is not None
        if not isinstance(path, str) or self._recording.get(cam) == path or not self.rows.refused.recording(cam, path):
            return
        self._recording[cam] = path
        pattern = series(path)
        if pattern is not None:
            self.names.setdefault(cam, {})[pattern.pattern] = pattern

    def _age(self) -> None:
        b = self.budget
        if not b or time.monotonic() - self._aged < b.every_s:
            return
        self._aged, now = time.monotonic(), time.time()
        if b.rows_s is not None or b.counts_s is not None:
            self.flusher.age_out(None if b.rows_s is None else now - b.rows_s,
                                 None if b.counts_s is None else now - b.counts_s)
        if b.activity is not None and b.idle_s is not None and self.names:
            assert self.rows is not None
            names = {cam: list(found.values()) for cam, found in self.names.items()}
            self.rows.forget(remove_idle(self.flusher, self.root, names, b.activity, now - b.idle_s, self._refused))
