"""Planted secrets appear in no output. One `pipeline run` (a subprocess, so the CLI's
logging path runs as in production) with a failing RTSP camera whose URL holds a
password, a working file camera, the live view behind a token, and events to a real
Mosquitto (with a password) and to a local webhook whose URL holds a `?token=`. Every
output is then searched for every planted secret: the log on stderr, the summary on
stdout, the `--report` JSON, the JSON lines, `/api/cameras`, `/metrics` and the page
(fetched all through the run), the MQTT and webhook payloads as they arrived, and what
`pipeline validate` prints for a config with a bad value next to each secret."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

from brokers import Mosquitto, available, free_port
from conftest import ROOT, detector_model

_MISSING = available()
if _MISSING and os.environ.get("CI", "").lower() in ("1", "true", "yes"):
    raise RuntimeError(f"CI: {_MISSING}")
pytestmark = pytest.mark.skipif(_MISSING is not None, reason=_MISSING or "")

RTSP_PASSWORD = "Pl4ntedRtspPw"
HOOK_TOKEN = "Pl4ntedHookTok"
MQTT_PASSWORD = "Pl4ntedMqttPw"
WEB_TOKEN = "Pl4ntedWebTok"
SECRETS = (RTSP_PASSWORD, HOOK_TOKEN, MQTT_PASSWORD, WEB_TOKEN)


class RawWebhook:
    """Records each POST body as it arrived (bytes, every field, not only the events);
    the request's own URL carries the token by design and is not an output. The first
    `failures` requests get a 500, so the sender's warnings (which name the URL) are
    written too."""

    def __init__(self, failures: int = 1) -> None:
        self.bodies: list[bytes] = []
        received = self.bodies
        answers = [500] * failures

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                body = self.rfile.read(int(self.headers["Content-Length"]))  # its URL has the token, rightly
                status = answers.pop() if answers else 204
                if status == 204:
                    received.append(body)
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, name="webhook", daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class RawSubscriber:
    """Records every MQTT message on every topic (`#`), topic and payload as they came."""

    def __init__(self, port: int) -> None:
        import paho.mqtt.client as mqtt

        self.messages: list[bytes] = []
        subscribed = threading.Event()
        self.client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2)
        self.client.on_connect = lambda c, *a: c.subscribe("#", qos=1)
        self.client.on_subscribe = lambda *a: subscribed.set()
        self.client.on_message = lambda c, u, m: self.messages.append(m.topic.encode() + b"\n" + m.payload)
        self.client.connect("127.0.0.1", port)
        self.client.loop_start()
        assert subscribed.wait(10)

    def close(self) -> None:
        self.client.loop_stop()
        self.client.disconnect()


def get(url: str) -> tuple[int, bytes]:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {WEB_TOKEN}"})
    try:
        with urllib.request.urlopen(request, timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()
    except OSError:
        return 0, b""


def config(tmp_path: Path, model_path, clip: str, broker: int, hook: str, web: int) -> dict:
    closed = free_port()  # nothing listens there: the camera cannot be opened
    return {"sources": [{"id": "door", "uri": f"rtsp://admin:{RTSP_PASSWORD}@127.0.0.1:{closed}/x",
                         "open_timeout_s": 1, "reconnect": {"initial_s": 0.2, "max_s": 0.5, "give_up_s": 3}},
                        {"id": "yard", "uri": clip, "realtime": True, "loop": True}],
            "models": {"det": detector_model(model_path)},
            "graph": [{"detect": {"model": "det"}}, "track",
                      {"analytics": {"cameras": {"yard": {"zones": [
                          {"name": "all", "polygon": [[0, 0], [640, 0], [640, 272], [0, 272]]}]}}}}],
            "outputs": {"dir": str(tmp_path / "out"), "video": {"enabled": False},
                        "web": {"port": web, "token": WEB_TOKEN},
                        "events": {"mqtt": {"host": "127.0.0.1", "port": broker, "username": "pipeline",
                                            "password": MQTT_PASSWORD},
                                   "webhook": {"url": f"{hook}?token={HOOK_TOKEN}"}}}}


def watch(base: str, proc: subprocess.Popen, seen: dict[str, list[bytes]]) -> None:
    """Fetch the API, the metrics and the page all through the run (a camera's error
    shows in its state's detail only while it lasts)."""
    while proc.poll() is None:
        for name, path in (("/api/cameras", "/api/cameras"), ("/metrics", "/metrics"), ("the page", "/")):
            status, body = get(base + path)
            if status == 200:
                seen[name].append(body)
        time.sleep(0.3)


@pytest.fixture(scope="module")
def run(tmp_path_factory, model_path, short_clips) -> dict:
    tmp_path = tmp_path_factory.mktemp("secrets")
    broker = Mosquitto(tmp_path / "broker").start()
    sub, hook = RawSubscriber(broker.port), RawWebhook()
    web = free_port()
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config(tmp_path, model_path, short_clips["bikes"], broker.port, hook.url, web)))
    report = tmp_path / "report.json"
    seen: dict[str, list[bytes]] = {"/api/cameras": [], "/metrics": [], "the page": []}
    proc = subprocess.Popen([sys.executable, "-m", "pipeline", "run", "--config", str(path), "--max-frames", "200",
                             "--report", str(report)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    watcher = threading.Thread(target=watch, args=(f"http://127.0.0.1:{web}", proc, seen), daemon=True)
    watcher.start()
    try:
        stdout, stderr = proc.communicate(timeout=300)
        watcher.join(30)
        time.sleep(1)  # the last MQTT messages reach the subscriber
    finally:
        if proc.poll() is None:
            proc.kill()
        sub.close()
        hook.close()
        broker.stop()
    out = tmp_path / "out"
    return {"rc": proc.returncode, "mqtt": [m.split(b"\n", 1) for m in sub.messages],
            "outputs": {"stderr (the log)": stderr, "stdout (the summary)": stdout,
                        "--report JSON": report.read_bytes() if report.exists() else b"",
                        "JSON lines": b"".join(p.read_bytes() for p in sorted(out.glob("*.jsonl"))),
                        **{name: b"\n".join(bodies) for name, bodies in seen.items()},
                        "MQTT payloads": b"\n".join(sub.messages), "webhook payloads": b"\n".join(hook.bodies)}}


def leaks(outputs: dict[str, bytes]) -> list[str]:
    """'<output>: <secret> in ...<where>...' for every planted secret found."""
    found = []
    for name, data in outputs.items():
        text = data.decode("utf-8", "replace")
        for secret in SECRETS:
            at = text.find(secret)
            if at >= 0:
                found.append(f"{name}: {secret} in ...{text[max(0, at - 120):at + 40]!r}...")
    return found


def test_no_output_of_a_run_shows_a_planted_secret(run):
    assert leaks(run["outputs"]) == []


def test_the_run_really_produced_every_output_it_searched(run):
    """The search above means something only if the secrets had their chance: the camera
    failed with its URL in its error, and every output has content."""
    outputs = run["outputs"]
    assert run["rc"] == 0, outputs["stderr (the log)"].decode()[-3000:]
    assert [name for name, data in outputs.items() if not data] == []
    log = outputs["stderr (the log)"].decode()
    assert "camera door: failed" in log and "rtsp://admin:***@127.0.0.1:" in log
    assert "/hook?token=***" in log  # the webhook's first answer, a 500, was warned about
    report = json.loads(outputs["--report JSON"])
    assert report["cameras"]["door"]["state"] == "failed" and report["cameras"]["yard"]["state"] == "ended"
    events = [json.loads(payload) for _, payload in run["mqtt"]]
    assert any(e.get("camera") == "door" and e.get("state") == "failed" for e in events)
    for name in ("/api/cameras", "MQTT payloads", "webhook payloads", "stdout (the summary)", "--report JSON"):
        assert b"rtsp://admin:***@127.0.0.1:" in outputs[name], name  # the camera's error, URL redacted
    assert b'"enter"' in outputs["webhook payloads"]


def test_validate_shows_no_secret_next_to_a_bad_value(tmp_path, model_path, short_clips, pipeline_cmd):
    cfg = config(tmp_path, model_path, short_clips["bikes"], 1883, "http://127.0.0.1:9/hook", 8080)
    cfg["sources"][0]["transport"] = "pigeon"
    cfg["sources"].append(f"rtsp://admin:{RTSP_PASSWORD}@10.0.0.7/x")  # a camera written as its URL alone
    cfg["outputs"]["web"]["quality"] = 5
    cfg["outputs"]["events"]["mqtt"]["port"] = 99999
    cfg["outputs"]["events"]["webhook"]["timeout_s"] = "slow"
    first = tmp_path / "first.yaml"
    first.write_text(yaml.safe_dump(cfg))
    cfg["outputs"]["events"]["mqtt"]["password"] = 73645192830  # a numeric secret: a type error
    cfg["outputs"]["web"]["token"] = 91827364550
    cfg["outputs"]["events"]["webhook"]["url"] = f"ftp://hook:{HOOK_TOKEN}@127.0.0.1/in?token={HOOK_TOKEN}"
    second = tmp_path / "second.yaml"
    second.write_text(yaml.safe_dump(cfg))
    printed = {}
    for path in (first, second):
        r = subprocess.run([*pipeline_cmd, "validate", "--config", str(path)], capture_output=True, cwd=ROOT)
        assert r.returncode == 2
        printed[f"validate {path.name}"] = r.stdout + r.stderr
    for text in printed.values():  # the bad values were found, next to the secrets
        assert b"sources[0].transport" in text and b"outputs.events.mqtt.port" in text and b"sources[2]" in text
    assert b"outputs.events.mqtt.password" in printed["validate second.yaml"]
    assert b"outputs.events.webhook.url" in printed["validate second.yaml"]
    numbers = ("73645192830", "91827364550")
    assert leaks(printed) == [] and [n for n in numbers if n.encode() in printed["validate second.yaml"]] == []
