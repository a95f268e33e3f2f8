"""Bad input never costs more data than it has to: damaged packets are skipped and
counted, a truncated file keeps what it has, a live URL that breaks before its first
frame backs off and gives up, timestamps that do not increase are replaced, and models
read the wrong way round are refused before anything starts."""
from __future__ import annotations

import functools
import http.server
import json
import os
import random
import subprocess
import sys
import threading
import time
from pathlib import Path

import av
import numpy as np
import pytest
import yaml

from conftest import ROOT, detector_model, frame_count, read_jsonl, run_pipeline
from onnx_models import make_nms_inside, make_v5_layout


def remux(src: str, dst: str, faststart: bool = False, zero_pts: bool = False, packets: int | None = None) -> str:
    """The clip's packets copied into a new file (`packets`: only the first so many)."""
    with av.open(src) as i, av.open(dst, "w", options={"movflags": "faststart"} if faststart else {}) as o:
        s = o.add_stream_from_template(i.streams.video[0])
        for n, p in enumerate(i.demux(i.streams.video[0])):
            if p.dts is None or (packets is not None and n >= packets):
                continue
            if zero_pts:
                p.pts = p.dts = 0
            p.stream = s
            o.mux(p)
    return dst


def damage(src: str, dst: str, at: float, size: int, seed: int = 2) -> str:
    data = bytearray(Path(src).read_bytes())
    rng = random.Random(seed)
    start = int(len(data) * at)
    for k in range(start, start + size):
        data[k] = rng.randrange(256)
    Path(dst).write_bytes(bytes(data))
    return dst


def cli_run(config: dict, tmp_path: Path, *extra: str, timeout: float = 120) -> tuple[subprocess.CompletedProcess, dict]:
    config.setdefault("outputs", {}).setdefault("dir", str(tmp_path / "out"))
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    r = subprocess.run([sys.executable, "-m", "pipeline", "run", "--config", str(path), "-q", "--report",
                        str(tmp_path / "report.json"), *extra], capture_output=True, text=True, cwd=ROOT,
                       timeout=timeout)
    report = json.loads((tmp_path / "report.json").read_text()) if (tmp_path / "report.json").exists() else {}
    return r, report


def test_damage_mid_file_costs_only_the_damaged_packets(tmp_path, sample_path, model_path):
    frames = 150
    whole = remux(sample_path("vtest.mp4"), str(tmp_path / "whole.mp4"), packets=frames)  # the camera's own stream
    clip = damage(whole, str(tmp_path / "damaged.mp4"), at=0.5, size=8000)
    cfg = {"sources": [{"id": "cam", "uri": clip}], "models": {"det": detector_model(model_path)},
           "graph": [{"detect": {"model": "det"}}], "outputs": {"video": {"enabled": False}}}
    r, report = cli_run(cfg, tmp_path)
    assert r.returncode == 0, r.stderr
    cam = report["cameras"]["cam"]
    assert cam["state"] == "ended" and cam["decode_errors"] >= 1
    assert cam["processed"] >= frames - 2 * cam["decode_errors"], cam  # what was before and after the damage is kept
    assert "Traceback" not in r.stderr
    warnings = [line for line in r.stderr.splitlines() if "unreadable packet" in line]
    assert 1 <= len(warnings) <= 2  # one story, not a line per packet


