"""The ingress: fair fan-in across cameras, batch formation, files read in turns."""
import threading
import time

from pipeline.frames import EndOfStream, Frame
from pipeline.runtime.ingress import Ingress


def frame(cam: str, seq: int, t: float | None = None) -> Frame:
    return Frame(camera=cam, seq=seq, pts=seq, time_base=None, image=None,  # type: ignore[arg-type]
                 t_capture=float(seq) if t is None else t)


def test_lanes_give_the_oldest_frame_first_whatever_its_camera():
    lanes = Ingress("l")
    for cam in ("a", "b", "c"):
        lanes.add_camera(cam, 10, "block")
    for i in range(6):
        lanes.put(frame("a", i, t=10.0 + i))
    lanes.put(frame("b", 0, t=11.5))
    lanes.put(frame("c", 0, t=9.0))
    batch = lanes.collect(4, 0.0)
    assert [(f.camera, f.seq) for f in batch] == [("c", 0), ("a", 0), ("a", 1), ("b", 0)]


def test_a_partial_batch_is_held_only_while_holding_is_free_and_at_most_max_wait():
    lanes = Ingress("l")
    lanes.add_camera("a", 10, "block")
    lanes.put(frame("a", 0))
    t0 = time.monotonic()
    assert len(lanes.collect(4, 60.0)) == 1 and time.monotonic() - t0 < 1  # nobody says hold: at once
    lanes.put(frame("a", 1))
    t0 = time.monotonic()
    batch = lanes.collect(4, 0.05, hold=lambda: True)  # every worker busy: wait for more, up to max_wait
    assert len(batch) == 1 and time.monotonic() - t0 >= 0.045


def test_a_held_batch_goes_when_a_worker_frees_up():
    lanes = Ingress("l")
    lanes.add_camera("a", 10, "block")
    lanes.put(frame("a", 0))
    busy = [True]

    def free() -> None:
        time.sleep(0.05)
        busy[0] = False
        lanes.wake()

    t0 = time.monotonic()  # before the thread starts: its 50 ms count from after it
    threading.Thread(target=free).start()
    assert len(lanes.collect(4, 60.0, hold=lambda: busy[0])) == 1
    assert 0.04 <= time.monotonic() - t0 < 5


def test_collect_returns_as_soon_as_the_batch_is_full():
    lanes = Ingress("l")
    lanes.add_camera("a", 10, "block")
    for i in range(4):
        lanes.put(frame("a", i))
    assert [f.seq for f in lanes.collect(4, 60.0, hold=lambda: True)] == [0, 1, 2, 3]


def test_end_of_stream_flushes_the_partial_batch():
    lanes = Ingress("l")
    lanes.add_camera("a", 10, "block")
    lanes.put(frame("a", 0))
    lanes.put(EndOfStream("a"))
    batch = lanes.collect(8, 60.0, hold=lambda: True)
    assert len(batch) == 2 and isinstance(batch[-1], EndOfStream)


def test_collect_returns_empty_when_idle():
    lanes = Ingress("l")
    lanes.add_camera("a", 10, "block")
    assert lanes.collect(4, 0.01, poll_s=0.01) == []



def _waiting_readers(lanes: Ingress, n: int) -> None:
    for _ in range(500):
        with lanes._lock:
            if len(lanes._readers) == n:
                return
        time.sleep(0.01)
    raise AssertionError(f"expected {n} readers waiting for their turn")


def test_file_readers_go_in_arrival_order_within_the_read_budget():
    """A reader that came first reads first, and a second may read only once the first's
    frame is taken (read_budget 1), even when its frame would be older."""
    lanes = Ingress("l", read_budget=1)
    for cam in ("x", "a", "b"):
        lanes.add_camera(cam, 2, "block")
    lanes.put(frame("x", 0, t=0.0))
    # b's frame is older than a's: were both let in, b's would be taken first
    readers = [threading.Thread(target=lambda c=c, t=t: (lanes.wait_turn(c), lanes.put(frame(c, 0, t=t)),
                                                         lanes.end_turn(c)))
               for c, t in (("a", 2.0), ("b", 1.0))]
    readers[0].start()
    _waiting_readers(lanes, 1)
    readers[1].start()
    _waiting_readers(lanes, 2)
    order = []
    while len(order) < 3:
        assert lanes.depth() <= 1
        order += [f.camera for f in lanes.collect(4, poll_s=5.0)]
    for t in readers:
        t.join()
    assert order == ["x", "a", "b"]
