"""One malloc arena for the whole process (glibc), set as the package is imported.

glibc gives each thread that allocates an arena of its own (up to eight per core), and
an arena keeps what was freed into it for its own thread's later use. The run's threads
pass frames along (decoded in a camera's thread, freed in the sink's) and the sink opens
a new encoder at every segment, so each arena grew in its own steps: RSS rose with the
segments written though nothing leaked (Python's own allocations stayed flat under
tracemalloc; the growth was free memory held in the arenas). With one arena, what any
thread frees serves every other, and RSS stays flat (the README's months-of-running
figure). It must be set before a second thread allocates: glibc fixes its arena limit
then. `MALLOC_ARENA_MAX` in the environment, read by glibc itself, is left to rule.
"""
from __future__ import annotations

import ctypes
import os

M_ARENA_MAX = -8  # mallopt's parameter number for the arena limit (glibc's malloc.h)


def one_arena() -> bool:
    """Limit malloc to its main arena; False where that is not glibc, or the environment decides."""
    if "MALLOC_ARENA_MAX" in os.environ:
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # not glibc (musl, macOS): their allocators work otherwise
        return False
    return bool(mallopt(M_ARENA_MAX, 1))
