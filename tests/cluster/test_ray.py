"""Cameras on a real 2-node Ray cluster (1 CPU each), started by the test in a private
network namespace: Ray binds every interface, so all its traffic stays on a loopback of
its own. The same JSON lines as one process; a host killed mid-run hands its cameras to
the other, and every frame reaches the JSON lines exactly once."""
from __future__ import annotations

import collections
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import yaml

from conftest import ROOT, detector_model, frame_count, read_jsonl, run_pipeline

SCENARIO = ROOT / "tests" / "support" / "ray_scenario.py"


def _unavailable() -> str | None:
    try:
        import ray  # noqa: F401
    except ImportError:
        return "Ray is not installed (pip install '.[cluster]')"
    if not shutil.which("unshare") or os.geteuid() != 0:
        return "a private network namespace for Ray needs unshare as root (as CI runs)"
    r = subprocess.run(["unshare", "-n", "true"], capture_output=True)
    if r.returncode != 0:
        return f"unshare -n is not permitted here: {r.stderr.decode().strip()}"
    return None


_MISSING = _unavailable()
if _MISSING and os.environ.get("CI", "").lower() in ("1", "true", "yes"):
    raise RuntimeError(f"CI: the cluster tests cannot run: {_MISSING}")
pytestmark = pytest.mark.skipif(_MISSING is not None, reason=_MISSING or "")


def scenario(config: dict, tmp_path, *extra: str) -> dict:
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(config))
    result = tmp_path / "result.json"
    cmd = f"ip link set lo up && exec {sys.executable} {SCENARIO} {path} {result} {' '.join(extra)}"
    r = subprocess.run(["unshare", "-n", "sh", "-c", cmd], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert r.returncode == 0 and result.exists(), r.stderr[-3000:]
    return json.loads(result.read_text())


def cameras(clips: list[str], **extra) -> list[dict]:
    return [{"id": f"cam{i}", "uri": clip, **extra} for i, clip in enumerate(clips)]


def by_camera(records: list[dict]) -> list[tuple]:
    return [(d["class"], tuple(np.round(d["box"], 0))) for r in records for d in r["detections"]]


def test_four_cameras_on_two_hosts_write_what_one_process_writes(tmp_path, short_clips, model_path, write_config):
    clips = [short_clips["bikes"], short_clips["vtest"]] * 2
    base = {"sources": cameras(clips), "models": {"det": detector_model(model_path)},
            "graph": [{"detect": {"model": "det"}}, "annotate"],
            "outputs": {"jsonl": {"filename": "{camera}.jsonl"}}}
    single = tmp_path / "single"
    run_pipeline(json.loads(json.dumps(base)), write_config, str(single))
    cluster_cfg = json.loads(json.dumps(base))
    cluster_cfg["outputs"]["dir"] = str(tmp_path / "cluster")
    result = scenario(cluster_cfg, tmp_path)
    assert result["finished"] and len(set(result["placement"].values())) == 2  # both hosts had cameras
    for i in range(4):
        one = read_jsonl(str(single / f"cam{i}.jsonl"))
        two = read_jsonl(str(tmp_path / "cluster" / f"cam{i}.jsonl"))
        assert [r["seq"] for r in two] == [r["seq"] for r in one] == list(range(40))
        assert by_camera(two) == by_camera(one)
        assert frame_count(str(tmp_path / "cluster" / f"cam{i}.mp4")) == 40


def test_a_killed_host_hands_its_cameras_over_and_every_frame_is_written_once(tmp_path, sample_path, model_path):
    out = tmp_path / "out"
    config = {"sources": cameras([sample_path("bikes.mp4")] * 4, realtime=True),
              "models": {"det": detector_model(model_path)}, "graph": [{"detect": {"model": "det"}}, "annotate"],
              "outputs": {"dir": str(out), "jsonl": {"filename": "{camera}.jsonl"}}}
    result = scenario(config, tmp_path, "--kill-after", "150")
    assert result["finished"] and result["killed_at_s"] is not None
    assert len(result["events"]) == 1 and "host0" in result["events"][0]
    moved = [c for c, v in result["cameras"].items() if v["moves"]]
    assert moved and all(result["placement"][c] == "host1" for c in moved)  # they finished on the survivor
    for i in range(4):
        seqs = [r["seq"] for r in read_jsonl(str(out / f"cam{i}.jsonl"))]
        assert collections.Counter(seqs) == collections.Counter(range(250)), f"cam{i}"  # each frame exactly once
        segments = sorted(out.glob(f"cam{i}*.mp4"))
        assert sum(frame_count(str(s)) for s in segments) == 250  # the video too, across its segments
        assert (len(segments) > 1) == (f"cam{i}" in moved)
        assert result["cameras"][f"cam{i}"]["processed"] == 250


def test_the_command_line_runs_on_a_cluster_and_takes_cameras_while_running(tmp_path, sample_path, model_path):
    """`pipeline run --cluster local`, then `pipeline cluster add / status / remove` from
    another process reach the running driver."""
    out = tmp_path / "out"
    config = {"sources": cameras([sample_path("bikes.mp4")], realtime=True),
              "models": {"det": detector_model(model_path)}, "graph": [{"detect": {"model": "det"}}],
              "outputs": {"dir": str(out), "jsonl": {"filename": "{camera}.jsonl"}}}
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(config))
    py = f"{sys.executable} -m pipeline"
    script = f"""
ip link set lo up
{py} run --config {tmp_path / 'c.yaml'} --cluster local --hosts 2 --report {tmp_path / 'r.json'} \
    > {tmp_path / 'run.out'} 2> {tmp_path / 'run.err'} &
RUN=$!
for i in $(seq 1 120); do [ -s {out / 'cam0.jsonl'} ] && break; sleep 0.5; done
{py} cluster add --source "{{id: extra, uri: {sample_path('bikes.mp4')}, realtime: true}}"
sleep 3
{py} cluster status
{py} cluster remove extra
wait $RUN
echo "run exit $?"
"""
    r = subprocess.run(["unshare", "-n", "sh", "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert "run exit 0" in r.stdout, (r.stdout, (tmp_path / "run.err").read_text()[-2000:])
    assert "camera extra: sent to the driver" in r.stdout and "camera extra: removal sent" in r.stdout
    status = r.stdout[r.stdout.index("camera        host"):]
    assert "cam0" in status and "extra" in status  # both running, on their hosts
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["cameras"]["cam0"]["processed"] == 250 and report["cameras"]["cam0"]["state"] == "ended"
    extra = report["cameras"]["extra"]
    assert extra["state"] == "ended" and "stopped" in extra["detail"] and 0 < extra["processed"] < 250
    assert len(read_jsonl(str(out / "extra.jsonl"))) == extra["processed"]
