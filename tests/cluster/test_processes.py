"""`pipeline run --processes N` (`pipeline.cluster.processes`): the cameras spread over
host processes of this machine write what one process writes; a host process that dies
hands its cameras to the other, every frame written once; a run killed leaves no host
process behind and its files playable; what the processes cannot share is refused at once."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from conftest import ROOT, cut_clip, detector_model, frame_count, read_jsonl, run_pipeline


def cameras(clips: list[str], **extra) -> list[dict]:
    return [{"id": f"cam{i}", "uri": clip, **extra} for i, clip in enumerate(clips)]


def config(clips: list[str], model_path, out, **extra) -> dict:
    return {"sources": cameras(clips, **extra), "models": {"det": detector_model(model_path)},
            "graph": [{"detect": {"model": "det"}}, "track", "annotate"],
            "outputs": {"dir": str(out), "jsonl": {"filename": "{camera}.jsonl"}}}


def run_command(path: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "pipeline", "run", "--config", path, "-q", *extra]


def boxes(records: list[dict]) -> list[tuple]:
    return [(r["seq"], d["class"], tuple(np.round(d["box"], 0)), d.get("track"))
            for r in records for d in r["detections"]]


def written(out, cam: str) -> tuple[list[dict], int]:
    """A camera's JSON lines and the frames of all its video segments."""
    return read_jsonl(str(out / f"{cam}.jsonl")), sum(frame_count(str(s)) for s in out.glob(f"{cam}*.mp4"))


def children(pid: int) -> list[int]:
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        return [int(p) for p in f.read().split()]


def lines(path) -> int:
    try:
        with open(path) as f:
            return sum(1 for _ in f)
    except FileNotFoundError:
        return 0


