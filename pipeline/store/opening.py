"""The configured store and its writer (`store_writer`), opened: PostgreSQL at `outputs.store.url`, else the SQLite file
at `outputs.store.path` under `outputs.dir`.

A SQLite file that is damaged (not a database, or failing its integrity check) is never
emptied in place: it is moved aside (`store.db.damaged-<stamp>`, with its WAL), said in
one line, and the store is rebuilt from the JSON lines (`rebuild`) before the run writes
into it. A store from a newer pipeline is refused (`tables.migrate`).
"""
from __future__ import annotations

import logging
import os
import time

from pipeline.config.outputs import OutputsConfig
from pipeline.store.backend import Backend, Damaged, open_postgres, open_sqlite
from pipeline.store.flusher import OnLost
from pipeline.store.rebuild import rebuild
from pipeline.store.runlog import RunLog
from pipeline.store.writer import Budget, StoreWriter

log = logging.getLogger("pipeline.store")

SIDE_FILES = ("-wal", "-shm")  # SQLite's companions of a WAL database
DAY_S = 86400.0


def store_path(out: OutputsConfig) -> str:
    return os.path.join(out.dir, out.store.path)


def move_aside(path: str, why: str) -> str:
    """Move a SQLite store (and its WAL) aside; returns where it went."""
    aside = f"{path}.{why}-{time.strftime('%Y%m%d-%H%M%S')}"
    for suffix in ("",) + SIDE_FILES:
        if os.path.exists(path + suffix):
            os.replace(path + suffix, aside + suffix)
    return aside


def open_store(out: OutputsConfig) -> Backend:
    """The run's store, ready to write into (a damaged SQLite file rebuilt first)."""
    if out.store.url is not None:
        return open_postgres(out.store.url)
    path = store_path(out)
    try:
        if _emptied(path, out.dir):
            raise Damaged(f"{path}: the store is empty (0 bytes) though its run log names earlier runs")
        return open_sqlite(path)
    except Damaged as e:
        aside = move_aside(path, "damaged")
        log.error("store: %s; moved aside to %s, rebuilding it from the JSON lines", e.problems[0], aside)
    backend = open_sqlite(path)
    done = rebuild(out, backend)
    log.warning("store: %s rebuilt: %d runs, %d frames from the JSON lines", path, done.runs, done.records)
    return backend


def _emptied(path: str, root: str) -> bool:
    """A store emptied under the run log's runs (a file system's crash, a file truncated):
    opened as it is, it would be taken for a new store and their rows silently gone."""
    return os.path.exists(path) and os.path.getsize(path) == 0 and bool(RunLog(root).read())


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
