"""Rows from frame records: what a track, an event, a count and a segment hold."""
import json

from pipeline.store.rows import GAP_S, RowBuilder

ORIGIN = 1_700_000_000.0
REC = "gate.rec.20261101T000000Z.mp4"
SNAP_A, SNAP_B = "events/gate/20261101T000059.500Z_7.jpg", "events/gate/20261101T000100.500Z_7.jpg"


def record(seq, t, dets=(), events=(), recording=None, rtime=None, motion=False):
    r = {"camera": "gate", "seq": seq, "pts": seq, "time": t, "detected": True, "detections": list(dets)}
    if recording is not None:
        r["recording"], r["recording_time"] = recording, rtime
    if motion:
        r["motion"] = True
    if events:
        r["events"] = list(events)
    return r


def det(track, score, box=(0, 0, 10, 10), cls="person", predicted=False, labels=None):
    d = {"box": list(box), "score": score, "class_id": 0, "class": cls, "predicted": predicted, "track": track}
    if labels:
        d["labels"] = {stage: {"label": label, "id": 1, "score": 0.9} for stage, label in labels.items()}
    return d


def test_a_track_keeps_its_best_detected_sighting_its_latest_labels_and_its_span():
    b = RowBuilder(3, "/nowhere")
    b.add(record(0, 0.0, [det(7, 0.5, labels={"colour": "red"})], recording=REC, rtime=10.0), ORIGIN)
    b.add(record(1, 1.0, [det(7, 0.9, box=(1, 2, 3, 4))], recording=REC, rtime=11.0), ORIGIN)
    b.add(record(2, 2.0, [det(7, 0.99, predicted=True, labels={"colour": "blue"})]), ORIGIN)
    (t,) = b.take().tracks
    assert (t.run, t.camera, t.track, t.cls) == (3, "gate", 7, "person")
    assert (t.first_seen, t.last_seen) == (ORIGIN, ORIGIN + 2.0)
    assert (t.best_score, t.best_box, t.best_time) == (0.9, [1, 2, 3, 4], ORIGIN + 1.0)  # a predicted box never
    assert (t.recording, t.recording_time) == (REC, 11.0)
    assert t.labels == {"colour": "blue"}


def test_events_become_rows_and_zone_entries_and_crossings_count_per_minute():
    b = RowBuilder(1, "/nowhere")
    cross = {"event": "cross", "track": 7, "class": "person", "line": "gate", "direction": "in",
             "snapshot": SNAP_A}
    enter = {"event": "enter", "track": 7, "class": "person", "zone": "lawn"}
    leave = {"event": "exit", "track": 7, "class": "person", "zone": "lawn"}
    b.add(record(0, 59.5, [det(7, 0.8)], [cross, enter]), ORIGIN - ORIGIN % 60)
    b.add(record(1, 60.5, [det(7, 0.8)], [dict(cross, snapshot=SNAP_B), leave]), ORIGIN - ORIGIN % 60)
    rows = b.take()
    minute = int(ORIGIN - ORIGIN % 60)
    assert dict(rows.counts) == {("gate", minute, "line", "gate", "person", "in"): 1,
                                 ("gate", minute, "zone", "lawn", "person", "enter"): 1,
                                 ("gate", minute + 60, "line", "gate", "person", "in"): 1}
    assert [(e[3], e[6], e[7], e[9]) for e in rows.events] == [
        ("cross", "gate", None, SNAP_A), ("enter", None, "lawn", None),
        ("cross", "gate", None, SNAP_B), ("exit", None, "lawn", None)]
    (t,) = rows.tracks
    assert (t.zones, t.lines, t.snapshot) == (["lawn"], [("gate", "in")], SNAP_A)
    assert json.loads(t.values()[11]) == ["gate"]


def test_a_segment_spans_its_frames_and_counts_the_time_with_motion_and_with_objects(tmp_path):
    (tmp_path / REC).write_bytes(b"x" * 1234)
    b = RowBuilder(1, str(tmp_path))
    b.add(record(0, 5.0, recording=REC, rtime=2.0), ORIGIN)
    b.add(record(1, 6.0, [det(1, 0.7)], recording=REC, rtime=3.0, motion=True), ORIGIN)
    b.add(record(2, 6.5, recording=REC, rtime=3.5, motion=True), ORIGIN)
    b.add(record(3, 16.5, [det(1, 0.7)], recording=REC, rtime=13.5), ORIGIN)  # after a 10 s hole
    (seg,) = b.take().segments
    assert (seg.camera, seg.path, seg.start, seg.end, seg.bytes) == ("gate", REC, ORIGIN + 3.0, ORIGIN + 16.5,
                                                                    1234)
    assert (seg.motion_s, seg.objects_s) == (1.5, 1.0 + GAP_S)


def test_take_hands_over_only_what_changed_and_an_ended_camera_leaves_memory():
    b = RowBuilder(1, "/nowhere")
    b.add(record(0, 0.0, [det(1, 0.5)]), ORIGIN)
    assert len(b.take().tracks) == 1
    assert len(b.take()) == 0
    b.end_camera("gate")
    b.take()
    assert b.cameras == {}
