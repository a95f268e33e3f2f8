"""NMS against hand-computed cases."""
import numpy as np

from pipeline.decoders.nms import iou_matrix, nms


def test_iou_of_hand_computed_boxes():
    a = np.array([[0, 0, 10, 10]], np.float32)
    b = np.array([[5, 0, 15, 10], [20, 20, 30, 30], [0, 0, 10, 10]], np.float32)
    # overlap 5x10=50, union 100+100-50=150
    np.testing.assert_allclose(iou_matrix(a, b)[0], [50 / 150, 0.0, 1.0], rtol=1e-6)


def test_nms_keeps_the_best_of_overlapping_boxes_and_separate_ones():
    boxes = np.array([[0, 0, 10, 10], [1, 0, 11, 10], [50, 50, 60, 60], [0, 0, 10, 9]], np.float32)
    scores = np.array([0.8, 0.9, 0.7, 0.6], np.float32)
    keep = nms(boxes, scores, 0.5)
    assert keep.tolist() == [1, 2]


def test_nms_threshold_is_inclusive_of_lower_overlaps():
    boxes = np.array([[0, 0, 10, 10], [5, 0, 15, 10]], np.float32)  # IoU 1/3
    scores = np.array([0.9, 0.8], np.float32)
    assert nms(boxes, scores, 0.34).tolist() == [0, 1]
    assert nms(boxes, scores, 0.33).tolist() == [0]


def test_class_aware_nms_never_suppresses_across_classes():
    boxes = np.array([[0, 0, 10, 10], [0, 0, 10, 10], [0, 0, 10, 10]], np.float32)
    scores = np.array([0.9, 0.8, 0.7], np.float32)
    classes = np.array([0, 1, 0])
    assert nms(boxes, scores, 0.5, classes).tolist() == [0, 1]
    assert nms(boxes, scores, 0.5).tolist() == [0]


def test_max_keep_and_empty_input():
    boxes = np.array([[i * 20, 0, i * 20 + 10, 10] for i in range(5)], np.float32)
    scores = np.linspace(0.9, 0.5, 5).astype(np.float32)
    assert nms(boxes, scores, 0.5, max_keep=2).tolist() == [0, 1]
    assert nms(np.zeros((0, 4), np.float32), np.zeros(0, np.float32), 0.5).tolist() == []
