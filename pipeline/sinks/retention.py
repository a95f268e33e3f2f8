"""Keeps what the run writes within a disk budget and an age, for cameras that run for months.

What may go, and nothing else: a file that the run's record (`WrittenIndex`, the
folder's `.written`) says one of its writers created, for a camera this run has
(configured, or added while running), whose name is one that camera's outputs take
(`names`: its video and JSON lines file names, with their segment stamps and part
numbers; under `events/<camera>/`, its snapshots and clips), that is a plain file
(never a symlink, never followed) and lies inside the folder once every link on the way
is resolved: the rule the store's rows and removals keep too (`store.paths`). Of those, the oldest go first until what remains is under `max_bytes`, and
any older than `max_age_s`; never a file still being written (`is_open`), never the
newest of a camera's time-named segments (the one being written, whichever process
writes it: on a cluster each host's retention sees the whole record but knows only its
own open files). A file of the same name that someone else put there, another camera's
files, the user's own files: all stay, and none counts against the budget. Every
removal is counted (files, bytes) for the summary and the metrics. A sweep runs on a
thread of its own every `interval_s`, off the frame path. `OutputRetention` is a run's:
one for the videos and JSON lines, one for `events/`.
"""
from __future__ import annotations

import logging
import os
import re
import stat
import threading
import time
from typing import Callable, Iterable, Mapping

from pipeline.config import OutputsConfig
from pipeline.config.outputs import RetainConfig, stamped
from pipeline.metrics.registry import Metrics
from pipeline.metrics.snapshot import RetentionStats
from pipeline.recording.segments import STAMP_RE, stamp_order
from pipeline.sinks.written import SHARED, WrittenIndex
from pipeline.store.paths import EVENTS, is_evidence, path_problem

log = logging.getLogger("pipeline.retention")

Owns = Callable[[str, str], bool]  # (path relative to the index's folder, camera) -> may this retention remove it


class Retention:
    def __init__(self, root: str, index: WrittenIndex, owns: Owns, max_bytes: int | None, max_age_s: float | None,
                 is_open: Callable[[str], bool] = lambda path: False, interval_s: float = 10.0,
                 on_removed: Callable[[list[str]], None] | None = None):
        self.root = root
        self.index = index
        self.owns = owns
        self.max_bytes = max_bytes
        self.max_age_s = max_age_s
        self.is_open = is_open
        self.interval_s = interval_s
        self.on_removed = on_removed  # the files gone (relative to the index's folder): the store forgets them
        self.stats = RetentionStats()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def _files(self) -> list[tuple[float, int, str]]:
        """(modification time, size, path) of every file this retention may remove, oldest first."""
        found, gone = [], []
        for relative, camera in self.index.entries().items():
            # inside the output folder, not this part's (a link under it, `events`, leads out)
            if not self.owns(relative, camera) or path_problem(self.index.root, relative) is not None:
                continue
            path = os.path.join(self.index.root, relative)
            try:
                st = os.lstat(path)
            except FileNotFoundError:
                gone.append(relative)  # removed by someone else: forgotten
                continue
            if stat.S_ISREG(st.st_mode):
                found.append((st.st_mtime, st.st_size, path))
        self.index.removed(gone)
        if gone and self.on_removed is not None:
            self.on_removed(gone)
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
            relatives = [os.path.relpath(p, self.index.root) for p in removed]
            self.index.removed(relatives)
            if relatives and self.on_removed is not None:
                self.on_removed(relatives)
            self.index.compact()
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
        """Stop sweeping, after a last sweep: the run's files are finished now, so the budget
        holds when the run ends and the counts reported (`kept_bytes`) are the folder's."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
            self.sweep()


def newest_segments(paths: Iterable[str]) -> set[str]:
    """The newest file of each series of time-named segments (same name but the stamp)."""
    newest: dict[str, tuple[tuple[str, int], str]] = {}
    for path in paths:
        found = re.search(STAMP_RE, os.path.basename(path))
        if found:
            key = os.path.join(os.path.dirname(path), re.sub(STAMP_RE, "", os.path.basename(path)))
            newest[key] = max(newest.get(key, (stamp_order(found.group()), path)), (stamp_order(found.group()), path))
    return {path for _, path in newest.values()}


def template_names(template: str, camera: str) -> str:
    """A pattern of the relative paths a file name template gives a camera's files: any
    segment stamp for `{start}`, and the part number a resolution change adds."""
    stem, ext = os.path.splitext(template)
    return (re.escape(stem.format(camera=camera, start="\0")).replace("\0", STAMP_RE) + r"(?:\.part\d+)?"
            + re.escape(ext))


def names(outputs: OutputsConfig, camera: str, recording: str | None = None) -> re.Pattern:
    """The relative paths of the files a camera's outputs write (SHARED: the JSON lines
    file all cameras share), as written, with and without segment stamps; `recording`:
    the file name of the camera's recording, which is always time-named."""
    templates = [] if recording is None else [stamped(recording)]
    if outputs.video.enabled and camera != SHARED:
        templates.append(outputs.video.filename)
    if outputs.jsonl.enabled and ("{camera}" in outputs.jsonl.filename) == (camera != SHARED):
        templates.append(outputs.jsonl.filename)
    patterns = [template_names(t, camera) for template in templates for t in (template, stamped(template))]
    return re.compile("|".join(patterns) or r"(?!)")


class OutputRetention:
    """A run's retentions: `outputs.retain` over the videos and JSON lines (never an open
    file: `is_open`), `outputs.events.retain` over `events/`, each over the files the
    run's record holds for `cameras` (those the run has, each with its recording's file
    name, or None without a recording); their counts go into the
    metrics (`snapshot().retention`). Swept four times per time segment of the shortest
    segments any output writes (the annotated video's or the recordings': every second at
    most, every minute at least), so the folder exceeds its budget by about a segment at
    most. The files removed are handed to `on_removed` (the store forgets them) in the
    same sweep."""

    def __init__(self, outputs: OutputsConfig, is_open: Callable[[str], bool], metrics: Metrics,
                 index: WrittenIndex, cameras: Callable[[], Mapping[str, str | None]],
                 on_removed: Callable[[list[str]], None] | None = None):
        self.outputs = outputs
        self.cameras = cameras
        self._names: dict[tuple[str, str | None], re.Pattern] = {}
        lengths = [outputs.video.segment_s] + ([outputs.record.segment_s] if outputs.record.enabled else [])
        interval = min(60.0, max(1.0, min([s for s in lengths if s] or [3600.0]) / 4))
        self.parts: list[Retention] = []
        for name, retain, root, owns in (("outputs", outputs.retain, outputs.dir, self._owns_output),
                                         ("events", outputs.events.retain, os.path.join(outputs.dir, EVENTS),
                                          self._owns_evidence)):
            if retain is not None and (retain.max_gb is not None or retain.max_days is not None):
                part = Retention(root, index, owns, *limits(retain), is_open=is_open, interval_s=interval,
                                 on_removed=on_removed)
                metrics.retention[name] = part.stats
                self.parts.append(part)

    def _owns_output(self, relative: str, camera: str) -> bool:
        written = self.cameras()
        if camera != SHARED and camera not in written:
            return False
        key = (camera, written.get(camera))
        if key not in self._names:
            self._names[key] = names(self.outputs, *key)
        return self._names[key].fullmatch(relative) is not None

    def _owns_evidence(self, relative: str, camera: str) -> bool:
        return is_evidence(relative, camera) and camera in self.cameras()

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
