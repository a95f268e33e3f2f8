"""One connection to the live view: its requests, routed to the page, the API, the
metrics, a camera's stills or its MJPEG stream, its motion for the tuning view, the
events and their evidence files, the recordings and their boxes, and (with
`outputs.web.control`) cameras added and removed and the config reloaded.

A client that goes away mid-reply ends its connection with one debug line; an idle
connection is closed after the server's idle timeout (the socket timeout, which also
bounds a write to a viewer that stopped reading).
"""
from __future__ import annotations

import json
import logging
import urllib.parse

from prometheus_client import generate_latest

from pipeline.errors import one_line
from pipeline.redact import redact_data
from pipeline.sinks.preview import Picture
from pipeline.web import camera_api, evidence, pages, recordings, reload_api, tuning
from pipeline.web import store_api
from pipeline.web import export_api
from pipeline.web.admission import AdmittedHandler

log = logging.getLogger("pipeline.web")

GONE = (ConnectionError, TimeoutError)  # the client closed, reset or stopped reading
MAX_VIEWER = 32  # characters of a page's name for itself (`?viewer=`) that are kept


def _int(values: list[str] | None, default: int) -> int:
    try:
        return int(values[0]) if values else default
    except ValueError:
        return default


class Handler(AdmittedHandler):
    protocol_version = "HTTP/1.1"

    def handle(self) -> None:
        try:
            super().handle()
        except GONE as e:
            log.debug("%s went away: %s", self.address_string(), one_line(e))
            self.close_connection = True

    def log_message(self, format: str, *args) -> None:  # noqa: A002
        # the request line is the client's: its control characters are escaped, never written raw
        log.debug("%s %s", self.address_string(), (format % args).translate(self._control_char_table))

    def send(self, status: int, body: bytes, content_type: str = "text/plain; charset=utf-8",
             headers: dict[str, str] | None = None) -> None:
        self.send_head(status, content_type, None if status == 204 else len(body), headers)
        self.wfile.write(body)

    def send_head(self, status: int, content_type: str, length: int | None,
                  headers: dict[str, str] | None = None) -> None:
        """The status line and headers; `length` None for "no content", which has no body by definition."""
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        if length is not None:
            self.send_header("Content-Length", str(length))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()

    def guard(self) -> tuple[str, dict[str, list[str]], str] | None:
        """The request's path, query and `?token=` once it holds the token (None: answered 401)."""
        if not self.authorised:
            self.send(401, b"a token is needed\n", headers={"WWW-Authenticate": "Bearer"})
            return None
        return self.target, self.query, self.query_token

    def do_GET(self) -> None:  # noqa: N802
        request = self.guard()
        if request is None:
            return
        path, query, token = request
        if path in pages.FILES:
            pages.serve(self, path, token)
        elif path == "/api/cameras":
            self.send(200, json.dumps(redact_data(self.app.api_snapshot())).encode(), "application/json")
        elif path.startswith("/api/motion/"):
            tuning.serve(self, urllib.parse.unquote(path[len("/api/motion/"):]))
        elif path == "/api/events":
            self.recent_events(_int(query.get("limit"), 50), _int(query.get("after"), 0))
        elif path.startswith("/evidence/"):
            evidence.serve(self, urllib.parse.unquote(path[len("/evidence/"):]))
        elif path.startswith("/recordings/"):
            recordings.serve_file(self, urllib.parse.unquote(path[len("/recordings/"):]))
        elif path.startswith("/api/recordings/"):
            recordings.serve_segments(self, urllib.parse.unquote(path[len("/api/recordings/"):]))
        elif path == "/api/boxes":
            recordings.serve_boxes(self, query)
        elif path == export_api.PATH:
            export_api.serve(self, query)
        elif path.startswith(store_api.PREFIX):
            store_api.serve(self, path, query)
        elif path == "/metrics":
            self.send(200, generate_latest(self.app.registry), "text/plain; version=0.0.4")
        elif path.startswith("/stream/"):
            self.stream(urllib.parse.unquote(path[len("/stream/"):]))
        elif path.startswith("/frame/") and path.endswith(".jpg"):
            self.still(urllib.parse.unquote(path[len("/frame/"):-len(".jpg")]), _int(query.get("after"), -1),
                       (query.get("viewer") or [""])[0][:MAX_VIEWER])
        else:
            self.send(404, b"not found\n")

    def do_POST(self) -> None:  # noqa: N802
        self.close_connection = True  # a body left unread is never taken for the next request
        request = self.guard()
        if request is not None:
            (reload_api.post if request[0] == reload_api.PATH else camera_api.post)(self, request[0])

    def do_DELETE(self) -> None:  # noqa: N802
        self.close_connection = True
        request = self.guard()
        if request is not None:
            camera_api.delete(self, request[0])

    def recent_events(self, limit: int, after: int) -> None:
        """The newest events after id `after`, newest first, with their evidence paths."""
        if self.app.events is None:
            self.send(404, b"this run keeps no events for the page\n")
            return
        events = self.app.events(max(1, min(limit, 200)), after)
        self.send(200, json.dumps({"events": redact_data(events)}).encode(), "application/json")

    def known(self, camera: str) -> bool:
        if camera in self.app.cameras():
            return True
        self.send(404, b"no such camera\n")
        return False

    def still(self, camera: str, after: int, viewer: str) -> None:
        """The camera's newest picture (204 when it is still the one numbered `after`).
        Asking keeps the camera watched for a while, so a viewer that asks at the live
        rate gets fresh pictures; the first ask after nobody watched waits for one.
        `viewer`: the page asking (its tiles count as viewers, `Preview.viewers`)."""
        if not self.known(camera):
            return
        preview = self.app.preview
        current = preview.watch_for(camera, self.app.still_lease_s, viewer)
        picture = preview.latest(camera, timeout=0)
        if not current:
            picture = preview.latest(camera, picture.seq if picture else -1, self.app.STILL_WAIT_S) or picture
        if picture is None:
            self.send(503, b"no picture yet\n", headers={"Retry-After": "1"})
        elif picture.seq == after:
            self.send(204, b"")
        else:
            self.send(200, picture.jpeg, "image/jpeg", {"X-Capture-Time": f"{picture.captured:.6f}",
                                                        "X-Seq": str(picture.seq)})
            self.app.seen(camera, picture)

    def stream(self, camera: str) -> None:
        """MJPEG: the newest picture whenever there is a new one, until the viewer goes."""
        if not self.known(camera):
            return
        self.send_response(200)
        self.send_header("Content-Type", "multipart/x-mixed-replace; boundary=frame")
        self.send_header("Cache-Control", "no-store")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        with self.app.watching(camera):
            try:
                self._stream_pictures(camera)
            except GONE as e:
                log.debug("%s went away from the stream of %s: %s", self.address_string(), camera, one_line(e))

    def _stream_pictures(self, camera: str) -> None:
        seq = -1
        while not self.app.closing.is_set():
            picture = self.app.preview.latest(camera, seq, timeout=1.0)
            if picture is None:
                continue
            seq = picture.seq
            self.wfile.write(_part(picture))
            self.wfile.flush()
            self.app.seen(camera, picture)


def _part(picture: Picture) -> bytes:
    head = (f"--frame\r\nContent-Type: image/jpeg\r\nContent-Length: {len(picture.jpeg)}\r\n"
            f"X-Capture-Time: {picture.captured:.6f}\r\nX-Seq: {picture.seq}\r\n\r\n").encode()
    return head + picture.jpeg + b"\r\n"
