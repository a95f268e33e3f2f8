"""Operator controls on a real run: lines and zones changed by SIGHUP and over
`POST /api/reload` without a restart (a bad edit refused with every problem, the run going
on; other changes named as needing a restart), `pipeline status` against it, and SIGTERM
ending it with exit status 0 and playable files."""
import copy
import json
import signal
import socket
import subprocess
import time

import yaml

from conftest import ROOT, detector_model, frame_count, read_jsonl
from web.web_support import get, wait_for

TOKEN = "s3cret-T0k"
EVERYWHERE = {"name": "everywhere", "polygon": [[0, 0], [767, 0], [767, 575], [0, 575]]}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _config(tmp_path, sample_path, model_path) -> dict:
    return {"sources": [{"id": "campus", "uri": sample_path("vtest.mp4"), "realtime": True, "loop": True,
                         "max_fps": 5}],
            "models": {"det": detector_model(model_path, score_threshold=0.2)},
            "graph": [{"detect": {"model": "det"}}, "track",
                      {"analytics": {"cameras": {"campus": {
                          "lines": [{"name": "path", "points": [[0, 300], [767, 250]]}]}}}}],
            "outputs": {"dir": str(tmp_path / "out"),
                        "web": {"port": _free_port(), "token": TOKEN, "control": True}}}


def _events(path) -> list[dict]:
    """The events in the JSON lines whole so far (the writer may be mid-line)."""
    lines = path.read_text().splitlines() if path.exists() else []
    found = []
    for line in lines:
        try:
            found += json.loads(line).get("events", [])
        except json.JSONDecodeError:
            pass
    return found


