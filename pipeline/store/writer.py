"""The store's one writer: the sink offers each frame's record and returns at once; a
thread of its own builds the rows (`rows.RowBuilder`) and writes them every `flush_s` in
one transaction (`flusher.Flusher`), off the frame path.

Nothing waits on the database: the queue is bounded (`outputs.store.queue`) and a full
one drops the frame's record, counted lost for its camera (summary, metrics, exit
status; the JSON lines still hold it, `pipeline store rebuild` recovers it); rows the
database refuses are tried again for `buffer_s`, then counted lost. Retention's removals
(`forget`) and a camera's end travel through the same queue, in order with the frames,
and are never dropped (they wait for room instead); a removal returns once no row names
the files. Once a minute tracks and events older than `max_days`, and counts older than
`counts_max_days`, leave the store.
"""
from __future__ import annotations

import logging
import math
import queue
import socket
import threading
import time
import uuid
from typing import Callable

from pipeline.errors import one_line
from pipeline.store.backend import Backend
from pipeline.store.flusher import Flusher, OnLost
from pipeline.store.rows import RowBuilder
from pipeline.store.runlog import RunLog
from pipeline.store.tables import StoreError

log = logging.getLogger("pipeline.store")

CONTROL_WAIT_S = 5.0  # a removal or a camera's end waits this long for room in a full queue
AGE_EVERY_S = 60.0  # how often rows past their budget are removed


class StoreWriter:
    """`connect` opens the store (again, after a failure); `root` is `outputs.dir`; `keep_s`:
    how long (tracks and events, counts) stay (None: for ever)."""

    def __init__(self, connect: Callable[[], Backend], root: str, on_lost: OnLost, queue_size: int = 10000,
                 flush_s: float = 0.5, buffer_s: float = 30.0, config_path: str | None = None,
                 keep_s: tuple[float | None, float | None] = (None, None)):
        self.flusher = Flusher(connect, on_lost, buffer_s)
        self.on_lost = on_lost
        self.root = root
        self.flush_s = flush_s
        self.config_path = config_path
        self.keep_s = keep_s
        self.runlog = RunLog(root)
        self.queue: queue.Queue = queue.Queue(queue_size)
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

    def offer(self, record: dict) -> None:
        """A frame's record, from the sink's thread: queued, or dropped and counted."""
        cam, t = record["camera"], record.get("time")
        origin = self.origins.get(cam)
        if origin is None and t is not None:
            origin = self.origins[cam] = time.time() - t
        try:
            self.queue.put_nowait(("frame", cam, origin, record))
        except queue.Full:
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
        try:
            self.queue.put(item, timeout=CONTROL_WAIT_S)
        except queue.Full:
            log.error("store: its writer is stuck; %s not applied", item[0])

    def close(self, timeout: float = 30.0) -> None:
        """Write what waits and close the store (rows the database refuses now are lost, counted)."""
        if self._thread is None:
            self.flusher.close()  # opened, never started (a run that failed to start)
            return
        self.queue.put(("stop",))
        self._thread.join(timeout)
        self._thread = None

    def _loop(self) -> None:
        assert self.rows is not None
        next_flush = time.monotonic() + self.flush_s
        while True:
            try:
                item = self.queue.get(timeout=max(0.0, next_flush - time.monotonic()))
            except queue.Empty:
                item = None
            if item is not None and item[0] == "stop":
                break
            if item is not None:
                self._apply(item)
            if time.monotonic() >= next_flush:
                self.flusher.write(self.rows.take())
                self._age()
                next_flush = time.monotonic() + self.flush_s
        self.flusher.write(self.rows.take(), final=True)
        self.flusher.close()

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
        elif item[0] == "end":
            self.rows.end_camera(item[1])
        else:
            self.flusher.write(self.rows.take())  # the rows first: they may name the files
            self.flusher.forget(item[1])
            item[2].set()

    def _age(self) -> None:
        rows_s, counts_s = self.keep_s
        if (rows_s is None and counts_s is None) or time.monotonic() - self._aged < AGE_EVERY_S:
            return
        self._aged, now = time.monotonic(), time.time()
        self.flusher.age_out(None if rows_s is None else now - rows_s, None if counts_s is None else now - counts_s)
