"""`pipeline models inspect` on every catalogued model and on an Ultralytics-style export:
the right layout, size and names, and a model block that a config can take as it is."""
from __future__ import annotations

import subprocess
import sys
import threading

import pytest
import yaml

from conftest import ROOT
from exports import make_oversized, make_ultralytics_style


def inspect(path: str, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pipeline", "models", "inspect", path, *extra], capture_output=True,
                          text=True, cwd=ROOT, timeout=120)


def block(stdout: str) -> dict:
    """The model block at the end of the answer, as a config would read it."""
    return next(iter(yaml.safe_load(stdout[stdout.index("\nmodels:"):])["models"].values()))


@pytest.mark.parametrize("file,layout,size,names,color", [
    ("yolox_nano.onnx", "yolox", [416, 416], "80 names", "bgr"),
    ("yolox_nano_v8layout.onnx", "yolov8", [416, 416], "80 names", "bgr"),
    ("efficientnet_lite0.onnx", "classifier", [224, 224], "the file names no classes", "bgr"),
    ("vehicle_color.onnx", "classifier", [32, 32], "the file names no classes", "bgr"),
    ("ultralytics", "yolov8", [416, 416], "80 names", "rgb")])
def test_inspect_tells_layout_size_and_names(tmp_path, model_path, file, layout, size, names, color):
    path = make_ultralytics_style(model_path("yolox_nano_v8layout.onnx"), str(tmp_path / "yolov8n.onnx")) \
        if file == "ultralytics" else model_path(file)
    r = inspect(path)
    assert r.returncode == 0, r.stderr
    assert f"\nlayout: {layout} (" in r.stdout and names in r.stdout
    m = block(r.stdout)
    assert (m["path"], m["layout"], m["input_size"], m["color"]) == (path, layout, size, color)
    if file == "ultralytics":
        assert m["scale"] == pytest.approx(1 / 255) and m["letterbox"] == "center"
        assert "metadata (ultralytics)" in r.stdout and "imgsz: 416x416" in r.stdout


def test_a_shape_two_layouts_share_is_told_apart_on_a_real_picture(tmp_path, model_path, sample_path):
    from onnx_models import make_v5_layout

    v5 = make_v5_layout(model_path("yolox_nano.onnx"), str(tmp_path / "v5.onnx"))
    for path, right, wrong in ((model_path("yolox_nano.onnx"), "yolox", "yolov5"), (v5, "yolov5", "yolox")):
        r = inspect(path, "--picture", sample_path("bikes.mp4"))
        assert r.returncode == 0, r.stderr
        assert f"layout: {right} (" in r.stdout and f"only {right} gives plausible boxes" in r.stdout
        assert f"read as {wrong} on the first frame of bikes.mp4: " in r.stdout and "degenerate" in r.stdout
        assert block(r.stdout)["layout"] == right


def test_a_file_that_is_not_onnx_is_one_line(tmp_path):
    bad = tmp_path / "model.onnx"
    bad.write_bytes(b"\x00not a model" * 100)
    r = inspect(str(bad))
    errors = [l for l in r.stderr.splitlines() if l.startswith("error:")]
    assert r.returncode == 2 and len(errors) == 1 and "model.onnx: not a readable ONNX file" in errors[0], r.stderr



def inspect_here(path: str, capsys) -> tuple[int, str, str]:
    """`models inspect` in this process (its exit status, stdout and stderr): no interpreter start-up."""
    import argparse

    from pipeline.modelfile.commands import inspect_command

    status = inspect_command(argparse.Namespace(path=path, picture=None))
    out = capsys.readouterr()
    return status, out.out, out.err


def test_an_empty_file_is_not_onnx_and_is_one_line(tmp_path, capsys):
    """Protobuf reads 0 bytes as a model with nothing set: it printed a model block, exit 0."""
    empty = tmp_path / "empty.onnx"
    empty.write_bytes(b"")
    status, out, err = inspect_here(str(empty), capsys)
    assert (status, out, err) == (2, "", "error: empty.onnx: not a readable ONNX file (an empty file)\n")


@pytest.mark.parametrize("side,imgsz", [(10**9, False), (10**9, True), (8000, False)])
def test_an_input_beyond_the_size_cap_is_one_line_not_an_allocation(tmp_path, model_path, capsys, side, imgsz):
    """A 10^9 side asked for 2.60 EiB (a 30-line traceback, exit 1); 8000 took 1.2 GB."""
    src = model_path("yolox_nano_v8layout.onnx" if imgsz else "vehicle_color.onnx")
    path = make_oversized(src, str(tmp_path / "big.onnx"), side, imgsz)
    said = f"metadata imgsz [{side}, {side}]" if imgsz else f"input shape [batch, 3, {side}, {side}]"
    assert inspect_here(path, capsys) == (2, "", f"error: big.onnx: {said} asks for an input of {side}x{side}, "
                                                 f"beyond the 4096 pixels a side the pipeline will try\n")


def test_a_picture_that_is_a_fifo_is_one_line_not_a_hang(model_path, fifo, capsys):
    import argparse

    from pipeline.modelfile.commands import inspect_command

    pipe, status = fifo(), []
    args = argparse.Namespace(path=model_path("vehicle_color.onnx"), picture=pipe)
    t = threading.Thread(target=lambda: status.append(inspect_command(args)), daemon=True)
    t.start()
    t.join(20)
    assert status, "reading the picture waited for a writer"  # OpenCV's read of a FIFO blocks
    assert (status[0], capsys.readouterr().err) == (2, f"error: --picture {pipe}: not a regular file (a FIFO)\n")


def test_a_metadata_value_of_a_hundred_thousand_items_is_shown_shortened(tmp_path, model_path, capsys):
    """imgsz = [1, 1, ...] (100,000 of them) was one error line of 300 KB."""
    import onnx

    m = onnx.load(model_path("yolox_nano.onnx"))
    entry = m.metadata_props.add()
    entry.key, entry.value = "imgsz", "[" + "1, " * 100_000 + "]"
    onnx.save(m, str(tmp_path / "long.onnx"))
    assert inspect_here(str(tmp_path / "long.onnx"), capsys) == (2, "", "error: long.onnx: metadata imgsz: expected "
                                                                         "[height, width] or a number, got list "
                                                                         "[1, 1, 1, 1, 1, 1, ...]\n")
