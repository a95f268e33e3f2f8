"""Error containment in a stage: one bad frame is counted and passed on; the stage goes on."""
import time

import numpy as np

from pipeline.frames import EndOfStream, Frame
from pipeline.metrics.registry import Metrics
from pipeline.runtime.stage import RunControl, Stage


class Flaky(Stage):
    def process(self, frame):
        if frame.seq == 3:
            raise ValueError("bad pixels")
        frame.events.append({"seen": True})
        return (frame,)


def test_an_exception_on_one_frame_is_contained():
    metrics, control = Metrics(), RunControl()
    stage = Flaky("flaky", metrics, control, 4)
    out = []
    stage.emit = out.append
    stage.start()
    for i in range(6):
        stage.input.put(Frame("cam", i, i, None, np.zeros((2, 2, 3), np.uint8), 0.0))
    stage.input.put(EndOfStream("cam"))
    deadline = time.monotonic() + 10
    while not (out and isinstance(out[-1], EndOfStream)) and time.monotonic() < deadline:
        time.sleep(0.01)
    control.abort.set()
    stage.join(2)
    frames = out[:-1]
    assert [f.seq for f in frames] == list(range(6))  # nothing lost, order kept
    assert frames[3].errors == ["flaky: ValueError: bad pixels"] and not frames[3].events
    assert all(f.events for i, f in enumerate(frames) if i != 3)
    assert metrics.camera("cam").errors == 1 and metrics.stages["flaky"].errors == 1
