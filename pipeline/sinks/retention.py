"""Keeps an output folder within a disk budget and an age, for cameras that run for months.

What can go: finished files (video and JSON lines segments, event snapshots and clips),
oldest first, until the folder is under `max_bytes` and nothing is older than
`max_age_s`. Never a file still being written (`is_open`), never anything but the kinds
of file the run writes. Every removal is counted (files, bytes) for the summary and the
metrics. A sweep runs on a thread of its own every `interval_s`, off the frame path.
"""
from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass
from typing import Callable

log = logging.getLogger("pipeline.retention")

KINDS = (".mp4", ".mkv", ".mov", ".m4v", ".webm", ".ts", ".jsonl", ".jpg", ".jpeg")


@dataclass
class RetentionStats:
    removed_files: int = 0
    removed_bytes: int = 0
    kept_bytes: int = 0  # after the last sweep


class Retention:
    def __init__(self, root: str, max_bytes: int | None, max_age_s: float | None,
                 is_open: Callable[[str], bool] = lambda path: False, interval_s: float = 10.0):
        self.root = root
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
        for folder, _, names in os.walk(self.root):
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
            total = sum(size for _, size, _ in files)
            removed, freed = [], 0
            for mtime, size, path in files:
                too_old = self.max_age_s is not None and now - mtime > self.max_age_s
                too_big = self.max_bytes is not None and total > self.max_bytes
                if not (too_old or too_big) or self.is_open(path):
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
