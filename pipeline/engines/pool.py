"""Dispatcher threads that run engine batches.

On CPU all engines share one pool sized to the cores: the detector and the classifiers
then never have more compute threads than there are cores between them, and whichever
model has work uses the whole machine. On a GPU each engine gets its own pool of one, so
each session keeps its own thread and CUDA stream.

The pool knows whether a job handed to it now would start at once (`has_idle_worker`),
which is what lets a batcher submit a frame immediately instead of holding it for a
fuller batch, and it tells listeners whenever a worker frees up.

Waiting jobs start by priority, then in order: engines later in the graph have the higher
priority, so a free worker finishes the frames already under way (their crops) before it
starts new ones. The work done is the same; frames spend less time half done, and files
read on demand read their next frame only when the frames at hand are through.
"""
from __future__ import annotations

import itertools
import math
import queue
import threading
from typing import Callable


class WorkerPool:
    def __init__(self, name: str, size: int):
        self.name = name
        self.size = size
        self._jobs: queue.PriorityQueue[tuple[float, int, Callable[[], None] | None]] = queue.PriorityQueue()
        self._order = itertools.count()
        self._lock = threading.Lock()
        self._pending = 0  # jobs queued or running
        self._listeners: list[Callable[[], None]] = []
        self._threads = [threading.Thread(target=self._work, name=f"{name}-{i}", daemon=True) for i in range(size)]
        for t in self._threads:
            t.start()

    def put(self, job: Callable[[], None], priority: int = 0) -> None:
        with self._lock:
            self._pending += 1
        self._jobs.put((-priority, next(self._order), job))

    def has_idle_worker(self) -> bool:
        """A job put now would start at once."""
        return self._pending < self.size

    def is_idle(self) -> bool:
        """Nothing queued or running: the whole machine's inference share is free."""
        return self._pending == 0

    def on_free(self, listener: Callable[[], None]) -> None:
        """Call `listener` (cheap, non-blocking) whenever a worker finishes a job."""
        self._listeners.append(listener)

    def _work(self) -> None:
        while True:
            _, _, job = self._jobs.get()
            if job is None:
                return
            try:
                job()
            finally:
                with self._lock:
                    self._pending -= 1
                for listener in self._listeners:
                    listener()

    def close(self) -> None:
        for _ in self._threads:  # after every job still waiting
            self._jobs.put((math.inf, next(self._order), None))
        for t in self._threads:
            t.join(timeout=10)
