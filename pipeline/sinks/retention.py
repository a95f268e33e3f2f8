"""Keeps an output folder within a disk budget and an age, for cameras that run for months.

What can go: finished files (video and JSON lines segments, event snapshots and clips),
oldest first, until the folder is under `max_bytes` and nothing is older than
`max_age_s`. Never a file still being written (`is_open`), never anything but the kinds
of file the run writes, never the newest of a camera's time-named segments (the one being
written, whichever process writes it: on a cluster each host's retention sees the whole
folder but knows only its own open files). Every removal is counted (files, bytes) for the summary and the
metrics. A sweep runs on a thread of its own every `interval_s`, off the frame path.
Folders in `skip` are another retention's (the event evidence under `events/`).
`OutputRetention` is a run's: one for the videos and JSON lines, one for `events/`.
"""
from __future__ import annotations

import logging
import os
import re
import threading
import time
from typing import Callable, Iterable

from pipeline.config import OutputsConfig
from pipeline.config.outputs import RetainConfig
from pipeline.metrics.registry import Metrics
from pipeline.metrics.snapshot import RetentionStats
from pipeline.sinks.segments import STAMP_RE

log = logging.getLogger("pipeline.retention")

KINDS = (".mp4", ".mkv", ".mov", ".m4v", ".webm", ".ts", ".jsonl", ".jpg", ".jpeg")


class Retention:
    def __init__(self, root: str, max_bytes: int | None, max_age_s: float | None,
                 is_open: Callable[[str], bool] = lambda path: False, interval_s: float = 10.0,
                 skip: tuple[str, ...] = ()):
        self.root = root
        self.skip = {os.path.abspath(p) for p in skip}
        self.max_bytes = max_bytes
        self.max_age_s = max_age_s
        self.is_open = is_open
        self.interval_s = interval_s
        self.stats = RetentionStats()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def _files(self) -> list[tuple[float, int, str]]:
        """(modification time, size, path) of every file of a kind the run writes."""
        found = []
        for folder, subfolders, names in os.walk(self.root):
            subfolders[:] = [d for d in subfolders if os.path.abspath(os.path.join(folder, d)) not in self.skip]
            for name in names:
                if not name.lower().endswith(KINDS):
                    continue
                path = os.path.join(folder, name)
                try:
                    st = os.stat(path)
                except FileNotFoundError:
                    continue
                found.append((st.st_mtime, st.st_size, path))
        return sorted(found)

    def sweep(self, now: float | None = None) -> list[str]:
        """Remove what is over the budget, oldest first; the paths removed."""
        now = time.time() if now is None else now
        with self._lock:
            files = self._files()
            newest = newest_segments(path for _, _, path in files)
            total = sum(size for _, size, _ in files)
            removed, freed = [], 0
            for mtime, size, path in files:
                too_old = self.max_age_s is not None and now - mtime > self.max_age_s
                too_big = self.max_bytes is not None and total > self.max_bytes
                if not (too_old or too_big) or path in newest or self.is_open(path):
                    continue
                try:
                    os.remove(path)
                except FileNotFoundError:
                    pass
                except OSError as e:
                    log.warning("retention: cannot remove %s: %s", path, e.strerror or e)
                    continue
                total -= size
                freed += size
                removed.append(path)
                self.stats.removed_files += 1
                self.stats.removed_bytes += size
            self.stats.kept_bytes = total
        if removed:
            log.info("retention: removed %d file(s) (%.1f MB) to stay within the budget", len(removed), freed / 1e6)
        return removed

    def start(self) -> None:
        if self._thread is None and (self.max_bytes is not None or self.max_age_s is not None):
            self._thread = threading.Thread(target=self._loop, name="retention", daemon=True)
            self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sweep()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)


EVENTS = "events"


def newest_segments(paths: Iterable[str]) -> set[str]:
    """The newest file of each series of time-named segments (same name but the stamp)."""
    newest: dict[str, str] = {}
    for path in paths:
        found = re.search(STAMP_RE, os.path.basename(path))
        if found:
            key = os.path.join(os.path.dirname(path), re.sub(STAMP_RE, "", os.path.basename(path)))
            newest[key] = max(newest.get(key, path), path)
    return set(newest.values())


class OutputRetention:
    """A run's retentions: `outputs.retain` over the videos and JSON lines (never an open
    file: `is_open`), `outputs.events.retain` over `events/`; their counts go into the
    metrics (`snapshot().retention`). Swept four times per time segment (every second
    at most, every minute at least: a sweep stats every file of the folder), so the folder
    exceeds its budget by about a segment at most."""

    def __init__(self, outputs: OutputsConfig, is_open: Callable[[str], bool], metrics: Metrics):
        events = os.path.join(outputs.dir, EVENTS)
        length = outputs.video.segment_s or 3600.0
        interval = min(60.0, max(1.0, length / 4))
        self.parts: list[Retention] = []
        for name, retain, root, skip in (("outputs", outputs.retain, outputs.dir, (events,)),
                                         ("events", outputs.events.retain, events, ())):
            if retain is not None and (retain.max_gb is not None or retain.max_days is not None):
                part = Retention(root, *limits(retain), is_open=is_open, interval_s=interval, skip=skip)
                metrics.retention[name] = part.stats
                self.parts.append(part)

    def start(self) -> None:
        for part in self.parts:
            part.start()

    def close(self) -> None:
        for part in self.parts:
            part.close()


def limits(retain: RetainConfig) -> tuple[int | None, float | None]:
    """(bytes, seconds) of a `retain` record."""
    return (None if retain.max_gb is None else int(retain.max_gb * 1e9),
            None if retain.max_days is None else retain.max_days * 86400)