def test_a_truncated_file_keeps_its_first_half_and_says_so(tmp_path, sample_path, model_path):
    fast = remux(sample_path("bikes.mp4"), str(tmp_path / "fast.mp4"), faststart=True)
    data = Path(fast).read_bytes()
    half = tmp_path / "half.mp4"
    half.write_bytes(data[: len(data) // 2])
    cfg = {"sources": [{"id": "cam", "uri": str(half)}], "models": {"det": detector_model(model_path)},
           "graph": [{"detect": {"model": "det"}}]}
    r, report = cli_run(cfg, tmp_path)
    assert r.returncode == 0, r.stderr
    cam = report["cameras"]["cam"]
    assert cam["state"] == "ended" and 80 <= cam["processed"] <= 170
    assert "ends early" in cam["detail"] and "of the 250 frames its index lists" in cam["detail"]
    assert frame_count(str(tmp_path / "out" / "cam.mp4")) == cam["processed"]


def test_a_live_url_that_breaks_before_its_first_frame_backs_off_and_gives_up(tmp_path, sample_path, model_path):
    """An HTTP server without range requests serving an MP4 whose index is at its end:
    FFmpeg opens it but never gets a frame. Backoff and give-up apply, the run ends, and
    the summary reports no made-up downtime."""
    folder = tmp_path / "www"
    folder.mkdir()
    (folder / "cam.mp4").write_bytes(Path(sample_path("vtest.mp4")).read_bytes())
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(folder))
    handler.log_message = lambda *a: None  # type: ignore[method-assign]
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        cfg = {"sources": [{"id": "web", "uri": f"http://127.0.0.1:{httpd.server_port}/cam.mp4",
                            "reconnect": {"initial_s": 0.2, "max_s": 1.0, "give_up_s": 3}}],
               "models": {"det": detector_model(model_path)}, "graph": [{"detect": {"model": "det"}}]}
        t0 = time.monotonic()
        r, report = cli_run(cfg, tmp_path, timeout=60)
        took = time.monotonic() - t0
    finally:
        httpd.shutdown()
    assert took < 30  # it ends (hours before the fix: it never did)
    web = report["cameras"]["web"]
    assert web["state"] == "failed" and "give_up_s=3" in web["detail"]
    assert web["downtime_s"] == 0 and web["reconnects"] == 0  # it never streamed: nothing to be down from
    attempts = [line for line in r.stderr.splitlines() if "camera web: connecting (" in line]
    assert 2 <= len(attempts) <= 12 and all("retrying in" in a for a in attempts)  # backoff, and why


def test_timestamps_that_do_not_increase_are_replaced_by_the_frame_rate(tmp_path, short_clips, model_path,
                                                                         write_config):
    clip = remux(short_clips["bikes"], str(tmp_path / "zero.mkv"), zero_pts=True)
    with av.open(clip) as c:
        assert {f.pts for f in c.decode(video=0)} == {0}  # really all 0
    cfg = {"sources": [{"id": "cam", "uri": clip}], "models": {"det": detector_model(model_path)},
           "graph": [{"detect": {"model": "det"}}]}
    run_pipeline(cfg, write_config, str(tmp_path / "out"))
    times = [r["time"] for r in read_jsonl(str(tmp_path / "out" / "detections.jsonl"))]
    np.testing.assert_allclose(times, np.arange(40) / 25, atol=1e-6)
    with av.open(str(tmp_path / "out" / "cam.mp4")) as c:
        s = c.streams.video[0]
        pts = [float(f.pts * s.time_base) for f in c.decode(s)]
    np.testing.assert_allclose(np.diff(pts), 1 / 25, atol=1e-3)


def test_an_nms_inside_export_gives_the_unfused_models_boxes_with_io_binding(tmp_path, short_clips, model_path,
                                                                             write_config):
    """Its output has one row per box, so its shape changes with every frame: outputs of
    unknown shape are bound afresh for every run."""
    fused = make_nms_inside(model_path("yolox_nano.onnx"), str(tmp_path / "e2e.onnx"))
    runs = {}
    for name, model in (("fused", detector_model(model_path, path=fused, layout="e2e")),
                        ("raw", detector_model(model_path))):
        model["engine"]["io_binding"] = True
        cfg = {"sources": [{"id": "cam", "uri": short_clips["vtest"]}], "models": {"det": model},
               "graph": [{"detect": {"model": "det"}}], "outputs": {"video": {"enabled": False}}}
        snap = run_pipeline(cfg, write_config, str(tmp_path / name))
        assert snap.cameras["cam"].errors == 0
        runs[name] = read_jsonl(str(tmp_path / name / "detections.jsonl"))
    sizes = {len(r["detections"]) for r in runs["fused"]}
    assert len(sizes) > 1  # the output shape really changed between frames
    for a, b in zip(runs["fused"], runs["raw"]):
        key = lambda d: (d["class"], round(d["box"][0]))  # noqa: E731
        assert len(a["detections"]) == len(b["detections"])
        for da, db in zip(sorted(a["detections"], key=key), sorted(b["detections"], key=key)):
            assert da["class"] == db["class"]
            assert np.abs(np.array(da["box"]) - np.array(db["box"])).max() <= 0.5


@pytest.mark.parametrize("file,declared,suggested", [("raw", "yolov5", "yolox"), ("v5", "yolox", "yolov5")])
def test_a_layout_read_the_wrong_way_round_is_refused(tmp_path, short_clips, model_path, file, declared, suggested):
    """YOLOX's raw head and YOLOv5 share the shape [b, n, 85]: only the boxes tell."""
    path = model_path("yolox_nano.onnx") if file == "raw" else make_v5_layout(model_path("yolox_nano.onnx"),
                                                                            str(tmp_path / "v5.onnx"))
    cfg = {"sources": [{"id": "cam", "uri": short_clips["vtest"]}],
           "models": {"det": detector_model(model_path, path=path, layout=declared)},
           "graph": [{"detect": {"model": "det"}}]}
    r, _ = cli_run(cfg, tmp_path)
    errors = [line for line in r.stderr.splitlines() if line.startswith("error:")]
    assert r.returncode == 2 and len(errors) == 1, r.stderr
    assert errors[0].startswith("error: models.det.layout:") and f"is it a {suggested} model?" in errors[0]
    assert not (tmp_path / "out").exists()


def test_the_right_v5_layout_runs(tmp_path, short_clips, model_path, write_config):
    v5 = make_v5_layout(model_path("yolox_nano.onnx"), str(tmp_path / "v5.onnx"))
    runs = {}
    for layout, path in (("yolov5", v5), ("yolox", model_path("yolox_nano.onnx"))):
        cfg = {"sources": [{"id": "cam", "uri": short_clips["vtest"]}],
               "models": {"det": detector_model(model_path, path=path, layout=layout)},
               "graph": [{"detect": {"model": "det"}}], "outputs": {"video": {"enabled": False}}}
        run_pipeline(cfg, write_config, str(tmp_path / layout), max_frames=5)
        runs[layout] = read_jsonl(str(tmp_path / layout / "detections.jsonl"))
    assert [[d["box"] for d in r["detections"]] for r in runs["yolov5"]] == \
        [[d["box"] for d in r["detections"]] for r in runs["yolox"]]


def test_class_ids_beyond_the_labels_are_an_error_not_a_number(tmp_path, short_clips, model_path):
    fused = make_nms_inside(model_path("yolox_nano.onnx"), str(tmp_path / "e2e.onnx"))
    cfg = {"sources": [{"id": "street", "uri": short_clips["bikes"]}],  # people, bicycles and cars (class 2)
           "models": {"det": detector_model(model_path, path=fused, layout="e2e", labels=["person", "bicycle"])},
           "graph": [{"detect": {"model": "det"}}]}
    r, _ = cli_run(cfg, tmp_path)
    assert r.returncode == 2
    import re

    assert re.search(r"error: models\.det: .*class id \d+ is beyond the model's 2 labels", r.stderr), r.stderr


@pytest.mark.serial  # timed against the wall clock: alone, after the parallel part of `make test`
@pytest.mark.parametrize("delay", [0.2, 0.8, 1.6])
def test_ctrl_c_while_starting_exits_130_quietly(tmp_path, sample_path, model_path, delay):
    cfg = {"sources": [{"id": "cam", "uri": sample_path("bikes.mp4"), "realtime": True}],
           "models": {"det": detector_model(model_path)}, "graph": [{"detect": {"model": "det"}}],
           "outputs": {"dir": str(tmp_path / "out")}}
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    proc = subprocess.Popen([sys.executable, "-m", "pipeline", "run", "--config", str(tmp_path / "c.yaml"), "-q"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(delay)
    proc.send_signal(2)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr and "Error" not in stderr.replace("ERROR", "")


def test_failed_cameras_leave_no_empty_files(tmp_path, model_path, short_clips):
    garbage = tmp_path / "garbage.mp4"
    garbage.write_bytes(os.urandom(20000))
    cfg = {"sources": [{"id": "bad", "uri": str(garbage)}, {"id": "good", "uri": short_clips["bikes"]}],
           "models": {"det": detector_model(model_path)}, "graph": [{"detect": {"model": "det"}}],
           "outputs": {"jsonl": {"filename": "{camera}.jsonl"}}}
    r, report = cli_run(cfg, tmp_path)
    assert r.returncode == 0 and report["cameras"]["bad"]["state"] == "failed"
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [".config", ".store_runs", ".written", "good.jsonl",
                                                                    "good.mp4", "store.db", "store.db.lock"]


def test_a_server_that_never_answers_is_reported_as_a_timeout(tmp_path, model_path, short_clips):
    """A camera whose server accepts the connection and then says nothing: the reason given
    is the open timeout, not 'Invalid data found'."""
    import socket

    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen()
    port = silent.getsockname()[1]
    try:
        cfg = {"sources": [{"id": "mute", "uri": f"rtsp://127.0.0.1:{port}/cam", "open_timeout_s": 1,
                            "reconnect": {"initial_s": 0.2, "max_s": 0.5, "give_up_s": 2}},
                           {"id": "good", "uri": short_clips["bikes"]}],
               "models": {"det": detector_model(model_path)}, "graph": [{"detect": {"model": "det"}}]}
        r, report = cli_run(cfg, tmp_path)
    finally:
        silent.close()
    assert r.returncode == 0, r.stderr
    mute = report["cameras"]["mute"]
    assert mute["state"] == "failed" and "no answer within open_timeout_s=1" in mute["detail"]
    assert report["cameras"]["good"]["processed"] == 40


def test_onnx_runtimes_own_log_lines_stay_off_the_terminal(tmp_path):
    """A kernel that fails mid-run raises an exception we report in one line; ORT prints
    nothing itself (by default it logs the failure in raw colour codes, even into a file)."""
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Reshape", ["x", "shape"], ["y"])], "halves",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3, 1, 1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [helper.make_tensor("shape", TensorProto.INT64, [2], [2, -1])])
    path = tmp_path / "halves.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    script = f"""
import numpy as np
from pipeline.config import ModelConfig
from pipeline.engines.session import create_session
s = create_session(ModelConfig(name="halves", path={str(path)!r}, layout="classifier", input_size=(1, 1)), 1)
try:
    s.run(None, {{"x": np.zeros((1, 3, 1, 1), np.float32)}})  # 3 values cannot make two rows
except Exception as e:
    print("raised", type(e).__name__)
"""
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert "raised" in r.stdout, r.stderr
    assert "\x1b[" not in r.stderr and "onnxruntime" not in r.stderr.lower(), r.stderr


def test_a_fifo_source_is_refused_by_validate_and_run_in_one_line(tmp_path, fifo, model_path, short_clips):
    """A `file://` FIFO without a writer: `validate` hung, `run` stayed `connecting` and
    outlived SIGTERM by minutes (FFmpeg's open waits in the kernel)."""
    pipe = fifo()
    cfg = {"sources": [{"id": "pipe", "uri": f"file://{pipe}"}, {"id": "ok", "uri": short_clips["bikes"]}],
           "models": {"det": detector_model(model_path)}, "graph": [{"detect": {"model": "det"}}],
           "outputs": {"dir": str(tmp_path / "out")}}
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(cfg))
    for command in ("validate", "run"):
        try:
            r = subprocess.run([sys.executable, "-m", "pipeline", command, "--config", str(path)], capture_output=True,
                               text=True, cwd=ROOT, timeout=60)
        except subprocess.TimeoutExpired:
            pytest.fail(f"{command} hung on the FIFO")
        errors = [line for line in r.stderr.splitlines() if line.startswith("error:")]
        assert r.returncode == 2 and errors == [f"error: sources[0].uri: not a regular file (a FIFO): file://{pipe}"], \
            r.stderr[-2000:]


def test_a_file_that_became_a_fifo_fails_its_camera_and_a_stop_still_ends_the_run(tmp_path, fifo, model_path,
                                                                                  short_clips, write_config):
    """The path was checked when the config was read; it is checked again right before the
    open, so the camera fails in one line instead of waiting for a writer, and the stop
    that SIGTERM makes ends the run."""
    import shutil

    from pipeline.config import load_config
    from pipeline.graph import Pipeline

    swapped = tmp_path / "swapped.mp4"
    shutil.copyfile(short_clips["bikes"], swapped)
    cfg = {"sources": [{"id": "swapped", "uri": str(swapped)},
                       {"id": "cam", "uri": short_clips["bikes"], "realtime": True, "loop": True}],
           "models": {"det": detector_model(model_path)}, "graph": [{"detect": {"model": "det"}}],
           "outputs": {"dir": str(tmp_path / "out"), "video": {"enabled": False}}}
    p = Pipeline(load_config(write_config(cfg)))
    swapped.unlink()
    fifo(swapped)
    p.start()
    try:
        deadline = time.monotonic() + 30
        while p.snapshot().cameras["cam"].processed < 5 and time.monotonic() < deadline:
            time.sleep(0.1)
        p.stop()
        assert p.wait(30), "the run did not end after the stop"
    finally:
        p.stop(abort=True)
        p.close(timeout=10)
    cams = p.snapshot().cameras
    assert cams["swapped"].state == "failed"
    assert cams["swapped"].detail == f"cannot open {swapped}: not a regular file (a FIFO): {swapped}"
    assert cams["cam"].state == "ended" and cams["cam"].processed >= 5


def test_event_pictures_a_full_disk_cannot_hold_show_in_the_summary_report_and_exit_status(tmp_path, small_disk,
                                                                                          model_path):
    """`events/` on a full disk (a tmpfs of its own): a WARNING, but the run exited 0 and
    neither its summary nor its report said a picture was missing."""
    from synthetic import Mover, picture, render

    clip = tmp_path / "walk.mp4"
    render([Mover(picture("astronaut", 200), (0, 0), (430, 10))], str(clip), frames=40)
    (tmp_path / "out").mkdir()
    disk = small_disk("64k", "out/events")
    free = os.statvfs(disk).f_bavail * os.statvfs(disk).f_frsize
    (disk / "filler").write_bytes(b"x" * free)
    cfg = {"sources": [{"id": "lab", "uri": str(clip)}], "models": {"det": detector_model(model_path)},
           "graph": [{"detect": {"model": "det"}}, "track", {"analytics": {"cameras": {"lab": {"lines": [
               {"name": "middle", "points": [[320, 0], [320, 359]], "classes": ["person"]}]}}}}],
           "outputs": {"video": {"enabled": False}, "events": {"snapshots": True}}}
    r, report = cli_run(cfg, tmp_path)
    lab = report["cameras"]["lab"]
    crossings = [e for rec in read_jsonl(str(tmp_path / "out" / "detections.jsonl")) for e in rec.get("events", [])]
    assert len(crossings) == 1, "the person crosses the line once"
    assert r.returncode == 1, r.stderr[-2000:]
    assert lab["snapshots_lost"] == 2  # the frame's JPEG and the crop
    row = next(line for line in r.stdout.splitlines() if line.startswith("lab "))
    assert "2 snapshot picture(s) LOST" in row
    said = [line for line in r.stderr.splitlines() if "could not be written" in line]
    assert len(said) == 1 and "No space left on device" in said[0] and "events/lab/" in said[0]
    assert sorted(os.listdir(disk / "lab")) == []  # no half-written picture left behind
