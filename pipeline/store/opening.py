"""The configured store and its writer (`store_writer`), opened: PostgreSQL at `outputs.store.url`, else the SQLite file
at `outputs.store.path` under `outputs.dir`.

A SQLite store that is damaged (not a database, failing its integrity check), emptied (0
bytes) or missing where the folder's run log names earlier runs is built again from the
JSON lines before the run writes, said in one line. A store is only ever rebuilt aside
(`build_aside`, as `pipeline store rebuild` does): the new file takes the old one's place
when whole, the old one kept (`store.db.damaged-<stamp>`, with its WAL), so a kill during
a rebuild leaves the damaged store (or none) for the next start, never a half-built one
taken for sound. The run holds the store's lock (`storelock`) shared while it writes, and
exclusive while it rebuilds. A store from a newer pipeline is refused (`tables.migrate`).
"""
from __future__ import annotations

import logging
import os
import time

from pipeline.config.outputs import OutputsConfig
from pipeline.store.backend import Backend, Damaged, open_postgres, open_sqlite
from pipeline.store.flusher import OnLost
from pipeline.store.rebuild import Rebuilt, rebuild
from pipeline.store.runlog import RunLog
from pipeline.store.storelock import StoreLock
from pipeline.store.tables import StoreError
from pipeline.store.writer import Budget, StoreWriter

log = logging.getLogger("pipeline.store")

SIDE_FILES = ("-wal", "-shm")  # SQLite's companions of a WAL database
BUILDING = ".rebuilding"  # a store being built beside the one it replaces
DAY_S = 86400.0


def store_path(out: OutputsConfig) -> str:
    return os.path.join(out.dir, out.store.path)


def move_aside(path: str, why: str) -> str:
    """Move a SQLite store (and its WAL) aside; returns where it went: a name no file has
    (a second store moved aside in the same second gets `-2`, never written over the first)."""
    stem = aside = f"{path}.{why}-{time.strftime('%Y%m%d-%H%M%S')}"
    n = 1
    while any(os.path.lexists(aside + suffix) for suffix in ("",) + SIDE_FILES):
        n += 1
        aside = f"{stem}-{n}"
    for suffix in ("",) + SIDE_FILES:
        if os.path.exists(path + suffix):
            os.replace(path + suffix, aside + suffix)
    return aside


def build_aside(out: OutputsConfig, target: str, why: str) -> tuple[Rebuilt, str | None]:
    """The store at `target` built again from `out`'s JSON lines: built whole in
    `target.rebuilding` (one file, no WAL), then the store there moved aside (`why`; where
    it went is returned) and the new one moved into its place. The caller holds `target`'s
    lock exclusive."""
    building = target + BUILDING
    for suffix in ("",) + SIDE_FILES:
        if os.path.exists(building + suffix):
            os.remove(building + suffix)  # an earlier rebuild's, cut short
    backend = open_sqlite(building)
    try:
        done = rebuild(out, backend)
        backend.conn.execute("PRAGMA journal_mode = DELETE")  # its WAL folded in: one file to move
    finally:
        backend.close()
    kept = move_aside(target, why) if os.path.lexists(target) else None
    os.replace(building, target)
    return done, kept


def open_store(out: OutputsConfig) -> Backend:
    """The run's store, ready to write into (rebuilt first where it is damaged or lost),
    its lock held shared until it closes."""
    if out.store.url is not None:
        return open_postgres(out.store.url)
    path = store_path(out)
    lock = StoreLock(path)
    lock.take(exclusive=False)
    try:
        problem = _lost(path, out.dir)
        if problem is None:
            try:
                return open_sqlite(path, lock)
            except Damaged as e:
                problem = e.problems[0]
        _rebuilding(lock, problem)
        done, kept = build_aside(out, path, "damaged")
        log.error("store: %s; rebuilt from the JSON lines: %d runs, %d frames%s", problem, done.runs, done.records,
                  f"; the store before moved aside to {kept}" if kept else "")
        lock.take(exclusive=False)
        return open_sqlite(path, lock)
    except BaseException:
        lock.release()
        raise


def _rebuilding(lock: StoreLock, problem: str) -> None:
    """The store's lock taken exclusive for its rebuild, or a `StoreError` saying why the
    store needs one and who holds it."""
    try:
        lock.take(exclusive=True)
    except StoreError as e:
        raise StoreError(f"{problem}; it cannot be rebuilt now: {e.problems[0]}") from None


def _lost(path: str, root: str) -> str | None:
    """Why the store at `path` lost rows it held, where its file says so (None: it did
    not): emptied (a file system's crash, a file truncated) or removed under the run log's
    runs, or gone while a rebuild was cut short. Opened as it is, it would be taken for a
    new store and their rows silently gone."""
    if os.path.lexists(path) and (not os.path.isfile(path) or os.path.getsize(path) > 0):
        return None  # a store, or something `open_sqlite` names
    if not os.path.lexists(path) and os.path.exists(path + BUILDING):
        return f"{path}: the store is missing, its rebuild cut short"
    if not RunLog(root).read():
        return None  # a new store
    return f"{path}: the store is {'empty (0 bytes)' if os.path.lexists(path) else 'missing'} though its run log " \
        "names earlier runs"


def seconds(days: float | None) -> float | None:
    return None if days is None else days * DAY_S


def store_writer(out: OutputsConfig, on_lost: OnLost, config: str | None = None) -> StoreWriter | None:
    """The run's writer of the configured store, the store opened and the run entered
    (None: the store is off); `StoreError` where the store cannot be opened."""
    store = out.store
    if not store.enabled:
        return None
    activity = {"all": None, "motion": "motion_s", "active_objects": "objects_s"}[store.recordings_kept]
    budget = Budget(seconds(store.max_days), seconds(store.counts_max_days), activity, seconds(store.recordings_days))
    writer = StoreWriter(lambda: open_store(out), out.dir, on_lost, store.queue, store.flush_s, store.buffer_s,
                         config, budget)
    writer.open()
    return writer
