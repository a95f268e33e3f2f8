"""Every script the docs quote runs, at its smallest (seconds, not minutes), and prints what
it says it measures: a script that the code moved away from (a renamed field, a record
that became typed) fails here, not when someone repeats a figure of the docs. The Ray
one (`cluster_bench.py`) is in tests/cluster; `gpu_check.py` has its own test."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import ROOT, cut_clip, read_jsonl

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# The slowest here: whole pipeline runs (models loaded, clips decoded) before the script
# itself; `-m "not e2e"` leaves them out of a quick round, CI runs them with the rest.
WHOLE_RUNS = pytest.mark.e2e
COVERED_ELSEWHERE = {"gpu_check.py": "tests/test_gpu_check.py", "cluster_bench.py": "tests/cluster/test_cluster_scripts.py"}


def script(name: str, *args: str, timeout: float = 180) -> str:
    """Run `scripts/<name>` from the repository root; its standard output (exit 0 asserted)."""
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / name), *args], capture_output=True, text=True,
                       cwd=ROOT, timeout=timeout)
    assert r.returncode == 0, f"{name}: exit {r.returncode}\n{r.stderr[-3000:]}"
    return r.stdout


def pipeline_run(config: Path, out: Path, frames: int, *extra: str) -> Path:
    r = subprocess.run([sys.executable, "-m", "pipeline", "run", "--config", str(config), "--output", str(out),
                        "--max-frames", str(frames), "-q", *extra], capture_output=True, text=True, cwd=ROOT,
                       timeout=180)
    assert r.returncode == 0, r.stderr[-3000:]
    return out / "detections.jsonl"


def test_every_script_the_docs_name_is_run_here():
    named = {m for page in DOCS for m in re.findall(r"scripts/(\w+\.py)", page.read_text(encoding="utf-8"))}
    here = set(re.findall(r'script\("(\w+\.py)"', Path(__file__).read_text(encoding="utf-8")))
    assert named and named <= here | set(COVERED_ELSEWHERE), named - here - set(COVERED_ELSEWHERE)
    assert all((ROOT / test).is_file() for test in COVERED_ELSEWHERE.values())


def test_rss_soak_samples_the_memory_and_reports_its_slope(tmp_path):
    """It crashed at its first sample once the metrics snapshot became a typed record."""
    out = script("rss_soak.py", "--minutes", "0.08", "--warmup", "0", "--interval", "1", "--out",
                 str(tmp_path / "soak.json"))
    assert "slope after warm-up" in out
    result = json.loads((tmp_path / "soak.json").read_text())
    assert len(result["samples"]) >= 3 and all(mib > 0 for _, mib in result["samples"])
    assert result["processed"] > 0 and not result["ended_early"] and len(result["load"]) >= 2


@WHOLE_RUNS
def test_gating_agreement_compares_every_frame_with_gated_detection(tmp_path, short_clips):
    clip = cut_clip(short_clips["vtest"], str(tmp_path / "vtest.mp4"), 12)
    out = script("gating_agreement.py", "--config", "configs/tracking.yaml", clip, "--camera", "campus", "--json",
                 str(tmp_path / "g.json"))
    (result,) = json.loads((tmp_path / "g.json").read_text()).values()
    runs = re.search(r"^\| vtest\.mp4 \| (\d+) / (\d+) \|", out, re.M)
    assert runs and 0 < int(runs.group(2)) <= int(runs.group(1)) == 12, out
    assert 0 <= result["tracks_found"] <= result["tracks"] and result["deterministic"], result


@WHOLE_RUNS
def test_region_check_compares_regions_with_the_whole_frame():
    result = json.loads(script("region_check.py", "--config", "configs/tracking.yaml", "--frames", "6"))
    assert result["frames"] >= 1 and result["detector_runs"]["whole"] >= 1 and result["detector_runs"]["regions"] >= 1


def test_motion_cost_times_each_step_per_1080p_frame(short_clips):
    out = script("motion_cost.py", short_clips["vtest"], "--frames", "3", "--rounds", "1")
    costs = dict(re.findall(r"^(\S.*?)\s+([\d.]+) ms per 1080p frame", out, re.M))
    assert {"motion (8-bit)", "BGR conversion"} <= set(costs) and all(float(v) > 0 for v in costs.values()), out


def test_picture_costs_times_both_ways_of_making_each_picture():
    out = script("picture_costs.py", "--frames", "3", "--runs", "1")
    costs = re.findall(r": ([\d.]+) ms per 1080p frame", out)
    assert len(costs) == 4 and all(float(c) > 0 for c in costs), out


def test_cpu_breakdown_shares_the_cpu_of_a_frame_among_the_steps():
    out = script("cpu_breakdown.py", "configs/bench.yaml", "--camera-count", "1", "--frames", "8", "--runs", "1")
    rows = {m.group(1): m.groups()[1:] for m in re.finditer(r"^\| ([\w +]+) \| ([\d.-]+) \| ([\d.-]+) \|$", out, re.M)}
    assert {"inference", "total", "fps"} <= set(rows), out
    assert all(float(v) > 0 for v in rows["total"] + rows["inference"]), out


@WHOLE_RUNS
def test_camera_cpu_shares_a_stretch_of_the_cameras_cpu_among_their_threads():
    out = script("camera_cpu.py", "configs/density/gated.yaml", "--cameras", "2", "--clip", "samples/bikes.mp4",
                 "--detect-clip", "samples/bikes.mp4", "--at", "1", "--seconds", "2", "--runs", "1")
    head = re.match(r"2 camera\(s\), 1-3 s: ([\d.]+)% of a core \(runs: \d+\), ([\d.]+)% per camera, "
                    r"([\d.]+) voluntary context switches a frame$", out, re.M)
    assert head and float(head.group(1)) > 0 and float(head.group(2)) == pytest.approx(float(head.group(1)) / 2, abs=0.1)
    assert float(head.group(3)) > 0, out  # a camera's threads sleep between its frames
    assert re.search(r"^ +[\d.]+%  .*camN", out, re.M), out  # the cameras' threads, grouped


def test_recording_cpu_compares_runs_with_and_without_the_recording():
    out = script("recording_cpu.py", "--frames", "10", "--clip-frames", "10", "--rounds", "1")
    assert re.search(r"runs of 10 1080p frames: record on [\d.]+ s CPU, off [\d.]+ s", out), out
    assert re.search(r"per packet \([1-9]\d*\): the recording adds -?\d+ us of CPU", out), out


def test_live_video_cpu_measures_the_pipeline_watched_by_video_by_stills_and_by_nobody():
    out = script("live_video_cpu.py", "--cameras", "1", "--seconds", "2", "--warmup", "4", "--rounds", "1")
    assert re.search(r"^  none +cpu +[\d.]+% .*fragments +0 .*stills +0$", out, re.M), out
    assert re.search(r"^  video +cpu .*fragments +[1-9]", out, re.M), out  # the socket's video came
    assert re.search(r"^  stills +cpu .*stills +[1-9]", out, re.M), out


@WHOLE_RUNS
def test_live_wall_plays_every_tile_in_chromium_and_reports_what_it_presented():
    """Two tiles (one an RTSP camera's H.264) against a real run, in headless Chromium (installed by .ci/run)."""
    out = script("live_wall.py", "--cameras", "2", "--rtsp", "1", "--seconds", "3", "--warmup", "8", timeout=240)
    assert re.search(r"^  playing 2 of 2; presented median [1-9][\d.]*%", out, re.M), out
    assert re.search(r"capture to screen median \d+ ms, P95 \d+ ms", out), out


def test_cluster_simulation_measures_the_drivers_work_per_poll():
    out = script("cluster_simulation.py", "--camera-count", "20", "--cores-per-host", "4", "--polls", "2")
    assert re.search(r"^20 cameras at 1080p", out, re.M) and "one poll" in out and "a host lost" in out, out


@WHOLE_RUNS
def test_id_switches_and_label_agreement_read_the_json_lines_of_real_runs(tmp_path):
    """A tracked run for the id switches; a per-track and an every-frame run of the
    classifier cascade (on people, the sample with people in it) for the labels."""
    tracked = pipeline_run(ROOT / "configs" / "tracking.yaml", tmp_path / "tracked", 12, "--cameras", "campus")
    out = script("id_switches.py", str(tracked), "--camera", "campus", "--class", "person")
    found = re.search(r"^(\d+) person tracks over (\d+) object-frames: (\d+) likely id switches", out, re.M)
    tracks = {(r["camera"], d["track"]) for r in read_jsonl(str(tracked)) for d in r["detections"]
              if d["class"] == "person" and "track" in d}
    assert found and int(found.group(1)) == len(tracks) > 0 and int(found.group(3)) <= int(found.group(1)), out
    data = yaml.safe_load((ROOT / "configs" / "two_classifiers.yaml").read_text())
    data["sources"] = [{"id": "campus", "uri": str(ROOT / "samples" / "vtest.mp4")}]
    for model in data["models"].values():
        model["path"] = str(ROOT / "models" / Path(model["path"]).name)
        model["labels"] = str(ROOT / "models" / Path(model["labels"]).name)
    runs = {}
    for per_track in (True, False):
        for stage in data["graph"]:
            if "classify" in stage:
                stage["classify"].update(classes=["person"], per_track=per_track)
        config = tmp_path / f"per_track_{per_track}.yaml"
        config.write_text(yaml.safe_dump(data))
        runs[per_track] = pipeline_run(config, tmp_path / config.stem, 8)
    out = script("label_agreement.py", str(runs[False]), str(runs[True]))
    shares = re.search(r"^(\d+) rows, (\d+) tracks: per-track == per-frame label ([\d.]+)%.*ceiling .* ([\d.]+)%$",
                       out, re.M)
    assert shares and int(shares.group(1)) > 0 and 0 <= float(shares.group(3)) <= 100, out
    assert 0 < float(shares.group(4)) <= 100, out


def test_store_bench_times_the_queries_over_the_tracks_it_stored_and_sizes_a_sampled_day(tmp_path):
    from store_rows import make_store, synthetic

    run = tmp_path / "run"
    run.mkdir()
    data = synthetic(30, seed=5)
    make_store(str(run / "store.db"), data)
    cameras = sorted({t[2] for t in data["tracks"]})
    (run / "detections.jsonl").write_text("".join(json.dumps({"camera": c, "time": 7200.0}) + "\n" for c in cameras))
    out = json.loads(script("store_bench.py", "--tracks", "3000", "--cameras", "4", "--days", "3", "--runs", "1",
                            "--hourly", "--sample", str(run)))
    assert out["rows"]["tracks"] == 3000 and out["rows"]["events"] > 3000
    assert out["hourly_rollup"] == "present"  # the schema's own (version 2)
    assert out["queries"]["filtered_first_page"]["rows"] > 0 and out["queries"]["hourly_counts_day"]["rows"] > 0
    assert all(q["ms"] > 0 for q in out["queries"].values()) and out["bytes_per_camera_day"] > 0
    for camera in cameras:
        day = out["sample"][camera]
        tracks = sum(t[2] == camera for t in data["tracks"])
        assert day["tracks_per_day"] == tracks * 12 and day["bytes_per_day"] > 0  # 12 loops of 2 h


@WHOLE_RUNS
def test_store_overhead_runs_with_the_store_on_and_off_in_turns_and_says_the_ratio():
    out = script("store_overhead.py", "--config", str(ROOT / "configs" / "tracking.yaml"), "--frames", "8",
                 "--rounds", "1", timeout=300)
    assert re.search(r"^round 1: store off [\d.]+ fps$", out, re.M) and re.search(r"^round 1: store on ", out, re.M)
    ratio = re.search(r"^median: store on ([\d.]+) fps, off ([\d.]+) fps: on/off ([\d.]+)$", out, re.M)
    assert ratio and float(ratio.group(1)) > 0 and float(ratio.group(2)) > 0, out
    held = re.search(r"^the store of one run: \d+ kB, (\d+) tracks, \d+ events, \d+ counts, (\d+) segments$", out, re.M)
    assert held and int(held.group(1)) > 0, out


@WHOLE_RUNS
def test_outputs_digest_gives_two_runs_of_one_input_the_same_lines_and_another_output_other_lines(tmp_path, short_clips):
    clip = short_clips["vtest"]
    args = ("--clip", clip, "--detect-clip", clip, "--cameras", "2")
    first = script("outputs_digest.py", "configs/density/gated.yaml", *args)
    assert re.search(r"^json lines: 80 [0-9a-f]{16}$", first, re.M), first
    tracks = re.search(r"^store tracks: (\d+) [0-9a-f]{16}$", first, re.M)
    assert tracks and int(tracks.group(1)) > 0, first
    assert script("outputs_digest.py", "configs/density/gated.yaml", *args) == first
    config = yaml.safe_load((ROOT / "configs" / "density" / "gated.yaml").read_text())
    here = ROOT / "configs" / "density"
    for entry, key in ((config["models"]["detector"], "path"), (config["models"]["detector"], "labels"),
                       (config["sources"][0], "uri")):
        entry[key] = str((here / entry[key]).resolve())
    config["models"]["detector"]["score_threshold"] = 0.6  # fewer boxes: other lines, other tracks
    changed = tmp_path / "changed.yaml"
    changed.write_text(yaml.safe_dump(config))
    other = script("outputs_digest.py", str(changed), *args)
    assert other.splitlines()[0] != first.splitlines()[0] and "store tracks:" in other, other
