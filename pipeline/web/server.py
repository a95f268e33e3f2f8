"""The live web view (`outputs.web`): one page with a tile per camera (its annotated video,
state, fps, P99, drops, reconnects, line and zone counts, a latency chart), plus
`/api/cameras` (the snapshot the summary uses) and `/metrics` (Prometheus) on one port.

The video is MJPEG (`multipart/x-mixed-replace`): every browser shows it in a plain
`<img>`, with no player and no buffering, so what you see is the newest frame. Frames are
encoded only for cameras someone watches (`sinks.preview`). Binds 127.0.0.1 unless told
otherwise; with a `token`, every request needs it (an `Authorization: Bearer` header, a
`?token=` parameter, or the cookie the page sets).
"""
from __future__ import annotations

import hmac
import json
import logging
import threading
import time
import urllib.parse
from http.cookies import SimpleCookie
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Callable

from prometheus_client import CollectorRegistry, generate_latest

from pipeline.config.outputs import WebConfig
from pipeline.metrics.histogram import Histogram
from pipeline.metrics.prometheus import SnapshotCollector
from pipeline.sinks.preview import Preview

log = logging.getLogger("pipeline.web")

PAGE = (Path(__file__).parent / "page.html").read_text(encoding="utf-8")
COOKIE = "pipeline_token"


class WebServer:
    def __init__(self, config: WebConfig, snapshot: Callable[[], dict], preview: Preview):
        self.config = config
        self.snapshot = snapshot
        self.preview = preview
        self.view_latency: dict[str, Histogram] = {}  # capture to bytes on a viewer's socket, per camera
        self.viewers = 0
        self.registry = CollectorRegistry()
        self.registry.register(SnapshotCollector(self.api_snapshot))  # type: ignore[arg-type]
        self._httpd = ThreadingHTTPServer((config.host, config.port), self._handler())
        self._httpd.daemon_threads = True
        self.port = self._httpd.server_address[1]
        self._closing = threading.Event()
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="web", daemon=True)

    def start(self) -> None:
        self._thread.start()
        log.info("live view on http://%s:%d/", self.config.host, self.port)

    def close(self) -> None:
        self._closing.set()
        self._httpd.shutdown()
        self._httpd.server_close()

    def api_snapshot(self) -> dict:
        snap = self.snapshot()
        snap["live_view"] = {"viewers": self.viewers, "encoded": self.preview.encoded,
                             "latency": {cam: h.summary_ms() for cam, h in self.view_latency.items()}}
        return snap

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args) -> None:  # noqa: A002
                log.debug("%s %s", self.address_string(), format % args)

            def _authorised(self, query: dict) -> bool:
                token = server.config.token
                if not token:
                    return True
                given = self.headers.get("Authorization", "").removeprefix("Bearer ").strip()
                given = given or (query.get("token") or [""])[0]
                if not given:
                    cookie = SimpleCookie(self.headers.get("Cookie", ""))
                    given = cookie[COOKIE].value if COOKIE in cookie else ""
                return hmac.compare_digest(given.encode(), token.encode())

            def _send(self, status: int, body: bytes, content_type: str, headers: dict | None = None) -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Cache-Control", "no-store")
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:  # noqa: N802
                url = urllib.parse.urlsplit(self.path)
                query = urllib.parse.parse_qs(url.query)
                if not self._authorised(query):
                    self._send(401, b"a token is needed\n", "text/plain", {"WWW-Authenticate": "Bearer"})
                    return
                path = url.path
                if path == "/":
                    headers = {}
                    if server.config.token and query.get("token"):
                        headers["Set-Cookie"] = f"{COOKIE}={query['token'][0]}; HttpOnly; SameSite=Strict; Path=/"
                    self._send(200, PAGE.encode(), "text/html; charset=utf-8", headers)
                elif path == "/api/cameras":
                    self._send(200, json.dumps(server.api_snapshot()).encode(), "application/json")
                elif path == "/metrics":
                    self._send(200, generate_latest(server.registry), "text/plain; version=0.0.4")
                elif path.startswith("/stream/"):
                    self._stream(urllib.parse.unquote(path[len("/stream/"):]))
                elif path.startswith("/frame/") and path.endswith(".jpg"):
                    self._frame(urllib.parse.unquote(path[len("/frame/"):-4]))
                else:
                    self._send(404, b"not found\n", "text/plain")

            def _known(self, camera: str) -> bool:
                if camera in server.snapshot()["cameras"]:
                    return True
                self._send(404, f"no camera {camera}\n".encode(), "text/plain")
                return False

            def _frame(self, camera: str) -> None:
                if not self._known(camera):
                    return
                server.preview.watch(camera)
                try:
                    picture = server.preview.latest(camera, timeout=5.0)
                finally:
                    server.preview.unwatch(camera)
                if picture is None:
                    self._send(503, b"no picture yet\n", "text/plain")
                    return
                self._send(200, picture.jpeg, "image/jpeg", {"X-Capture-Time": f"{picture.captured:.6f}",
                                                             "X-Seq": str(picture.seq)})

            def _stream(self, camera: str) -> None:
                """MJPEG: the newest picture whenever there is a new one, until the viewer goes."""
                if not self._known(camera):
                    return
                self.send_response(200)
                self.send_header("Content-Type", "multipart/x-mixed-replace; boundary=frame")
                self.send_header("Cache-Control", "no-store")
                self.send_header("Connection", "close")
                self.end_headers()
                server.preview.watch(camera)
                server.viewers += 1
                latency = server.view_latency.setdefault(camera, Histogram())
                seq = -1
                try:
                    while not server._closing.is_set():
                        picture = server.preview.latest(camera, seq, timeout=1.0)
                        if picture is None:
                            continue
                        seq = picture.seq
                        head = (f"--frame\r\nContent-Type: image/jpeg\r\nContent-Length: {len(picture.jpeg)}\r\n"
                                f"X-Capture-Time: {picture.captured:.6f}\r\nX-Seq: {picture.seq}\r\n\r\n").encode()
                        self.wfile.write(head + picture.jpeg + b"\r\n")
                        self.wfile.flush()
                        latency.record(max(0.0, time.time() - picture.captured))
                except (BrokenPipeError, ConnectionResetError, TimeoutError):
                    pass  # the viewer went away
                finally:
                    server.viewers -= 1
                    server.preview.unwatch(camera)
                self.close_connection = True

        return Handler
