"""Bad input and interruptions: one clear line naming the culprit, the rest keeps going,
and every output file stays playable."""
from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time

import av
import pytest
import yaml

from conftest import ROOT, cut_clip, detector_model, frame_count, read_jsonl


def remux_ts(src: str, dst: str) -> str:
    with av.open(src) as i, av.open(dst, "w", format="mpegts") as o:
        s = o.add_stream_from_template(i.streams.video[0])
        for p in i.demux(i.streams.video[0]):
            if p.dts is None:
                continue
            p.stream = s
            o.mux(p)
    return dst


@pytest.fixture(scope="module")
def broken_clips(tmp_path_factory, sample_path) -> dict[str, str]:
    d = tmp_path_factory.mktemp("broken")
    clip = cut_clip(sample_path("bikes.mp4"), str(d / "bikes.mp4"), 60)  # short: every broken copy is decoded
    ts = remux_ts(clip, str(d / "bikes.ts"))
    data = open(ts, "rb").read()
    corrupt = bytearray(data)
    rng = random.Random(1)
    for k in range(len(data) // 3, len(data) // 3 + 60_000):
        corrupt[k] = rng.randrange(256)
    mp4 = open(clip, "rb").read()
    files = {"truncated_ts": data[: len(data) // 2], "corrupt_ts": bytes(corrupt),
             "truncated_mp4": mp4[: len(mp4) // 2],
             "garbage": rng.randbytes(50_000)}  # seeded: some random bytes pass for a container without video
    out = {}
    for name, blob in files.items():
        path = d / (name + (".mp4" if "mp4" in name or name == "garbage" else ".ts"))
        path.write_bytes(blob)
        out[name] = str(path)
    return out


def run_cli(config: dict, tmp_path, *extra: str, timeout: float = 300) -> subprocess.CompletedProcess:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return subprocess.run([sys.executable, "-m", "pipeline", "run", "--config", str(path), *extra],
                          capture_output=True, text=True, cwd=ROOT, timeout=timeout)


def test_broken_cameras_are_closed_and_the_others_finish(tmp_path, broken_clips, short_clips, model_path):
    sources = [{"id": "good", "uri": short_clips["bikes"]}] + [{"id": k, "uri": v} for k, v in broken_clips.items()]
    cfg = {"sources": sources, "models": {"det": detector_model(model_path)},
           "graph": [{"detect": {"model": "det"}}, "annotate"], "outputs": {"dir": str(tmp_path / "out")}}
    r = run_cli(cfg, tmp_path, "--report", str(tmp_path / "report.json"))
    assert r.returncode == 0, r.stderr
    import json

    report = json.loads((tmp_path / "report.json").read_text())
    cams = report["cameras"]
    assert cams["good"]["state"] == "ended" and cams["good"]["processed"] == frame_count(short_clips["bikes"])
    for name in ("truncated_mp4", "garbage"):
        assert cams[name]["state"] == "failed"
        lines = [l for l in r.stderr.splitlines() if f"camera {name}: failed" in l]
        assert len(lines) == 1 and broken_clips[name] in lines[0] and "Invalid data" in lines[0]
    for name in ("truncated_ts", "corrupt_ts"):
        assert cams[name]["state"] == "ended" and cams[name]["processed"] > 0
    for cam, stats in cams.items():
        mp4 = tmp_path / "out" / f"{cam}.mp4"
        if stats["processed"]:
            assert frame_count(str(mp4)) == stats["processed"]
        else:
            assert not mp4.exists()
    assert "failed" in r.stdout  # the summary table shows the closed cameras


def test_missing_model_file_is_a_config_error(tmp_path, short_clips, model_path):
    cfg = {"sources": [{"id": "a", "uri": short_clips["bikes"]}],
           "models": {"det": detector_model(model_path, path="nowhere/model.onnx")},
           "graph": [{"detect": {"model": "det"}}]}
    r = run_cli(cfg, tmp_path)
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == ["error: models.det.path: file not found: nowhere/model.onnx"]


def test_model_whose_input_does_not_match_the_size_is_one_line(tmp_path, short_clips, model_path):
    cfg = {"sources": [{"id": "a", "uri": short_clips["bikes"]}],
           "models": {"det": detector_model(model_path, input_size=640)},
           "graph": [{"detect": {"model": "det"}}], "outputs": {"dir": str(tmp_path / "out")}}
    r = run_cli(cfg, tmp_path)
    assert r.returncode == 2
    errors = [l for l in r.stderr.splitlines() if l.startswith("error:")]
    assert len(errors) == 1 and "models.det" in errors[0] and "416x416" in errors[0] and "640x640" in errors[0]
    assert not (tmp_path / "out").exists()  # nothing started


def test_wrong_layout_for_the_model_fails_before_starting(tmp_path, short_clips, model_path):
    cfg = {"sources": [{"id": "a", "uri": short_clips["bikes"]}],
           "models": {"det": detector_model(model_path, layout="yolov8")},  # raw YOLOX head file, v8 decoder
           "graph": [{"detect": {"model": "det"}}], "outputs": {"dir": str(tmp_path / "out")}}
    cfg["models"]["det"]["path"] = model_path("yolox_nano.onnx")
    r = run_cli(cfg, tmp_path)
    errors = [l for l in r.stderr.splitlines() if l.startswith("error:")]
    assert r.returncode == 2 and len(errors) == 1 and "layout yolov8" in errors[0]


def _start_realtime_run(tmp_path, sample_path, model_path) -> tuple[subprocess.Popen, str]:
    out = tmp_path / "out"
    cfg = {"sources": [{"id": "campus", "uri": sample_path("vtest.mp4"), "realtime": True},
                       {"id": "street", "uri": sample_path("bikes.mp4"), "realtime": True}],
           "models": {"det": detector_model(model_path)},
           "graph": [{"detect": {"model": "det"}}, "annotate"], "outputs": {"dir": str(out)}}
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(cfg))
    proc = subprocess.Popen([sys.executable, "-m", "pipeline", "run", "--config", str(path)], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not (out / "detections.jsonl").exists() or (out / "detections.jsonl").stat().st_size < 5000:
        assert proc.poll() is None and time.monotonic() < deadline, "pipeline did not start"
        time.sleep(0.1)
    return proc, str(out)


@pytest.mark.parametrize("signals", [1, 2], ids=["drain", "abort"])
def test_ctrl_c_finalises_every_file_and_prints_the_summary(tmp_path, sample_path, model_path, signals):
    proc, out = _start_realtime_run(tmp_path, sample_path, model_path)
    time.sleep(1.0)
    for _ in range(signals):
        proc.send_signal(signal.SIGINT)
        time.sleep(0.05)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode in (0, 130), stderr
    assert "total:" in stdout and "campus" in stdout
    records = read_jsonl(os.path.join(out, "detections.jsonl"))
    for cam, total in (("campus", 795), ("street", 250)):
        n = frame_count(os.path.join(out, f"{cam}.mp4"))
        assert 0 < n < total  # playable, and really cut short
        if signals == 1:  # a drain writes every frame that was read
            assert n == sum(1 for r in records if r["camera"] == cam)


def test_a_second_ctrl_c_ends_a_busy_run_at_once(tmp_path, sample_path, model_path):
    """Files at full speed keep every queue full and the batcher waiting for the engine:
    the abort must wake every wait (it once sat out a 30 s join)."""
    out = tmp_path / "out"
    cfg = {"sources": [{"id": f"cam{i}", "uri": sample_path("vtest.mp4")} for i in range(4)],
           "models": {"det": detector_model(model_path)}, "graph": [{"detect": {"model": "det"}}, "annotate"],
           "outputs": {"dir": str(out)}}
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(cfg))
    proc = subprocess.Popen([sys.executable, "-m", "pipeline", "run", "--config", str(path), "-q"], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not (out / "detections.jsonl").exists() or (out / "detections.jsonl").stat().st_size < 20000:
        assert proc.poll() is None and time.monotonic() < deadline, "pipeline did not start"
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    time.sleep(0.3)
    t0 = time.monotonic()
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=60)
    assert time.monotonic() - t0 < 10, stderr  # a hang guard, not a speed claim: it took 33 s before
    assert proc.returncode == 130 and "total:" in stdout
    for i in range(4):
        assert frame_count(str(out / f"cam{i}.mp4")) > 0  # finalised: playable


def test_sigterm_drains_like_ctrl_c(tmp_path, sample_path, model_path):
    proc, out = _start_realtime_run(tmp_path, sample_path, model_path)
    proc.send_signal(signal.SIGTERM)
    stdout, _ = proc.communicate(timeout=60)
    assert proc.returncode in (0, 130) and "total:" in stdout
    assert frame_count(os.path.join(out, "campus.mp4")) > 0


def test_hardware_codecs_that_cannot_open_fall_back_to_software(tmp_path, short_clips, model_path, write_config):
    """NVDEC/NVENC names in the config run on a machine without them (as on this CPU one)."""
    import av as pyav

    from conftest import run_pipeline

    try:
        pyav.codec.Codec("h264_nvenc", "w")
    except Exception:
        pytest.skip("this PyAV build has no NVENC encoder to fall back from")
    cfg = {"sources": [{"id": "a", "uri": short_clips["bikes"], "decoder": "h264_cuvid"}],
           "models": {"det": detector_model(model_path)}, "graph": [{"detect": {"model": "det"}}],
           "outputs": {"video": {"codec": "h264_nvenc"}}}
    snap = run_pipeline(cfg, write_config, str(tmp_path / "out"))
    assert snap.cameras["a"].processed == 40 and snap.cameras["a"].errors == 0
    with pyav.open(str(tmp_path / "out" / "a.mp4")) as c:
        assert c.streams.video[0].codec_context.name == "h264"
    assert frame_count(str(tmp_path / "out" / "a.mp4")) == 40


def test_a_killed_process_leaves_playable_video_for_live_cameras(tmp_path, sample_path, model_path):
    """kill -9 gives no chance to finalise: live cameras write fragmented MP4 flushed about
    every second, so the file plays up to the last complete fragment."""
    out = tmp_path / "out"
    cfg = {"sources": [{"id": "cam", "uri": sample_path("bikes.mp4"), "live": True}],  # a file played as a camera
           "models": {"det": detector_model(model_path)}, "graph": [{"detect": {"model": "det"}}],
           "outputs": {"dir": str(out), "video": {"segment_s": 0}}}  # one file (no hourly cut)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(cfg))
    proc = subprocess.Popen([sys.executable, "-m", "pipeline", "run", "--config", str(path)], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    # lines the file holds whole: read while the writer's write is under way, the last may be half there
    while not (out / "detections.jsonl").exists() or (out / "detections.jsonl").read_bytes().count(b"\n") < 75:
        assert proc.poll() is None and time.monotonic() < deadline, "pipeline did not start"
        time.sleep(0.1)
    proc.kill()
    proc.wait(10)
    frames = frame_count(str(out / "cam.mp4"))
    assert 20 <= frames < 250
    lines = len(read_jsonl(str(out / "detections.jsonl")))
    assert lines >= frames - 25  # the JSON lines are flushed as often as the video: at most ~1 s behind
