"""What the docs show of the cluster, run as they show it, in namespaces of their own (see
test_ray): the README's recipe `pipeline run --config configs/cameras.yaml --cluster auto`
on a Ray cluster started beside it (it exited 2 on the shipped config's shared JSON lines
name), and `scripts/cluster_bench.py` at its smallest."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, frame_count, missing, read_jsonl
from test_ray import _unavailable, isolated

pytestmark = pytest.mark.cluster


@pytest.fixture(autouse=True, scope="module")
def _ray_in_namespaces_of_its_own():
    why = _unavailable()
    if why:
        missing(f"the cluster tests cannot run: {why}")


def test_the_readmes_cluster_recipe_runs_the_shipped_config_as_written(tmp_path):
    out = tmp_path / "out"
    script = f"""
{Path(sys.executable).parent / 'ray'} start --head --num-cpus 2 --disable-usage-stats > {tmp_path / 'ray.log'} 2>&1 \
    || {{ tail -20 {tmp_path / 'ray.log'} >&2; exit 3; }}
{sys.executable} -m pipeline run --config configs/cameras.yaml --cluster auto --max-frames 5 --output {out} \
    --report {tmp_path / 'r.json'} -q
"""
    r = subprocess.run(isolated(script), capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "a --cluster run writes one file per camera: detections.{camera}.jsonl" in r.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    for cam in ("campus", "street"):
        assert report["cameras"][cam]["processed"] == 5
        assert [row["seq"] for row in read_jsonl(str(out / f"detections.{cam}.jsonl"))] == list(range(5))
        assert frame_count(str(out / f"{cam}.mp4")) == 5


def test_cluster_bench_compares_one_process_with_two_hosts(tmp_path):
    cmd = (f"exec {sys.executable} scripts/cluster_bench.py configs/bench.yaml --camera-count 2 --repeats 1 "
           f"--frames 10")
    r = subprocess.run(isolated(cmd), capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    row = json.loads(r.stdout.splitlines()[0])
    assert row["one process"] > 0 and row["two hosts"] > 0 and row["ratio"] == round(row["two hosts"] /
                                                                                       row["one process"], 3)
    assert re.search(r"^2 file cameras: two hosts / one process, median of 1: [\d.]+$", r.stdout, re.M), r.stdout
