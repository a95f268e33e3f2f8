"""Error containment in a stage: one bad frame is counted and passed on; the stage goes on."""
import numpy as np

from pipeline.frames import EndOfStream, Frame
from pipeline.metrics.registry import Metrics
from pipeline.runtime.stage import InlineStage


class Flaky(InlineStage):
    def process(self, frame):
        if frame.seq == 3:
            raise ValueError("bad pixels")
        frame.errors.append("seen")
        return (frame,)


def test_an_exception_on_one_frame_is_contained():
    metrics = Metrics()
    stage = Flaky("flaky", metrics)
    out = []
    stage.emit = out.append
    stage.start()
    for i in range(6):
        stage.accept(Frame("cam", i, i, None, np.zeros((2, 2, 3), np.uint8), 0.0))
    stage.accept(EndOfStream("cam"))
    frames = out[:-1]
    assert isinstance(out[-1], EndOfStream)
    assert [f.seq for f in frames] == list(range(6))  # nothing lost, order kept
    assert frames[3].errors == ["flaky: ValueError: bad pixels"]
    assert all(f.errors == ["seen"] for i, f in enumerate(frames) if i != 3)
    assert metrics.camera("cam").errors == 1 and metrics.stages["flaky"].errors == 1
