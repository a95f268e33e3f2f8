"""The writer thread's side of the database: rows written in one transaction per flush;
rows the database refuses (a full disk, PostgreSQL away) kept and tried again at each
flush for `buffer_s`, then counted lost per camera; a broken connection opened again
(`connect`) at the next flush. Removed files forgotten and old rows aged out on the same
connection, so the store has one writer.
"""
from __future__ import annotations

import logging
import time
from collections import Counter
from typing import Callable

from pipeline.errors import one_line
from pipeline.store.backend import Backend
from pipeline.store.rows import Rows

log = logging.getLogger("pipeline.store")

OnLost = Callable[[str, int], None]  # (camera, records) the store could not keep


def lost_by_camera(rows: Rows) -> Counter:
    """How many rows of each camera a flush holds (what a refused flush loses)."""
    lost: Counter = Counter()
    lost.update(track.camera for track in rows.tracks)
    lost.update(event[1] for event in rows.events)
    lost.update(key[0] for key in rows.counts)
    lost.update(seg.camera for seg in rows.segments)
    return lost


class Flusher:
    def __init__(self, connect: Callable[[], Backend], on_lost: OnLost, buffer_s: float):
        self.connect = connect
        self.on_lost = on_lost
        self.buffer_s = buffer_s
        self.backend: Backend | None = None
        self._waiting = Rows()  # refused by the database, tried again
        self._since: float | None = None  # when the oldest of them was first refused
        self._down = False  # said once per outage

    def open(self) -> Backend:
        """The first connection (its errors are the caller's: a store that cannot be opened
        at start is a start-up error)."""
        self.backend = self.connect()
        return self.backend

    def write(self, rows: Rows, final: bool = False) -> None:
        """Write `rows` with any still waiting; `final`: nothing is tried again."""
        self._waiting.merge(rows)
        if not len(self._waiting):
            return
        if self._since is None:
            self._since = time.monotonic()
        try:
            if self.backend is None:
                self.backend = self.connect()
            self.backend.write(self._waiting)
        except Exception as e:
            self._refused(e, final)
            return
        if self._down:
            log.warning("store: %s writes again", self.backend.where)
            self._down = False
        self._waiting, self._since = Rows(), None

    def _refused(self, error: Exception, final: bool) -> None:
        if not self._down:
            self._down = True
            where = self.backend.where if self.backend is not None else "the store"
            log.error("store: %s refused %d rows (%s); trying again for %gs", where, len(self._waiting),
                      one_line(error), self.buffer_s)
        if self.backend is not None and not self.backend.alive():
            self.backend.close()
            self.backend = None  # connected again at the next flush
        assert self._since is not None
        if final or time.monotonic() - self._since >= self.buffer_s:
            for cam, n in lost_by_camera(self._waiting).items():
                self.on_lost(cam, n)
            log.error("store: %d rows lost (the JSON lines hold them: `pipeline store rebuild`)", len(self._waiting))
            self._waiting, self._since = Rows(), None

    def forget(self, paths: list[str]) -> None:
        try:
            if self.backend is None:
                self.backend = self.connect()
            self.backend.forget(paths)
        except Exception as e:
            log.error("store: %d removed file(s) could not be forgotten: %s", len(paths), one_line(e))

    def idle_segments(self, cameras: list[str], ended_before: float, activity: str) -> list[str]:
        try:
            if self.backend is None:
                self.backend = self.connect()
            return self.backend.idle_segments(cameras, ended_before, activity)
        except Exception as e:
            log.error("store: the recordings without %s could not be looked up: %s", activity, one_line(e))
            return []

    def age_out(self, rows_before: float | None, counts_before: float | None) -> None:
        try:
            if self.backend is not None:
                self.backend.age_out(rows_before, counts_before)
        except Exception as e:
            log.error("store: old rows could not be removed: %s", one_line(e))

    def close(self) -> None:
        if self.backend is not None:
            self.backend.close()
            self.backend = None
