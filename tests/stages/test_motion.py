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


def textbook(mean, cov, boxes, steps):
    """ByteTrack's filter written with its 8x8 matrices: x' = F x, P' = F P F^T + Q;
    K = P H^T (H P H^T + R)^-1, x += K (z - H x), P -= K H P."""
    f, hm = np.eye(8) + np.eye(8, k=4), np.eye(4, 8)
    for z in boxes[:steps]:
        h = mean[3]
        q = np.array([h / 20, h / 20, 1e-2, h / 20, h / 160, h / 160, 1e-5, h / 160]) ** 2
        mean, cov = f @ mean, f @ cov @ f.T + np.diag(q)
        h = mean[3]
        r = np.diag(np.array([h / 20, h / 20, 1e-1, h / 20]) ** 2)
        k = cov @ hm.T @ np.linalg.inv(hm @ cov @ hm.T + r)
        mean = mean + k @ (motion.to_xyah(z[None])[0] - hm @ mean)
        cov = cov - k @ hm @ cov
    return mean


def test_the_filter_kept_per_axis_is_bytetracks_8x8_filter():
    rng = np.random.default_rng(3)
    boxes = np.array([box(5 * i + rng.normal(0, 3), 2 * i + rng.normal(0, 3), 40 + i, 80 + 2 * i)
                      for i in range(1, 12)], np.float64)
    mean, cov = motion.initiate(np.array([box(0, 0)], np.float64))
    h = mean[0, 3]
    std = np.array([h / 10, h / 10, 1e-2, h / 10, h / 16, h / 16, 1e-5, h / 16])
    expected = textbook(mean[0], np.diag(std ** 2), boxes, len(boxes))
    for z in boxes:
        mean, cov = motion.predict(mean, cov)
        mean, cov = motion.update(mean, cov, z[None])
    np.testing.assert_allclose(mean[0], expected, rtol=1e-9, atol=1e-9)
