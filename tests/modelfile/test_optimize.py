"""`pipeline models optimize`: variants are measured against the original on frames not
used for calibration, and written only when they agree enough."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from conftest import ROOT
from exports import make_fp16_breaker, make_oversized
from pipeline.frames import ClassNames, Detections
from pipeline.modelfile.agreement import detector_f1, top1_agreement


def optimize(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pipeline", "models", "optimize", *args], capture_output=True,
                          text=True, cwd=ROOT, timeout=600)


def dets(*rows: tuple) -> Detections:
    a = np.array(rows, np.float32).reshape(-1, 6)
    return Detections(xyxy=a[:, :4], score=a[:, 4], class_id=a[:, 5].astype(np.int64), names=ClassNames())


def test_detector_agreement_is_f1_at_iou_half_with_the_same_class():
    ref = [dets((0, 0, 10, 10, 0.9, 1), (20, 20, 40, 40, 0.8, 2)), dets()]
    assert detector_f1(ref, ref).score == 1.0
    shifted = [dets((0, 0, 10, 10, 0.9, 1), (26, 26, 46, 46, 0.8, 2)), dets()]  # IoU 0.39: not the same box
    relabelled = [dets((0, 0, 10, 10, 0.9, 1), (20, 20, 40, 40, 0.8, 3)), dets()]
    twice = [dets((0, 0, 10, 10, 0.9, 1), (0, 0, 10, 10, 0.8, 1), (20, 20, 40, 40, 0.8, 2)), dets()]
    assert detector_f1(ref, shifted).score == detector_f1(ref, relabelled).score == pytest.approx(0.5)
    assert detector_f1(ref, twice).score == pytest.approx(2 * 2 / 5)  # a reference box matches once
    assert detector_f1([dets()], [dets()]).score == 1.0
    assert top1_agreement([1, 2, 3, 4], [1, 2, 3, 0]).score == 0.75


def test_fp16_classifier_agrees_and_keeps_float32_inputs_and_outputs(tmp_path, short_clips):
    out = tmp_path / "efficientnet_lite0.fp16.onnx"
    r = optimize(str(ROOT / "models" / "efficientnet_lite0.onnx"), "--fp16", "--calibrate", short_clips["bikes"],
                 "--frames", "12", "--config", str(ROOT / "configs" / "classify.yaml"), "--model", "vehicle_type",
                 "--out", str(out))
    assert r.returncode == 0, r.stderr
    agreement = float(r.stdout.split("top-1 agreement ")[1].split()[0])
    assert agreement >= 0.98 and "ms per frame" in r.stdout and f"written: {out}" in r.stdout
    import onnx  # here: at module level every process collecting the tests would import it (ml_dtypes: 1 s)

    m = onnx.load(str(out))
    assert [i.type.tensor_type.elem_type for i in list(m.graph.input) + list(m.graph.output)] == \
        [onnx.TensorProto.FLOAT] * 2
    assert any(i.data_type == onnx.TensorProto.FLOAT16 for i in m.graph.initializer)
    assert {p.key: p.value for p in m.metadata_props}["precision"] == "fp16"


def test_a_variant_that_disagrees_is_not_written(tmp_path, short_clips):
    out = tmp_path / "breaker.fp16.onnx"
    r = optimize(make_fp16_breaker(str(tmp_path / "breaker.onnx")), "--fp16", "--calibrate", short_clips["vtest"],
                 "--frames", "6", "--out", str(out))
    assert r.returncode == 1 and "top-1 agreement 0.0000" in r.stdout
    assert "is below --min-agreement 0.95" in r.stderr and not out.exists()
    assert not list(tmp_path.glob(".optimize-*"))  # nothing left behind


def test_int8_is_calibrated_on_some_frames_and_judged_on_the_others(tmp_path, short_clips, model_path):
    out = tmp_path / "yolox_nano.int8.onnx"
    r = optimize(model_path("yolox_nano.onnx"), "--int8", "--calibrate", short_clips["vtest"], short_clips["bikes"],
                 "--frames", "12", "--min-agreement", "0.5", "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert "layout yolox: " in r.stdout  # told apart from YOLOv5 on a picture, as `inspect` does
    assert "on 6 held-out frames (6 other frames calibrated)" in r.stdout
    assert "calibrating [" in r.stderr and "6/6 frames" in r.stderr
    import onnx

    m = onnx.load(str(out))
    assert sum(n.op_type == "QuantizeLinear" for n in m.graph.node) > 50
    props = {p.key: p.value for p in m.metadata_props}
    assert props["precision"] == "int8" and props["names"].startswith("{0: 'person'")


def test_bad_arguments_are_one_line_each(tmp_path):
    r = optimize(str(tmp_path / "missing.onnx"), "--int8", "--calibrate", "x.mp4")
    assert r.returncode == 2 and r.stderr.strip() == f"error: {tmp_path / 'missing.onnx'}: file not found"
    r = optimize(str(ROOT / "models" / "vehicle_color.onnx"), "--int8", "--calibrate", str(tmp_path / "no.mp4"),
                 "--min-agreement", "2")
    errors = [l for l in r.stderr.splitlines() if l.startswith("error:")]
    assert r.returncode == 2 and len(errors) == 2 and "no.mp4: file not found" in errors[0]
    assert "--min-agreement: must be within 0..1" in errors[1]



def optimize_here(capsys, *args: str) -> tuple[int, str]:
    """`models optimize` in this process: its exit status and stderr."""
    from pipeline.cli import build_parser

    parsed = build_parser().parse_args(["models", "optimize", *args])
    status = parsed.func(parsed)
    return status, capsys.readouterr().err


def test_sizes_beyond_the_cap_are_one_line_from_the_file_or_the_config(tmp_path, model_path, capsys):
    clip = str(ROOT / "samples" / "bikes.mp4")
    huge = make_oversized(model_path("vehicle_color.onnx"), str(tmp_path / "huge.onnx"), 10**9)
    assert optimize_here(capsys, huge, "--fp16", "--calibrate", clip) == (2, (
        "error: models.huge.path: huge.onnx: input shape [batch, 3, 1000000000, 1000000000] asks for an input of "
        "1000000000x1000000000, beyond the 4096 pixels a side the pipeline will try\n"))
    config = tmp_path / "models.yaml"
    config.write_text(f"models:\n  m:\n    path: {model_path('vehicle_color.onnx')}\n    layout: classifier\n"
                      f"    input_size: [1000000000, 32]\n")
    assert optimize_here(capsys, model_path("vehicle_color.onnx"), "--fp16", "--calibrate", clip,
                         "--config", str(config), "--model", "m") == (2, (
        "error: models.m.input_size: expected a positive integer or [width, height], at most 4096 a side, "
        "got [1000000000, 32]\n"))
