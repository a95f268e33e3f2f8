"""A model that describes itself needs only `path`; one that does not is told, in one
round, what it must say; hostile metadata stops the run before anything starts."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from conftest import ROOT, read_jsonl
from exports import COCO, make_ultralytics_style, make_undescribed
from pipeline.config.models import ModelConfig
from pipeline.config.schema import Reader


@pytest.fixture(scope="module")
def ultralytics_file(tmp_path_factory, model_path) -> str:
    return make_ultralytics_style(model_path("yolox_nano_v8layout.onnx"),
                                  str(tmp_path_factory.mktemp("export") / "yolov8n_like.onnx"))


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([".venv/bin/python", "-m", "pipeline", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=300)


def write(tmp_path: Path, name: str, model: dict, clip: str) -> str:
    cfg = {"sources": [{"id": "campus", "uri": clip}], "models": {"det": model},
           "graph": [{"detect": {"model": "det"}}, "annotate"], "outputs": {"dir": str(tmp_path / name)}}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return str(path)


def errors(r: subprocess.CompletedProcess) -> list[str]:
    return [line for line in r.stderr.splitlines() if line.startswith("error:")]


def test_an_ultralytics_export_runs_with_only_its_path(tmp_path, ultralytics_file, short_clips):
    spelled_out = {"path": ultralytics_file, "layout": "yolov8", "input_size": [416, 416], "color": "rgb",
                   "scale": 1 / 255, "letterbox": "center", "labels": list(COCO)}
    runs = {}
    for name, model in (("path_only", {"path": ultralytics_file}), ("spelled_out", spelled_out)):
        r = cli("run", "--config", write(tmp_path, name, model, short_clips["vtest"]), "--max-frames", "8", "-q")
        assert r.returncode == 0, r.stderr
        runs[name] = (read_jsonl(str(tmp_path / name / "detections.jsonl")), r.stderr)
        assert (tmp_path / name / "campus.mp4").stat().st_size > 0
    path_only, spelled = runs["path_only"][0], runs["spelled_out"][0]
    assert len(path_only) == 8 and [f["detections"] for f in path_only] == [f["detections"] for f in spelled]
    classes = {d["class"] for f in path_only for d in f["detections"]}
    assert "person" in classes and classes <= set(COCO)  # names from the file, not "0"
    line = next(l for l in runs["path_only"][1].splitlines() if "from the file" in l)
    for said in ("layout yolov8", "input_size 416x416 (metadata imgsz", "labels 80 names", "color rgb",
                 "scale 0.00392157", "letterbox center", "Ultralytics"):
        assert said in line, line
    assert "from the file" not in runs["spelled_out"][1]


def test_what_the_config_gives_wins_over_the_file(ultralytics_file):
    r = Reader(Path("."))
    m = r.record(ModelConfig, {"path": ultralytics_file, "color": "bgr", "labels": ["a"] * 80, "input_size": 320},
                 "models.det", {"name": "det"})
    assert not r.problems
    assert (m.color, m.input_size, m.labels[0], m.scale, m.letterbox) == ("bgr", (320, 320), "a", 1 / 255, "center")
    assert sorted(m.from_file) == ["layout", "letterbox", "scale"]


def test_a_file_that_does_not_describe_itself_is_told_what_is_missing_in_one_round(tmp_path, model_path, short_clips):
    bare = make_undescribed(model_path("yolox_nano.onnx"), str(tmp_path / "bare.onnx"))
    r = cli("validate", "--config", write(tmp_path, "bare", {"path": bare}, short_clips["vtest"]))
    assert r.returncode == 2
    found = errors(r)
    assert len(found) == 2, r.stderr
    assert found[0].startswith("error: models.det.input_size: required") and "no imgsz" in found[0]
    assert found[1].startswith("error: models.det.layout: required")
    assert "YOLOX head and YOLOv5" in found[1] and "pipeline models inspect" in found[1]


def test_hostile_metadata_is_refused_in_one_line_and_nothing_runs(tmp_path, model_path, short_clips):
    pwned = tmp_path / "pwned"
    hostile = make_ultralytics_style(model_path("yolox_nano_v8layout.onnx"), str(tmp_path / "hostile.onnx"),
                                     names=f"__import__('os').system('touch {pwned}')")
    r = cli("run", "--config", write(tmp_path, "hostile", {"path": hostile}, short_clips["vtest"]))
    assert r.returncode == 2 and len(errors(r)) == 1, r.stderr
    assert "models.det.path: hostile.onnx: metadata names" in errors(r)[0] and "refused" in errors(r)[0]
    r = cli("models", "inspect", hostile)
    assert r.returncode == 2 and len(errors(r)) == 1 and "refused" in errors(r)[0], r.stderr
    assert not pwned.exists() and not (tmp_path / "hostile").exists()
