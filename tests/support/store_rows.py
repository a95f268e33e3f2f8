"""A store's rows for the query tests (tests/store, tests/web, the CLI's): tracks over two
days with their zones, lines, labels, events and per-minute counts, random but seeded,
written into a real database (SQLite, or PostgreSQL) through the schema; the tests
compute what each query must answer from the same rows."""
from __future__ import annotations

import json
import random
import sqlite3
from collections import Counter

from pipeline.store.tables import POSTGRES, SQLITE, TABLES, migrate

T0 = 1795392000.0  # 2026-11-23 00:00 UTC
CAMERAS = ("gate", "lawn-east", "yard")
CLASSES = ("person", "car", "bicycle")
ZONES = ("lawn", "path")
LINES = ("entry", "street")
TRACK = ("id, run, camera, track, class, first_seen, last_seen, best_score, best_box, best_time, labels, zones, "
         "lines, snapshot, recording, recording_time")
EVENT = "id, run, camera, time, event, track, class, line, zone, direction"


def synthetic(n: int = 400, seed: int = 7) -> dict:
    """Tracks over two days with their zones, lines, labels, events and per-minute counts;
    a few share one time (ties across page boundaries)."""
    rng = random.Random(seed)
    tracks, zones, lines, events, counts = [], [], [], [], Counter()
    for i in range(1, n + 1):
        first = T0 + (rng.randrange(0, 2 * 86400) if i % 10 else 3600.0)  # every tenth at 01:00 exactly
        cls, cam = rng.choice(CLASSES), rng.choice(CAMERAS)
        tz = rng.sample(ZONES, rng.randrange(3))
        tl = [(rng.choice(LINES), rng.choice(("in", "out")))] if rng.random() < 0.5 else []
        labels = {"colour": rng.choice(("red", "blue"))} if cls == "car" else {}
        tracks.append((i, 1, cam, i, cls, first, first + 30, 0.5, "[1, 2, 3, 4]", first + 1, json.dumps(labels),
                       json.dumps(tz), json.dumps([n for n, _ in tl]), None, None, None))
        zones += [(i, z) for z in tz]
        lines += [(i, n, d) for n, d in tl]
        for k, z in enumerate(tz):
            events.append((len(events) + 1, 1, cam, first + k, "enter", i, cls, None, z, "enter"))
            counts[(cam, int((first + k) // 60 * 60), "zone", z, cls, "enter")] += 1
        for n_, d in tl:
            events.append((len(events) + 1, 1, cam, first + 5, "cross", i, cls, n_, None, d))
            counts[(cam, int((first + 5) // 60 * 60), "line", n_, cls, d)] += 1
    return {"tracks": tracks, "zones": zones, "lines": lines, "events": events, "counts": counts}


def connect(location: str):
    """A writable connection to the store at `location` (a file or a PostgreSQL URL) and
    its dialect."""
    if location.startswith("postgresql://"):
        import psycopg

        return psycopg.connect(location), POSTGRES
    return sqlite3.connect(location), SQLITE


def execute(location: str, statement: str, *params) -> None:
    """One statement (written with `?`) run and committed: rows written beside a reader."""
    conn, d = connect(location)
    try:
        conn.cursor().execute(d.sql(statement), params)
        conn.commit()
    finally:
        conn.close()


def fill(conn, data: dict, d=SQLITE) -> None:
    cur = conn.cursor()
    cur.executemany(d.sql(f"INSERT INTO tracks ({TRACK}) VALUES ({', '.join('?' * 16)})"), data["tracks"])
    cur.executemany(d.sql("INSERT INTO track_zones (track_id, zone) VALUES (?, ?)"), data["zones"])
    cur.executemany(d.sql("INSERT INTO track_lines (track_id, line, direction) VALUES (?, ?, ?)"), data["lines"])
    cur.executemany(d.sql(f"INSERT INTO events ({EVENT}) VALUES ({', '.join('?' * 10)})"), data["events"])
    cur.executemany(d.sql("INSERT INTO counts (camera, minute, kind, name, class, direction, n)"
                          " VALUES (?, ?, ?, ?, ?, ?, ?)"), [k + (n,) for k, n in data["counts"].items()])
    cur.executemany(d.sql('INSERT INTO segments (camera, path, start, "end", bytes, motion_s, objects_s)'
                          " VALUES (?, ?, ?, ?, ?, ?, ?)"), data.get("segments", []))
    if "counts_hour" in TABLES:  # the schema's hourly rollup, filled as the writer fills it
        roll_up(cur, d)
    conn.commit()


ROLLUP = ("CREATE TABLE counts_hour (camera TEXT, hour BIGINT, kind TEXT, name TEXT, class TEXT, direction TEXT,"
          " n BIGINT)")


def roll_up(cur, d=SQLITE) -> None:
    cur.execute("INSERT INTO counts_hour SELECT camera, minute / 3600 * 3600, kind, name, class, direction, SUM(n)"
                " FROM counts GROUP BY camera, minute / 3600 * 3600, kind, name, class, direction")


def make_store(location: str, data: dict) -> str:
    """A store at `location` (a SQLite file, or an empty PostgreSQL database's URL) holding
    `data`; its location."""
    conn, d = connect(location)
    migrate(conn, d, "test")
    fill(conn, data, d)
    conn.close()
    return location
