"""In CI a missing model or clip fails the run (and names the file); elsewhere it skips."""
import os
import subprocess
import sys

from conftest import ROOT

NEEDS_A_MODEL = "tests/engines/test_engine.py::test_model_input_size_mismatch_names_the_model"


def run_without_assets(tmp_path, ci: str | None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env["PIPELINE_TEST_ASSETS"] = str(tmp_path)  # a folder with no models in it
    if ci is not None:
        env["CI"] = ci
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", NEEDS_A_MODEL], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=120)


def test_a_missing_model_fails_in_ci_and_names_the_file(tmp_path):
    r = run_without_assets(tmp_path, "true")
    assert r.returncode != 0
    assert "CI: models/yolox_nano.onnx is not available" in r.stdout


def test_a_missing_model_skips_elsewhere_and_says_why(tmp_path):
    r = run_without_assets(tmp_path, None)
    assert r.returncode == 0 and "1 skipped" in r.stdout
