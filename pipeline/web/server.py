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
that present the token have places of their own (`web.admission`), so neither a crowd,
forgotten sockets nor slow ones starve the viewers.

It serves with aiohttp on an event loop of its own, in one thread named "web"; what
blocks (the store, the disk, camera control, big JSON) runs in a pool of `WORKERS`
threads, so no client, however slow, holds the loop, and a crowd costs queued work, not
threads. `routes(app)`, where given, adds routes of its own to the aiohttp application
(the live video's WebSocket, `web.live_api.add_routes`; a camera's live routes relayed to
the process that holds it, `web.forward`): they get the same token, places and headers as
every route, and come before the server's own.
"""
from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import ipaddress
import logging
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Collection

from aiohttp import web
from prometheus_client import CollectorRegistry

from pipeline.config.outputs import WebConfig
from pipeline.control import CameraControl
from pipeline.errors import StartupError
from pipeline.metrics.histogram import Histogram
from pipeline.metrics.prometheus import SnapshotCollector, unusable_port
from pipeline.metrics.snapshot import Latency, Snapshot
from pipeline.sinks.preview import Picture, Preview
from pipeline.store.filters import Known
from pipeline.store.queries import Store
from pipeline.web.admission import Admission, Gate
from pipeline.web.handler import SERVER, add_routes, not_found
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


def listening(host: str, port: int, backlog: int) -> socket.socket:
    """The server's socket, bound now (a restart binds at once, the last run's sockets in TIME-WAIT or not)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        return socket.create_server((host, port), family=family, backlog=backlog)
    except OSError as e:
        raise StartupError(unusable_port("outputs.web.port", port, host, e)) from None


class PictureWaits:
    """Waits for a camera's next picture on the loop, holding no thread: `Preview` says
    (on its encoder's thread) when it makes one, and the loop wakes that camera's waiters."""

    def __init__(self, preview: Preview):
        self.preview = preview
        self.loop: asyncio.AbstractEventLoop | None = None  # the server's, once it serves
        self._waiting: dict[str, asyncio.Event] = {}
        preview.listen(self._made)

    async def next(self, camera: str, after: int, timeout: float) -> Picture | None:
        """The camera's newest picture once it is not the one numbered `after` (None after `timeout`)."""
        deadline = time.monotonic() + timeout
        while True:
            if (picture := self.preview.latest(camera, after, timeout=0)) is not None:
                return picture  # no wait registered: the camera's next picture wakes nobody for it
            made = self._waiting.setdefault(camera, asyncio.Event())
            if (picture := self.preview.latest(camera, after, timeout=0)) is not None:
                return picture  # made between the two looks (`_made` saw no waiter then)
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(made.wait(), left)

    def _made(self, camera: str) -> None:
        """On the encoder's thread: wakes the loop only where a reader waits for `camera` (a
        reader between two polls of its stills waits for nothing: no wake for its pictures)."""
        loop = self.loop
        if camera in self._waiting and loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # closed meanwhile
                loop.call_soon_threadsafe(self._wake, camera)

    def _wake(self, camera: str) -> None:
        made = self._waiting.pop(camera, None)
        if made is not None:
            made.set()


