"""How fast the store answers at scale: a store filled with synthetic tracks (and their
zones, lines, events, per-minute counts and hourly recording segments) of many cameras
over a week, then timed through the queries the API and `pipeline query` use:

- a filtered query: one class, one zone, one hour, the first page of 100 (target < 100 ms);
- the same query's fifth page (a cursor: costs what the first does);
- a day of hourly counts over every camera (target < 50 ms); hour and day buckets read the
  hourly rollup `counts_hour` where the schema has one (`--hourly`: made as proposed where not);
- a day's activity timeline (segments and events per camera, hour buckets).

Each figure is the median of `--runs` runs, after one warm-up run. The store's size per
camera-day is the file's (SQLite) at this density: `--tracks` over cameras x days; with
`--sample DIR` (a run's outputs.dir: its store.db and JSON lines), also at that run's
activity: each camera looping its clip for a day, in a store of its own.

    python scripts/store_bench.py --tracks 1000000 --cameras 16 --days 7 --hourly --sample out/tracking
    python scripts/store_bench.py --tracks 1000000 --store postgresql://u:p@127.0.0.1/store
"""
from __future__ import annotations

import argparse
import json
import os
import random
import sqlite3
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipeline.store.connections import is_url  # noqa: E402
from pipeline.store.filters import parse  # noqa: E402
from pipeline.store.queries import Store  # noqa: E402
from pipeline.store.tables import POSTGRES, SQLITE, migrate  # noqa: E402

START = 1795392000.0  # 2026-11-23 00:00 UTC, a Monday
CLASSES = (("person", 0.6), ("car", 0.3), ("bicycle", 0.1))
ZONES = ("lawn", "path", "road")
LINES = ("gate", "street")
COLOURS = ("red", "blue", "white", "black", "grey")
SEGMENT_S = 3600.0
BATCH = 20000


def one_track(rng: random.Random, tid: int, camera: str, days: int) -> tuple[tuple, list, list, list]:
    """A track's row, its zones, its lines and its events (with a day's rhythm: more by day)."""
    day = rng.randrange(days)
    hour = min(23.999, max(0.0, rng.gauss(14, 4)))
    first = START + day * 86400 + hour * 3600
    last = first + rng.expovariate(1 / 20)
    cls = rng.choices([c for c, _ in CLASSES], [w for _, w in CLASSES])[0]
    zones = rng.sample(ZONES, rng.choice((0, 1, 1, 2)))
    lines = [(rng.choice(LINES), rng.choice(("in", "out")))] if rng.random() < 0.5 else []
    labels = {"colour": rng.choice(COLOURS)} if cls == "car" else {}
    box = [round(rng.uniform(0, 1800), 1), round(rng.uniform(0, 1000), 1)]
    box += [box[0] + 80, box[1] + 160]
    events = []
    for zone in zones:
        t = rng.uniform(first, last)
        events.append((1, camera, t, "enter", tid, cls, None, zone, "enter"))
        events.append((1, camera, min(last, t + rng.expovariate(1 / 10)), "exit", tid, cls, None, zone, "exit"))
    for line, direction in lines:
        events.append((1, camera, rng.uniform(first, last), "cross", tid, cls, line, None, direction))
    row = (tid, 1, camera, tid, cls, first, last, round(rng.uniform(0.3, 0.95), 3), json.dumps(box),
           (first + last) / 2, json.dumps(labels), json.dumps(zones), json.dumps([n for n, _ in lines]),
           f"events/{camera}/{tid}.jpg", f"recordings/{camera}/{int(first // SEGMENT_S)}.mp4",
           (first % SEGMENT_S))
    return row, [(tid, z) for z in zones], [(tid, n, d) for n, d in lines], events


