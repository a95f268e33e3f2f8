"""Timelines without a server: paced files stamped when due, looped files, live
timelines across reconnects, timestamps that do not increase; the frame gate; the
reconnect policy."""
from __future__ import annotations

import time
from fractions import Fraction
from types import SimpleNamespace

import pytest

from conftest import detector_model
from pipeline.config import ReconnectConfig
from pipeline.frames import EndOfStream, Frame
from pipeline.metrics.registry import Metrics
from pipeline.runtime.stage import RunControl
from pipeline.sources.gate import FrameGate
from pipeline.sources.reconnect import Reconnect
from pipeline.sources.timeline import LIVE_TIME_BASE, Timeline


def test_a_paced_files_frames_are_stamped_at_their_due_time_never_earlier(short_clips, model_path, write_config):
    from pipeline.config import load_config
    from pipeline.preprocess import Preprocessor
    from pipeline.sources.camera import VideoSource

    cfg = load_config(write_config({"sources": [{"id": "a", "uri": short_clips["bikes"], "realtime": True}],
                                    "models": {"det": detector_model(model_path)},
                                    "graph": [{"detect": {"model": "det"}}]}))
    got: list[tuple[Frame, float]] = []
    lane = SimpleNamespace(put=lambda item: got.append((item, time.perf_counter())), wait_turn=lambda: None,
                           end_turn=lambda: None)
    source = VideoSource(cfg.sources[0], Preprocessor(cfg.detector), lane, Metrics(), RunControl(), max_frames=12)
    source.start()
    source.join(30)
    frames = [(f, t) for f, t in got if isinstance(f, Frame)]
    assert len(frames) == 12 and isinstance(got[-1][0], EndOfStream)
    start = source.framing.timeline.started
    for f, handed_over in frames:
        due = start + f.pts_seconds - frames[0][0].pts_seconds
        assert f.t_capture == pytest.approx(due, abs=1e-6)  # the due time, not the (earlier) decode time
        assert handed_over >= f.t_capture  # and never handed over before it was due



def test_a_paced_files_turn_to_read_never_spans_its_wait_for_the_next_frame(short_clips, model_path, write_config):
    """Other file cameras may read while this one waits for its next frame's due time: the
    turn covers decoding and handing over one frame (plus at most the read-ahead)."""
    from pipeline.config import load_config
    from pipeline.preprocess import Preprocessor
    from pipeline.sources.camera import READ_AHEAD_S, VideoSource

    cfg = load_config(write_config({"sources": [{"id": "a", "uri": short_clips["bikes"], "realtime": True}],
                                    "models": {"det": detector_model(model_path)},
                                    "graph": [{"detect": {"model": "det"}}]}))
    turn = {"held": False, "turns": 0}
    waits_in_turn: list[float] = []

    def room() -> None:
        assert not turn["held"]
        turn["held"] = True
        turn["turns"] += 1

    def read_done() -> None:
        turn["held"] = False

    lane = SimpleNamespace(put=lambda item: None, wait_turn=room, end_turn=read_done)
    source = VideoSource(cfg.sources[0], Preprocessor(cfg.detector), lane, Metrics(), RunControl(), max_frames=8)
    wait = source._wait
    source._wait = lambda seconds: (waits_in_turn.append(seconds) if turn["held"] else None, wait(seconds))[1]
    source.start()
    source.join(30)
    assert turn["turns"] >= 8
    # at most the read-ahead (plus timestamp jitter), never most of the 40 ms frame interval
    assert max(waits_in_turn, default=0.0) < READ_AHEAD_S + 0.015

def test_a_looped_file_continues_one_frame_after_each_pass():
    t = Timeline("a", network=False, loop=True)
    tb, rate = Fraction(1, 25), Fraction(25)
    first = [t.pts(p, tb, rate) for p in range(3)]
    t.new_connection()
    second = [t.pts(p, tb, rate) for p in range(3)]
    assert first + second == list(range(6))


