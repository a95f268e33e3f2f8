"""The stage base: a thread that takes items from a queue, works, and emits downstream.

Error containment lives here once for every stage: an exception on one frame is counted,
logged with the camera and sequence number, recorded on the frame, and the frame goes on
unprocessed by that stage (so outputs keep every frame); the stage keeps running.
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Callable, Iterable

from pipeline.frames import EndOfStream, Frame, Item
from pipeline.metrics.registry import Metrics
from pipeline.runtime.queues import BoundedQueue, QueueClosed

log = logging.getLogger("pipeline.stage")

Emit = Callable[[Item], None]


class RunControl:
    """Shared stop signals: `stop` ends the sources (the graph then drains); `abort` makes
    every stage give up its queued work so outputs are finalised at once."""

    def __init__(self) -> None:
        self.stop = threading.Event()
        self.abort = threading.Event()


def contain(metrics: Metrics, stage: str, frame: Frame, error: BaseException) -> None:
    """Record a per-frame failure: counted, logged once per frame, kept on the frame."""
    message = f"{stage}: {type(error).__name__}: {error}"
    frame.errors.append(message)
    metrics.error(frame.camera, stage)
    log.warning("camera %s frame %d: %s", frame.camera, frame.seq, message)


class Stage:
    """One worker thread over a bounded input queue; subclasses implement `process`.

    A stage cheap enough per frame (tracking, analytics, drawing: well under a
    millisecond) runs `inline`: in the thread of the stage before it, called through
    `push` instead of a queue. Each hand-over between threads costs a wake-up and a wait
    for the interpreter lock, which at load shows in the latency tail."""

    name = "stage"

    def __init__(self, name: str, metrics: Metrics, control: RunControl, queue_size: int, inline: bool = False):
        self.name = name
        self.metrics = metrics
        self.control = control
        self.inline = inline
        self.input: BoundedQueue[Item] = BoundedQueue(name, queue_size, "block")
        if not inline:
            metrics.queues[name] = self.input
        self.emit: Emit = lambda item: None
        self._threads: list[threading.Thread] = []

    def join(self, timeout: float | None = None) -> None:
        for t in self._threads:
            t.join(timeout)

    def process(self, frame: Frame) -> Iterable[Item]:
        return (frame,)

    def end(self, eos: EndOfStream) -> Iterable[Item]:
        """A camera ended: drop its per-camera state and pass the marker on."""
        return (eos,)

    def start(self) -> None:
        if self.inline:
            return
        t = threading.Thread(target=self._loop, name=self.name, daemon=True)
        self._threads.append(t)
        t.start()

    def push(self, item: Item) -> None:
        """Run this inline stage on `item` in the caller's thread and pass the results on."""
        for out in self._handle(item):
            self.emit(out)

    @property
    def accept(self) -> Emit:
        """How the stage before it hands an item over."""
        return self.push if self.inline else self.input.put

    def _loop(self) -> None:
        try:
            while not self.control.abort.is_set():
                item = self.input.get(timeout=0.2)
                if item is None:
                    continue
                for out in self._handle(item):
                    self.emit(out)
        except QueueClosed:
            return

    def _handle(self, item: Item) -> Iterable[Item]:
        if isinstance(item, EndOfStream):
            return self.end(item)
        t0 = time.perf_counter()
        item.stamps[self.name] = t0
        try:
            out = list(self.process(item))
        except Exception as e:
            contain(self.metrics, self.name, item, e)
            out = [item]
        self.metrics.stage_busy(self.name, time.perf_counter() - t0)
        return out

    def close(self) -> None:
        """Release what the stage holds (engines, files) once its threads are done."""