def counts_of(events: list[tuple]) -> Counter:
    """Line crossings and zone entries per minute, as the writer counts them."""
    out: Counter = Counter()
    for _, camera, t, kind, _, cls, line, zone, direction in events:
        if kind == "cross":
            out[(camera, int(t // 60 * 60), "line", line, cls, direction)] += 1
        elif kind == "enter":
            out[(camera, int(t // 60 * 60), "zone", zone, cls, "enter")] += 1
    return out


INSERTS = {
    "tracks": "INSERT INTO tracks (id, run, camera, track, class, first_seen, last_seen, best_score, best_box,"
              " best_time, labels, zones, lines, snapshot, recording, recording_time) VALUES"
              " (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
    "zones": "INSERT INTO track_zones (track_id, zone) VALUES (?, ?)",
    "lines": "INSERT INTO track_lines (track_id, line, direction) VALUES (?, ?, ?)",
    "events": "INSERT INTO events (run, camera, time, event, track, class, line, zone, direction)"
              " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
    "counts": "INSERT INTO counts (camera, minute, kind, name, class, direction, n) VALUES (?, ?, ?, ?, ?, ?, ?)",
    "segments": 'INSERT INTO segments (camera, path, start, "end", bytes, motion_s, objects_s)'
                " VALUES (?, ?, ?, ?, ?, ?, ?)",
}


def write(conn, dialect, table: str, rows: list) -> None:
    if rows:
        cur = conn.cursor()
        cur.executemany(dialect.sql(INSERTS[table]), rows)
        conn.commit()


def fill(conn, dialect, tracks: int, cameras: int, days: int, seed: int = 1) -> None:
    """`tracks` tracks spread evenly over the cameras, written in batches of `BATCH`."""
    rng = random.Random(seed)
    counts: Counter = Counter()
    tid = 0
    for c in range(cameras):
        camera = f"cam{c:02d}"
        share = tracks // cameras + (1 if c < tracks % cameras else 0)
        for done in range(0, share, BATCH):
            batch = {"tracks": [], "zones": [], "lines": [], "events": []}
            for _ in range(min(BATCH, share - done)):
                tid += 1
                row, zones, lines, events = one_track(rng, tid, camera, days)
                batch["tracks"].append(row)
                batch["zones"] += zones
                batch["lines"] += lines
                batch["events"] += events
            counts.update(counts_of(batch["events"]))
            for table, rows in batch.items():
                write(conn, dialect, table, rows)
        segments = [(camera, f"recordings/{camera}/{int(START // SEGMENT_S) + h}.mp4", START + h * SEGMENT_S,
                     START + (h + 1) * SEGMENT_S, 400_000_000, rng.uniform(0, 3600), rng.uniform(0, 3600))
                    for h in range(days * 24)]
        write(conn, dialect, "segments", segments)
    write(conn, dialect, "counts", [key + (n,) for key, n in sorted(counts.items())])


ROLLUP = ("CREATE TABLE counts_hour (camera TEXT NOT NULL, hour {int} NOT NULL, kind TEXT NOT NULL,"
          " name TEXT NOT NULL, class TEXT NOT NULL, direction TEXT NOT NULL, n {int} NOT NULL,"
          " PRIMARY KEY (camera, hour, kind, name, class, direction))",
          "CREATE INDEX counts_hour_hour ON counts_hour (hour)")


def roll_up(conn, dialect, exists: bool) -> None:
    """The hourly rollup of the counts filled as a writer keeps it: in the schema's table
    where it has one, else in one made as proposed for it (`--hourly`)."""
    cur = conn.cursor()
    if not exists:
        for statement in ROLLUP:
            cur.execute(dialect.ddl(statement))
    cur.execute("DELETE FROM counts_hour")
    cur.execute("INSERT INTO counts_hour SELECT camera, minute / 3600 * 3600, kind, name, class, direction, SUM(n)"
                " FROM counts GROUP BY camera, minute / 3600 * 3600, kind, name, class, direction")
    conn.commit()


def connect(location: str, dialect):
    if dialect is POSTGRES:
        import psycopg

        return psycopg.connect(location)
    conn = sqlite3.connect(location)
    conn.execute("PRAGMA journal_mode = WAL")
    return conn


def timed(store: Store, kind: str, params: dict, runs: int, pages: int = 1) -> tuple[float, int]:
    """The median milliseconds of `runs` runs (after one unmeasured) to parse and answer
    a query, following its cursor to page `pages` (or the last); and the rows of that page."""
    samples, rows = [], 0
    for i in range(runs + 1):
        t0 = time.perf_counter()
        query = dict(params)
        for _ in range(pages):
            answer = store.query(kind, parse(kind, query))
            if not getattr(answer, "next", None):
                break  # the last page came first
            query["cursor"] = [answer.next]
        if i:
            samples.append(1000 * (time.perf_counter() - t0))
        rows = len(answer.rows) if hasattr(answer, "rows") else sum(len(s["points"]) for s in answer) \
            if isinstance(answer, list) else sum(len(v) for v in answer.values())
    return statistics.median(samples), rows


def measure(store: Store, runs: int) -> dict:
    hour = START + 2 * 86400 + 14 * 3600  # the third day, 14:00 to 15:00 UTC
    day = {"after": [str(START + 2 * 86400)], "before": [str(START + 3 * 86400)], "bucket": ["hour"]}
    filtered = {"class": ["person"], "zone": ["lawn"], "after": [str(hour)], "before": [str(hour + 3600)],
                "limit": ["100"]}
    out = {}
    for name, kind, params, pages in (("filtered_first_page", "tracks", filtered, 1),
                                      ("filtered_fifth_page", "tracks", filtered, 5),
                                      ("events_zone_hour", "events", {**filtered, "event": ["enter"]}, 1),
                                      ("hourly_counts_day", "counts", day, 1),
                                      ("activity_day", "activity", day, 1)):
        ms, rows = timed(store, kind, params, runs, pages)
        out[name] = {"ms": round(ms, 2), "rows": rows}
    return out


def sqlite_size(path: str) -> int:
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    return sum(os.path.getsize(p) for p in (path, path + "-wal") if os.path.exists(p))


def clip_seconds(run_dir: Path) -> dict[str, float]:
    """Each camera's length in the run's JSON lines: its last frame's time in its stream."""
    out: dict[str, float] = {}
    for path in run_dir.glob("*.jsonl"):
        with open(path, encoding="utf-8") as f:
            for line in f:
                row = json.loads(line)
                out[row["camera"]] = max(out.get(row["camera"], 0.0), row.get("time") or 0.0)
    return out


def looped_day(run: dict, camera: str, length: float, path: str) -> int:
    """A store holding a day of `camera` looping its clip (`length` s): the run's rows of
    it copied again and again, shifted by the clip each time; its size in bytes."""
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA journal_mode = WAL")
    migrate(conn, SQLITE, "sample")
    tid, counts = 0, Counter()
    tracks = [t for t in run["tracks"] if t[2] == camera]
    events = [e for e in run["events"] if e[2] == camera]
    for k in range(int(86400 // length)):
        shift, ids = k * length, {}
        for row in tracks:
            tid += 1
            ids[row[0]] = ids[("track", row[3])] = tid
            conn.execute(f"INSERT INTO tracks VALUES ({', '.join('?' * len(row))})",
                         (tid, row[1], camera, tid, row[4], row[5] + shift, row[6] + shift, *row[7:]))
        conn.executemany("INSERT INTO track_zones VALUES (?, ?)",
                         [(ids[z[0]], z[1]) for z in run["zones"] if z[0] in ids])
        conn.executemany("INSERT INTO track_lines VALUES (?, ?, ?)", [(ids[x[0]], *x[1:]) for x in run["lines"]
                                                                     if x[0] in ids])
        shifted = [(e[1], camera, e[3] + shift, e[4], ids.get(("track", e[5]), e[5]), *e[6:]) for e in events]
        conn.executemany(f"INSERT INTO events VALUES (NULL, {', '.join('?' * len(shifted[0]))})", shifted)
        counts.update(counts_of([e[:9] for e in shifted]))
        conn.commit()
    write(conn, SQLITE, "counts", [key + (n,) for key, n in sorted(counts.items())])
    conn.close()
    return sqlite_size(path)


def sample_day(run_dir: Path, path: str) -> dict:
    """A camera-day at a run's activity: each camera of the run (its store, `store.db` in
    its folder) looping its clip for a day, in a store of its own; the store's size."""
    seconds = clip_seconds(run_dir)
    source = sqlite3.connect(run_dir / "store.db")
    run = {t: source.execute(f"SELECT * FROM {t}").fetchall() for t in ("tracks", "track_zones", "track_lines")}
    run = {"tracks": run["tracks"], "zones": run["track_zones"], "lines": run["track_lines"],
           "events": source.execute("SELECT * FROM events ORDER BY id").fetchall()}
    source.close()
    out = {}
    for camera, length in seconds.items():
        out[camera] = {"clip_s": length, "tracks_per_day": round(sum(t[2] == camera for t in run["tracks"])
                                                                 * 86400 / length),
                       "events_per_day": round(sum(e[2] == camera for e in run["events"]) * 86400 / length),
                       "bytes_per_day": looped_day(run, camera, length, f"{path}.{camera}")}
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tracks", type=int, default=1_000_000)
    ap.add_argument("--cameras", type=int, default=16)
    ap.add_argument("--days", type=int, default=7)
    ap.add_argument("--runs", type=int, default=3, help="timed runs per query (the median is reported)")
    ap.add_argument("--store", help="a SQLite file or a postgresql:// URL (default: a new file in a temporary folder)")
    ap.add_argument("--keep", action="store_true", help="fill an existing store no further: time it as it is")
    ap.add_argument("--hourly", action="store_true",
                    help="where the schema has no hourly rollup of the counts, make the one proposed for it")
    ap.add_argument("--json", help="write the figures here as JSON")
    ap.add_argument("--sample", metavar="DIR", help="also: the size of a camera-day at the activity of the run whose "
                                                    "outputs.dir this is (its store.db and JSON lines)")
    args = ap.parse_args()
    if args.tracks < args.cameras or args.cameras < 1 or args.days < 3 or args.runs < 1:
        ap.error("--tracks >= --cameras >= 1, --days >= 3 (the queries ask for the third day), --runs >= 1")
    with tempfile.TemporaryDirectory() as tmp:
        location = args.store or os.path.join(tmp, "store.db")
        result = bench(args, location)
        if args.sample:
            result["sample"] = sample_day(Path(args.sample), os.path.join(tmp, "sample.db"))
    print(json.dumps(result, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    return 0


def bench(args: argparse.Namespace, location: str) -> dict:
    dialect = POSTGRES if is_url(location) else SQLITE
    filled = 0.0
    if not args.keep:
        conn = connect(location, dialect)
        migrate(conn, dialect, "bench")
        t0 = time.perf_counter()
        fill(conn, dialect, args.tracks, args.cameras, args.days)
        filled = time.perf_counter() - t0
        conn.close()
    store = Store.open(location)
    hourly = store.has_table("counts_hour")
    store.close()
    if hourly or args.hourly:
        conn = connect(location, dialect)
        roll_up(conn, dialect, hourly)
        conn.close()
    store = Store.open(location)
    rows = {t: store.fetch(f"SELECT COUNT(*) FROM {t}", [])[0][0] for t in ("tracks", "events", "counts", "segments")}
    result = {"store": dialect.name, "tracks": args.tracks, "cameras": args.cameras, "days": args.days,
              "rows": rows, "fill_s": round(filled, 1), "hourly_rollup": "present" if hourly else
              "made by --hourly" if args.hourly else "none", "queries": measure(store, args.runs)}
    store.close()
    if dialect is SQLITE:
        size = sqlite_size(location)
        result["bytes"] = size
        result["bytes_per_camera_day"] = round(size / (args.cameras * args.days))
    return result


if __name__ == "__main__":
    sys.exit(main())
