"""A store past the limits of one query (tests/store, tests/web): a week of per-minute
counts of many lines at one camera or more, written by SQL straight into the writer's
tables (and its hourly rollup), so it takes a second where the writer would take minutes."""
from __future__ import annotations

import sqlite3

from store_rows import T0, make_store, roll_up, synthetic

NAMES = 12  # series of per-minute counts: a week of them is past MAX_ROWS, a day is not
WEEK = 7 * 86400


def many_counts(path: str, cameras: tuple[str, ...] = ("gate",)) -> str:
    """A SQLite store at `path` of a few tracks and a week of per-minute counts of `NAMES`
    lines (`line-0` ...) at each of `cameras` from T0; its path."""
    make_store(path, synthetic(20))
    conn = sqlite3.connect(path)
    for camera in cameras:
        conn.execute("WITH RECURSIVE mins(m) AS (SELECT ? UNION ALL SELECT m + 60 FROM mins WHERE m + 60 < ?),"
                     " names(k) AS (SELECT 0 UNION ALL SELECT k + 1 FROM names WHERE k + 1 < ?)"
                     " INSERT OR REPLACE INTO counts (camera, minute, kind, name, class, direction, n)"
                     " SELECT ?, m, 'line', 'line-' || k, 'car', 'in', 1 FROM mins, names",
                     (int(T0), int(T0) + WEEK, NAMES, camera))
    conn.execute("DELETE FROM counts_hour")
    roll_up(conn.cursor())
    conn.commit()
    conn.close()
    return path
