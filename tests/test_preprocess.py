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


def _iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    lo, hi = np.maximum(a[:, None, :2], b[None, :, :2]), np.minimum(a[:, None, 2:], b[None, :, 2:])
    inter = np.prod(np.clip(hi - lo, 0, None), axis=2)
    area = lambda z: np.prod(z[:, 2:] - z[:, :2], axis=1)  # noqa: E731
    return inter / (area(a)[:, None] + area(b)[None, :] - inter + 1e-9)


def _matched(a, b) -> list[float]:
    """For each box of `a`, its best IoU with a box of the same class in `b`."""
    if not len(a[0]):
        return []
    if not len(b[0]):
        return [0.0] * len(a[0])
    return list((_iou(a[0], b[0]) * (a[1][:, None] == b[1][None, :])).max(1))


@pytest.mark.parametrize("clip,size", [("vtest.mp4", (1920, 1080)), ("bikes.mp4", None)])
def test_the_detector_input_made_from_the_decoded_picture_gives_the_boxes_of_the_bgr_picture(
        clip, size, sample_path, model_path, tmp_path):
    """The tolerance docs/outputs.md states: of either way's boxes, 90% have a box of the same
    class at IoU >= 0.5 in the other, with a median IoU of 0.95 or more."""
    import av
    import onnxruntime as ort

    from conftest import detector_model
    from pipeline.config import parse_config
    from pipeline.decoders.layouts import DetectionDecoder
    from pipeline.frames import Frame

    config = parse_config({"sources": [{"id": "c", "uri": sample_path(clip)}], "graph": [{"detect": {"model": "detector"}}],
                           "models": {"detector": detector_model(model_path)}}, tmp_path)
    m = config.detector
    session = ort.InferenceSession(m.path, providers=["CPUExecutionProvider"])
    decoder = DetectionDecoder(m)

    def boxes(model_input, box):
        out = session.run(None, {session.get_inputs()[0].name: model_input.numpy()[None]})
        det = decoder.decode(out, 1)[0]
        return box.to_frame(det.xyxy), det.class_id

    bgr_way, picture_way = Preprocessor(m), Preprocessor(m, from_picture=True)
    ious = []
    with av.open(sample_path(clip)) as c:
        for i, vf in enumerate(c.decode(video=0)):
            if i >= 60:
                break
            if i % 6:
                continue
            vf = vf.reformat(*size, "yuv420p") if size else vf
            frame = Frame(camera="c", seq=i, pts=None, time_base=None, image=None, t_capture=0.0, picture=vf)
            by_picture = boxes(*picture_way.frame(frame))
            assert not frame.converted
            by_bgr = boxes(*bgr_way.frame(frame))
            ious += _matched(by_bgr, by_picture) + _matched(by_picture, by_bgr)
    ious = np.array(ious)
    assert len(ious) > 20
    assert (ious >= 0.5).mean() >= 0.9 and np.median(ious) >= 0.95, ((ious >= 0.5).mean(), np.median(ious))
