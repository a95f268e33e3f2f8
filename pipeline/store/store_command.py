"""`pipeline store rebuild | check`: the store built again from the JSON lines, and a look
at a store's health.

`rebuild` reads the folder of a config (`--config`) or a folder alone (`--dir`: every
`*.jsonl` file in it) and builds the store beside it (or `--to` a file); a SQLite store
is built in a new file that then takes the old one's place, the old one kept aside
(`store.db.replaced-<stamp>`): nothing is emptied (`opening.build_aside`, as a run's
start-up rebuild). A PostgreSQL store (`outputs.store.url`) is rebuilt only into an empty
database. A folder a run is writing is refused (`lock`: the run's lock on its output
folder), and so is a store file a run writes into, whatever folder it is in (`storelock`),
or one holding rows of runs the folder's run log does not name (another folder's). `check` opens a store (bringing an older schema up to
date), runs SQLite's `integrity_check` and says how many rows each table holds; exit 1
where it is damaged.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from contextlib import AbstractContextManager
from typing import Callable

from pipeline.config.outputs import JsonlOutputConfig, OutputsConfig
from pipeline.errors import BAD_INPUT, DONE, FAILED, PipelineError
from pipeline.store.backend import Backend, Damaged, not_a_folder, open_postgres, open_sqlite
from pipeline.store.opening import build_aside, store_path
from pipeline.store.rebuild import jsonl_files, rebuild
from pipeline.store.runlog import RunLog
from pipeline.store.storelock import StoreLock
from pipeline.store.tables import TABLES, StoreError

Lock = Callable[[str], AbstractContextManager]  # the output folder's lock (`runloop.OutputLock`)


def add_store_parser(sub, lock: Lock) -> None:
    store = sub.add_parser("store", help="rebuild the store from the JSON lines, or check it")
    actions = store.add_subparsers(dest="action", required=True)
    for name, text in (("rebuild", "build the store again from the JSON lines (and the recordings on disk)"),
                       ("check", "open the store, check its integrity, count its rows")):
        action = actions.add_parser(name, help=text)
        where = action.add_mutually_exclusive_group(required=True)
        where.add_argument("--config", help="the run's config: its outputs.dir, JSON lines and store")
        where.add_argument("--dir", help="an output folder: its *.jsonl files, store.db beside them")
        if name == "rebuild":
            action.add_argument("--to", help="write this SQLite file instead of the configured store")
    store.set_defaults(func=lambda args: run_store_command(args, lock))


def outputs_of(args: argparse.Namespace) -> OutputsConfig:
    """The outputs a command works on: the config's, or a folder's with every `*.jsonl`."""
    if args.config:
        from pipeline.config import load_config

        out = load_config(args.config).outputs
        if not os.path.isdir(out.dir):
            raise PipelineError(f"outputs.dir: {out.dir}: no such folder (nothing to rebuild from)")
        return out
    if not os.path.isdir(args.dir):
        raise PipelineError(f"--dir: {args.dir}: no such folder")
    return OutputsConfig(dir=os.path.abspath(args.dir), jsonl=JsonlOutputConfig(filename="*.jsonl"))


def run_store_command(args: argparse.Namespace, lock: Lock) -> int:
    try:
        out = outputs_of(args)
        if args.action == "check":
            return check(out)
        with lock(out.dir):
            return rebuild_store(out, args.to)
    except PipelineError as e:
        for line in e.problems:
            print(f"error: {line}", file=sys.stderr)
        return e.exit_status


def rebuild_store(out: OutputsConfig, to: str | None) -> int:
    files = jsonl_files(out)
    if not files:
        print(f"error: {out.dir}: no JSON lines to rebuild from ({out.jsonl.filename})", file=sys.stderr)
        return BAD_INPUT
    if out.store.url is not None and to is None:
        backend = open_postgres(out.store.url)
        if _count(backend, "runs"):
            backend.close()
            raise StoreError(f"outputs.store.url: {backend.where}: holds a store already: rebuild into an empty "
                             "database (or --to a SQLite file)")
        done, target, kept = rebuild(out, backend), backend.where, None
        backend.close()
    else:
        target = os.path.realpath(to if to else store_path(out))  # a link's store, never the link, is rebuilt
        not_a_folder(target)
        lock = StoreLock(target)
        lock.take(exclusive=True)  # no run writes into it meanwhile, however it is named
        try:
            _keeps_other_runs(target, out.dir)
            done, kept = build_aside(out, target, "replaced")
        finally:
            lock.release()
    print(f"{target}: rebuilt from {len(files)} JSON lines file(s): {done.runs} run(s), {done.records} frame(s)"
          + (f", {done.skipped} line(s) that are not frames skipped" if done.skipped else "")
          + (f"; the store before kept as {kept}" if kept else ""))
    return DONE


def _keeps_other_runs(target: str, root: str) -> None:
    """Refuse to replace a store holding rows of runs that `root`'s run log does not name
    (another folder's runs, where two configs share one store): rebuilt from `root`'s JSON
    lines, their rows would be gone from it. A store that cannot be read has none to keep."""
    if not os.path.lexists(target):
        return
    try:
        backend = open_sqlite(target)
    except Damaged:
        return
    try:
        runs = backend.conn.execute(
            "SELECT started, host, config FROM runs WHERE host IS NOT NULL AND (EXISTS (SELECT 1 FROM tracks"
            " WHERE run = runs.id) OR EXISTS (SELECT 1 FROM events WHERE run = runs.id)) ORDER BY started").fetchall()
    finally:
        backend.close()
    logged = {(run.started, run.host) for run in RunLog(root).read()}
    others = [run for run in runs if (run[0], run[1]) not in logged]
    if others:
        started, host, config = others[0]
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(started))
        raise StoreError(f"{target}: holds {len(others)} run(s) with rows that {root}'s run log does not name "
                         f"(the first: {when} UTC on {host}, config {config}); rebuilt from this folder their rows "
                         "would be gone: rebuild --to another file, or move this store aside first")


def _count(backend: Backend, table: str) -> int:
    cur = backend.conn.cursor()
    cur.execute(f"SELECT count(*) FROM {table}")  # the table is one of TABLES, never the user's text
    return int(cur.fetchone()[0])


def check(out: OutputsConfig) -> int:
    if out.store.url is None and not os.path.exists(store_path(out)):
        print(f"error: {store_path(out)}: no store here", file=sys.stderr)
        return BAD_INPUT
    try:
        backend = open_postgres(out.store.url) if out.store.url else open_sqlite(store_path(out))
    except Damaged as e:
        print(f"error: {e.problems[0]} (pipeline store rebuild builds it again from the JSON lines)", file=sys.stderr)
        return FAILED
    try:
        if backend.dialect.name == "sqlite":
            problems = [r[0] for r in backend.conn.execute("PRAGMA integrity_check").fetchall()]
            if problems != ["ok"]:
                print(f"error: {backend.where}: integrity check: {problems[0]}", file=sys.stderr)
                return FAILED
        counts = ", ".join(f"{t} {_count(backend, t)}" for t in TABLES if t != "meta")
        print(f"{backend.where}: ok ({counts})")
        return DONE
    finally:
        backend.close()
