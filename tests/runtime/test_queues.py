"""Queue policies and drop accounting."""
import threading
import time

import pytest

from pipeline.frames import EndOfStream, Frame
from pipeline.runtime.queues import BoundedQueue, QueueClosed


def frame(cam: str, seq: int, t: float | None = None) -> Frame:
    return Frame(camera=cam, seq=seq, pts=seq, time_base=None, image=None,  # type: ignore[arg-type]
                 t_capture=float(seq) if t is None else t)


def test_drop_oldest_never_blocks_and_counts_drops():
    dropped = []
    q = BoundedQueue("q", 3, "drop_oldest", on_drop=lambda item, why: dropped.append((item.seq, why)))
    for i in range(10):
        q.put(frame("a", i))
    assert [q.get(0).seq for _ in range(3)] == [7, 8, 9]
    assert q.dropped == 7 and dropped[0] == (0, "queue_full")


def test_drop_oldest_keeps_end_of_stream_markers():
    q = BoundedQueue("q", 2, "drop_oldest")
    q.put(frame("a", 0))
    q.put(EndOfStream("a"))
    q.put(frame("a", 1))
    items = [q.get(0), q.get(0)]
    assert isinstance(items[0], EndOfStream) and items[1].seq == 1


def test_an_end_of_stream_never_displaces_the_last_frame_of_a_full_drop_oldest_queue():
    """A live camera that stops (max_frames, a signal, its file's end) while its lane holds
    the frame it read last: that frame is still processed, the end comes after it."""
    q = BoundedQueue("q", 1, "drop_oldest")
    q.put(frame("a", 29))
    q.put(EndOfStream("a"))
    last, end = q.get(0), q.get(0)
    assert last.seq == 29 and isinstance(end, EndOfStream) and q.dropped == 0


def test_block_policy_waits_for_room_and_loses_nothing():
    q = BoundedQueue("q", 2, "block")
    got = []

    def consume():
        for _ in range(20):
            got.append(q.get(5).seq)
            time.sleep(0.001)

    t = threading.Thread(target=consume)
    t.start()
    for i in range(20):
        q.put(frame("a", i))
    t.join(10)
    assert got == list(range(20)) and q.dropped == 0 and q.high_water <= 2


def test_close_wakes_blocked_producers_and_consumers():
    q = BoundedQueue("q", 1, "block")
    q.put(frame("a", 0))
    errors = []

    def produce():
        try:
            q.put(frame("a", 1))
        except QueueClosed:
            errors.append("closed")

    t = threading.Thread(target=produce)
    t.start()
    time.sleep(0.05)
    q.close()
    t.join(2)
    assert errors == ["closed"]
    with pytest.raises(QueueClosed):
        q.get(0.1)
