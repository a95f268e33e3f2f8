"""What an ONNX file says about itself, read as Ultralytics writes it and never run."""
from __future__ import annotations

import pytest

from pipeline.config.model_defaults import file_defaults, layout_candidates
from pipeline.config.model_file import MetadataError, ModelFile, Tensor, read_model_file


def described(metadata: dict[str, str], output: tuple = ("batch", 84, 8400),
              image: tuple = ("batch", 3, "height", "width")) -> ModelFile:
    return ModelFile("m.onnx", [Tensor("images", image)], [Tensor("output0", output)], metadata)


def test_names_and_imgsz_are_read_in_the_formats_ultralytics_writes():
    mf = described({"names": "{0: 'person', 1: 'bicycle', 2: 'traffic light'}", "imgsz": "[384, 640]",
                    "stride": "32", "batch": "1", "task": "detect", "author": "Ultralytics"})
    assert mf.names() == ["person", "bicycle", "traffic light"]
    assert mf.imgsz() == (640, 384)  # Ultralytics writes [height, width]
    assert mf.number("stride") == 32 and mf.number("batch") == 1 and mf.family == "ultralytics"
    assert described({"names": "['a', 'b']", "imgsz": "320"}).names() == ["a", "b"]


def test_hostile_metadata_is_refused_and_nothing_in_it_runs(tmp_path):
    pwned = tmp_path / "pwned"
    mf = described({"names": f"__import__('os').system('touch {pwned}')"})
    with pytest.raises(MetadataError) as e:
        mf.names()
    assert "metadata names" in str(e.value) and "refused" in str(e.value) and "\n" not in str(e.value)
    assert not pwned.exists()


@pytest.mark.parametrize("key,value", [("names", "{0: 'a', 2: 'c'}"), ("names", "{0: 'a'"), ("imgsz", "[1, 2, 3]"),
                                       ("stride", "'32'"), ("names", "[" * 200_000)])
def test_damaged_metadata_is_a_clear_error(key, value):
    mf = described({key: value})
    with pytest.raises(MetadataError, match=f"metadata {key}"):
        mf.names() if key == "names" else mf.imgsz() if key == "imgsz" else mf.number(key)


@pytest.mark.parametrize("output,layouts", [
    (("batch", 84, 8400), ("yolov8",)), (("batch", 84, "anchors"), ("yolov8",)),
    (("batch", 3549, 85), ("yolox", "yolov5")), (("batch", "anchors", 85), ("yolox", "yolov5")),
    (("batch", 300, 6), ("e2e",)), (("n", 7), ("e2e",)), (("batch", 1000), ("classifier",)),
    (("batch", 10, 1, 1), ("classifier",)), (("batch", 116, 8400, 2), ())])
def test_the_output_shape_tells_the_layout(output, layouts):
    assert layout_candidates(described({}, output))[0] == layouts


def test_a_segmentation_export_is_not_taken_for_a_detector():
    layouts, why = layout_candidates(described({"task": "segment"}, ("batch", 116, 8400)))
    assert layouts == () and "segment" in why


def test_an_ultralytics_export_supplies_every_setting_and_the_input_shape_beats_imgsz():
    mf = described({"author": "Ultralytics", "names": "{0: 'a', 1: 'b'}", "imgsz": "[640, 640]", "task": "detect"},
                   output=("batch", 6, 8400), image=(1, 3, 480, 640))
    found = file_defaults(mf, {"layout", "input_size", "labels", "color", "scale", "letterbox"})
    assert {k: s.value for k, s in found.values.items()} == {
        "layout": "yolov8", "input_size": (640, 480), "labels": ["a", "b"], "color": "rgb", "scale": 1 / 255,
        "letterbox": "center"}
    assert "input shape" in found.values["input_size"].why and not found.missing


def test_catalogued_files_are_read(model_path):
    mf = read_model_file(model_path("yolox_nano.onnx"))
    assert mf.inputs[0].shape == ("batch", 3, 416, 416) and mf.outputs[0].shape == ("batch", 3549, 85)
    assert mf.fixed_size() == (416, 416) and len(mf.names()) == 80 and mf.family is None
