"""What this machine can hold: the bound on every count a config or a request sets.

A count no machine could run (5,000 decode threads for one camera, 100,000 cameras) used
to start anyway and freeze every camera; now it is refused when the config is read (exit
2) or when a camera is added over HTTP (400), naming the limit and where it comes from:
`sources[0].thread_count: 5000 is over the limit of 16 (...)`. Limits that follow the
machine are read from it (visible cores, the memory this process may use, the threads
the system lets it start); the others are fixed far beyond any real use.
"""
from __future__ import annotations

import functools
import os
import resource
from dataclasses import dataclass
from typing import Any, Callable

Check = Callable[[Any], "str | None"]

CAMERA_BYTES = 32 * 2**20  # the least a camera holds (decoder, its lane, encoder, outputs) at small sizes
THREADS_PER_CAMERA = 2  # its reader and its encoder, besides any extra decode threads
FIXED_THREADS = 64  # the stages, engines, servers and libraries besides the cameras, at most
DECODE_THREADS = 16  # FFmpeg's own most when it picks (thread_count 0)
LINES = ZONES = 256  # per camera: each one is checked against every track on every frame
POINTS = 1024  # of a zone's polygon
FRAMES_QUEUED = 256  # frames one lane or stage queue may hold (a 1080p frame is 6 MB)
EVENTS_BUFFERED = 1_000_000  # events an event destination keeps while it is away (about 1 kB each)
CLIP_S = 600.0  # seconds before or after an event in its clip
MAX_BATCH = 1024  # items in one batch, batches in flight: each holds a model input


def visible_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _first_int(*paths: str) -> int | None:
    for path in paths:
        try:
            with open(path) as f:
                text = f.read().split()[0]
        except (OSError, IndexError):
            continue
        if text.isdigit():
            return int(text)
    return None


@dataclass(frozen=True)
class Machine:
    cores: int
    memory: int  # bytes this process may use: the machine's memory, or its cgroup's limit
    threads: int  # threads the system lets this process start

    @property
    def decode_threads(self) -> int:
        """Threads of one camera's decoder (or one engine): more than the cores gain nothing."""
        return max(DECODE_THREADS, self.cores)

    @property
    def thread_budget(self) -> int:
        """The threads the process may plan for: half of what the system allows (the rest
        of the machine runs too)."""
        return self.threads // 2

    def cameras(self, clip_bytes: int = 0) -> int:
        """The most cameras this process can hold: each holds at least `CAMERA_BYTES`
        (and its clip ring, `clip_bytes`), in half the memory."""
        return max(1, self.memory // 2 // (CAMERA_BYTES + clip_bytes))


@functools.cache
def machine() -> Machine:
    with open("/proc/meminfo") as f:
        total = next(int(line.split()[1]) * 1024 for line in f if line.startswith("MemTotal:"))
    cgroup = _first_int("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes")
    soft, _ = resource.getrlimit(resource.RLIMIT_NPROC)
    threads = [t for t in (_first_int("/proc/sys/kernel/threads-max"), _first_int("/proc/sys/kernel/pid_max"),
                           _first_int("/sys/fs/cgroup/pids.max"), None if soft == resource.RLIM_INFINITY else soft)
               if t]
    return Machine(visible_cores(), min(total, cgroup or total), min(threads, default=32768))


def camera_threads(decode_threads: int) -> int:
    """Threads a camera brings: its reader and encoder, and its decoder's extra threads
    (0: FFmpeg picks, up to one per core)."""
    extra = machine().cores if decode_threads == 0 else decode_threads - 1
    return THREADS_PER_CAMERA + extra


def over(value: float, limit: float, why: str) -> str:
    return f"{value:g} is over the limit of {limit:g} ({why})"


def at_most(limit: float | Callable[[], float], why: str | Callable[[], str], then: Check | None = None) -> Check:
    """A field check: `then` (the field's own check) and at most `limit`."""
    def check(v: Any) -> str | None:
        first = then(v) if then is not None else None
        n = limit() if callable(limit) else limit
        return first or (None if v <= n else over(v, n, why() if callable(why) else why))
    return check


def camera_problems(cameras: int, threads: int, clip_bytes: int) -> str | None:
    """Why this many cameras, bringing this many threads, cannot run here (None: they can)."""
    m = machine()
    most = m.cameras(clip_bytes)
    if cameras > most:
        clips = f" and its clip ring, {clip_bytes / 2**20:g} MiB" if clip_bytes else ""
        return (f"{cameras} cameras are over the limit of {most} (each holds at least {CAMERA_BYTES // 2**20} MiB"
                f"{clips}, in half of this machine's {m.memory / 2**30:.1f} GiB)")
    if threads + FIXED_THREADS > m.thread_budget:
        return (f"the cameras' {threads} threads are over the limit of {m.thread_budget - FIXED_THREADS} (half of the "
                f"{m.threads} threads this system allows, less {FIXED_THREADS} for the rest of the run)")
    return None
