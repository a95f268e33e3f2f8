"""Snapshots: one JPEG per frame that confirmed events (encoded once however many), a crop
of each event's object, the paths in the events, and the events delivered only once the
files exist."""
import os
import time

import cv2
import numpy as np

from pipeline.frames import ClassNames, Detections, Event, Frame
from pipeline.sinks.event_evidence import Snapshots


def event_frame(seq: int) -> Frame:
    image = np.zeros((120, 160, 3), np.uint8)
    image[40:80, 60:100] = (0, 0, 255)  # the object
    det = Detections(np.array([[60, 40, 100, 80]], np.float32), np.array([0.9], np.float32), np.array([0]),
                     names=ClassNames(["person"]), track_id=np.array([7]))
    f = Frame("cam", seq, seq, None, image, time.perf_counter(), detections=det)
    f.events = [Event("cam", seq, seq, 7, "person", "cross", line="door", direction="in"),
                Event("cam", seq, seq, 7, "person", "enter", zone="hall")]
    return f


def test_a_frame_with_two_events_is_one_snapshot_and_two_crops_delivered_after_they_exist(tmp_path):
    delivered = []

    def deliver(events, jpeg):
        assert all(os.path.exists(tmp_path / e.snapshot) and os.path.exists(tmp_path / e.crop) for e in events)
        delivered.append((events, jpeg))

    snaps = Snapshots(str(tmp_path), deliver, margin=0.25)
    snaps.start()
    frame = event_frame(12)
    snaps.frame(frame, wall_time=1_780_000_000.25)
    snaps.close()
    (events, jpeg), = delivered
    assert events is frame.events and events[0].snapshot == events[1].snapshot  # one picture per frame
    assert events[0].snapshot.startswith(os.path.join("events", "cam", "20260528T")) and "_12" in events[0].snapshot
    assert snaps.written == 1 and len(os.listdir(tmp_path / "events" / "cam")) == 3
    picture = cv2.imdecode(np.frombuffer(jpeg, np.uint8), cv2.IMREAD_COLOR)
    assert picture.shape == (120, 160, 3)
    crop = cv2.imread(str(tmp_path / events[0].crop))
    assert crop.shape[:2] == (60, 60)  # 40x40 box grown by 25% on every side
    assert crop[30, 30, 2] > 200 and crop[2, 2, 2] < 50  # the object in the middle, margin around it
