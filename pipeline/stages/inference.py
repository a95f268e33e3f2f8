"""The shape shared by the stages around an engine (detect, classify).

A feeding thread forms batches (by the stage's `BatchPolicy`) and submits them; the
engine's completion callback only hands the result over (never blocking: results are
bounded by the engine's in-flight credits); a completion thread gives the credit back,
turns results into finished frames and releases them per camera in sequence order. Items
that need no inference pass through the same completion queue, so order is kept for
them too.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass

from pipeline.engines.batching import BatchPolicy
from pipeline.engines.protocol import Chunks, EngineClosed, InferenceEngine
from pipeline.frames import Item
from pipeline.metrics.registry import Metrics
from pipeline.runtime.queues import BoundedQueue, QueueClosed
from pipeline.runtime.stage import Emit, RunControl
from pipeline.stages.reorder import Reorderer


@dataclass
class BatchDone:
    """An engine finished a batch (its credit is given back when this is taken)."""

    context: object
    result: Chunks | BaseException


@dataclass
class BatchFailed:
    """A batch could not be submitted (e.g. a tensor of the wrong shape); no credit held."""

    context: object
    error: BaseException


@dataclass
class PassThrough:
    """An item that needs no inference here: an end of stream, a frame without crops."""

    item: Item


class InferenceStage:
    def __init__(self, name: str, engine: InferenceEngine, policy: BatchPolicy, metrics: Metrics,
                 control: RunControl, pass_through_room: int):
        self.name = name
        self.engine = engine
        self.policy = policy
        self.metrics = metrics
        self.control = control
        self.emit: Emit = lambda item: None
        self.completions: BoundedQueue = BoundedQueue(f"{name}.done", engine.max_inflight + pass_through_room,
                                                      "block")
        self._reorder = Reorderer()
        self._threads: list[threading.Thread] = []

    def accept(self, item: Item) -> None:
        raise NotImplementedError

    def start(self) -> None:
        for target, suffix in ((self._feed, "feed"), (self._completion_loop, "completion")):
            t = threading.Thread(target=target, name=f"{self.name}-{suffix}", daemon=True)
            self._threads.append(t)
            t.start()

    def stop(self) -> None:
        self.completions.close()

    def join(self, timeout: float | None = None) -> None:
        for t in self._threads:
            t.join(timeout)

    def _feed(self) -> None:
        try:
            self.feed_loop()
        except (QueueClosed, EngineClosed):
            return

    def feed_loop(self) -> None:
        """Form batches and submit them until the stage is aborted."""
        raise NotImplementedError

    def complete(self, context, result: Chunks | BaseException) -> list[Item]:
        """Turn one batch result (or its error) into the frames it finished."""
        raise NotImplementedError

    def credit_back(self) -> None:
        """An in-flight credit was given back (a feeder that waits for one elsewhere is told)."""

    def submit(self, inputs: list, context: object) -> None:
        try:
            self.engine.submit(inputs, self._on_done, context)
        except EngineClosed:
            raise
        except Exception as e:  # e.g. a tensor of the wrong shape: the batch's frames carry the error
            self.completions.put(BatchFailed(context, e))

    def pass_through(self, item: Item) -> None:
        self.completions.put(PassThrough(item))

    def _on_done(self, chunks: Chunks | None, err: BaseException | None, context: object) -> None:
        # Runs on an inference thread: hand over only.
        try:
            self.completions.put(BatchDone(context, err if err is not None else chunks), force=True)
        except QueueClosed:
            pass

    def _completion_loop(self) -> None:
        try:
            while not self.control.abort.is_set():
                msg = self.completions.get(timeout=0.2)
                if msg is None:
                    continue
                if isinstance(msg, PassThrough):
                    ready = [msg.item]
                elif isinstance(msg, BatchDone):
                    self.engine.consumed()
                    self.credit_back()
                    ready = self.complete(msg.context, msg.result)
                else:
                    ready = self.complete(msg.context, msg.error)
                for item in ready:
                    for out in self._reorder.push(item):
                        self.emit(out)
        except QueueClosed:
            return

    def close(self) -> None:
        self.completions.close()
        self.engine.close()
