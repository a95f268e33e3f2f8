"""The store built again from the JSON lines (`pipeline store rebuild`, or a damaged store
at start-up): the JSON lines are the record, the store an index of them.

Each camera's lines are read in the order of their files (time-named files sort by their
stamps) and cut into sessions where its frame numbers start again (a new run, or the
camera returning). The store's run log (`runlog`) names each run and, per camera, the
wall clock at its time 0; the newest sessions go with the newest logged ones (older
files may have been removed, never newer ones). A session the log does not know (a run
made before the store existed, or a lost log) takes its wall clock from its last file's
modification time, and such sessions share one run row. The rows come from the same
`RowBuilder` as the live writer's, so a rebuild gives the rows the live writer wrote
(what a full queue dropped there is here too).
"""
from __future__ import annotations

import glob
import json
import logging
import os
from dataclasses import dataclass
from typing import Iterator

from pipeline.config.outputs import OutputsConfig, stamped
from pipeline.store.backend import Backend
from pipeline.store.rows import RowBuilder
from pipeline.store.runlog import RunLog

log = logging.getLogger("pipeline.store")

FLUSH_RECORDS = 5000  # records per transaction


@dataclass
class Session:
    """A stretch of one camera's lines with rising frame numbers: one camera in one run."""

    camera: str
    last_file: str
    last_time: float | None = None
    key: str | None = None  # its run in the run log (None: a run the log does not know)
    run: int | None = None
    origin: float | None = None


@dataclass
class Rebuilt:
    runs: int
    records: int
    skipped: int  # lines that are not frame records (torn, hand-edited)


def jsonl_files(out: OutputsConfig) -> list[str]:
    """The JSON lines files of the folder, in order (time-named ones by their stamps)."""
    found: set[str] = set()
    for template in {out.jsonl.filename, stamped(out.jsonl.filename)}:
        pattern = os.path.join(out.dir, template.replace("{camera}", "*").replace("{start}", "*"))
        found.update(p for p in glob.glob(pattern) if os.path.isfile(p))
    return sorted(found)


def records(files: list[str], bad: list[int]) -> Iterator[tuple[str, dict]]:
    """(file, record) of every sound frame line; `bad[0]` counts the others."""
    for path in files:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                try:
                    record = json.loads(line)
                    if isinstance(record, dict) and isinstance(record.get("camera"), str) \
                            and isinstance(record.get("seq"), int):
                        yield path, record
                        continue
                except ValueError:
                    pass
                bad[0] += 1


def sessions(files: list[str]) -> dict[str, list[Session]]:
    """Each camera's sessions, in order."""
    out: dict[str, list[Session]] = {}
    last_seq: dict[str, int] = {}
    for path, record in records(files, [0]):
        cam = record["camera"]
        if cam not in last_seq or record["seq"] <= last_seq[cam]:
            out.setdefault(cam, []).append(Session(cam, path))
        last_seq[cam] = record["seq"]
        session = out[cam][-1]
        session.last_file = path
        if record.get("time") is not None:
            session.last_time = record["time"]
    return out


def place(found: dict[str, list[Session]], backend: Backend, root: str) -> int:
    """Give every session its run and origin, creating the runs' rows; returns how many."""
    logged = sorted(RunLog(root).read(), key=lambda run: run.started)  # hosts sharing a folder log in any order
    unlogged: list[Session] = []
    for cam, cam_sessions in found.items():
        known = [(run.key, o) for run in logged for o in run.origins.get(cam, [])]
        k = min(len(known), len(cam_sessions))
        for session, (key, origin) in zip(cam_sessions[len(cam_sessions) - k:], known[len(known) - k:]):
            session.key, session.origin = key, origin
        unlogged += cam_sessions[:len(cam_sessions) - k]
    ids: dict[str | None, int] = {}
    for s in unlogged:
        s.origin = os.stat(s.last_file).st_mtime - (s.last_time or 0.0)
    if unlogged:
        ids[None] = backend.begin_run(min(s.origin for s in unlogged if s.origin is not None), None, None)
    for run in logged:
        ids[run.key] = backend.begin_run(run.started, run.config, run.host)
    for cam_sessions in found.values():
        for s in cam_sessions:
            s.run = ids[s.key]
    return len(ids)


def rebuild(out: OutputsConfig, backend: Backend) -> Rebuilt:
    """Fill `backend` (an empty store) from the JSON lines in `out.dir`."""
    files = jsonl_files(out)
    found = sessions(files)
    runs = place(found, backend, out.dir)
    builders: dict[int, RowBuilder] = {}
    index = {cam: -1 for cam in found}
    last_seq: dict[str, int] = {}
    bad, n = [0], 0
    for _, record in records(files, bad):
        cam = record["camera"]
        if cam not in last_seq or record["seq"] <= last_seq[cam]:
            if index[cam] >= 0:  # the camera's session before ended there, as the live writer heard
                ended = builders[found[cam][index[cam]].run]  # type: ignore[index]
                ended.end_camera(cam)
                backend.write(ended.take())
            index[cam] += 1
        last_seq[cam] = record["seq"]
        session = found[cam][index[cam]]
        assert session.run is not None and session.origin is not None
        builder = builders.setdefault(session.run, RowBuilder(session.run, out.dir, os.path.exists))
        builder.add(record, session.origin)
        n += 1
        if n % FLUSH_RECORDS == 0:
            for b in builders.values():
                backend.write(b.take())
    for b in builders.values():
        for cam in list(b.cameras):
            b.end_camera(cam)
        backend.write(b.take())
    return Rebuilt(runs, n, bad[0])