def test_timestamps_that_do_not_increase_step_by_the_frame_rate(caplog):
    t = Timeline("a", network=False, loop=False)
    tb, rate = Fraction(1, 1000), Fraction(25)
    assert [t.pts(p, tb, rate) for p in (0, 0, 0, None)] == [0, 40, 80, 120]
    assert sum("timestamps do not increase" in r.getMessage() for r in caplog.records) == 1


def test_a_live_timeline_never_rewinds_across_reconnects():
    clock = [100.0]
    t = Timeline("a", network=True, loop=False, clock=lambda: clock[0])
    tb = Fraction(1, 90000)
    a = [t.pts(p, tb, Fraction(15)) for p in (9000, 15000)]
    t.new_connection()
    clock[0] += 0.5
    b = [t.pts(p, tb, Fraction(15)) for p in (0, 6000)]  # the camera restarted its clock
    assert a[0] < a[1] < b[0] < b[1] and t.time_base(tb) == LIVE_TIME_BASE


def test_the_gate_keeps_every_nth_frame_and_at_most_max_fps_on_the_cameras_clock():
    gate = FrameGate(stride=2)
    assert [gate.reject(i, i / 25) for i in range(4)] == [None, "stride", None, "stride"]
    gate = FrameGate(max_fps=5)
    kept = [i for i in range(25) if gate.reject(i, i / 25) is None]
    assert kept == [0, 5, 10, 15, 20]


def test_reconnect_backoff_doubles_resets_on_frames_and_gives_up_from_the_last_frame():
    now = [0.0]
    rc = Reconnect(ReconnectConfig(initial_s=0.5, max_s=4, give_up_s=10), clock=lambda: now[0], jitter=lambda: 1.0)
    assert [rc.next_delay() for _ in range(5)] == [0.5, 1.0, 2.0, 4.0, 4.0]
    rc.frame()
    assert rc.next_delay() == 0.5  # frames flowed: the backoff starts over
    now[0] = 3.0
    rc.lost()  # the stream broke 3 s after its last frame...
    now[0] = 9.0
    assert not rc.gave_up() and rc.next_delay() == pytest.approx(1.0)
    now[0] = 12.5
    assert rc.gave_up()  # ...and 10 s without a frame ends it, counted from the last frame
    now[0] = 13.0
    rc.frame()
    assert rc.reconnects == 1 and rc.downtime_s == pytest.approx(13.0)  # the real time without frames


def test_retries_past_give_up_keep_the_backoffs_pace():
    """A camera that goes on retrying past `give_up_s` (a dead sub-stream while its main
    stream is recorded) waits `max_s` between attempts, not the 0.05 s floor that keeps a
    last attempt before the give-up."""
    now = [0.0]
    rc = Reconnect(ReconnectConfig(initial_s=0.5, max_s=2, give_up_s=3), clock=lambda: now[0], jitter=lambda: 1.0)
    rc.frame()
    rc.lost()
    now[0] = 2.0
    assert rc.next_delay() == pytest.approx(0.5) and rc.next_delay() == pytest.approx(1.0)  # up to the give-up
    now[0] = 2.9
    assert rc.next_delay() == pytest.approx(0.1)  # never past it
    now[0] = 10.0
    assert rc.gave_up() and [rc.next_delay() for _ in range(3)] == pytest.approx([2.0, 2.0, 2.0])


@pytest.mark.parametrize("jitter", [0.8, 1.2])
def test_a_reconnect_wait_never_exceeds_max_s_jitter_included(jitter):
    rc = Reconnect(ReconnectConfig(initial_s=1, max_s=8, give_up_s=0), jitter=lambda: jitter)
    waits = [rc.next_delay() for _ in range(8)]
    assert max(waits) <= 8.0
    assert waits[:3] == pytest.approx([jitter, 2 * jitter, 4 * jitter])  # below max_s the jitter is kept


def test_each_backoff_step_is_said_once_per_outage_not_each_attempt():
    rc = Reconnect(ReconnectConfig(initial_s=0.5, max_s=2, give_up_s=0), jitter=lambda: 1.0)
    said = [rc.retry().news for _ in range(6)]  # steps 0.5, 1, 2, then 2 again and again
    assert said == [True, True, True, False, False, False]
    rc.frame()
    rc.lost()
    assert rc.retry().news  # a new outage starts: said again
