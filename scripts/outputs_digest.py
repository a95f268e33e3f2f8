"""One line per output of a run: its JSON lines and each store table, digested with what
differs between two runs of the same input taken out (wall-clock times, the start stamp
in a recording's name, row ids, the run's own rows). Two trees that must give the same
outputs (before and after a change that must not change them) give the same lines.

N file cameras of a config (set up like its first source, read as fast as they decode:
a paced camera's gate depends on the clock, a file's does not), each recording `--clip`
and analysing `--detect-clip` as its sub-stream:

    python scripts/outputs_digest.py configs/density/gated.yaml --clip 1080p-idle --detect-clip 360p-idle --cameras 2
"""
from __future__ import annotations

import argparse
import glob
import hashlib
import json
import os
import re
import sqlite3
import tempfile
from dataclasses import replace

from pipeline.bench.camera_clips import clip_or_file
from pipeline.config import load_config
from pipeline.graph import Pipeline

STAMP = re.compile(r"\.\d{8}T\d{6}Z")  # a recording's start in its name
WALL_FIELDS = ("latency", "stamps", "t_capture", "wall")  # a line's fields read from the clock
SKIP_TABLES = {"meta", "runs"}  # the store's own bookkeeping: this run's id, when it began
EPOCH = 1e9  # a float above this is a wall-clock time (seconds since 1970)


def run(args: argparse.Namespace, out: str) -> None:
    config = load_config(args.config)
    template = config.sources[0]
    clip, sub = clip_or_file(args.clip), clip_or_file(args.detect_clip) if args.detect_clip else None
    sources = [replace(template, id=f"cam{i}", uri=clip, detect_uri=sub, live=False, realtime=False, loop=False)
               for i in range(args.cameras)]
    p = Pipeline(replace(config, sources=sources).with_output_dir(out))
    p.start()
    try:
        p.wait()
    finally:
        p.close()


def lines_digest(out: str) -> tuple[int, str]:
    h, n = hashlib.sha256(), 0
    for path in sorted(glob.glob(os.path.join(out, "**", "*.jsonl"), recursive=True)):
        with open(path) as f:
            for line in f:
                record = {k: v for k, v in json.loads(line).items() if not k.startswith(WALL_FIELDS)}
                h.update(STAMP.sub(".T", json.dumps(record, sort_keys=True)).encode())
                n += 1
    return n, h.hexdigest()[:16]


def table_digests(db: str) -> dict[str, tuple[int, str]]:
    """Each table's rows, ids left out, a wall-clock time as seconds after its camera's
    first (the first column names the camera where a table has one)."""
    c = sqlite3.connect(db)
    digests = {}
    try:
        tables = [t for (t,) in c.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
        for table in (t for t in tables if t not in SKIP_TABLES):
            cols = [r[1] for r in c.execute(f"PRAGMA table_info({table})") if r[1] not in ("id", "run")]
            rows = c.execute(f"SELECT {', '.join(cols)} FROM {table}").fetchall() if cols else []
            first: dict = {}
            for r in rows:
                for v in r:
                    if isinstance(v, float) and v > EPOCH:
                        first[r[0]] = min(first.get(r[0], v), v)

            def plain(v, base):
                if isinstance(v, float) and v > EPOCH:
                    return round(v - base, 4)
                return STAMP.sub(".T", v) if isinstance(v, str) else v
            kept = sorted((tuple(plain(v, first.get(r[0], 0.0)) for v in r) for r in rows), key=repr)
            digests[table] = (len(kept), hashlib.sha256(repr(kept).encode()).hexdigest()[:16])
    finally:
        c.close()
    return digests


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("config")
    ap.add_argument("--clip", default="1080p-idle", help="each camera's recorded stream (a made clip's name or a file)")
    ap.add_argument("--detect-clip", default="360p-idle", help="its analysed sub-stream ('' for none)")
    ap.add_argument("--cameras", type=int, default=2)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="outputs-digest-") as out:
        run(args, out)
        n, digest = lines_digest(out)
        print(f"json lines: {n} {digest}")
        for db in sorted(glob.glob(os.path.join(out, "**", "*.db"), recursive=True)):
            for table, (rows, digest) in table_digests(db).items():
                print(f"store {table}: {rows} {digest}")


if __name__ == "__main__":
    main()