def test_lines_and_zones_change_on_sighup_and_http_a_bad_edit_changes_nothing_and_sigterm_exits_0(
        tmp_path, sample_path, model_path, pipeline_cmd):
    cfg = _config(tmp_path, sample_path, model_path)
    config = tmp_path / "cameras.yaml"
    config.write_text(yaml.safe_dump(cfg))
    jsonl, log = tmp_path / "out" / "detections.jsonl", tmp_path / "stderr.txt"
    with open(log, "w") as err:
        proc = subprocess.Popen([*pipeline_cmd, "run", "--config", str(config), "-q"], cwd=ROOT,
                                stdout=subprocess.PIPE, stderr=err, text=True)
    try:
        assert wait_for(lambda: jsonl.exists() and jsonl.stat().st_size > 2000 or proc.poll() is not None, 120)
        assert proc.poll() is None, log.read_text()[-3000:]

        status = subprocess.run([*pipeline_cmd, "status", "--config", str(config)], capture_output=True, text=True,
                                cwd=ROOT, timeout=60)
        assert status.returncode == 0, status.stderr
        header, columns, row = status.stdout.splitlines()
        assert header.startswith(f"pipeline at http://127.0.0.1:{cfg['outputs']['web']['port']}: up ")
        assert columns.split() == ["camera", "state", "fps", "processed", "drops", "recording"]
        assert row.split()[:2] == ["campus", "streaming"] and row.split()[-1] == "off"
        machine = subprocess.run([*pipeline_cmd, "status", "--url", f"http://127.0.0.1:{cfg['outputs']['web']['port']}",
                                  "--json"], capture_output=True, text=True, cwd=ROOT, timeout=60)
        assert machine.returncode == 1 and machine.stdout == ""  # no token: refused
        assert machine.stderr.strip().splitlines() == [
            f"error: http://127.0.0.1:{cfg['outputs']['web']['port']}: 401: a token is needed "
            "(--token, $PIPELINE_TOKEN, or outputs.web.token of --config)"]

        bad = copy.deepcopy(cfg)
        bad["graph"][2]["analytics"]["cameras"]["campus"]["zones"] = [{"name": "half", "polygon": [[0, 0], [5, 5]]}]
        bad["graph"][2]["analytics"]["cameras"]["nowhere"] = {"lines": []}
        config.write_text(yaml.safe_dump(bad))
        proc.send_signal(signal.SIGHUP)
        refused = wait_for(lambda: "reload refused" in log.read_text(), 30)
        assert refused, log.read_text()[-3000:]
        problems = [ln.split(" ERROR pipeline.reload: reload: ", 1)[1] for ln in log.read_text().splitlines()
                    if " ERROR pipeline.reload: reload: " in ln]
        assert problems == ["graph[2].analytics.cameras.campus.zones[0].polygon: expected 3 or more [x, y] points",
                            "graph[2].analytics.cameras.nowhere: no camera with this id"]
        size = jsonl.stat().st_size
        assert wait_for(lambda: jsonl.stat().st_size > size, 30) and proc.poll() is None  # the run went on

        good = copy.deepcopy(cfg)
        good["graph"][2]["analytics"]["cameras"]["campus"]["zones"] = [EVERYWHERE]
        good["sources"][0]["max_fps"] = 4  # not applied while running: named as needing a restart
        config.write_text(yaml.safe_dump(good))
        proc.send_signal(signal.SIGHUP)
        assert wait_for(lambda: any(e.get("zone") == "everywhere" and e["event"] == "enter" for e in _events(jsonl)),
                        60), log.read_text()[-3000:]
        text = log.read_text()
        assert "reload: graph[2].analytics.cameras.campus: lines path; zones everywhere" in text
        assert "reload: sources[0].max_fps changed: needs a restart (not applied)" in text

        base = f"http://127.0.0.1:{cfg['outputs']['web']['port']}/api/reload"
        assert get(base, method="POST", body=b"")[0] == 401
        no_lines = copy.deepcopy(good)
        no_lines["graph"][2]["analytics"]["cameras"]["campus"]["lines"] = []
        config.write_text(yaml.safe_dump(no_lines))
        code, body, _ = get(base, {"Authorization": f"Bearer {TOKEN}"}, method="POST", body=b"")
        assert code == 200, body
        assert json.loads(body) == {"applied": ["graph[2].analytics.cameras.campus: lines none; zones everywhere"],
                                    "restart": ["sources[0].max_fps"]}
        code, body, _ = get(f"http://127.0.0.1:{cfg['outputs']['web']['port']}/api/cameras",
                            {"Authorization": f"Bearer {TOKEN}"})
        assert "everywhere" in json.loads(body)["cameras"]["campus"]["occupancy"]
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        stdout, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, log.read_text()[-3000:]  # was 130: systemd took a clean stop for a failure
    assert "total:" in stdout and frame_count(str(tmp_path / "out" / "campus.mp4")) > 0
    records = read_jsonl(str(jsonl))
    assert records and frame_count(str(tmp_path / "out" / "campus.mp4")) == len(records)  # drained: every frame written


def test_only_lines_zones_and_masks_change_live_and_everything_else_is_named_by_its_yaml_path(
        tmp_path, sample_path, model_path):
    from pipeline.config import parse_config
    from pipeline.reload import differences, with_live

    cfg = _config(tmp_path, sample_path, model_path)
    before = parse_config(cfg, tmp_path)
    edited = copy.deepcopy(cfg)
    edited["graph"][2]["analytics"]["cameras"]["campus"]["lines"][0]["points"] = [[0, 100], [767, 100]]
    edited["sources"][0]["motion"] = {"mask": [[[0, 0], [50, 0], [50, 50]]]}
    edited["graph"][1] = {"track": {"max_age": 10}}
    edited["outputs"]["web"]["token"] = "another"
    after = parse_config(edited, tmp_path)
    assert differences(before, with_live(after, before)) == ["graph[1].track.max_age", "outputs.web.token"]
    running = with_live(before, after)
    assert differences(before, running) == [
        "sources[0].motion.mask", "graph[2].analytics.cameras.campus.lines[0].points[0]",
        "graph[2].analytics.cameras.campus.lines[0].points[1]"]
    assert running.graph[1] == before.graph[1] and running.outputs == before.outputs
