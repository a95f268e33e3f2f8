"""The track stage between detector runs: predicted rows on the frames the detector did
not see, tracks a run on regions did not look at held, stationary objects kept where they
stopped, and every frame's tracks handed back to the camera's gate."""
from fractions import Fraction

import numpy as np

from pipeline.config import TrackSpec
from pipeline.frames import DetectPlan, Detections, Frame
from pipeline.metrics.registry import Metrics
from pipeline.runtime.track_feedback import TrackFeedbacks
from pipeline.stages.track import SETTLED_S, TrackStage

FPS = 15


def frame(seq: int, boxes: list[list[float]] | None, plan: DetectPlan | None = None) -> Frame:
    """Frame `seq` of a 640x360 camera at 15 fps; `boxes` None: the detector did not see it."""
    f = Frame("cam", seq, seq, Fraction(1, FPS), np.zeros((360, 640, 3), np.uint8), 0.0, plan=plan)
    if boxes is not None:
        f.detections = Detections(np.array(boxes, np.float32).reshape(-1, 4), np.full(len(boxes), 0.9, np.float32),
                                  np.zeros(len(boxes), np.int64))
        f.detected = True
    return f


def step(stage: TrackStage, f: Frame) -> Frame:
    (out,) = stage.process(f)
    return out


def walker(seq: int, speed: float = 4.0) -> list[float]:
    return [100 + speed * seq, 100, 140 + speed * seq, 200]


def test_frames_the_detector_did_not_see_get_the_tracks_as_predicted_rows_moving_on_and_age_no_track():
    stage = TrackStage(TrackSpec(max_age=3), Metrics())
    seen = []
    for seq in range(30):
        f = step(stage, frame(seq, [walker(seq)] if seq % 3 == 0 else None))
        det = f.detections
        assert det is not None and len(det) == 1 and det.track_id.tolist() == [1]
        assert det.predicted.tolist() == [seq % 3 != 0]
        seen.append(float(det.xyxy[0, 0]))
    assert all(b > a for a, b in zip(seen[6:], seen[7:]))  # the predicted box moves on with the object
    assert abs(seen[-1] - walker(29)[0]) < 4
    for seq in range(30, 60):  # ten times max_age frames unseen by the detector: no track ages
        assert step(stage, frame(seq, None)).detections.track_id.tolist() == [1]
    assert step(stage, frame(60, [walker(60)])).detections.track_id.tolist() == [1]


def test_a_run_on_regions_holds_the_tracks_it_did_not_look_at_beside_its_own_rows():
    stage = TrackStage(TrackSpec(max_age=2), Metrics())
    parked = [500, 200, 600, 260]
    step(stage, frame(0, [walker(0), parked]))
    region = DetectPlan(True, "motion", regions=np.array([[0, 0, 360, 360]], np.float32))
    for seq in range(1, 12):  # runs that look only where the walker is
        det = step(stage, frame(seq, [walker(seq)], region)).detections
        assert sorted(zip(det.track_id.tolist(), det.predicted.tolist())) == [(1, False), (2, True)]
        np.testing.assert_allclose(det.xyxy[det.track_id == 2][0], parked, atol=1)
    det = step(stage, frame(12, [walker(12), parked])).detections  # a run on the whole frame finds it again
    assert det.track_id.tolist() == [1, 2] and not det.predicted.any()
    for seq in range(13, 17):  # the whole frame looked at, the parked one missing: it ages as usual
        det = step(stage, frame(seq, [walker(seq)])).detections
    assert det.track_id.tolist() == [1]


def test_an_object_that_stopped_for_stationary_s_is_stationary_keeps_its_box_and_stops_moving_for_the_gate():
    feedbacks = TrackFeedbacks(True)
    feedback = feedbacks.open("cam", wait=True)
    stage = TrackStage(TrackSpec(stationary_s=1.0), Metrics(), feedbacks=feedbacks)
    rng = np.random.default_rng(1)
    flags, views = [], []
    for seq in range(60):
        if seq < 15:
            box = walker(seq, 6.0)
        else:  # it stopped: the detector's boxes jitter by a pixel or two
            box = (np.array(walker(14, 6.0)) + rng.normal(0, 1, 4)).tolist()
        det = step(stage, frame(seq, [box] if seq % 3 == 0 else None)).detections
        flags.append(bool(det.stationary[0]))
        views.append(feedback.view(seq, lambda: True))
        if seq > 40 and seq % 3:
            kept = det.xyxy[0]
    assert not any(flags[:15 + FPS - 3]) and all(flags[15 + FPS + 3:])  # after a second where it stopped
    assert views[10].moving.tolist() == [True] and views[-1].moving.tolist() == [False]
    assert [v.seq for v in views] == list(range(60))  # every frame's tracks go back to the gate
    np.testing.assert_allclose(kept, walker(14, 6.0), atol=3)  # predicted where it stands, not drifting
    assert not np.any(views[-1].velocity)


def test_an_object_standing_settles_for_the_gate_after_settled_s_long_before_it_is_stationary():
    """A person standing in a quiet scene is not re-detected at the rate for all of
    `stationary_s`; moving on, they move again for the gate at once."""
    feedbacks = TrackFeedbacks(True)
    feedback = feedbacks.open("cam", wait=True)
    stage = TrackStage(TrackSpec(stationary_s=10.0), Metrics(), feedbacks=feedbacks)
    rng = np.random.default_rng(2)
    standing = [300, 100, 340, 200]
    moving, stationary = [], []
    for seq in range(FPS * 4):
        box = standing if seq < FPS * 3 else walker(seq - FPS * 3 + 60, 8.0)  # stands 3 s, then walks off
        jitter = (np.array(box) + rng.normal(0, 1, 4)).tolist()
        det = step(stage, frame(seq, [jitter] if seq % 3 == 0 else None)).detections
        stationary.append(bool(det.stationary.any()))
        moving.append(feedback.view(seq, lambda: True).moving.tolist() == [True])
    settled = round(SETTLED_S * FPS)
    assert all(moving[3:settled - 3]) and not any(moving[settled + 3:FPS * 3])  # confirmed at its second run
    assert moving[FPS * 3 + 3]  # walked off its anchor: it moves again
    assert not any(stationary)  # nowhere near stationary_s


def test_a_run_that_failed_ages_no_track():
    stage = TrackStage(TrackSpec(max_age=1), Metrics())
    step(stage, frame(0, [walker(0)]))
    for seq in range(1, 6):
        failed = frame(seq, None)
        failed.detections = Detections.empty()  # what the detect stage leaves on a failed run
        assert step(stage, failed).detections.track_id.tolist() == [1]


def test_a_confirmed_tracks_rows_carry_its_first_detected_box_for_the_analytics():
    stage = TrackStage(TrackSpec(), Metrics())
    step(stage, frame(0, []))  # the camera's first update: empty, so the walker starts tentative
    tentative = step(stage, frame(1, [walker(1, speed=8)])).detections
    assert tentative.track_id.tolist() == [-1] and np.isnan(tentative.origin).all()
    for seq in (2, 3):
        det = step(stage, frame(seq, [walker(seq, speed=8)])).detections
        assert det.track_id.tolist() == [1]
        assert det.origin.tolist() == [walker(1, speed=8)]  # where it was first seen, not where it was confirmed
