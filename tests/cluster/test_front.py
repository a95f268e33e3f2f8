"""The live page of a run over processes (`pipeline.cluster.front`): one server on the
config's port and token serves the run as a whole (its cameras, events) and each
camera's stills, MJPEG and live video from the host process that runs it; a camera added
over HTTP is placed on a host and served from it, and removed."""
from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import time
import urllib.error
import urllib.request

import aiohttp

from brokers import free_port
from conftest import ROOT, detector_model
from test_processes import run_command, wait_for

TOKEN = "front-door-token"


def get(port: int, path: str, token: bool = True, method: str = "GET", body: bytes | None = None
        ) -> tuple[int, dict, bytes]:
    headers = {"Authorization": f"Bearer {TOKEN}"} if token else {}
    if body is not None:
        headers["Content-Type"] = "application/json"
    ask = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=body, method=method, headers=headers)
    try:
        with urllib.request.urlopen(ask, timeout=30) as answer:
            return answer.status, dict(answer.headers), answer.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def cameras(port: int) -> dict:
    try:
        return json.loads(get(port, "/api/cameras")[2])
    except (OSError, ValueError):
        return {}


async def watch_video(port: int, camera: str, check) -> list:
    """The camera's live socket through the front, read until a frame record came, then
    `check()` while it is open."""
    got: list = []
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with aiohttp.ClientSession(headers=headers) as session:
        async with session.ws_connect(f"http://127.0.0.1:{port}/api/live/{camera}") as ws:
            while not any(k == "text" and m["type"] == "frame" for k, m in got):
                m = await asyncio.wait_for(ws.receive(), 60)
                assert m.type in (aiohttp.WSMsgType.TEXT, aiohttp.WSMsgType.BINARY), m
                got.append(("text", json.loads(m.data)) if m.type == aiohttp.WSMsgType.TEXT else ("binary", m.data))
            await asyncio.get_running_loop().run_in_executor(None, check)
    return got


def mjpeg_parts(port: int, camera: str, count: int) -> int:
    ask = urllib.request.Request(f"http://127.0.0.1:{port}/stream/{camera}", headers={"Authorization": f"Bearer {TOKEN}"})
    seen = b""
    with urllib.request.urlopen(ask, timeout=30) as answer:
        assert answer.headers["Content-Type"].startswith("multipart/x-mixed-replace")
        while seen.count(b"Content-Type: image/jpeg") < count:
            seen += answer.read1(65536)
    return seen.count(b"\xff\xd8")


def test_one_page_on_the_configs_port_serves_every_camera_from_the_process_that_runs_it(
        tmp_path, sample_path, model_path, write_config):
    port = free_port()
    zone = {"zones": [{"name": "road", "polygon": [[0, 100], [639, 100], [639, 271], [0, 271]]}]}
    cfg = {"sources": [{"id": f"cam{i}", "uri": sample_path("bikes.mp4"), "realtime": True, "loop": True,
                        "max_fps": 5} for i in range(2)],
           "models": {"det": detector_model(model_path, score_threshold=0.2)},
           "graph": [{"detect": {"model": "det"}}, "track",
                     {"analytics": {"cameras": {"cam0": zone, "cam1": zone}}}, "annotate"],
           "outputs": {"dir": str(tmp_path / "out"), "jsonl": {"filename": "{camera}.jsonl"},
                       "web": {"port": port, "token": TOKEN, "control": True}}}
    run = subprocess.Popen(run_command(write_config(cfg), "--processes", "2"), cwd=ROOT,
                           stderr=subprocess.PIPE, text=True)
    try:
        def started() -> bool:
            cams = cameras(port).get("cameras", {})
            return len(cams) == 2 and all(c["processed"] > 0 for c in cams.values())

        wait_for(started, 120, "the cameras did not start")
        snap = cameras(port)
        assert sorted(snap["cameras"]) == ["cam0", "cam1"]
        assert {c["host"] for c in snap["cameras"].values()} == {"host0", "host1"}  # one camera a process
        assert snap["cpu_percent"] == round(snap["cpu_percent"], 1)  # the hosts' added up, shown as one process's
        wait_for(lambda: cameras(port)["recent"]["latency"]["p99_ms"] is not None, 30,
                 "the header's P99 over the last seconds: the hosts' recent latencies merged")
        assert get(port, "/api/cameras", token=False)[0] == 401  # the config's token at the door
        for cam in ("cam0", "cam1"):
            status, headers, body = get(port, f"/frame/{cam}.jpg?token=ignored")
            assert status == 200 and headers["Content-Type"] == "image/jpeg" and body[:2] == b"\xff\xd8"
            assert int(headers["X-Seq"]) >= 0 and float(headers["X-Capture-Time"]) > 0
        assert get(port, "/frame/cam9.jpg")[0] == 404
        assert mjpeg_parts(port, "cam1", 3) >= 3

        def one_socket_counted() -> None:  # the host's count of open sockets, through its status
            wait_for(lambda: cameras(port)["live_view"]["video"] == {"cam1": 1}, 30, "the socket was not counted")

        got = asyncio.run(watch_video(port, "cam1", one_socket_counted))
        assert got[0][0] == "text" and got[0][1]["type"] == "init" and got[0][1]["width"] == 640
        assert got[1][0] == "binary" and got[1][1][4:8] == b"ftyp"  # the camera's own packets, as fMP4

        wait_for(lambda: {e["camera"] for e in json.loads(get(port, "/api/events")[2])["events"]} == {"cam0", "cam1"},
                 60, "no events of both cameras")
        events = json.loads(get(port, "/api/events?limit=200")[2])["events"]
        ids = [e["id"] for e in events]
        assert ids == sorted(set(ids), reverse=True)  # one numbering, newest first
        assert all(e["id"] > ids[1] for e in json.loads(get(port, f"/api/events?after={ids[1]}")[2])["events"])
        status, _, body = get(port, "/metrics")  # as metrics.prometheus_port: counters a move would set back
        assert status == 404 and b"not served by a run of hosts" in body
        assert get(port, "/frame/cam0")[0] == 404  # a still is a .jpg, as on one process

        added = {"id": "cam2", "uri": sample_path("vtest.mp4"), "realtime": True, "loop": True, "max_fps": 5}
        status, _, body = get(port, "/api/cameras", method="POST", body=json.dumps(added).encode())
        assert status == 201, body
        wait_for(lambda: cameras(port)["cameras"].get("cam2", {}).get("processed", 0) > 0, 60, "cam2 did not start")
        assert cameras(port)["cameras"]["cam2"]["host"] in ("host0", "host1")
        status, headers, body = get(port, "/frame/cam2.jpg")
        assert status == 200 and body[:2] == b"\xff\xd8"  # from the host it was placed on
        assert get(port, "/api/cameras", method="POST", body=json.dumps(added).encode())[0] == 409  # running
        assert get(port, "/api/cameras/cam2", method="DELETE")[0] == 202
        wait_for(lambda: get(port, "/frame/cam2.jpg")[0] == 404, 30, "cam2 was not removed")
        run.send_signal(signal.SIGTERM)
        assert run.wait(120) == 0, run.stderr.read()[-3000:] if run.stderr else ""
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and cameras(port):
        time.sleep(0.2)
    assert not cameras(port)  # the page went with the run