class WebServer:
    """Listens from construction (a port in use is a `StartupError` then), serves from
    `start()`; `close()` is safe whether it started or not, and cuts open streams."""

    IDLE_TIMEOUT_S = 30.0  # a connection that sends nothing for this long is closed
    HEAD_TIMEOUT_S = 10.0  # a new connection's first request head must be in by then
    MAX_WAITING = 64  # connections still sending their first head; one more cuts the oldest
    # admitted (their head held the token) at once; more are answered 503. A page holds a video
    # socket per tile in view (32 for a wall of 32 cameras), and on the event loop a connection
    # holds no thread: a few walls open at once fit.
    MAX_CONNECTIONS = 256
    BACKLOG = 128  # connections the kernel holds before they are accepted
    WORKERS = 4  # threads for what blocks: the store, files, camera control
    STILL_WAIT_S = 2.0  # the first still of a camera nobody watched waits this long for a fresh picture
    CLOSE_WAIT_S = 1.0  # open answers (streams, sockets) get this long to end at close, then are cut

    def __init__(self, config: WebConfig, snapshot: Callable[[], Snapshot], preview: Preview,
                 cameras: Callable[[], Collection[str]] | None = None, *,
                 events: Callable[[int, int], list[dict]] | None = None, evidence_dir: str | None = None,
                 control: CameraControl | None = None, recordings: RecordingFiles | None = None,
                 annotated: bool = True, store: Store | None = None, names: Callable[[], Known] | None = None,
                 routes: Callable[[web.Application], None] | None = None,
                 video: Callable[[], dict[str, int]] | None = None):
        """`events(limit, after)`: the newest events (`RecentEvents.newest`), for the page's
        panel; `evidence_dir`: `outputs.dir`, whose `events/` folder is served; `control`:
        cameras added and removed over HTTP (given only with `outputs.web.control`);
        `recordings`: the cameras' recordings, played on the page with their boxes;
        `annotated`: whether the graph draws its results on the pictures (the page says
        when it does not); `store`: the store's reader (`/api/store/...`); `names`: what
        the run's config names (`filters.ConfigNames`), which its queries may ask for;
        `routes`: adds routes to the application (the live video's WebSocket); `video`:
        the video sockets open on each camera (`live.hub.LiveHub.viewers`)."""
        if control is not None and not config.token:  # a WebConfig made in code skips the config's check
            raise StartupError("outputs.web.control: adding and removing cameras over HTTP needs outputs.web.token")
        self.config, self.snapshot, self.preview = config, snapshot, preview
        self.cameras = cameras or (lambda: snapshot().cameras)
        self.events, self.evidence_dir, self.recordings = events, evidence_dir, recordings
        self.store, self.names, self.control, self.annotated = store, names, control, annotated
        self.video = video
        self.still_lease_s = max(2.0, 3.0 / config.fps)  # a tile asks every 1/fps: a few missed asks are fine
        self.view_latency: dict[str, Histogram] = {}  # capture to bytes on a viewer's socket, per camera
        self.closing = threading.Event()
        self.registry = CollectorRegistry()
        self.registry.register(SnapshotCollector(snapshot))  # type: ignore[arg-type]
        self._sock = listening(config.host, config.port, self.BACKLOG)
        self.address: tuple[str, int] = self._sock.getsockname()[:2]
        self.port = self.address[1]
        self.admission = Admission(self.MAX_WAITING, self.MAX_CONNECTIONS,
                                   min(self.HEAD_TIMEOUT_S, self.IDLE_TIMEOUT_S), config.token)
        self.app = web.Application(middlewares=[self.admission.middleware, not_found], client_max_size=1 << 20)
        self.app[SERVER] = self  # type: ignore[assignment]
        if routes is not None:  # first: they answer paths the server's own would
            routes(self.app)
        add_routes(self.app)
        self._pool = ThreadPoolExecutor(self.WORKERS, thread_name_prefix="web")
        self.pictures = PictureWaits(preview)
        self.next_picture = self.pictures.next
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        warning = exposure_warning(self.config)
        if warning:
            log.warning("%s", warning)
        ready = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(ready,), name="web", daemon=True)
        self._thread.start()
        ready.wait(10)
        log.info("live view on http://%s:%d/", self.config.host, self.port)

    def _run(self, ready: threading.Event) -> None:
        """The "web" thread: the loop, closed without waiting for work still in the pool."""
        loop = asyncio.new_event_loop()
        loop.set_default_executor(self._pool)  # aiohttp's own file reads take the pool too
        self._loop = self.pictures.loop = loop
        try:
            loop.run_until_complete(self._serve(ready))
        finally:
            loop.close()

    async def _serve(self, ready: threading.Event) -> None:
        """Serve until `close()`, then end every connection within `CLOSE_WAIT_S`."""
        assert self._loop is not None
        self._stop = asyncio.Event()
        runner = web.AppRunner(self.app, access_log=None, keepalive_timeout=self.IDLE_TIMEOUT_S,
                               shutdown_timeout=self.CLOSE_WAIT_S)
        await runner.setup()
        assert runner.server is not None
        make = runner.server
        listener = await self._loop.create_server(lambda: Gate(make(), self.admission), sock=self._sock,
                                                  backlog=self.BACKLOG)
        ready.set()
        try:
            await self._stop.wait()
        finally:
            listener.close()
            await runner.cleanup()

    def close(self) -> None:
        self.closing.set()
        loop, thread = self._loop, self._thread
        if loop is not None and thread is not None and self._stop is not None:
            with contextlib.suppress(RuntimeError):  # the loop ended already
                loop.call_soon_threadsafe(self._stop.set)
            thread.join(self.CLOSE_WAIT_S + 5)
        self._thread = None
        self._sock.close()
        self._pool.shutdown(wait=False, cancel_futures=True)
        if self.store is not None:
            self.store.close()

    def run(self, work: Callable[..., Any], *args: Any) -> asyncio.Future:
        """`work(*args)` in the pool, awaited on the loop."""
        assert self._loop is not None
        return self._loop.run_in_executor(self._pool, work, *args)

    def api_snapshot(self) -> dict:
        """`/api/cameras`: the run's snapshot and the live view's own figures (`live_view`)."""
        return {**self.snapshot().to_dict(), "live_view": self.live_view()}

    def live_view(self) -> dict:
        """`viewers` (open streams and the pages' tiles fetching stills), the cameras
        `watched`, the cameras whose motion the tuning view can draw, whether the pictures
        carry boxes, and the video sockets open on each camera (`video`)."""
        latency = {cam: dataclasses.asdict(Latency.of(h)) for cam, h in list(self.view_latency.items())}
        return {"viewers": self.preview.viewers, "watched": self.preview.watched,
                "encoded": self.preview.encoded, "fps": self.config.fps,
                "refused": self.admission.refused, "cut": self.admission.cut,
                "latency": latency, "motion": self.preview.measures_motion(),
                "annotated": self.annotated, "video": self.video() if self.video else {}}

    def known(self) -> Known:
        """What a store query may ask for though no row holds it yet: the cameras running
        (those added too) and what the run's config names."""
        named = self.names() if self.names is not None else Known()
        return dataclasses.replace(named, cameras=named.cameras | set(self.cameras()))

    def seen(self, camera: str, picture: Picture) -> None:
        """A picture reached a viewer's socket: its age counts in the live view's latency."""
        self.view_latency.setdefault(camera, Histogram()).record(max(0.0, time.time() - picture.captured))
