"""Dispatcher threads that run engine batches.

On CPU all engines share one pool sized to the cores: the detector and the classifier
then never have more compute threads than there are cores between them (four threads
fighting over two cores measured ~10% slower: more switches, colder caches), and
whichever model has work uses the whole machine. On a GPU each engine gets its own
pool of one, so each session keeps its own thread and CUDA stream.
"""
from __future__ import annotations

import queue
import threading
from typing import Callable


class WorkerPool:
    def __init__(self, name: str, size: int):
        self.name = name
        self.size = size
        self._jobs: queue.Queue[Callable[[], None] | None] = queue.Queue()
        self._threads = [threading.Thread(target=self._work, name=f"{name}-{i}", daemon=True) for i in range(size)]
        for t in self._threads:
            t.start()

    def put(self, job: Callable[[], None]) -> None:
        self._jobs.put(job)

    def _work(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            job()

    def close(self) -> None:
        for _ in self._threads:
            self._jobs.put(None)
        for t in self._threads:
            t.join(timeout=10)
