"""The live web view (`outputs.web`): one page with a tile per camera (its annotated video,
state, fps, P99, drops, reconnects, line and zone counts, a latency chart) and a panel of
the newest events with their snapshots, plus `/api/cameras` (the snapshot the summary
uses), `/api/events`, the events' evidence files (`/evidence/...`) and `/metrics`
(Prometheus) on one port; with `control`, cameras are added and removed on it too.

The page's tiles fetch stills (`/frame/<camera>.jpg`) at the live rate, one request at a
time and only while the tile is in view, so any number of cameras share the browser's
few connections per host; `/stream/<camera>` (MJPEG) serves tools that want one stream.
Frames are encoded only for cameras someone watches (`sinks.preview`). Binds 127.0.0.1
unless told otherwise; with a `token`, every request needs it (`web.auth`). Connections
are capped (the excess is answered 503) and closed when idle, so neither a crowd nor
forgotten sockets exhaust the threads.
"""
from __future__ import annotations

import contextlib
import dataclasses
import ipaddress
import logging
import socket
import sys
import threading
import time
from http.server import ThreadingHTTPServer
from typing import Callable, Collection, Iterator

from prometheus_client import CollectorRegistry

from pipeline.config.outputs import WebConfig
from pipeline.control import CameraControl
from pipeline.errors import StartupError, one_line
from pipeline.metrics.histogram import Histogram
from pipeline.metrics.prometheus import SnapshotCollector, unusable_port
from pipeline.metrics.snapshot import Latency, Snapshot
from pipeline.sinks.preview import Picture, Preview
from pipeline.web.handler import Handler

log = logging.getLogger("pipeline.web")

BUSY = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nContent-Length: 21\r\n"
        b"Retry-After: 1\r\nConnection: close\r\n\r\ntoo many connections\n")


def exposure_warning(config: WebConfig) -> str | None:
    """What to warn about when the cameras are open to other machines with no token."""
    if config.token or config.host == "localhost":
        return None
    try:
        if ipaddress.ip_address(config.host).is_loopback:
            return None
    except ValueError:
        pass  # a host name: it may well be reachable from elsewhere
    return (f"outputs.web: listening on {config.host} without a token: anyone who reaches this address sees "
            "the cameras (set outputs.web.token)")


class Listener(ThreadingHTTPServer):
    """A thread per connection, at most `limit` at once; the connections still open are
    cut at `server_close`, so closing never waits for an idle client."""

    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True  # a restart binds at once, even with the last run's sockets in TIME-WAIT

    def __init__(self, address: tuple[str, int], app: WebServer):
        self.app = app
        self.request_queue_size = app.BACKLOG
        self.refused = 0
        self._slots = threading.BoundedSemaphore(app.MAX_CONNECTIONS)
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()
        super().__init__(address, Handler)

    def process_request(self, request, client_address) -> None:  # type: ignore[override]
        if not self._slots.acquire(blocking=False):
            self._refuse(request)
            return
        with self._lock:
            self._open.add(request)
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._done(request)
            raise

    def process_request_thread(self, request, client_address) -> None:  # type: ignore[override]
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._done(request)

    def _done(self, request: socket.socket) -> None:
        with self._lock:
            self._open.discard(request)
        self._slots.release()

    def _refuse(self, request: socket.socket) -> None:
        self.refused += 1
        log.debug("connection refused: %d open already", self.app.MAX_CONNECTIONS)
        with contextlib.suppress(OSError):
            request.setblocking(False)
            request.send(BUSY)
        self.shutdown_request(request)

    def handle_error(self, request, client_address) -> None:  # type: ignore[override]
        error = sys.exc_info()[1]
        log.warning("live view: a request from %s failed: %s", client_address[0], one_line(error) if error else "?")
        log.debug("the request's failure", exc_info=True)

    def server_close(self) -> None:
        super().server_close()
        with self._lock:
            still_open = list(self._open)
        for request in still_open:
            with contextlib.suppress(OSError):
                request.shutdown(socket.SHUT_RDWR)


class WebServer:
    """Listens from construction (a port in use is a `StartupError` then), serves from
    `start()`; `close()` is safe whether it started or not."""

    IDLE_TIMEOUT_S = 30.0  # a connection that sends nothing for this long is closed
    MAX_CONNECTIONS = 64  # at once; more are answered 503
    BACKLOG = 128  # connections the kernel holds before they are accepted
    STILL_WAIT_S = 2.0  # the first still of a camera nobody watched waits this long for a fresh picture

    def __init__(self, config: WebConfig, snapshot: Callable[[], Snapshot], preview: Preview,
                 cameras: Callable[[], Collection[str]] | None = None, *,
                 events: Callable[[int, int], list[dict]] | None = None, evidence_dir: str | None = None,
                 control: CameraControl | None = None):
        """`events(limit, after)`: the newest events (`RecentEvents.newest`), for the page's
        panel; `evidence_dir`: `outputs.dir`, whose `events/` folder is served; `control`:
        cameras added and removed over HTTP (given only with `outputs.web.control`)."""
        if control is not None and not config.token:  # a WebConfig made in code skips the config's check
            raise StartupError("outputs.web.control: adding and removing cameras over HTTP needs outputs.web.token")
        self.config = config
        self.snapshot = snapshot
        self.preview = preview
        self.cameras = cameras or (lambda: snapshot().cameras)
        self.events = events
        self.evidence_dir = evidence_dir
        self.control = control
        self.still_lease_s = max(2.0, 3.0 / config.fps)  # a tile asks every 1/fps: a few missed asks are fine
        self.view_latency: dict[str, Histogram] = {}  # capture to bytes on a viewer's socket, per camera
        self.viewers = 0
        self._viewers_lock = threading.Lock()
        self.closing = threading.Event()
        self.registry = CollectorRegistry()
        self.registry.register(SnapshotCollector(snapshot))  # type: ignore[arg-type]
        try:
            self._httpd = Listener((config.host, config.port), self)
        except OSError as e:
            raise StartupError(unusable_port("outputs.web.port", config.port, config.host, e)) from None
        self.port = self._httpd.server_address[1]
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        warning = exposure_warning(self.config)
        if warning:
            log.warning("%s", warning)
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="web", daemon=True)
        self._thread.start()
        log.info("live view on http://%s:%d/", self.config.host, self.port)

    def close(self) -> None:
        self.closing.set()
        if self._thread is not None:
            self._httpd.shutdown()
            self._thread = None
        self._httpd.server_close()

    def api_snapshot(self) -> dict:
        """`/api/cameras`: the run's snapshot and the live view's own figures."""
        latency = {cam: dataclasses.asdict(Latency.of(h)) for cam, h in list(self.view_latency.items())}
        return {**self.snapshot().to_dict(),
                "live_view": {"viewers": self.viewers, "encoded": self.preview.encoded, "fps": self.config.fps,
                              "refused": self._httpd.refused, "latency": latency}}

    @contextlib.contextmanager
    def watching(self, camera: str) -> Iterator[None]:
        """A stream viewer of `camera` while inside."""
        self.preview.watch(camera)
        with self._viewers_lock:
            self.viewers += 1
        try:
            yield
        finally:
            with self._viewers_lock:
                self.viewers -= 1
            self.preview.unwatch(camera)

    def seen(self, camera: str, picture: Picture) -> None:
        """A picture reached a viewer's socket: its age counts in the live view's latency."""
        self.view_latency.setdefault(camera, Histogram()).record(max(0.0, time.time() - picture.captured))
