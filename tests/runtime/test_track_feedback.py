"""The tracks a camera's gate sees: those after the update on one exact earlier frame,
waited for by a file camera however far its tracker has got, never waited for by a live
one; a wait ends when the camera stops or nothing more comes."""
import threading
import time

import numpy as np

from pipeline.runtime.track_feedback import TrackFeedback, TrackView


def view(seq: int, x: float = 0.0) -> TrackView:
    return TrackView(seq, seq / 10, np.array([[x, 0, x + 10, 10]], np.float32), np.array([[100.0, 0.0]], np.float32),
                     np.array([True]))


def test_a_file_camera_waits_for_the_update_on_its_frame_and_gets_exactly_that_one():
    fb = TrackFeedback(wait=True)
    got = []
    reader = threading.Thread(target=lambda: got.append(fb.view(3, lambda: False)))
    reader.start()
    for seq in range(3):
        fb.publish(view(seq))
    time.sleep(0.2)
    assert reader.is_alive()  # frame 3's update is not there yet
    for seq in range(3, 6):   # the tracker runs on past it before the reader wakes
        fb.publish(view(seq))
    reader.join(2)
    assert got[0].seq == 3
    assert fb.view(3, lambda: False).seq == 3  # asked again (a later frame of the same lag): the same update


def test_a_live_camera_takes_the_newest_update_up_to_its_frame_without_waiting():
    fb = TrackFeedback(wait=False)
    assert fb.view(5, lambda: False) is None
    fb.publish(view(2))
    t0 = time.perf_counter()
    assert fb.view(5, lambda: False).seq == 2 and time.perf_counter() - t0 < 0.05


def test_a_wait_ends_when_the_camera_stops_or_its_tracker_ends():
    fb = TrackFeedback(wait=True)
    stop = threading.Event()
    threading.Timer(0.2, stop.set).start()
    t0 = time.perf_counter()
    assert fb.view(1, stop.is_set) is None and time.perf_counter() - t0 < 1.0
    threading.Timer(0.2, fb.close).start()
    assert fb.view(1, lambda: False) is None


def test_moving_tracks_are_carried_on_to_the_frames_time():
    v = TrackView(0, 1.0, np.array([[0, 0, 10, 10], [50, 50, 60, 60]], np.float32),
                  np.array([[100.0, -20.0], [5.0, 5.0]], np.float32), np.array([True, False]))
    assert v.moving_at(1.5).tolist() == [[50.0, -10.0, 60.0, 0.0]]
