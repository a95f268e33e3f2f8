"""Connections for reading the store from many threads (the web server answers each
request in a thread of its own): a few kept open and lent to one query at a time, more
opened while many ask at once and closed when returned beyond the few.

A location is a path (SQLite) or a `postgresql://` URL. SQLite connections are read-only
(`query_only`) and wait a while for a writer's lock; PostgreSQL ones autocommit, so no
transaction stays open between requests. Each query runs at most `time_limit_s` (SQLite:
interrupted by a progress handler; PostgreSQL: `statement_timeout`), then is `TooMuch`. A
store of an older schema is brought up to
date on first open (`tables.migrate`); a newer one, a missing file or a database that
holds no store is a `StoreError` naming the location.
"""
from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
from typing import Any, Iterator, Sequence

from pipeline.config.outputs import OutputsConfig
from pipeline.errors import one_line
from pipeline.redact import redact, userinfo_problem
from pipeline.store.filters import TooMuch
from pipeline.store.opening import store_path
from pipeline.store.tables import POSTGRES, SCHEMA_VERSION, SQLITE, Dialect, StoreError, migrate, stored_version

KEPT = 4  # idle connections kept open
BUSY_TIMEOUT_S = 5.0  # how long a SQLite read waits for a writer's checkpoint
QUERY_TIME_S = 10.0  # how long one query may run: a heavier one is refused, not left to starve the cameras
PROGRESS_STEPS = 10_000  # SQLite virtual machine steps between looks at the clock
CANCELED = "57014"  # PostgreSQL's query_canceled: statement_timeout


def is_url(location: str) -> bool:
    return location.startswith(("postgresql://", "postgres://"))


def location_of(outputs: OutputsConfig) -> str | None:
    """Where a run's store is (`outputs.store`: its URL, else its file under `outputs.dir`);
    None with the store off."""
    if not outputs.store.enabled:
        return None
    return outputs.store.url or store_path(outputs)


class Connections:
    """Lends connections to `location`'s store; `open` checks it can be read at all."""

    time_limit_s: float = QUERY_TIME_S

    def __init__(self, location: str):
        self.location = location
        self.problem = userinfo_problem(location) if is_url(location) else None  # first: its secret registered
        self.where = redact(location)
        self.dialect: Dialect = POSTGRES if is_url(location) else SQLITE
        self._idle: list[Any] = []
        self._lock = threading.Lock()
        self._checked = False
        self._tables: dict[str, bool] = {}
        self._errors: tuple[type[BaseException], ...] = (sqlite3.Error,)  # and psycopg's, once connected

    @classmethod
    def open(cls, location: str):
        """A reader of the store at `location`, its schema checked now (StoreError)."""
        store = cls(location)
        with store.connection():
            pass
        return store

    def _connect(self) -> Any:
        if self.dialect is POSTGRES:
            return self._connect_postgres()
        if not os.path.isfile(self.location):
            raise StoreError(f"{self.where}: no store there (no such file)")
        try:
            conn = sqlite3.connect(self.location, timeout=BUSY_TIMEOUT_S, check_same_thread=False)
            self._check(conn)
            conn.execute("PRAGMA query_only = ON")
        except sqlite3.DatabaseError as e:
            raise StoreError(f"{self.where}: cannot be read as a store: {one_line(e)}") from None
        return conn

    def _connect_postgres(self) -> Any:
        try:
            import psycopg
        except ImportError:
            raise StoreError(f"{self.where}: reading a PostgreSQL store needs psycopg (pip install psycopg)") from None
        if self.problem:
            raise StoreError(self.problem)
        try:
            self._errors = (psycopg.Error,)
            conn = psycopg.connect(self.location, connect_timeout=5)
        except psycopg.Error as e:
            raise StoreError(f"{self.where}: cannot connect: {redact(one_line(e))}") from None
        try:
            self._check(conn)  # in transactions: a migration step is all or nothing
            conn.rollback()
            conn.autocommit = True
            conn.execute(f"SET statement_timeout = {max(1, round(self.time_limit_s * 1000))}")
        except BaseException:
            conn.close()
            raise
        return conn

    def _check(self, conn: Any) -> None:
        """The schema is this pipeline's (an older one brought up to date, once)."""
        if self._checked:
            return
        found = stored_version(conn, self.dialect)
        conn.commit()
        if found == 0:
            raise StoreError(f"{self.where}: holds no store (no schema version)")
        if found != SCHEMA_VERSION:
            migrate(conn, self.dialect, self.where)
        self._checked = True

    @contextlib.contextmanager
    def connection(self) -> Iterator[Any]:
        with self._lock:
            conn = self._idle.pop() if self._idle else None
        conn = conn or self._connect()
        try:
            yield conn
        except BaseException:
            conn.close()  # its state is unknown (a broken server connection, an interrupted read)
            raise
        with self._lock:
            keep = len(self._idle) < KEPT
            if keep:
                self._idle.append(conn)
        if not keep:
            conn.close()

    def fetch(self, statement: str, params: Sequence[Any]) -> list[tuple]:
        """All rows of one statement written with `?` placeholders; `TooMuch` once it has
        run `time_limit_s`."""
        with self.connection() as conn:
            cur = conn.cursor()
            if self.dialect is SQLITE:
                deadline = time.monotonic() + self.time_limit_s
                conn.set_progress_handler(lambda: time.monotonic() > deadline, PROGRESS_STEPS)
            try:
                cur.execute(self.dialect.sql(statement), list(params))
                return cur.fetchall()
            except self._errors as e:
                if _timed_out(e):
                    raise TooMuch(f"the query ran past {self.time_limit_s:g} s, the store's limit for one query: "
                                  "ask for a shorter range, fewer cameras or more filters") from None
                raise StoreError(f"{self.where}: the query failed: {redact(one_line(e))}") from e
            finally:
                cur.close()

    def count_at_most(self, source: str, params: Sequence[Any], most: int) -> int:
        """How many rows `source` (`table WHERE ...`) holds, counting no further than one
        past `most`: what a query would read, known before it reads, at a cost bounded
        however large the store (an index's range, without the rows' sorting)."""
        return int(self.fetch(f"SELECT COUNT(*) FROM (SELECT 1 FROM {source} LIMIT ?) AS r",
                              [*params, most + 1])[0][0])

    def has_table(self, name: str) -> bool:
        """Whether the store's schema has the table `name` (asked once per name)."""
        if name not in self._tables:
            sql = ("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?" if self.dialect is SQLITE else
                   "SELECT 1 FROM information_schema.tables WHERE table_schema = current_schema() AND table_name = ?")
            self._tables[name] = bool(self.fetch(sql, [name]))
        return self._tables[name]

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()


def _timed_out(error: BaseException) -> bool:
    """Whether a query failed for its time limit (SQLite's interrupt, PostgreSQL's
    statement_timeout) rather than for the store."""
    if isinstance(error, sqlite3.OperationalError):
        return str(error) == "interrupted"
    return getattr(error, "sqlstate", None) == CANCELED
