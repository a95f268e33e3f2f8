"""Letterbox geometry and normalisation; boxes map back to frame pixels exactly."""
import numpy as np
import pytest

from pipeline.config import ModelConfig
from pipeline.preprocess import Preprocessor


def model(letterbox: str, **kw) -> ModelConfig:
    return ModelConfig(name="m", path="", layout="yolox", input_size=(416, 416), letterbox=letterbox, **kw)


def test_top_left_letterbox_matches_the_yolox_recipe():
    img = np.full((576, 768, 3), 200, np.uint8)
    model_input, box = Preprocessor(model("top_left"))(img)
    tensor = model_input.numpy()
    r = min(416 / 576, 416 / 768)
    assert box.scale_x == box.scale_y == pytest.approx(r)
    assert (box.pad_x, box.pad_y) == (0, 0)
    assert tensor.shape == (3, 416, 416) and tensor.dtype == np.float32
    h = int(576 * r)
    assert np.all(tensor[:, :h, :] == 200) and np.all(tensor[:, h:, :] == 114)


@pytest.mark.parametrize("mode", ["top_left", "center", "stretch", "center_crop"])
def test_box_round_trip_through_the_letterbox(mode):
    img = np.zeros((272, 640, 3), np.uint8)
    _, box = Preprocessor(model(mode))(img)
    frame_boxes = np.array([[100, 50, 300, 250], [0, 0, 640, 272]], np.float32)
    back = box.to_frame(box.to_input(frame_boxes))
    if mode == "center_crop":  # the crop cuts the frame's sides: those map back clipped
        np.testing.assert_allclose(back[0], frame_boxes[0], atol=1e-3)
    else:
        np.testing.assert_allclose(back, frame_boxes, atol=1e-3)


def test_centered_padding_splits_the_border():
    _, box = Preprocessor(model("center"))(np.zeros((272, 640, 3), np.uint8))
    assert box.pad_x == 0 and box.pad_y == (416 - int(272 * 416 / 640)) // 2


def test_rgb_order_and_normalisation():
    img = np.zeros((10, 10, 3), np.uint8)
    img[..., 0], img[..., 1], img[..., 2] = 10, 20, 30  # B, G, R
    m = model("stretch", color="rgb", scale=1 / 255, mean=(0.5, 0.5, 0.5), std=(0.25, 0.25, 0.25))
    tensor = Preprocessor(m)(img)[0].numpy()
    expected = [(30 / 255 - 0.5) / 0.25, (20 / 255 - 0.5) / 0.25, (10 / 255 - 0.5) / 0.25]
    np.testing.assert_allclose(tensor[:, 0, 0], expected, rtol=1e-5)


def test_boxes_mapped_back_are_clipped_to_the_frame():
    _, box = Preprocessor(model("top_left"))(np.zeros((272, 640, 3), np.uint8))
    mapped = box.to_frame(np.array([[-20, -5, 500, 400], [10, 10, 100, 100]], np.float32))
    np.testing.assert_allclose(mapped, [[0, 0, 640, 272], [10 / box.scale_x, 10 / box.scale_y,
                                                          100 / box.scale_x, 100 / box.scale_y]], rtol=1e-5)
