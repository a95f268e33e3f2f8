"""The live web view (`outputs.web`): one page with a tile per camera (its annotated video,
state, fps, P99, drops, reconnects, line and zone counts, a latency chart) and a panel of
the newest events with their snapshots, plus `/api/cameras` (the snapshot the summary
uses), `/api/events`, the events' evidence files (`/evidence/...`), the recordings with
the boxes seen in them (`web.recordings`: played on the page, the boxes drawn over the
video) and `/metrics` (Prometheus) on one port; with `control`, cameras are added and
removed on it too.

The page's tiles fetch stills (`/frame/<camera>.jpg`) at the live rate, one request at a
time and only while the tile is in view, so any number of cameras share the browser's
few connections per host; `/stream/<camera>` (MJPEG) serves tools that want one stream.
Frames are encoded only for cameras someone watches (`sinks.preview`). Binds 127.0.0.1
unless told otherwise; with a `token`, every request needs it (`web.auth`). Connections
are capped, closed when idle, and must send their first request head in time; those
that present the token have slots of their own (`web.admission`), so neither a crowd,
forgotten sockets nor slow ones exhaust the threads or starve the viewers.
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
from pipeline.store.filters import Known
from pipeline.store.queries import Store
from pipeline.web.admission import Slots
from pipeline.web.handler import Handler
from pipeline.web.recordings import RecordingFiles

log = logging.getLogger("pipeline.web")

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
    """A thread per connection, held as `web.admission` allows; the connections still
    open are cut at `server_close`, so closing never waits for an idle client."""

    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True  # a restart binds at once, even with the last run's sockets in TIME-WAIT

    def __init__(self, address: tuple[str, int], app: WebServer):
        self.app = app
        self.request_queue_size = app.BACKLOG
        self.slots = Slots(app.MAX_WAITING, app.MAX_CONNECTIONS)
        super().__init__(address, Handler)

    def process_request(self, request, client_address) -> None:  # type: ignore[override]
        self.slots.arrive(request)
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.slots.leave(request)
            raise

    def process_request_thread(self, request, client_address) -> None:  # type: ignore[override]
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.leave(request)

    def handle_error(self, request, client_address) -> None:  # type: ignore[override]
        error = sys.exc_info()[1]
        log.warning("live view: a request from %s failed: %s", client_address[0], one_line(error) if error else "?")
        log.debug("the request's failure", exc_info=True)

    def server_close(self) -> None:
        super().server_close()
        for request in self.slots.held():
            with contextlib.suppress(OSError):
                request.shutdown(socket.SHUT_RDWR)


class WebServer:
    """Listens from construction (a port in use is a `StartupError` then), serves from
    `start()`; `close()` is safe whether it started or not."""

    IDLE_TIMEOUT_S = 30.0  # a connection that sends nothing for this long is closed
    HEAD_TIMEOUT_S = 10.0  # a new connection's first request head must be in by then
    MAX_WAITING = 64  # connections still sending their first head; one more cuts the oldest
    MAX_CONNECTIONS = 64  # admitted (their head held the token) at once; more are answered 503
    BACKLOG = 128  # connections the kernel holds before they are accepted
    STILL_WAIT_S = 2.0  # the first still of a camera nobody watched waits this long for a fresh picture

    def __init__(self, config: WebConfig, snapshot: Callable[[], Snapshot], preview: Preview,
                 cameras: Callable[[], Collection[str]] | None = None, *,
                 events: Callable[[int, int], list[dict]] | None = None, evidence_dir: str | None = None,
                 control: CameraControl | None = None, recordings: RecordingFiles | None = None,
                 annotated: bool = True, store: Store | None = None, names: Callable[[], Known] | None = None):
        """`events(limit, after)`: the newest events (`RecentEvents.newest`), for the page's
        panel; `evidence_dir`: `outputs.dir`, whose `events/` folder is served; `control`:
        cameras added and removed over HTTP (given only with `outputs.web.control`);
        `recordings`: the cameras' recordings, played on the page with their boxes;
        `annotated`: whether the graph draws its results on the pictures (the page says
        when it does not); `store`: the store's reader (`/api/store/...`); `names`: what
        the run's config names (`filters.ConfigNames`), which its queries may ask for."""
        if control is not None and not config.token:  # a WebConfig made in code skips the config's check
            raise StartupError("outputs.web.control: adding and removing cameras over HTTP needs outputs.web.token")
        self.config = config
        self.snapshot = snapshot
        self.preview = preview
        self.cameras = cameras or (lambda: snapshot().cameras)
        self.events = events
        self.evidence_dir = evidence_dir
        self.recordings = recordings
        self.store = store
        self.names = names
        self.control = control
        self.still_lease_s = max(2.0, 3.0 / config.fps)  # a tile asks every 1/fps: a few missed asks are fine
        self.view_latency: dict[str, Histogram] = {}  # capture to bytes on a viewer's socket, per camera
        self.annotated = annotated
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
        if self.store is not None:
            self.store.close()

    def api_snapshot(self) -> dict:
        """`/api/cameras`: the run's snapshot and the live view's own figures: `viewers`
        (open streams and the pages' tiles fetching stills), the cameras `watched`, the
        cameras whose motion the tuning view can draw, whether the pictures carry boxes."""
        latency = {cam: dataclasses.asdict(Latency.of(h)) for cam, h in list(self.view_latency.items())}
        return {**self.snapshot().to_dict(),
                "live_view": {"viewers": self.preview.viewers, "watched": self.preview.watched,
                              "encoded": self.preview.encoded, "fps": self.config.fps,
                              "refused": self._httpd.slots.refused, "cut": self._httpd.slots.cut,
                              "latency": latency, "motion": self.preview.measures_motion(),
                              "annotated": self.annotated}}

    def known(self) -> Known:
        """What a store query may ask for though no row holds it yet: the cameras running
        (those added too) and what the run's config names."""
        named = self.names() if self.names is not None else Known()
        return dataclasses.replace(named, cameras=named.cameras | set(self.cameras()))

    @contextlib.contextmanager
    def watching(self, camera: str) -> Iterator[None]:
        """A stream viewer of `camera` while inside."""
        self.preview.watch(camera)
        try:
            yield
        finally:
            self.preview.unwatch(camera)

    def seen(self, camera: str, picture: Picture) -> None:
        """A picture reached a viewer's socket: its age counts in the live view's latency."""
        self.view_latency.setdefault(camera, Histogram()).record(max(0.0, time.time() - picture.captured))
