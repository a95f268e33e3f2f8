"""Out-of-order completions come out in per-camera order, end of stream last."""
import random

from pipeline.frames import EndOfStream, Frame
from pipeline.stages.reorder import Reorderer


def frame(cam: str, order: int) -> Frame:
    return Frame(camera=cam, seq=order, pts=order, time_base=None, image=None, t_capture=0.0, order=order)  # type: ignore[arg-type]


def test_shuffled_frames_of_two_cameras_leave_in_order():
    items = [frame(c, i) for c in ("a", "b") for i in range(50)]
    items += [EndOfStream("a", order=50), EndOfStream("b", order=50)]
    random.Random(7).shuffle(items)
    r = Reorderer()
    out = [x for item in items for x in r.push(item)]
    for cam in ("a", "b"):
        mine = [x for x in out if x.camera == cam]
        assert [x.order for x in mine] == list(range(51))
        assert isinstance(mine[-1], EndOfStream)
    assert len(out) == len(items)  # nothing left behind


def test_a_gap_holds_later_frames_back():
    r = Reorderer()
    assert r.push(frame("a", 1)) == []
    assert [f.order for f in r.push(frame("a", 0))] == [0, 1]
