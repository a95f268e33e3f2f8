"""A camera that may run on more than one machine in turn (a cluster) writes under a lease:
`Lease` is a small file per camera in `outputs.dir/.leases/` holding the epoch of the
writer that owns its outputs. The driver grants a new epoch before a camera moves (and
before its outputs are cut back to where it resumes); every writer checks its epoch
before each write reaches the disk (JSON lines at each flush, video at each fragment),
so a host that was only presumed dead (hung, cut off) never writes again when it wakes."""
from __future__ import annotations

import os

LEASES = ".leases"


class Fenced(Exception):
    """The camera's lease moved to another writer: this one must not write again."""


class Lease:
    """A writer's claim on one camera's outputs: valid while the lease file holds its epoch."""

    def __init__(self, folder: str, camera: str, epoch: int):
        self.path = lease_path(folder, camera)
        self.epoch = epoch

    @staticmethod
    def grant(folder: str, camera: str) -> int:
        """The next epoch of `camera`'s outputs, written atomically (a reader sees the old
        file or the new one, never a torn one); earlier writers are fenced from now on."""
        path = lease_path(folder, camera)
        epoch = read_epoch(path) + 1
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            f.write(str(epoch))
        os.replace(tmp, path)
        return epoch

    def check(self) -> None:
        """Raise `Fenced` when another writer holds the camera now. Read every time (a
        write happens about once a second per output): a cached inode could be reused."""
        holder = read_epoch(self.path)
        if holder != self.epoch:
            raise Fenced(f"lease {self.epoch} of {self.path} was taken over (epoch {holder})")


def lease_path(folder: str, camera: str) -> str:
    return os.path.join(folder, LEASES, f"{camera}.lease")


def read_epoch(path: str) -> int:
    try:
        with open(path) as f:
            return int(f.read().strip() or 0)
    except (FileNotFoundError, ValueError):
        return 0
