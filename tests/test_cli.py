"""The command line: model catalog listing, running a subset of cameras, reports."""
import json
import subprocess

import yaml

from conftest import ROOT, detector_model


def test_models_list_shows_the_catalog(pipeline_cmd):
    r = subprocess.run([*pipeline_cmd, "models", "list"], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0
    names = [line.split()[0] for line in r.stdout.splitlines() if not line.startswith(" ")]
    assert names == ["yolox_nano", "yolox_nano_v8layout", "efficientnet_lite0", "vehicle_color"]
    sources = [line.split("source: ")[1] for line in r.stdout.splitlines() if line.startswith(" ")]
    assert len(sources) == 4 and "Kazuhito00/YOLOX-ONNX-TFLite-Sample" in sources[0]


def test_run_a_subset_of_cameras_with_a_frame_limit_and_a_report(tmp_path, short_clips, model_path, pipeline_cmd):
    cfg = {"sources": [{"id": "campus", "uri": short_clips["vtest"]}, {"id": "street", "uri": short_clips["bikes"]}],
           "models": {"det": detector_model(model_path)}, "graph": [{"detect": {"model": "det"}}, "annotate"]}
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    r = subprocess.run([*pipeline_cmd, "run", "--config", str(tmp_path / "c.yaml"), "--cameras", "street",
                        "--max-frames", "7", "--output", str(tmp_path / "out"), "--report", str(tmp_path / "r.json")],
                       capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 0, r.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    assert list(report["cameras"]) == ["street"] and report["cameras"]["street"]["processed"] == 7
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["detections.jsonl", "street.mp4"]
    assert "street" in r.stdout and "total: 7 frames" in r.stdout  # the summary
    assert "thread plan for" in r.stderr  # printed at start-up
