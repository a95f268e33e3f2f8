"""What every stage of the graph is (`Stage`), the base of the stages cheap enough to run
inline, and the run's shared stop signals.

Every stage, the sink included, is started, handed items (`accept`), stopped (an abort:
queued work is given up and waiting threads wake), joined and closed the same way, and
passes what it finished to `emit`, which the graph wires to the next stage's `accept`.

A stage cheap enough per frame (tracking, analytics, drawing: well under a millisecond)
runs inline: in the thread of the stage before it. Each hand-over between threads costs a
wake-up and a wait for the interpreter lock, which at load shows in the latency tail.

Error containment lives here once for every stage: an exception on one frame is counted,
logged with the camera and sequence number, recorded on the frame, and the frame goes on
unprocessed by that stage (so outputs keep every frame); the stage keeps running.
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Callable, Iterable, Protocol

from pipeline.frames import EndOfStream, Frame, Item
from pipeline.metrics.registry import Metrics

log = logging.getLogger("pipeline.stage")

Emit = Callable[[Item], None]


class RunControl:
    """Shared stop signals: `stop` ends the sources (the graph then drains); `abort` makes
    every stage give up its queued work so outputs are finalised at once."""

    def __init__(self) -> None:
        self.stop = threading.Event()
        self.abort = threading.Event()


class Stage(Protocol):
    name: str
    emit: Emit

    def start(self) -> None: ...

    def accept(self, item: Item) -> None:
        """Take one item from the stage before (waits while the stage is full: backpressure)."""
        ...

    def stop(self) -> None:
        """Abort: give up queued work and wake every thread waiting in the stage."""
        ...

    def join(self, timeout: float | None = None) -> None: ...

    def close(self) -> None:
        """Release what the stage holds (engines, files) once its threads are done."""
        ...


def contain(metrics: Metrics, stage: str, frame: Frame, error: BaseException) -> None:
    """Record a per-frame failure: counted, logged once per frame, kept on the frame."""
    message = f"{stage}: {type(error).__name__}: {error}"
    frame.errors.append(message)
    metrics.error(frame.camera, stage)
    log.warning("camera %s frame %d: %s", frame.camera, frame.seq, message)


class InlineStage:
    """A stage that works in the caller's thread; subclasses implement `process` (and
    `end` for per-camera state)."""

    def __init__(self, name: str, metrics: Metrics):
        self.name = name
        self.metrics = metrics
        self.emit: Emit = lambda item: None

    def process(self, frame: Frame) -> Iterable[Item]:
        return (frame,)

    def end(self, eos: EndOfStream) -> Iterable[Item]:
        """A camera ended: drop its per-camera state and pass the marker on."""
        return (eos,)

    def accept(self, item: Item) -> None:
        for out in self._handle(item):
            self.emit(out)

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

    def start(self) -> None:
        """Nothing to start: it runs in the thread of the stage before it."""

    def stop(self) -> None:
        """Nothing queued to give up."""

    def join(self, timeout: float | None = None) -> None:
        """No thread of its own."""

    def close(self) -> None:
        """Nothing held."""
