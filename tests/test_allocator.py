"""The run's threads share one malloc arena: with an arena per thread, each kept what was
freed into it and RSS rose in steps with the segments written, though nothing leaked."""
import os
import subprocess
import sys

from conftest import ROOT

THREADS_ALLOCATE = """
import ctypes, sys, threading
import pipeline  # noqa: F401  (what the CLI, the library and a cluster's hosts import first)
import numpy as np

start = threading.Barrier(8)

def frames():
    start.wait()
    for _ in range(100):
        np.ones(2**20 // 8 + 1000)  # a frame-sized buffer, allocated and freed by this thread

threads = [threading.Thread(target=frames) for _ in range(8)]
[t.start() for t in threads]
[t.join() for t in threads]
sys.stderr.flush()
ctypes.CDLL(None).malloc_stats()  # glibc: one "Arena N:" block per arena, on stderr
"""


def test_threads_allocating_at_once_share_one_arena():
    env = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"}
    r = subprocess.run([sys.executable, "-c", THREADS_ALLOCATE], capture_output=True, text=True, cwd=ROOT,
                       env={**env, "PYTHONPATH": str(ROOT)}, timeout=60)
    assert r.returncode == 0, r.stderr
    assert [line for line in r.stderr.splitlines() if line.startswith("Arena ")] == ["Arena 0:"], r.stderr
