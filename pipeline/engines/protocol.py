"""What the stages need from an engine, and nothing more: the `Engine` implements it over
ONNX Runtime, the tests' fake engine over a function of the batch."""
from __future__ import annotations

from typing import Callable, Protocol

import numpy as np

from pipeline.engines.batching import Input

Chunks = list[tuple[int, list[np.ndarray]]]  # (real items, outputs) per piece, in input order
DoneCallback = Callable[[Chunks | None, BaseException | None, object], None]


class EngineClosed(Exception):
    """The engine was closed (abort): whoever waits to submit should stop."""


class InferenceEngine(Protocol):
    """Asynchronous submission with in-flight credits.

    `submit` returns as soon as the batch is handed over; at most `max_inflight` batches
    are in flight (submit waits beyond that: that is the backpressure). Completion calls
    `done` on an engine thread, which must only hand the result on. A batch counts as in
    flight until its consumer calls `consumed()` after taking the result, so hand-over
    queues hold at most `max_inflight` results and a completion callback never blocks.
    """

    max_inflight: int

    def wait_ready(self, timeout: float | None = None) -> bool:
        """Wait until a batch could be submitted without waiting (True), or `timeout` passes."""
        ...

    def has_idle_worker(self) -> bool:
        """A batch submitted now would start at once."""
        ...

    def on_free(self, listener: Callable[[], None]) -> None:
        """Call `listener` (cheap, non-blocking) whenever a run ends and its worker frees up."""
        ...

    def submit(self, tensors: list[Input], done: DoneCallback, context: object = None) -> None: ...

    def consumed(self) -> None: ...

    def close(self) -> None: ...
