"""`--max-frames N` ends the run even when a live camera can never be reached: once the
cameras that deliver have given their frames, the one that never delivered fails with one
line that names it, and the run ends (not every camera failed: exit 0)."""
from __future__ import annotations

import subprocess
import sys

import yaml

from brokers import free_port
from conftest import ROOT, detector_model


def test_max_frames_ends_a_run_whose_live_camera_never_answers_and_names_it(tmp_path, model_path, short_clips):
    closed = f"rtsp://127.0.0.1:{free_port()}/live"  # nothing listens: refused at every attempt
    cfg = {"sources": [{"id": "yard", "uri": short_clips["bikes"]},
                       {"id": "gate-7", "uri": closed, "open_timeout_s": 1,
                        "reconnect": {"initial_s": 0.2, "max_s": 0.4, "give_up_s": 0}}],  # 0: it never gives up
           "models": {"det": detector_model(model_path)}, "graph": [{"detect": {"model": "det"}}],
           "outputs": {"dir": str(tmp_path / "out"), "video": {"enabled": False}}}
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    r = subprocess.run([sys.executable, "-m", "pipeline", "run", "--config", str(tmp_path / "c.yaml"), "-q",
                        "--max-frames", "25", "--report", str(tmp_path / "report.json")],
                       capture_output=True, text=True, cwd=ROOT, timeout=240)
    assert r.returncode == 0, r.stderr[-2000:]
    failed = [line for line in r.stderr.splitlines() if "gate-7: failed" in line]
    assert len(failed) == 1 and "never delivered a frame" in failed[0] and "--max-frames 25" in failed[0], r.stderr
    assert "Traceback" not in r.stderr
    report = yaml.safe_load((tmp_path / "report.json").read_text())
    assert report["cameras"]["yard"]["processed"] == 25 and report["cameras"]["yard"]["state"] == "ended"
    assert report["cameras"]["gate-7"]["state"] == "failed" and report["cameras"]["gate-7"]["frames_in"] == 0
    assert report["cameras"]["gate-7"]["attempts"] >= 2  # it was tried again after the file camera was done
