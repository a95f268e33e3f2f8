"""Snapshots: one JPEG per frame that confirmed events (encoded once however many), a crop
of each event's object, the paths in the events, and the events delivered only once the
files exist; a busy camera's clips, bounded by `clips.max_s`."""
import os
import time
from fractions import Fraction

import cv2
import numpy as np

from pipeline.config import parse_config
from pipeline.frames import ClassNames, Detections, Event, Frame
from pipeline.events.event_evidence import EventEvidence, RecentEvents, Snapshots

from numbered_clips import FPS, numbered_packets, shown


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
    assert events == frame.events and events[0].snapshot == events[1].snapshot  # one picture per frame
    assert events[0].snapshot.startswith(os.path.join("events", "cam", "20260528T")) and "_12" in events[0].snapshot
    assert snaps.written == 1 and len(os.listdir(tmp_path / "events" / "cam")) == 3
    picture = cv2.imdecode(np.frombuffer(jpeg, np.uint8), cv2.IMREAD_COLOR)
    assert picture.shape == (120, 160, 3)
    crop = cv2.imread(str(tmp_path / events[0].crop))
    assert crop.shape[:2] == (60, 60)  # 40x40 box grown by 25% on every side
    assert crop[30, 30, 2] > 200 and crop[2, 2, 2] < 50  # the object in the middle, margin around it


def fill(folder, leave: int = 0) -> None:
    """Fill the disk `folder` is on, but for `leave` bytes."""
    st = os.statvfs(folder)
    with open(os.path.join(folder, "filler"), "wb") as f:
        f.write(b"x" * (st.f_bavail * st.f_frsize - leave))


def test_pictures_a_full_disk_cannot_hold_are_counted_said_and_named_nowhere(small_disk, caplog):
    """A full disk: one WARNING naming the frame's JPEG (written) rather than the crop that
    failed, nothing counted, a `.crop.jpg.tmp` left behind, the events naming the crop."""
    disk = small_disk("64k")
    (disk / "events" / "cam").mkdir(parents=True)
    fill(disk, leave=4096)  # one page: the frame's JPEG fits, its crops do not
    delivered, lost = [], []
    snaps = Snapshots(str(disk), lambda events, jpeg: delivered.append((events, jpeg)),
                      on_lost=lambda camera, n: lost.append((camera, n)))
    snaps.start()
    first = event_frame(1)
    with caplog.at_level("WARNING", logger="pipeline.evidence"):
        snaps.frame(first, wall_time=1_780_000_000.0)
        snaps.frame(event_frame(2), wall_time=1_780_000_001.0)  # now nothing fits
        snaps.close()
    (events, jpeg), (later, none) = delivered
    crops = [e.crop for e in first.events]  # the JSON line was written with the planned names
    assert jpeg is not None and none is None
    assert [sorted(e.to_dict()) for e in events] == [sorted({*e.to_dict()} - {"crop"} | {"snapshot_error"})
                                                     for e in first.events]
    assert all(e.snapshot_error == "crop: No space left on device" and e.crop is None
               and os.path.exists(disk / e.snapshot) for e in events)
    assert all(e.snapshot is None and e.crop is None and e.snapshot_error == "No space left on device"
               for e in later)
    assert lost == [("cam", 1), ("cam", 1), ("cam", 3)] and snaps.lost == 5 and snaps.written == 1
    assert sorted(os.listdir(disk / "events" / "cam")) == [os.path.basename(first.events[0].snapshot)]  # no .tmp
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 1 and crops[0] in said[0] and "No space left on device" in said[0]


def test_a_busy_cameras_events_name_clips_bounded_by_clips_max_s_each_left_by_retention_while_written(tmp_path):
    """`clips.max_s` from the config reaches the camera's clips; a clip past it still being
    written beside the newer one is open (retention leaves it)."""
    data = {"sources": [{"id": "cam", "uri": "rtsp://127.0.0.1:1/x"}],
            "models": {"det": {"path": __file__, "layout": "yolox", "input_size": 416}},
            "graph": [{"detect": {"model": "det"}}],
            "outputs": {"dir": str(tmp_path), "events": {"clips": {"pre_s": 1, "post_s": 3, "max_s": 5}}}}
    evidence = EventEvidence(str(tmp_path), parse_config(data, tmp_path).outputs.events, None, RecentEvents())
    feed = evidence.on_packet("cam")
    held, stream = numbered_packets(tmp_path, 200)
    events, open_at_once = [], 0
    for h in held:
        if h.pts in range(20, 160, 15):  # 1.5 s apart, closer than post_s
            frame = Frame("cam", h.pts, h.pts, Fraction(1, FPS), np.zeros((48, 64, 3), np.uint8), time.perf_counter())
            frame.events = [Event("cam", h.pts, h.pts, 7, "person", "cross", line="door", direction="in")]
            evidence.frame(frame)
            events += frame.events
        feed(h.packet(), stream)
        named, finished = {str(tmp_path / e.clip) for e in events}, set(evidence.recorders["cam"].written)
        assert all(evidence.is_open(c) for c in named - finished) and not any(map(evidence.is_open, finished))
        open_at_once = max(open_at_once, len(named - finished))
    evidence.close()
    clips = {e.clip: shown(str(tmp_path / e.clip)) for e in events}
    assert len(clips) >= 3 and open_at_once == 2
    assert all(len(frames) <= (5 + 3 + 1) * FPS for frames in clips.values())
    assert all({e.seq - FPS, e.seq, e.seq + 3 * FPS} <= set(clips[e.clip]) for e in events)
