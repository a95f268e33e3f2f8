"""Motion on the luminance plane: silent on sensor noise and slow light changes, a box
around what moves, recalibrated when the whole picture changes, blind under its mask,
and the same on padded rows, semi-planar and 10-bit pictures."""
import av
import cv2
import numpy as np
import pytest

from pipeline.config import MotionConfig
from pipeline.sources.motion_detector import MotionDetector, luma

W, H = 320, 180
RATE = 15


@pytest.fixture(scope="module")
def scene() -> np.ndarray:
    rng = np.random.default_rng(1)
    return cv2.resize(rng.integers(40, 200, (9, 16, 3), np.uint8), (W, H), interpolation=cv2.INTER_CUBIC)


def picture(scene: np.ndarray, rng, obj: tuple[int, int] | None = None, gain: float = 1.0,
            fmt: str = "yuv420p", noise: float = 4.0) -> av.VideoFrame:
    """The scene with sensor noise, a white block at `obj` (top-left), brightness x `gain`."""
    img = scene.astype(np.float32) * gain + rng.normal(0, noise, scene.shape)
    img = np.clip(img, 0, 255).astype(np.uint8)
    if obj is not None:
        x, y = obj
        img[y:y + 40, x:x + 20] = (250, 250, 250)
    return av.VideoFrame.from_ndarray(img, format="bgr24").reformat(format=fmt)


def run(detector: MotionDetector, pictures: list[av.VideoFrame], start: int = 0) -> list:
    return [detector(vf, (start + i) / RATE) for i, vf in enumerate(pictures)]


@pytest.mark.parametrize("flat", [False, True])
def test_a_still_scene_with_sensor_noise_has_no_motion(scene, flat):
    """Also a flat grey one, whose contrast stretch must not blow the noise up into motion."""
    rng = np.random.default_rng(2)
    still = np.full_like(scene, 96) if flat else scene
    results = run(MotionDetector(MotionConfig()), [picture(still, rng, noise=6) for _ in range(60)])
    assert results[0].recalibrated  # the first picture is the background
    assert not any(m.moving for m in results[1:])


def test_a_moving_object_gets_a_box_around_it_in_frame_pixels(scene):
    rng = np.random.default_rng(3)
    detector = MotionDetector(MotionConfig())
    run(detector, [picture(scene, rng) for _ in range(10)])
    for i in range(10):
        x = 40 + 12 * i
        m = detector(picture(scene, rng, (x, 70)), (10 + i) / RATE)
        assert m.moving, m
        x1, y1 = m.boxes[:, :2].min(axis=0)
        x2, y2 = m.boxes[:, 2:].max(axis=0)
        assert x1 <= x + 2 and x2 >= x + 18 and y1 <= 72 and y2 >= 108, (m.boxes, x)  # it covers the block
        assert x2 - x1 < 80 and y2 - y1 < 80  # ... and not much more


def test_motion_that_stopped_changing_is_not_live_and_live_again_when_it_moves(scene):
    """A block that moves is live motion; once it stands (and where it stood before it
    moved off), the change against the background stays until it fades, but nothing in it
    changes from one measured picture to the next: not live. It moving on is live again."""
    rng = np.random.default_rng(7)
    detector = MotionDetector(MotionConfig())
    run(detector, [picture(scene, rng) for _ in range(10)])
    moving = [detector(picture(scene, rng, (40 + 12 * i, 70)), (10 + i) / RATE) for i in range(5)]
    assert all(m.moving and m.live is not None and m.live.any() for m in moving)
    stands = [detector(picture(scene, rng, (100, 70)), (15 + i) / RATE) for i in range(5)]
    assert all(m.moving for m in stands[1:])  # the block is not background yet...
    assert not any(len(m.live_boxes) for m in stands[1:])  # ... but nothing in it changes
    moves_on = detector(picture(scene, rng, (160, 70)), 20 / RATE)
    assert len(moves_on.live_boxes) and moves_on.live_boxes[:, 2].max() >= 178  # where it is now


def test_a_slow_change_of_light_is_no_motion_and_a_sudden_one_recalibrates(scene):
    rng = np.random.default_rng(4)
    detector = MotionDetector(MotionConfig(contrast=False))
    run(detector, [picture(scene, rng) for _ in range(5)])
    ramp = [picture(scene, rng, gain=1.0 + 0.003 * i) for i in range(100)]  # +30% over 7 s
    assert not any(m.moving for m in run(detector, ramp, start=5))
    switched = run(detector, [picture(scene, rng, gain=0.3) for _ in range(10)], start=105)  # lights off
    assert switched[0].recalibrated and not switched[0].moving and switched[0].changed >= 0.8
    assert not any(m.moving for m in switched)


def test_with_contrast_a_change_of_overall_brightness_cancels_out(scene):
    rng = np.random.default_rng(5)
    detector = MotionDetector(MotionConfig())
    run(detector, [picture(scene, rng) for _ in range(5)])
    m = detector(picture(scene, rng, gain=1.25), 5 / RATE)
    assert not m.recalibrated and m.changed < 0.05


def test_motion_under_the_mask_is_ignored(scene):
    rng = np.random.default_rng(6)
    mask = [[(0, 0), (160, 0), (160, 180), (0, 180)]]  # the left half
    detector = MotionDetector(MotionConfig(mask=mask))
    run(detector, [picture(scene, rng) for _ in range(5)])
    left = [detector(picture(scene, rng, (30 + 10 * i, 60)), (5 + i) / RATE) for i in range(5)]
    assert not any(m.moving for m in left)
    right = detector(picture(scene, rng, (240, 60)), 10 / RATE)
    assert right.moving and right.boxes[0, 0] >= 160 - 16


@pytest.mark.parametrize("fmt", ["nv12", "yuv420p10le", "p010le", "yuv444p", "rgb24"])
def test_other_pixel_formats_give_the_same_motion(scene, fmt):
    def boxes(f: str) -> np.ndarray:
        rng = np.random.default_rng(7)
        detector = MotionDetector(MotionConfig())
        run(detector, [picture(scene, rng, fmt=f) for _ in range(5)])
        return detector(picture(scene, rng, (100, 60), fmt=f), 5 / RATE).boxes

    reference, other = boxes("yuv420p"), boxes(fmt)
    assert len(reference) == len(other) >= 1
    assert np.abs(reference - other).max() <= 2 * W / 178 + 1, (reference, other)  # within a small pixel or two


def test_padded_rows_are_skipped():
    """A width whose rows FFmpeg pads: the plane is read by its line size, not its width."""
    img = np.zeros((90, 150, 3), np.uint8)
    img[:, 100:] = 255
    vf = av.VideoFrame.from_ndarray(img, format="bgr24").reformat(format="yuv420p")
    assert vf.planes[0].line_size > vf.planes[0].width
    y, shift = luma(vf)
    assert y.shape == (90, 150) and shift == 0
    assert y[:, :95].max() < 40 and y[:, 105:].min() > 200  # each row starts where it should


def test_a_new_picture_size_starts_afresh(scene):
    rng = np.random.default_rng(8)
    detector = MotionDetector(MotionConfig())
    run(detector, [picture(scene, rng) for _ in range(3)])
    small = av.VideoFrame.from_ndarray(cv2.resize(scene, (160, 90)), format="bgr24").reformat(format="yuv420p")
    m = detector(small, 1.0)
    assert m.recalibrated and not m.moving
