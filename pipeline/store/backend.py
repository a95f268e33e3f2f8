"""One connection to the store, SQLite or PostgreSQL, and the statements the writer, the
rebuild and retention run on it: a run begun, a flush of rows in one transaction, files
forgotten, rows aged out.

SQLite runs in WAL mode (readers beside the one writer) with `synchronous=NORMAL`: a
crash or SIGKILL loses at most the transactions not yet checkpointed into the log, never
the file. A file that is not a database, or fails `PRAGMA quick_check`, is damaged
(`Damaged`): the caller moves it aside and rebuilds (`store.open`). PostgreSQL is reached
by URL through psycopg (the `postgres` extra); a server that does not answer is a
`StoreError` naming the redacted URL.
"""
from __future__ import annotations

import os
import sqlite3
import time
from collections import Counter
from typing import Any

from pipeline.errors import one_line
from pipeline.redact import redact, userinfo_problem
from pipeline.store.rows import EVENT_COLUMNS, SEGMENT_COLUMNS, TRACK_COLUMNS, Rows
from pipeline.store.storelock import StoreLock
from pipeline.store.tables import POSTGRES, SQLITE, Dialect, StoreError, migrate

CONNECT_TIMEOUT_S = 5
BUSY_TIMEOUT_S = 10.0  # how long SQLite waits for another process's lock (a cluster's hosts share a store)


class Damaged(StoreError):
    """The SQLite file is not a sound database."""


def _quoted(columns: tuple[str, ...]) -> str:
    return ", ".join(f'"{c}"' for c in columns)


def _marks(n: int) -> str:
    return ", ".join("?" * n)


TRACK_UPSERT = (f"INSERT INTO tracks ({_quoted(TRACK_COLUMNS)}) VALUES ({_marks(len(TRACK_COLUMNS))})"
                " ON CONFLICT (run, camera, track) DO UPDATE SET "
                + ", ".join(f'"{c}" = excluded."{c}"' for c in TRACK_COLUMNS[3:]) + " RETURNING id")
EVENT_INSERT = f"INSERT INTO events ({_quoted(EVENT_COLUMNS)}) VALUES ({_marks(len(EVENT_COLUMNS))})"
COUNT_ADD = ("INSERT INTO counts (camera, minute, kind, name, class, direction, n) VALUES (?, ?, ?, ?, ?, ?, ?)"
             " ON CONFLICT (camera, minute, kind, name, class, direction) DO UPDATE SET n = counts.n + excluded.n")
HOUR_ADD = ("INSERT INTO counts_hour (camera, hour, kind, name, class, direction, n) VALUES (?, ?, ?, ?, ?, ?, ?)"
            " ON CONFLICT (camera, hour, kind, name, class, direction) DO UPDATE SET n = counts_hour.n + excluded.n")
SEGMENT_UPSERT = (f"INSERT INTO segments ({_quoted(SEGMENT_COLUMNS)}) VALUES ({_marks(len(SEGMENT_COLUMNS))})"
                  " ON CONFLICT (path) DO UPDATE SET "
                  + ", ".join(f'"{c}" = excluded."{c}"' for c in SEGMENT_COLUMNS if c != "path"))
ZONE_ADD = "INSERT INTO track_zones (track_id, zone) VALUES (?, ?) ON CONFLICT DO NOTHING"
LINE_ADD = "INSERT INTO track_lines (track_id, line, direction) VALUES (?, ?, ?) ON CONFLICT DO NOTHING"
# a file retention removed: no row names it afterwards
FORGET = (
    "DELETE FROM segments WHERE path = ?",
    "UPDATE tracks SET snapshot = NULL WHERE snapshot = ?",
    "UPDATE tracks SET recording = NULL, recording_time = NULL WHERE recording = ?",
    "UPDATE events SET snapshot = NULL WHERE snapshot = ?",
    "UPDATE events SET clip = NULL WHERE clip = ?",
    "UPDATE events SET recording = NULL, recording_time = NULL WHERE recording = ?",
)


