"""The tracker on hand-made detections with known motion."""
import numpy as np

from pipeline.config import TrackSpec
from pipeline.stages.track import ByteTracker, KalmanBox, greedy_match


def box(x, y, w=40, h=80):
    return [x, y, x + w, y + h]


def run(tracker, frames):
    out = []
    for dets in frames:
        boxes = np.array([d[0] for d in dets], np.float32).reshape(-1, 4)
        scores = np.array([d[1] for d in dets], np.float32)
        classes = np.array([d[2] if len(d) > 2 else 0 for d in dets], np.int64)
        out.append(tracker.update(boxes, scores, classes).tolist())
    return out


def test_kalman_filter_learns_a_constant_velocity():
    kf = KalmanBox(np.array(box(0, 0), np.float64))
    for i in range(1, 15):
        kf.predict()
        kf.update(np.array(box(10 * i, 0), np.float64))
    kf.predict()
    np.testing.assert_allclose(kf.box()[:2], [150, 0], atol=2.0)


def test_greedy_match_takes_the_best_pairs_first():
    iou = np.array([[0.9, 0.8], [0.85, 0.1]])
    assert sorted(greedy_match(iou, 0.2)) == [(0, 0)]  # row 1's only candidate above 0.2 is taken
    assert greedy_match(np.array([[0.1]]), 0.2) == []


def test_two_objects_keep_their_ids_while_crossing_paths():
    t = ByteTracker(TrackSpec())
    frames = [[(box(10 * i, 100), 0.9), (box(300 - 10 * i, 100 + 0.5 * i), 0.8)] for i in range(30)]
    ids = run(t, frames)
    assert ids[0] == [1, 2]  # first frame: confirmed at once
    a = {row[0] for row in ids}
    b = {row[1] for row in ids}
    assert len(a) == 1 and len(b) == 1 and a != b


def test_an_object_hidden_for_a_few_frames_keeps_its_id():
    t = ByteTracker(TrackSpec())
    frames = [[(box(10 * i, 100), 0.9)] if not 10 <= i < 15 else [] for i in range(25)]
    ids = [row for row in run(t, frames) if row]
    assert {row[0] for row in ids} == {1}


def test_low_score_detections_extend_a_track_but_never_start_one():
    t = ByteTracker(TrackSpec())
    frames = [[(box(10 * i, 100), 0.9 if i < 5 else 0.2)] for i in range(10)]
    frames += [[(box(500, 300), 0.2)]]
    ids = run(t, frames)
    assert all(row == [1] for row in ids[:10])  # the partly hidden object stays track 1
    assert ids[10] == [-1]


def test_new_objects_are_confirmed_on_their_second_sighting():
    t = ByteTracker(TrackSpec())
    run(t, [[(box(0, 0), 0.9)]])
    ids = run(t, [[(box(0, 0), 0.9), (box(300, 300), 0.9)], [(box(0, 0), 0.9), (box(300, 300), 0.9)]])
    assert ids[0] == [1, -1] and ids[1] == [1, 2]


def test_tracks_are_per_class():
    t = ByteTracker(TrackSpec())
    ids = run(t, [[(box(0, 0), 0.9, 0), (box(0, 0), 0.9, 1)]] * 3)
    assert ids[-1][0] != ids[-1][1] and -1 not in ids[-1]


def test_a_track_unseen_for_longer_than_max_age_is_gone():
    t = ByteTracker(TrackSpec(max_age=3))
    run(t, [[(box(0, 0), 0.9)]] * 2 + [[]] * 5)
    assert t.tracks == []