def wait_for(check, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


def started(path: str, out, *extra: str, rows: int = 10, **popen) -> subprocess.Popen:
    """`run --processes 2` of a config of two paced cameras, once each has `rows` JSON lines."""
    popen = {"stderr": subprocess.PIPE, "text": True, **popen}
    run = subprocess.Popen(run_command(path, "--processes", "2", *extra), cwd=ROOT, **popen)
    try:
        wait_for(lambda: all(lines(out / f"cam{i}.jsonl") >= rows for i in range(2)), 120, "the cameras did not start")
    except BaseException:
        run.kill()
        raise
    return run


def test_four_cameras_on_two_processes_write_what_one_process_writes(tmp_path, sample_path, model_path,
                                                                     write_config):
    clips = [cut_clip(sample_path(f"{name}.mp4"), str(tmp_path / f"{name}.mp4"), 30) for name in ("bikes", "vtest")]
    run_pipeline(config(clips * 2, model_path, tmp_path / "one"), write_config, str(tmp_path / "one"))
    path = write_config(config(clips * 2, model_path, tmp_path / "two"), "two.yaml")
    r = subprocess.run(run_command(path, "--processes", "2", "--report", str(tmp_path / "report.json")),
                       capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    report = json.loads((tmp_path / "report.json").read_text())
    assert {c["host"] for c in report["cameras"].values()} == {"host0", "host1"}
    for i in range(4):
        one, two = read_jsonl(str(tmp_path / "one" / f"cam{i}.jsonl")), written(tmp_path / "two", f"cam{i}")
        assert [r["seq"] for r in two[0]] == [r["seq"] for r in one] == list(range(30)), f"cam{i}"
        assert boxes(two[0]) == boxes(one)
        assert two[1] == 30 and report["cameras"][f"cam{i}"]["processed"] == 30


def test_a_host_process_that_dies_hands_its_cameras_to_the_other_each_frame_written_once(tmp_path, sample_path,
                                                                                      model_path, write_config):
    clip = cut_clip(sample_path("bikes.mp4"), str(tmp_path / "bikes.mp4"), 100)
    path = write_config(config([clip] * 2, model_path, tmp_path / "out", realtime=True))  # paced: 4 s
    run = started(path, tmp_path / "out", "--host-timeout", "2", "--report", str(tmp_path / "report.json"), rows=15)
    try:
        victim = children(run.pid)[0]
        os.kill(victim, signal.SIGKILL)
        _, err = run.communicate(timeout=180)
    finally:
        run.kill()
    assert run.returncode == 0, err[-3000:]
    assert "lost" in err and "moving 1 camera(s)" in err
    report = json.loads((tmp_path / "report.json").read_text())
    assert sum(c["moves"] for c in report["cameras"].values()) == 1
    for i in range(2):
        records, video = written(tmp_path / "out", f"cam{i}")
        assert [r["seq"] for r in records] == list(range(100)), f"cam{i}"
        assert video == 100


def test_a_run_killed_leaves_no_host_process_and_its_files_playable(tmp_path, sample_path, model_path,
                                                                    write_config):
    clip = cut_clip(sample_path("vtest.mp4"), str(tmp_path / "vtest.mp4"), 100)
    path = write_config(config([clip] * 2, model_path, tmp_path / "out", realtime=True))
    run = started(path, tmp_path / "out", stderr=subprocess.DEVNULL)
    try:
        hosts = children(run.pid)
        run.kill()
        run.wait(10)
    finally:
        run.kill()
    wait_for(lambda: not any(os.path.exists(f"/proc/{pid}") and open(f"/proc/{pid}/stat").read().split()[2] != "Z"
                             for pid in hosts), 30, "a host process outlived its run")
    for i in range(2):
        records, video = written(tmp_path / "out", f"cam{i}")
        assert 10 <= video and len(records) >= 10  # finalised: the video plays to its last fragment


def test_sigterm_drains_every_host_process_and_the_run_ends_as_done(tmp_path, sample_path, model_path,
                                                                   write_config):
    """A service manager's stop reaches the run and its hosts (the whole control group):
    the hosts leave it to the run, which drains them; every frame processed is written."""
    clip = cut_clip(sample_path("bikes.mp4"), str(tmp_path / "bikes.mp4"), 100)
    path = write_config(config([clip] * 2, model_path, tmp_path / "out", realtime=True))
    run = started(path, tmp_path / "out", "--report", str(tmp_path / "report.json"))
    try:
        for pid in [run.pid, *children(run.pid)]:
            os.kill(pid, signal.SIGTERM)
        _, err = run.communicate(timeout=120)
    finally:
        run.kill()
    assert run.returncode == 0, err[-3000:]
    report = json.loads((tmp_path / "report.json").read_text())
    for i in range(2):
        records, video = written(tmp_path / "out", f"cam{i}")
        processed = report["cameras"][f"cam{i}"]["processed"]
        assert 10 <= processed < 100 and len(records) == video == processed


def test_a_run_whose_host_processes_all_died_ends_with_its_cameras_failed(tmp_path, sample_path, model_path,
                                                                         write_config):
    clip = cut_clip(sample_path("bikes.mp4"), str(tmp_path / "bikes.mp4"), 100)
    path = write_config(config([clip] * 2, model_path, tmp_path / "out", realtime=True))
    run = started(path, tmp_path / "out", "--report", str(tmp_path / "report.json"))
    try:
        for pid in children(run.pid):
            os.kill(pid, signal.SIGKILL)
        _, err = run.communicate(timeout=60)
    finally:
        run.kill()
    assert run.returncode == 1, err[-3000:]  # every camera failed
    assert "no pipeline host is left to run it" in err
    report = json.loads((tmp_path / "report.json").read_text())
    assert {c["state"] for c in report["cameras"].values()} == {"failed"}


def test_ctrl_c_twice_aborts_every_host_process_and_finalises_their_files(tmp_path, sample_path, model_path,
                                                                         write_config):
    """A terminal's Ctrl-C reaches the whole process group: the hosts leave it to the run,
    which drains them at the first and aborts them at the second."""
    clip = cut_clip(sample_path("vtest.mp4"), str(tmp_path / "vtest.mp4"), 100)
    path = write_config(config([clip] * 2, model_path, tmp_path / "out", realtime=True))
    run = started(path, tmp_path / "out", start_new_session=True)
    try:
        os.killpg(run.pid, signal.SIGINT)
        time.sleep(0.3)
        os.killpg(run.pid, signal.SIGINT)
        _, err = run.communicate(timeout=60)
    finally:
        run.kill()
    assert run.returncode == 130 and "Traceback" not in err, err[-3000:]
    for i in range(2):
        records, video = written(tmp_path / "out", f"cam{i}")
        assert 10 <= len(records) == video < 100


def test_a_model_the_host_processes_refuse_stops_the_run_with_its_reason(tmp_path, sample_path, model_path,
                                                                         write_config):
    broken = tmp_path / "broken.onnx"
    broken.write_bytes(b"not a model" * 100)
    cfg = config([sample_path("bikes.mp4")] * 2, model_path, tmp_path / "out")
    cfg["models"]["det"]["path"] = str(broken)
    r = subprocess.run(run_command(write_config(cfg), "--processes", "2"), capture_output=True, text=True,
                       cwd=ROOT, timeout=300)
    assert r.returncode == 2 and "models.det" in r.stderr and "Traceback" not in r.stderr, r.stderr[-2000:]


@pytest.mark.parametrize("args,outputs,expected", [
    (["--processes", "0"], {}, "--processes: must be >= 1, got 0"),
    (["--processes", "2", "--cluster", "local"], {}, "--processes: spreads the cameras over this machine"),
    (["--processes", "2", "--hosts", "2"], {}, "--hosts, --cpus-per-host: for --cluster only"),
])
def test_what_processes_cannot_share_is_refused_before_anything_starts(tmp_path, sample_path, model_path,
                                                                       write_config, args, outputs, expected):
    cfg = config([sample_path("bikes.mp4")], model_path, tmp_path / "out")
    cfg["outputs"].update(outputs)
    r = subprocess.run(run_command(write_config(cfg), *args), capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 2 and expected in r.stderr, r.stderr[-2000:]
    assert not (tmp_path / "out" / "cam0.jsonl").exists()
