"""The lock of a SQLite store file, apart from its output folder's: `store.db.lock` beside
it, held with `flock`. Its output folder's lock does not cover it: `outputs.store.path`
may be absolute (two configs naming one store), and `pipeline store rebuild --to` names
any file.

A run writing into the store holds it shared: runs of several folders, or a cluster's
hosts, write one store together through SQLite's own locking. A rebuild holds it
exclusive while it builds the store again and moves it into place (the start-up rebuild
of a damaged store, `pipeline store rebuild`): a rebuild never replaces a store a run is
writing, and a run never opens one being rebuilt; either is refused with one line naming
the holder's pid (`/proc/locks`). The OS drops the lock when its process dies. The lock
file stays: removed, a second holder could lock a new file beside the first's.
"""
from __future__ import annotations

import fcntl
import os
from dataclasses import dataclass

from pipeline.errors import one_line
from pipeline.store.tables import StoreError

SUFFIX = ".lock"
PROC_LOCKS = "/proc/locks"


@dataclass
class StoreLock:
    path: str  # the store's file (the lock is `path + SUFFIX`)
    fd: int | None = None

    def take(self, exclusive: bool) -> None:
        """Hold the lock shared (a run) or exclusive (a rebuild), or convert the one held;
        `StoreError` naming the holder where another process holds it the other way."""
        if self.fd is None:
            try:
                os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)  # a store's first run
                # beside the file a link names: a store reached through a link is the same store
                self.fd = os.open(os.path.realpath(self.path) + SUFFIX, os.O_RDWR | os.O_CREAT, 0o644)
            except OSError as e:
                raise StoreError(f"{self.path}{SUFFIX}: the store's lock cannot be taken: {one_line(e)}") from None
        try:
            fcntl.flock(self.fd, (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB)
        except BlockingIOError:
            readers, writers = holders(self.fd)
            self.release()
            if writers or not exclusive:  # a shared lock waits only on an exclusive one
                raise StoreError(f"{self.path}: the store is being rebuilt (pid {pids(writers)}); "
                                 "start again once the rebuild has ended") from None
            raise StoreError(f"{self.path}: the store is in use by a run writing into it (pid {pids(readers)}); "
                             "rebuild it once that run has ended") from None

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)  # closing releases the lock
            self.fd = None


def pids(found: list[int]) -> str:
    return ", ".join(map(str, found)) if found else "?"


def holders(fd: int) -> tuple[list[int], list[int]]:
    """The other processes holding the lock file `fd` is open on: (shared, exclusive), as
    the kernel lists them (none where `/proc/locks` cannot be read)."""
    st = os.fstat(fd)
    key = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    readers: list[int] = []
    writers: list[int] = []
    try:
        with open(PROC_LOCKS) as f:
            lines = f.readlines()
    except OSError:
        return readers, writers
    for line in lines:
        fields = line.split()  # "1: FLOCK  ADVISORY  READ 8174 fe:00:2146450 0 EOF"; "->" marks a waiter
        if key not in fields or "->" in fields or "FLOCK" not in fields:
            continue
        at = fields.index(key)
        pid = int(fields[at - 1])
        if pid != os.getpid():
            (writers if fields[at - 2] == "WRITE" else readers).append(pid)
    return readers, writers
