"""What a reload changes in a camera's own thread: its motion mask, and the lines and
zone edges its detect gate watches behind a rate."""
import numpy as np

from pipeline.config import MotionConfig
from pipeline.config.stages import CameraAnalyticsSpec, DetectRate, LineSpec
from pipeline.frames import ClassNames
from pipeline.runtime.track_feedback import TrackFeedback
from pipeline.sources.borders import Borders
from pipeline.sources.detect_gate import DetectGate
from pipeline.sources.motion_detector import MotionDetector

from sources.test_motion_detector import RATE, picture, run, scene  # noqa: F401 (scene: a fixture)


def test_a_new_mask_blinds_the_motion_under_it_from_the_next_picture(scene):  # noqa: F811
    rng = np.random.default_rng(6)
    detector = MotionDetector(MotionConfig())
    run(detector, [picture(scene, rng) for _ in range(5)])
    assert detector(picture(scene, rng, (30, 60)), 5 / RATE).moving
    detector.set_mask([[(0, 0), (160, 0), (160, 180), (0, 180)]])  # the left half
    run(detector, [picture(scene, rng) for _ in range(3)], 6)  # the fresh background
    assert not any(detector(picture(scene, rng, (30 + 10 * i, 60)), (9 + i) / RATE).moving for i in range(4))
    assert detector(picture(scene, rng, (240, 60)), 13 / RATE).moving


def borders(x: float) -> Borders:
    return Borders.of(CameraAnalyticsSpec(lines=[LineSpec(name="door", points=[(x, 0), (x, 89)])]),
                      ClassNames(["person"]))


def test_the_gate_watches_moved_lines_and_says_when_it_cannot_take_new_ones():
    rate = DetectRate(fps=5, border_s=0.5)
    gate = DetectGate(rate, MotionConfig(), feedback=TrackFeedback(wait=False), borders=borders(100))
    assert gate.watch(borders(200)) and gate.borders.segments[0, 0, 0] == 200
    assert not gate.watch(Borders())  # it reads its tracks for the borders alone: needs a restart
    without = DetectGate(rate, MotionConfig())
    assert not without.watch(borders(200)) and not without.borders  # no tracks read: needs a restart
    assert DetectGate(DetectRate(), MotionConfig()).watch(borders(200))  # no rate: every frame is seen anyway
