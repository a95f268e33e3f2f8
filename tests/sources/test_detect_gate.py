"""Which frames the detector sees: the detection rate by the camera's time, and with
motion only frames that move, plus one refresh per `refresh_s` on a still scene."""
import av
import numpy as np
import pytest

from pipeline.config import MotionConfig
from pipeline.config.stages import DetectRate
from pipeline.sources.detect_gate import DetectGate, phase_of


def runs(gate: DetectGate, times: list[float], picture=None) -> list[int]:
    return [i for i, t in enumerate(times) if gate.plan(picture, t).run]


@pytest.mark.parametrize("camera_fps, fps, per_second", [(15, 5, 5), (25, 4, 4), (30, 5, 5), (10, 15, 10)])
def test_the_detection_rate_takes_the_first_frame_of_each_slot_of_the_cameras_time(camera_fps, fps, per_second):
    times = [i / camera_fps for i in range(camera_fps * 4)]
    taken = runs(DetectGate(DetectRate(fps=fps), MotionConfig()), times)
    assert len(taken) == per_second * 4
    if camera_fps % fps == 0:
        assert taken == list(range(0, len(times), camera_fps // fps))


def test_cameras_in_step_want_the_detector_in_different_frames_each_at_its_own_rate():
    """Sixteen 15 fps cameras at `fps: 5` whose timelines start together: each takes 5
    frames a second, every third frame (after the first), but not all the same third: the
    frames the detector is asked for at once are spread over the slot's three frame
    intervals."""
    times = [i / 15 for i in range(60)]
    taken = {cam: runs(DetectGate(DetectRate(fps=5), MotionConfig(), phase=phase_of(cam)), times)
             for cam in (f"cam{i}" for i in range(16))}
    assert all(len(t) in (20, 21) and set(np.diff(t[1:])) == {3} for t in taken.values())  # frame 0 opens the first
    at_once = [sum(i in t for t in taken.values()) for i in range(3, 6)]  # every camera once in frames 3-5
    assert sum(at_once) == 16 and max(at_once) <= 8
    assert 0 <= phase_of("dock") < 1


def test_jittered_timestamps_still_give_one_frame_per_slot():
    rng = np.random.default_rng(0)
    times = [i / 30 + rng.uniform(-0.008, 0.008) for i in range(300)]
    taken = runs(DetectGate(DetectRate(fps=5), MotionConfig()), sorted(times))
    assert 49 <= len(taken) <= 50
    gaps = np.diff([times[i] for i in taken])
    assert gaps.min() > 0.1


def test_without_a_rate_or_motion_every_frame_goes_to_the_detector():
    assert runs(DetectGate(DetectRate(), MotionConfig()), [i / 15 for i in range(30)]) == list(range(30))


def still_and_moving(frames: int, moving: range) -> list[av.VideoFrame]:
    """A grey picture with sensor noise; a bright block slides across it on the frames of `moving`."""
    rng = np.random.default_rng(1)
    out = []
    for i in range(frames):
        img = np.clip(96 + rng.normal(0, 3, (90, 160)), 0, 255).astype(np.uint8)
        if i in moving:
            x = 10 + 4 * (i - moving.start)
            img[30:60, x:x + 15] = 230
        out.append(av.VideoFrame.from_ndarray(img, format="gray"))
    return out


def test_on_a_still_scene_the_detector_runs_once_per_refresh_s_and_on_every_frame_of_the_rate_that_moves():
    pictures = still_and_moving(150, range(60, 90))  # 10 s at 15 fps; moving from 4 s to 6 s
    gate = DetectGate(DetectRate(fps=5, motion=True, refresh_s=2.0), MotionConfig())
    plans = [gate.plan(vf, i / 15) for i, vf in enumerate(pictures)]
    ran = [i for i, p in enumerate(plans) if p.run]
    reasons = {i: plans[i].reason for i in ran}
    assert reasons[0] == "first"
    moving = [i for i in ran if 60 <= i < 90]
    assert moving == list(range(60, 90, 3)) and all(reasons[i] == "motion" for i in moving)
    still = [i for i in ran if i < 60 or i >= 96]  # (the block's trail may still show just after it left)
    assert all((b - a) / 15 >= 2.0 - 1e-6 for a, b in zip(still, still[1:]))  # at most once per refresh_s
    assert [reasons[i] for i in still[1:]] == ["refresh"] * (len(still) - 1)
    gated = [p for p in plans if not p.run and p.reason == "still"]
    assert len(gated) == 50 - len(ran)  # every other frame of the rate was gated


def test_a_track_still_moving_runs_the_detector_on_a_still_picture_and_its_regions_hold_it():
    """The tracker's view of half a second ago says a person still walks (motion missed
    it); the run's region holds where it walks now."""
    from pipeline.runtime.track_feedback import TrackFeedback, TrackView

    feedback = TrackFeedback(wait=True)
    gate = DetectGate(DetectRate(fps=5, motion=True, refresh_s=100, regions=True), MotionConfig(), least=64,
                      budget=1, feedback=feedback)
    still = still_and_moving(30, range(0))
    plans = []
    for i, vf in enumerate(still[:12]):
        t = i / 15
        if i % 3 == 0 and i:  # the tracker has updated on every frame up to the one LAG_S ago
            for seq in range(i - 8, i - 6):
                feedback.publish(TrackView(seq, seq / 15, np.array([[20, 20, 30, 40], [100, 50, 140, 70]], np.float32),
                                           np.array([[15.0, 0.0], [0.0, 0.0]], np.float32), np.array([True, False])))
        plans.append(gate.plan(vf, t, lambda: False))
        gate.handed(i, t)
    ran = [(i, p.reason) for i, p in enumerate(plans) if p.run]
    assert ran[0] == (0, "first") and all(r == "tracks" for _, r in ran[1:]) and len(ran) > 1
    last = plans[ran[-1][0]]
    assert last.regions is not None and len(last.regions) == 1
    x1, y1, x2, y2 = last.regions[0]
    assert x1 <= 20 + 15 * 0.4 and x2 >= 30 + 15 * 0.4  # where the walker is by now


def test_a_runs_regions_hold_the_motion_the_moving_tracks_and_whole_the_still_tracks_the_motion_touches():
    from pipeline.runtime.track_feedback import TrackView
    from pipeline.sources.detect_gate import _to_cover

    motion = np.array([[100, 100, 120, 120]], np.float32)
    tracks = TrackView(0, 0.0, np.array([[0, 0, 10, 10], [110, 90, 200, 150], [500, 500, 520, 540]], np.float32),
                       np.array([[10.0, 0.0], [0.0, 0.0], [0.0, 0.0]], np.float32), np.array([True, False, False]))
    cover = _to_cover(motion, tracks.moving_at(1.0), tracks)
    assert cover.tolist() == [[100, 100, 120, 120], [10, 0, 20, 10], [110, 90, 200, 150]]  # not the car far away


RATE = {0, *range(9, 60, 3)}  # the first frame, then the rate's frames once the tracker's view (LAG_S) says it moves


def walk_to_a_line(border_s: float) -> list[tuple[int, str]]:
    """A person tracked walking right at 60 px/s towards a line at x = 100, behind `fps: 5`
    on a 15 fps camera (the picture still: no motion); the frames the detector sees."""
    from pipeline.config.stages import CameraAnalyticsSpec, LineSpec
    from pipeline.frames import ClassNames
    from pipeline.runtime.track_feedback import TrackFeedback, TrackView
    from pipeline.sources.borders import Borders

    feedback = TrackFeedback(wait=True)
    line = CameraAnalyticsSpec(lines=[LineSpec(name="door", points=[(100, 0), (100, 89)])])
    gate = DetectGate(DetectRate(fps=5, motion=True, refresh_s=100, border_s=border_s), MotionConfig(),
                      feedback=feedback, borders=Borders.of(line, ClassNames(["person"])))
    plans = []
    for i, vf in enumerate(still_and_moving(60, range(0))):
        x = 60 * i / 15 - 40  # the anchor's x on frame i: at the line at 2.33 s
        feedback.publish(TrackView(i, i / 15, np.array([[x - 5, 40, x + 5, 80]], np.float32),
                                   np.array([[60.0, 0.0]], np.float32), np.array([True]), np.array([0])))
        plans.append(gate.plan(vf, i / 15, lambda: False))
        gate.handed(i, i / 15)
    return [(i, p.reason) for i, p in enumerate(plans) if p.run]


def test_behind_a_rate_every_frame_goes_to_the_detector_while_a_moving_track_is_border_s_from_a_line():
    ran = walk_to_a_line(0.5)
    border = [i for i, r in ran if r == "border"]
    assert all(i % 3 for i in border)  # between the rate's frames only
    assert border and all(abs(i / 15 - 140 / 60) <= 0.5 + 1e-6 for i in border)  # around the crossing only
    assert len(border) == 2 * len(range(28, 43)) // 3  # the frames between the rate's, 0.5 s either side
    assert {i for i, r in ran if r != "border"} == RATE


def test_with_border_s_0_the_rate_holds_at_lines_too():
    assert {i for i, _ in walk_to_a_line(0.0)} == RATE


def test_behind_a_rate_the_frames_after_one_whose_motion_touches_a_line_go_to_the_detector():
    """A block slides right across a still picture, over a line at x = 80 (no tracker):
    the frames between the rate's follow the detector only while the motion is at the line."""
    from pipeline.config.stages import CameraAnalyticsSpec, LineSpec
    from pipeline.frames import ClassNames
    from pipeline.sources.borders import Borders

    line = CameraAnalyticsSpec(lines=[LineSpec(name="door", points=[(80, 0), (80, 89)])])
    gate = DetectGate(DetectRate(fps=5, motion=True, refresh_s=100), MotionConfig(),
                      borders=Borders.of(line, ClassNames(["person"])))
    pictures = still_and_moving(60, range(15, 45))  # x = 10 + 4 * (i - 15): over x = 80 from about frame 29 to 32
    plans = [gate.plan(vf, i / 15) for i, vf in enumerate(pictures)]
    border = [i for i, p in enumerate(plans) if p.run and p.reason == "border"]
    motion = {i: p.motion.boxes for i, p in enumerate(plans) if p.motion is not None}
    assert border and all(i % 3 for i in border)
    touching = {i for i, boxes in motion.items() if any(x1 <= 80 <= x2 for x1, _, x2, _ in boxes)}
    assert {i - i % 3 for i in border} == touching  # the frames after each rate frame whose motion was at the line
    assert all(abs(i - 30) <= 6 for i in border)


def test_motion_on_a_settled_track_runs_nothing_and_motion_off_it_or_past_it_does():
    """A person who stopped is still motion until their picture fades into the background
    (`background_s` and more): lying on their settled track, it is theirs."""
    from pipeline.runtime.track_feedback import TrackView
    from pipeline.sources.detect_gate import off_settled

    tracks = TrackView(0, 0.0, np.array([[100, 100, 140, 200], [300, 100, 340, 200]], np.float32),
                       np.zeros((2, 2), np.float32), np.array([False, True]))  # the first settled, the second walks
    motion = np.array([[95, 95, 150, 205],     # the settled one's own blob, a little larger than its box
                       [300, 100, 340, 200],   # on the walking one: counts
                       [500, 50, 540, 90],     # on nobody: counts
                       [90, 90, 260, 210]],    # from the settled one far past it: someone else there, counts
                      np.float32)
    assert off_settled(motion, tracks).tolist() == motion[1:].tolist()
    assert off_settled(motion, None).tolist() == motion.tolist()
    assert off_settled(motion[:1], TrackView(0, 0.0)).tolist() == motion[:1].tolist()  # no tracks at all
