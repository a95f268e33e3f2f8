"""A stand-in for `pipeline.engines.engine.Engine` where the model is not the point: it
implements the stages' `InferenceEngine` protocol (in-flight credits, idle-worker signals,
completion callbacks) with outputs computed by a function of the batch and a controllable
time per batch (a number, or a function of the batch size: a cost model), run on
`workers` threads of its own."""
from __future__ import annotations

import threading
import time
from typing import Callable

import numpy as np

from pipeline.engines.protocol import DoneCallback, EngineClosed

Outputs = Callable[[np.ndarray], list[np.ndarray]]


class FakeEngine:
    def __init__(self, outputs: Outputs, item_shape: tuple[int, int, int] = (3, 8, 8), max_inflight: int = 2,
                 delay: float | Callable[[int], float] = 0.0, workers: int = 1):
        self.outputs = outputs
        self.item_shape = item_shape
        self.max_inflight = max_inflight
        self.delay = delay
        self.workers = workers              # runs at once; more wait for a worker
        self._running = 0
        self._listeners: list[Callable[[], None]] = []
        self._slots = threading.Semaphore(workers)
        self.batches: list[int] = []          # sizes of the batches run, in submission order
        self.submitted_at: list[float] = []   # when each batch was submitted
        self.max_seen = 0
        self._inflight = 0
        self._cond = threading.Condition()
        self._closed = False

    def wait_ready(self, timeout: float | None = None) -> bool:
        with self._cond:
            ready = self._cond.wait_for(lambda: self._inflight < self.max_inflight or self._closed, timeout)
            if self._closed:
                raise EngineClosed("fake")
            return ready

    def has_idle_worker(self) -> bool:
        return self._running < self.workers

    def on_free(self, listener: Callable[[], None]) -> None:
        self._listeners.append(listener)

    def submit(self, tensors: list, done: DoneCallback, context: object = None) -> None:
        with self._cond:
            self._cond.wait_for(lambda: self._inflight < self.max_inflight or self._closed)
            if self._closed:
                raise EngineClosed("fake")
            self._inflight += 1
            self._running += 1  # counted at once: a run waiting for a worker makes none idle
            self.max_seen = max(self.max_seen, self._inflight)
            self.batches.append(len(tensors))
            self.submitted_at.append(time.perf_counter())
        batch = np.stack([t if isinstance(t, np.ndarray) else t.numpy() for t in tensors])
        threading.Thread(target=self._run, args=(batch, done, context), daemon=True).start()

    def _run(self, batch: np.ndarray, done: DoneCallback, context: object) -> None:
        with self._slots:
            time.sleep(self.delay(len(batch)) if callable(self.delay) else self.delay)
            outputs = self.outputs(batch)
        with self._cond:
            self._running -= 1
        for listener in self._listeners:
            listener()
        done([(len(batch), outputs)], None, context)

    def consumed(self) -> None:
        with self._cond:
            self._inflight -= 1
            self._cond.notify_all()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