def by_hour(counts: Counter) -> Counter:
    """Per-minute counts summed per hour (`counts_hour`)."""
    hours: Counter = Counter()
    for (camera, minute, *rest), n in counts.items():
        hours[(camera, minute // 3600 * 3600, *rest)] += n
    return hours


def not_a_folder(path: str) -> None:
    """A store file's path that names a folder is a `StoreError`: SQLite would say only
    that it cannot open it, and moving a folder aside as a damaged store is never right."""
    if os.path.isdir(path):
        raise StoreError(f"{path}: the store is a folder, not a file")


def wal_mode(conn: sqlite3.Connection) -> None:
    """WAL mode, waiting up to `BUSY_TIMEOUT_S` for another process. Turning a new file to
    WAL takes its exclusive lock and is refused at once ("database is locked"), without
    SQLite's busy wait, while another connection holds any lock on it: hosts of a run
    opening one new store together met that a third of the time."""
    deadline = time.monotonic() + BUSY_TIMEOUT_S
    while True:
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as e:
            if "locked" not in str(e) or time.monotonic() >= deadline:
                raise
            time.sleep(0.02)


def open_sqlite(path: str, lock: StoreLock | None = None) -> "Backend":
    """The SQLite store at `path`, created or brought up to date; `Damaged` where the file
    is not a sound database. `lock`: the store's lock the caller holds, released as the
    store closes."""
    not_a_folder(path)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    try:
        conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, check_same_thread=False)
    except sqlite3.Error as e:
        raise StoreError(f"{path}: the store cannot be opened: {one_line(e)}") from None
    try:
        wal_mode(conn)
        conn.execute("PRAGMA synchronous = NORMAL")
        check = conn.execute("PRAGMA quick_check").fetchall()
        if check != [("ok",)]:
            raise Damaged(f"{path}: the store fails its integrity check: {check[0][0]}")
        migrate(conn, SQLITE, path)
    except sqlite3.OperationalError as e:  # locked, read-only, no room: the file may well be sound
        conn.close()
        raise StoreError(f"{path}: the store cannot be opened: {one_line(e)}") from None
    except sqlite3.DatabaseError as e:  # not a database, malformed
        conn.close()
        raise Damaged(f"{path}: the store is damaged: {one_line(e)}") from e
    except BaseException:
        conn.close()
        raise
    return Backend(conn, SQLITE, path, lock)


def open_postgres(url: str) -> "Backend":
    """The PostgreSQL store at `url`, its schema created or brought up to date."""
    problem = userinfo_problem(url)  # first: its secret registered before the URL is shown
    if problem:
        raise StoreError(f"outputs.store.url: {problem}")
    where = redact(url)
    try:
        import psycopg
    except ImportError:
        raise StoreError(f"outputs.store.url: {where}: PostgreSQL needs psycopg: "
                         "pip install 'pipeline[postgres]'") from None
    try:
        conn = psycopg.connect(url, connect_timeout=CONNECT_TIMEOUT_S)
    except psycopg.Error as e:
        raise StoreError(f"outputs.store.url: {where}: cannot connect: {one_line(e)}") from None
    migrate(conn, POSTGRES, where)
    return Backend(conn, POSTGRES, where)


class Backend:
    """A connection and the store's statements on it, in its dialect. Used by one thread at
    a time (the writer's, or a command's)."""

    def __init__(self, conn: Any, dialect: Dialect, where: str, lock: StoreLock | None = None):
        self.conn = conn
        self.dialect = dialect
        self.where = where
        self.lock = lock  # a SQLite file's lock (`storelock`), held while this connection writes

    def _sql(self, statement: str) -> str:
        return self.dialect.sql(statement)

    def begin_run(self, started: float, config: str | None, host: str | None) -> int:
        """A run writing into the store: its id."""
        cur = self.conn.cursor()
        cur.execute(self._sql("INSERT INTO runs (started, config, host) VALUES (?, ?, ?) RETURNING id"),
                    (started, config, host))
        run = int(cur.fetchone()[0])
        self.conn.commit()
        return run

    def write(self, rows: Rows) -> None:
        """Every row of a flush in one transaction (all or none)."""
        cur = self.conn.cursor()
        try:
            for track in rows.tracks:
                cur.execute(self._sql(TRACK_UPSERT), track.values())
                tid = cur.fetchone()[0]
                if track.zones:
                    cur.executemany(self._sql(ZONE_ADD), [(tid, z) for z in track.zones])
                if track.lines:
                    cur.executemany(self._sql(LINE_ADD), [(tid, line, d) for line, d in track.lines])
            if rows.events:
                cur.executemany(self._sql(EVENT_INSERT), rows.events)
            if rows.counts:
                cur.executemany(self._sql(COUNT_ADD), [key + (n,) for key, n in sorted(rows.counts.items())])
                cur.executemany(self._sql(HOUR_ADD), [key + (n,) for key, n in sorted(by_hour(rows.counts).items())])
            if rows.segments:
                cur.executemany(self._sql(SEGMENT_UPSERT), [s.values() for s in rows.segments])
            self.conn.commit()
        except BaseException:
            self._rollback()
            raise

    def forget(self, paths: list[str]) -> None:
        """Files that are gone (retention removed them): no row names them any more."""
        cur = self.conn.cursor()
        try:
            for statement in FORGET:
                cur.executemany(self._sql(statement), [(p,) for p in paths])
            self.conn.commit()
        except BaseException:
            self._rollback()
            raise

    def age_out(self, rows_before: float | None, counts_before: float | None) -> None:
        """Tracks and events older than `rows_before` go, counts older than `counts_before`."""
        cur = self.conn.cursor()
        try:
            if rows_before is not None:
                for table in ("track_zones", "track_lines"):
                    cur.execute(self._sql(f"DELETE FROM {table} WHERE track_id IN"
                                          " (SELECT id FROM tracks WHERE last_seen < ?)"), (rows_before,))
                cur.execute(self._sql("DELETE FROM tracks WHERE last_seen < ?"), (rows_before,))
                cur.execute(self._sql("DELETE FROM events WHERE time < ?"), (rows_before,))
            if counts_before is not None:  # whole hours of both, so the hourly sums stay the minutes' sums
                hour = int(counts_before // 3600) * 3600
                cur.execute(self._sql("DELETE FROM counts WHERE minute < ?"), (hour,))
                cur.execute(self._sql("DELETE FROM counts_hour WHERE hour < ?"), (hour,))
            self.conn.commit()
        except BaseException:
            self._rollback()
            raise

    def idle_segments(self, cameras: list[str], ended_before: float, activity: str) -> list[str]:
        """The recording segments of `cameras` that ended before `ended_before` without any
        `activity` ("motion_s" or "objects_s"), each camera's newest left out. Kept by
        motion, a segment with objects is kept too (as in Frigate, where objects come only
        with motion): one recorded before the camera's motion was measured reads 0 s of
        motion whatever it showed."""
        assert activity in ("motion_s", "objects_s")  # a column of ours, never the user's text
        idle = "motion_s = 0 AND objects_s = 0" if activity == "motion_s" else "objects_s = 0"
        marks = ", ".join("?" * len(cameras))
        cur = self.conn.cursor()
        cur.execute(self._sql(f'SELECT path FROM segments s WHERE camera IN ({marks}) AND "end" < ? AND {idle}'
                              " AND start < (SELECT max(start) FROM segments n WHERE n.camera = s.camera)"
                              " ORDER BY start"), (*cameras, ended_before))
        paths = [row[0] for row in cur.fetchall()]
        self.conn.commit()
        return paths

    def alive(self) -> bool:
        """Whether the connection can still be used (a PostgreSQL server that went away
        breaks it: the writer connects again)."""
        return not (getattr(self.conn, "broken", False) or getattr(self.conn, "closed", False))

    def _rollback(self) -> None:
        try:
            self.conn.rollback()
        except Exception:
            pass  # the connection itself is gone; the caller's error says why

    def close(self) -> None:
        try:
            self.conn.close()
        except Exception:
            pass
        if self.lock is not None:
            self.lock.release()

