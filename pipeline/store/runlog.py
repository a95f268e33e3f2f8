"""The store's record of its runs, beside the JSON lines in `outputs.dir` (`.store_runs`):
what a rebuild needs that the JSON lines do not say, because a file run's lines depend on
its files only. A line per run as it begins (`{"run": key, "started", "host", "config"}`)
and a line per camera as the store first sees it in that run (`{"run": key, "camera",
"origin"}`: the wall clock at the camera's time 0, so a frame's wall time is origin plus
its `time`). Lines are appended whole, as they happen (a kill keeps them); one that
cannot be written (a full disk) is said once and left out: the store's own rows do not
depend on it, only a later rebuild's wall times, which then fall back to the files' own.
"""
from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
import uuid
from dataclasses import dataclass, field

log = logging.getLogger("pipeline.store")

RUNLOG = ".store_runs"


@dataclass
class LoggedRun:
    key: str
    started: float
    host: str | None = None
    config: str | None = None
    origins: dict[str, list[float]] = field(default_factory=dict)  # camera -> its origins in this run, in order


class RunLog:
    def __init__(self, root: str):
        self.path = os.path.join(root, RUNLOG)
        self._failed = False

    def begin(self, key: str, started: float, host: str, config: str | None) -> None:
        self._append({"run": key, "started": started, "host": host, "config": config})

    def origin(self, key: str, camera: str, origin: float) -> None:
        self._append({"run": key, "camera": camera, "origin": origin})

    def _append(self, entry: dict) -> None:
        line = (json.dumps(entry, separators=(",", ":")) + "\n").encode("utf-8")
        try:
            os.makedirs(os.path.dirname(self.path), exist_ok=True)  # before the run's first file
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            try:
                os.write(fd, line)  # one small write to a file opened for appending: whole or not at all
            finally:
                os.close(fd)
        except OSError as e:
            if not self._failed:
                self._failed = True
                log.error("store: %s cannot be written (%s): a rebuild will take wall times from the files",
                          self.path, e.strerror or e)

    def read(self) -> list[LoggedRun]:
        """The runs logged, in the order they began; lines that are not sound are skipped."""
        runs: dict[str, LoggedRun] = {}
        try:
            with open(self.path, encoding="utf-8", errors="replace") as f:
                lines = f.readlines()
        except FileNotFoundError:
            return []
        for line in lines:
            try:
                entry = json.loads(line)
                key = str(entry["run"])
                if "started" in entry:
                    runs[key] = LoggedRun(key, float(entry["started"]), entry.get("host"), entry.get("config"))
                elif key in runs:
                    runs[key].origins.setdefault(str(entry["camera"]), []).append(float(entry["origin"]))
            except (ValueError, KeyError, TypeError):
                continue  # a torn or hand-edited line
        return list(runs.values())


class ClockLog:
    """The run log of a run with the store off: the run and its cameras' clocks, no rows.
    A later `pipeline store rebuild` (or a store turned on again) then tells this run's
    JSON lines from those of the runs the store holds, each with its own clock; without
    it a rebuild gave an earlier run's rows this run's lines. Offered every frame's record
    by the sink as the store's writer is; only a camera's first frame of a clock writes."""

    def __init__(self, root: str, config: str | None = None):
        self.log = RunLog(root)
        self.key = uuid.uuid4().hex
        self.config = config
        self.origins: dict[str, float] = {}
        self._begun = False
        self._lock = threading.Lock()  # sink workers offer from threads of their own

    def offer(self, record: dict, captured: float | None = None) -> None:
        cam, t = record["camera"], record.get("time")
        if t is None or cam in self.origins:
            return
        with self._lock:
            if not self._begun:
                self._begun = True
                self.log.begin(self.key, time.time(), socket.gethostname(), self.config)
            origin = self.origins[cam] = (time.time() if captured is None else captured) - t
            self.log.origin(self.key, cam, origin)

    def camera_ended(self, cam: str) -> None:
        self.origins.pop(cam, None)  # a camera that returns starts on a new clock
