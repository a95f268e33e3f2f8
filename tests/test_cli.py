"""The command line: model catalog listing, running a subset of cameras, reports; one run
per output folder; start-up failures, lost events and secrets in what it shows."""
import json
import os
import signal
import socket
import subprocess
import time

import pytest
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
    # the store is on by default, beside the files it indexes; closed, its WAL is folded into store.db
    # (its lock file stays: removed, two holders could each lock a file of their own)
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [".config", ".store_runs", ".written",
                                                                    "detections.jsonl", "store.db", "store.db.lock",
                                                                    "street.mp4"]
    assert "street" in r.stdout and "total: 7 frames" in r.stdout  # the summary
    assert "thread plan for" in r.stderr  # printed at start-up


def _config(tmp_path, model_path, source: dict, **outputs) -> str:
    cfg = {"sources": [{"id": "cam", **source}], "models": {"det": detector_model(model_path)},
           "graph": [{"detect": {"model": "det"}}], "outputs": {"dir": str(tmp_path / "out"), **outputs}}
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    return str(tmp_path / "c.yaml")


def test_a_second_run_on_the_same_output_folder_exits_2_naming_the_first(tmp_path, sample_path, model_path,
                                                                          pipeline_cmd):
    config = _config(tmp_path, model_path, {"uri": sample_path("bikes.mp4"), "realtime": True, "loop": True,
                                                  "max_fps": 5})
    first = subprocess.Popen([*pipeline_cmd, "run", "--config", config, "-q"], cwd=ROOT, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        for _ in range(240):
            if (tmp_path / "out" / "detections.jsonl").exists():
                break
            time.sleep(0.5)
        second = subprocess.run([*pipeline_cmd, "run", "--config", config, "--max-frames", "5"], capture_output=True,
                                text=True, cwd=ROOT, timeout=120)
    finally:
        first.send_signal(signal.SIGINT)
        out, err = first.communicate(timeout=120)
    assert second.returncode == 2, second.stderr  # was 0: both wrote the same files
    lines = [ln for ln in second.stderr.splitlines() if "error:" in ln]
    assert len(lines) == 1 and f"is in use by another run (pid {first.pid})" in lines[0]
    assert first.returncode == 130 and "cam" in out  # the first run went on, and its summary came on SIGINT
    assert not (tmp_path / "out" / ".pipeline.lock").exists()


def test_a_busy_metrics_port_is_one_error_line_and_exit_2(tmp_path, short_clips, model_path, pipeline_cmd):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        config = _config(tmp_path, model_path, {"uri": short_clips["bikes"]})
        data = yaml.safe_load(open(config))
        data["metrics"] = {"prometheus_port": port}
        (tmp_path / "c.yaml").write_text(yaml.safe_dump(data))
        r = subprocess.run([*pipeline_cmd, "run", "--config", config], capture_output=True, text=True, cwd=ROOT,
                           timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert [ln for ln in r.stderr.splitlines() if ln.startswith("error:")] == [
        f"error: metrics.prometheus_port: port {port} on 127.0.0.1 is already in use"]


def test_lost_events_show_in_the_summary_and_the_exit_status(tmp_path, short_clips, model_path, pipeline_cmd):
    with socket.socket() as s:  # a port nobody listens on: every POST is refused
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = _config(tmp_path, model_path, {"uri": short_clips["bikes"]},
                     events={"webhook": {"url": f"http://127.0.0.1:{port}/hook?token=S3cretTok"},
                             "flush_timeout_s": 0.5})
    r = subprocess.run([*pipeline_cmd, "run", "--config", config, "--report", str(tmp_path / "r.json")],
                       capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 1, r.stderr  # was 0: the run looked fine
    report = json.loads((tmp_path / "r.json").read_text())
    lost = sum(e["dropped"] for e in report["events"].values())
    assert lost > 0 and f"{lost} LOST" in r.stdout
    assert "S3cretTok" not in r.stdout + r.stderr + (tmp_path / "r.json").read_text()


def test_a_password_in_a_camera_url_shows_nowhere(tmp_path, model_path, pipeline_cmd):
    config = _config(tmp_path, model_path, {"uri": "rtsp://admin:S3cretPass@127.0.0.1:1/stream",
                                            "reconnect": {"give_up_s": 0.5}})
    r = subprocess.run([*pipeline_cmd, "run", "--config", config, "--report", str(tmp_path / "r.json")],
                       capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 1  # its only camera failed
    shown = r.stdout + r.stderr + (tmp_path / "r.json").read_text()
    assert "admin:***@127.0.0.1" in shown and "S3cretPass" not in shown


def test_the_renamed_bench_option_names_its_new_name(capsys):
    from pipeline.cli import build_parser

    with pytest.raises(SystemExit) as ended:
        build_parser().parse_args(["bench", "--config", "configs/bench.yaml", "--cameras", "4"])
    assert ended.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == \
        "pipeline bench: error: --cameras was renamed: use --camera-count N"


@pytest.fixture(scope="module")
def big_answer(tmp_path_factory) -> str:
    """A store whose page of 1000 events, as a table or as JSON, is far past a pipe's buffer."""
    from store_rows import make_store, synthetic

    return make_store(str(tmp_path_factory.mktemp("store") / "store.db"), synthetic(1000))


@pytest.mark.parametrize("table", [True, False], ids=["table", "json"])
def test_a_reader_that_leaves_early_ends_pipeline_query_quietly_with_exit_0_whatever_the_form(
        pipeline_cmd, big_answer, table):
    proc = subprocess.Popen([*pipeline_cmd, "query", "events", "--store", big_answer, "--limit", "1000",
                             *([] if table else ["--json"])], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout.readline()  # `| head -1`: one line read, then gone, the rest (far past a pipe's buffer) unread
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 0  # as when the answer is short enough to be whole in the pipe first
    assert err == ""


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (Linux), a device always full")
@pytest.mark.parametrize("form", [[], ["--json"], ["--limit", "1"]], ids=["table", "json", "one row"])
def test_stdout_on_a_full_device_is_one_error_line_and_exit_1_without_a_traceback(pipeline_cmd, big_answer, form):
    with open("/dev/full", "w") as full:
        r = subprocess.run([*pipeline_cmd, "query", "events", "--store", big_answer, "--limit", "1000", *form],
                           cwd=ROOT, stdout=full, stderr=subprocess.PIPE, text=True, timeout=60)
    assert r.returncode == 1
    assert r.stderr.splitlines() == ["error: cannot write to stdout: No space left on device"]
