"""The Kalman filters that predict the tracks' boxes, many at once."""
import numpy as np

from pipeline.stages import motion


def box(x, y, w=40, h=80):
    return [x, y, x + w, y + h]


def test_the_filters_learn_each_tracks_constant_velocity():
    mean, cov = motion.initiate(np.array([box(0, 0), box(300, 200, 60, 120)], np.float64))
    for i in range(1, 15):
        mean, cov = motion.predict(mean, cov)
        mean, cov = motion.update(mean, cov, np.array([box(10 * i, 0), box(300, 200 - 5 * i, 60, 120)], np.float64))
    mean, _ = motion.predict(mean, cov)
    boxes = motion.to_xyxy(mean)
    np.testing.assert_allclose(boxes[0, :2], [150, 0], atol=2.0)
    np.testing.assert_allclose(boxes[1, :2], [300, 125], atol=2.0)
    np.testing.assert_allclose(boxes[1, 2:] - boxes[1, :2], [60, 120], atol=1.0)


def test_a_box_goes_through_the_state_and_back_unchanged():
    b = np.array([box(12, 34, 56, 78)], np.float64)
    np.testing.assert_allclose(motion.to_xyxy(motion.to_xyah(b)), b)
