"""The record of what the run wrote in its output folder: retention removes nothing else.

`WrittenIndex` is one small file per output folder, `.written`: a JSON line per file a
camera's writers created (`{"camera": ..., "path": <relative to the folder>}`, added
as soon as the file exists, so a crash or kill keeps it) and one per file retention
removed (`{"removed": <path>}`). It survives restarts: a later run removes the old
segments of its cameras, never a file of the same name that someone else put there.
Every process writing the folder (a cluster's hosts) appends whole lines under an
advisory lock (`flock`); when the removed entries outnumber the live ones the file is
rewritten without them (atomically, under the same lock: a reader sees the old file
or the new one). A line torn by a full disk is cut back off (`append_whole`), and a
line that cannot be written waits for the next one. A record that cannot be read (a
folder, a lost permission) holds nothing, said once: retention then removes nothing; a
line that is not a sound entry (hand-edited, corrupt, a path with a NUL) is skipped.
"""
from __future__ import annotations

import fcntl
import json
import logging
import os
import threading
from contextlib import contextmanager
from typing import Iterator

from pipeline.sinks.jsonl import append_whole

log = logging.getLogger("pipeline.retention")

INDEX = ".written"
SHARED = ""  # the camera of a file all cameras share (the JSON lines without `{camera}`)
COMPACT_AFTER = 64  # removed entries before a rewrite is worth it (and they outnumber the live ones)


class WrittenIndex:
    def __init__(self, root: str):
        self.root = os.path.abspath(root)
        self.path = os.path.join(self.root, INDEX)
        self._waiting: list[str] = []  # lines a full disk refused: written with the next ones
        self._lock = threading.Lock()
        self._unreadable = False  # said once that the record cannot be read

    def add(self, camera: str, path: str) -> None:
        """`path` was created by one of `camera`'s writers (SHARED: by all of them)."""
        relative = os.path.relpath(os.path.abspath(path), self.root)
        self._append([json.dumps({"camera": camera, "path": relative}, separators=(",", ":"))])

    def removed(self, relatives: list[str]) -> None:
        """These files are gone (removed by retention, or by someone else)."""
        if relatives:
            self._append([json.dumps({"removed": r}, separators=(",", ":")) for r in relatives])

    def entries(self) -> dict[str, str]:
        """The files written and not removed: relative path -> camera."""
        return self._read()[0]

    def compact(self) -> None:
        """Rewrite the index without its removed entries, once they outnumber the live ones."""
        try:
            with self._locked():
                self._rewrite()
        except OSError:
            pass  # the record cannot be opened: `_read` said so

    def _rewrite(self) -> None:
        live, dead = self._read()
        if dead < max(COMPACT_AFTER, len(live)):
            return
        tmp = f"{self.path}.{os.getpid()}.tmp"
        try:
            with open(tmp, "w", encoding="utf-8") as f:
                f.writelines(json.dumps({"camera": c, "path": p}, separators=(",", ":")) + "\n"
                             for p, c in live.items())
            os.replace(tmp, self.path)  # under the old file's lock: appenders wait, then reopen
        except OSError as e:
            log.warning("retention: the index %s could not be rewritten: %s", self.path, e.strerror or e)
            if os.path.exists(tmp):
                os.remove(tmp)

    def _read(self) -> tuple[dict[str, str], int]:
        live: dict[str, str] = {}
        dead = 0
        try:
            with open(self.path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return live, 0
        except OSError as e:
            if not self._unreadable:
                log.warning("retention: the index %s cannot be read (%s): nothing is removed while it cannot",
                            self.path, e.strerror or e)
            self._unreadable = True
            return live, 0
        for raw in data.split(b"\n")[:-1]:  # the last piece has no newline: torn, or empty
            try:
                record = json.loads(raw)
            except (ValueError, RecursionError):  # RecursionError: nested past the decoder's depth
                continue
            if not isinstance(record, dict):
                continue
            if isinstance(record.get("removed"), str):
                dead += live.pop(record["removed"], None) is not None
            elif isinstance(record.get("path"), str) and isinstance(record.get("camera"), str) \
                    and "\0" not in record["path"]:
                live[record["path"]] = record["camera"]
        return live, dead

    def _append(self, lines: list[str]) -> None:
        with self._lock:
            data = "".join(line + "\n" for line in self._waiting + lines).encode("utf-8")
            try:
                with self._locked() as fd:
                    end = os.lseek(fd, 0, os.SEEK_END)
                    if end and os.pread(fd, 1, end - 1) != b"\n":  # a line torn by a crash: ours start anew
                        data = b"\n" + data
                    append_whole(fd, data)
                self._waiting = []
            except OSError as e:
                if not self._waiting:
                    log.warning("retention: the index %s cannot be written (%s): files written meanwhile are "
                                "recorded when it can", self.path, e.strerror or e)
                self._waiting += lines

    @contextmanager
    def _locked(self) -> Iterator[int]:
        """The index file, opened for appending and locked against the folder's other
        writers; the file a rewrite left, if one replaced it while this waited."""
        os.makedirs(self.root, exist_ok=True)
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                if os.stat(self.path).st_ino == os.fstat(fd).st_ino:
                    break
            except FileNotFoundError:
                pass
            os.close(fd)
        try:
            yield fd
        finally:
            os.close(fd)  # the lock goes with it
