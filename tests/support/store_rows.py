"""A store's rows for the query tests (tests/store, tests/web, the CLI's): tracks over two
days with their zones, lines, labels, events and per-minute counts, random but seeded,
written into a real database through the schema; the tests compute what each query must
answer from the same rows."""
from __future__ import annotations

import json
import random
import sqlite3
from collections import Counter

from pipeline.store.tables import SQLITE, migrate

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


def fill(conn, data: dict, d=SQLITE) -> None:
    conn.executemany(d.sql(f"INSERT INTO tracks ({TRACK}) VALUES ({', '.join('?' * 16)})"), data["tracks"])
    conn.executemany(d.sql("INSERT INTO track_zones (track_id, zone) VALUES (?, ?)"), data["zones"])
    conn.executemany(d.sql("INSERT INTO track_lines (track_id, line, direction) VALUES (?, ?, ?)"), data["lines"])
    conn.executemany(d.sql(f"INSERT INTO events ({EVENT}) VALUES ({', '.join('?' * 10)})"), data["events"])
    conn.executemany(d.sql("INSERT INTO counts (camera, minute, kind, name, class, direction, n)"
                           " VALUES (?, ?, ?, ?, ?, ?, ?)"), [k + (n,) for k, n in data["counts"].items()])
    conn.commit()



def make_store(path: str, data: dict) -> str:
    """A SQLite store at `path` holding `data`; its path."""
    conn = sqlite3.connect(path)
    migrate(conn, SQLITE, path)
    fill(conn, data)
    conn.close()
    return path
