"""Real event destinations for the tests, on free ports of 127.0.0.1: a Mosquitto broker
(Debian's `mosquitto`, installed by .ci/run) with persistence so a restart keeps
subscriptions and queued messages, as a production broker would; and a webhook endpoint
(the standard library's HTTP server) that can answer at once, only when the test lets
it, with 500, or never."""
from __future__ import annotations

import json
import shutil
import signal
import socket
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import paho.mqtt.client as mqtt

MOSQUITTO = shutil.which("mosquitto") or "/usr/sbin/mosquitto"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Mosquitto:
    def __init__(self, folder: Path, port: int | None = None):
        self.folder = folder
        self.port = port or free_port()
        self.proc: subprocess.Popen | None = None
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "mosquitto.conf").write_text(
            f"listener {self.port} 127.0.0.1\nallow_anonymous true\npersistence true\n"
            f"persistence_location {folder}/\nautosave_interval 1\n")

    def start(self) -> "Mosquitto":
        self.proc = subprocess.Popen([MOSQUITTO, "-c", str(self.folder / "mosquitto.conf")],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", self.port)) == 0:
                    return self
            time.sleep(0.05)
        raise RuntimeError(f"mosquitto did not start on port {self.port}")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)  # a hung broker must be able to hear the SIGTERM
            self.proc.terminate()  # SIGTERM: it saves its persistent state
            self.proc.wait(10)

    def hang(self) -> None:
        """SIGSTOP: connections stay open (the kernel accepts and buffers), nothing is answered."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGCONT)


def available() -> str | None:
    if not Path(MOSQUITTO).exists():
        return "Mosquitto is not installed (apt-get install mosquitto; .ci/run does)"
    return None


class Subscriber:
    """Collects `pipeline/+/events` with a persistent session: it gets what was published
    while the broker was away once both are back."""

    def __init__(self, port: int):
        self.messages: list[dict] = []
        self.connected = threading.Event()
        self.client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="test-subscriber", clean_session=False)
        self.client.on_connect = self._on_connect
        self.client.on_message = lambda c, u, m: self.messages.append(json.loads(m.payload))
        self.client.on_disconnect = lambda *a: self.connected.clear()
        self.client.reconnect_delay_set(min_delay=0.1, max_delay=0.5)
        self.client.connect("127.0.0.1", port)
        self.client.loop_start()
        assert self.connected.wait(10)

    def _on_connect(self, client, userdata, flags, reason, properties) -> None:
        client.subscribe("pipeline/+/events", qos=1)
        self.connected.set()

    def frame_events(self) -> list[dict]:
        return [m for m in self.messages if m["event"] != "state"]

    def wait_for(self, count: int, timeout: float) -> list[dict]:
        """The frame events received once there are `count` of them (or `timeout` passed)."""
        deadline = time.monotonic() + timeout
        while len(self.frame_events()) < count and time.monotonic() < deadline:
            time.sleep(0.1)
        return self.frame_events()

    def close(self) -> None:
        self.client.loop_stop()
        self.client.disconnect()


class Webhook:
    """An HTTP endpoint that records the events POSTed to it (`{"events": [...]}`), in
    the order it accepted them. `mode`: "ok" answers 204 at once; "gated" answers 204
    once the test calls `open_gate()`; "fail" answers 500 (nothing accepted); "hang"
    reads the request and never answers. `mode` may change while it runs."""

    def __init__(self, mode: str = "ok"):
        self.mode = mode
        self.events: list[dict] = []  # accepted (answered 2xx), in order
        self.requests = 0             # requests that arrived, whatever the answer
        self._changed = threading.Condition()
        self._gate = threading.Event()
        self._closing = threading.Event()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        self._thread = threading.Thread(target=self.server.serve_forever, name="webhook", daemon=True)
        self._thread.start()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                events = json.loads(self.rfile.read(int(self.headers["Content-Length"])))["events"]
                with hook._changed:
                    hook.requests += 1
                    hook._changed.notify_all()
                if hook.mode == "gated":
                    hook._gate.wait()
                if hook.mode == "hang":
                    hook._closing.wait()
                    return
                if hook.mode == "fail":
                    self.send_response(500)
                    self.end_headers()
                    return
                with hook._changed:
                    hook.events += events
                    hook._changed.notify_all()
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        return Handler

    def open_gate(self) -> None:
        self._gate.set()

    def wait_until(self, predicate, timeout: float = 30) -> bool:
        """Wait until `predicate(self)` holds (checked whenever a request arrives or is accepted)."""
        with self._changed:
            return self._changed.wait_for(lambda: predicate(self), timeout)

    def close(self) -> None:
        self._closing.set()
        self._gate.set()
        self.server.shutdown()
        self.server.server_close()
