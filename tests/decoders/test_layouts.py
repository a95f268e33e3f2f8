"""Each output layout decoded against a hand-computed case."""
import math

import numpy as np
import pytest

from pipeline.config import ModelConfig
from pipeline.decoders.layouts import DetectionDecoder, LayoutError, classify, yolox_grid

LABELS = ["a", "b", "c", "d"]


def model(layout: str, size: int = 64, **kw) -> ModelConfig:
    return ModelConfig(name="m", path="", layout=layout, input_size=(size, size), labels=LABELS, **kw)


def test_yolox_grid_is_row_major_per_stride():
    grid, stride = yolox_grid(64, 64)
    assert len(grid) == 8 * 8 + 4 * 4 + 2 * 2
    assert grid[19].tolist() == [3, 2] and stride[19, 0] == 8  # row 2, column 3 of the stride-8 grid
    assert grid[64 + 5].tolist() == [1, 1] and stride[64 + 5, 0] == 16


def test_yolox_raw_head_decodes_grid_offsets_and_exp_sizes():
    out = np.zeros((1, 84, 5 + 4), np.float32)
    out[0, 19, :4] = [0.5, 0.5, math.log(2), math.log(4)]
    out[0, 19, 4] = 0.9
    out[0, 19, 5 + 2] = 0.8
    out[0, 69, :4] = [0.0, 0.0, 0.0, 0.0]  # stride 16, cell (1, 1): centre (16, 16), size 16x16
    out[0, 69, 4] = 0.5
    out[0, 69, 5 + 1] = 0.9
    out[0, 70, 4] = 0.9  # high objectness but no class score: filtered
    det = DetectionDecoder(model("yolox", score_threshold=0.3)).decode([out], 1)[0]
    assert det.class_id.tolist() == [2, 1]
    np.testing.assert_allclose(det.score, [0.72, 0.45], rtol=1e-6)
    np.testing.assert_allclose(det.xyxy, [[20, 4, 36, 36], [8, 8, 24, 24]], atol=1e-5)


def test_yolov5_uses_objectness_times_class():
    out = np.zeros((2, 3, 9), np.float32)
    out[1, 0] = [30, 40, 10, 20, 0.5, 0, 0, 0, 0.8]
    out[1, 1] = [30, 40, 10, 20, 0.2, 0, 0, 0, 0.9]  # score 0.18 < 0.3
    dets = DetectionDecoder(model("yolov5")).decode([out], 2)
    assert len(dets[0]) == 0
    assert dets[1].class_id.tolist() == [3]
    np.testing.assert_allclose(dets[1].score, [0.4])
    np.testing.assert_allclose(dets[1].xyxy, [[25, 30, 35, 50]])


def test_yolov8_is_channels_first_without_objectness():
    out = np.zeros((1, 8, 5), np.float32)
    out[0, :4, 2] = [100, 50, 40, 20]
    out[0, 4 + 1, 2] = 0.7
    out[0, :4, 4] = [10, 10, 4, 4]
    out[0, 4 + 0, 4] = 0.2
    det = DetectionDecoder(model("yolov8")).decode([out], 1)[0]
    assert det.class_id.tolist() == [1]
    np.testing.assert_allclose(det.xyxy, [[80, 40, 120, 60]])
    np.testing.assert_allclose(det.score, [0.7])


def test_class_filter_takes_the_best_allowed_class():
    out = np.zeros((1, 8, 1), np.float32)
    out[0, :4, 0] = [10, 10, 4, 4]
    out[0, 4:, 0] = [0.9, 0.1, 0.6, 0.0]
    det = DetectionDecoder(model("yolov8", classes=["c", "d"])).decode([out], 1)[0]
    assert det.class_id.tolist() == [2]
    np.testing.assert_allclose(det.score, [0.6])


def test_nms_runs_per_class():
    out = np.zeros((1, 8, 3), np.float32)
    for i, cls in enumerate([0, 0, 1]):
        out[0, :4, i] = [50, 50, 20, 20]
        out[0, 4 + cls, i] = 0.9 - 0.1 * i
    det = DetectionDecoder(model("yolov8")).decode([out], 1)[0]
    assert sorted(det.class_id.tolist()) == [0, 1]


def test_e2e_rows_with_batch_index_are_split_per_image_without_nms():
    out = np.array([[0, 1, 2, 11, 12, 0.9, 3],
                    [1, 5, 5, 9, 9, 0.8, 0],
                    [0, 1, 2, 11, 12, 0.85, 3],   # same box again: kept, NMS is the model's job
                    [1, 0, 0, 1, 1, 0.1, 0]], np.float32)
    dets = DetectionDecoder(model("e2e")).decode([out], 2)
    np.testing.assert_allclose(dets[0].xyxy, [[1, 2, 11, 12], [1, 2, 11, 12]])
    assert dets[0].class_id.tolist() == [3, 3]
    assert dets[1].class_id.tolist() == [0] and len(dets[1]) == 1


def test_e2e_batched_six_column_form():
    out = np.zeros((2, 4, 6), np.float32)
    out[1, 0] = [3, 4, 5, 6, 0.95, 2]
    dets = DetectionDecoder(model("e2e")).decode([out], 2)
    assert len(dets[0]) == 0
    np.testing.assert_allclose(dets[1].xyxy, [[3, 4, 5, 6]])


def test_wrong_shapes_raise_a_layout_error():
    with pytest.raises(LayoutError, match="expects 84 rows"):
        DetectionDecoder(model("yolox")).decode([np.zeros((1, 100, 9), np.float32)], 1)
    with pytest.raises(LayoutError, match=r"\[n, 7\]"):
        DetectionDecoder(model("e2e")).decode([np.zeros((5, 5), np.float32)], 1)
    with pytest.raises(LayoutError, match="3-D"):
        DetectionDecoder(model("yolov8")).decode([np.zeros((8, 5), np.float32)], 1)


def test_classify_softmax_top1():
    ids, scores = classify(np.array([[0.0, math.log(3.0)], [2.0, 0.0]], np.float32), softmax=True)
    assert ids.tolist() == [1, 0]
    np.testing.assert_allclose(scores[0], 0.75, rtol=1e-6)
