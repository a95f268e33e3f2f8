"""The live page of a run over processes (`run --processes N` with `outputs.web`): one web
server on the config's port and token, in the parent, as one process's run serves it.

What is the run's as a whole it answers itself: the page and `/api/cameras` from the
driver's merged snapshot, the store's queries, the recordings and their boxes, exports
and the events' evidence (files on the disk every host writes to). A camera's live
routes (its stills, MJPEG, motion view and video socket) are relayed to the web server of
the host process that decodes it (`web.forward`): each host serves its own cameras on
127.0.0.1 behind a token made for the run, so no picture is encoded or muxed in the
parent, which only passes the bytes on. The events' panel gathers each host's newest
events (`HostEvents`). `/metrics` is not served, as `metrics.prometheus_port` is not for
a run of hosts (a moved camera's merged counters would go backwards).

The driver belongs to the run loop's thread: the page reads only what that thread
publishes after each poll (`HostsView`). A camera moved to another host after its host
died is relayed to the new one from then on; cameras added over HTTP are placed by the
driver (`process_run.ProcessRun`).
"""
from __future__ import annotations

import json
import logging
import secrets
import threading
import urllib.request
from collections import deque
from dataclasses import dataclass, field, replace
from typing import Callable

from aiohttp import web

from pipeline.cluster.driver import ClusterDriver
from pipeline.config import Config
from pipeline.config.outputs import WebConfig
from pipeline.control import CameraControl
from pipeline.metrics.snapshot import Snapshot
from pipeline.side_outputs import annotates
from pipeline.sinks.preview import Preview
from pipeline.store.connections import location_of
from pipeline.store.filters import ConfigNames
from pipeline.store.queries import Store
from pipeline.web.forward import Forwarder, add_routes
from pipeline.web.recordings import RecordingFiles
from pipeline.web.server import WebServer

log = logging.getLogger("pipeline.web")

ASK_S = 1.0  # a host answers its own events from memory
NO_METRICS = ("/metrics: not served by a run of hosts (--processes): a moved camera's merged counters would go "
              "backwards; the summary and --report hold them\n")
# a loopback request never goes through a proxy the environment names (it would carry the hosts' token)
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def host_web(web: WebConfig) -> WebConfig:
    """A host process's own server: loopback, any free port, a token made for this run, no control."""
    return replace(web, host="127.0.0.1", port=0, token=secrets.token_urlsafe(32), control=False)


@dataclass(frozen=True)
class HostsView:
    """The run as the page sees it, published whole by the driver's thread after each poll."""

    snapshot: Snapshot
    running: list[str] = field(default_factory=list)
    where: dict[str, int] = field(default_factory=dict)  # camera -> the web port of the host running it
    hosts: dict[str, int] = field(default_factory=dict)  # living host -> its web port
    live_views: list[dict] = field(default_factory=list)  # the living hosts' (`WebServer.live_view`)

    @classmethod
    def of(cls, driver: ClusterDriver) -> "HostsView":
        """On the driver's thread."""
        alive = {h.name: h for h in driver.alive() if h.web is not None}
        where = {cam: alive[run.host].web for cam, run in driver.cameras.items()
                 if run.host in alive and not run.done}
        return cls(driver.snapshot(), driver.running(), where,  # type: ignore[arg-type]
                   {name: h.web for name, h in alive.items()},  # type: ignore[misc]
                   [h.status.live_view for h in alive.values() if h.status and h.status.live_view])


class HostEvents:
    """The hosts' newest events as one panel: each host numbers its own (`RecentEvents`),
    so the front numbers them again in the order it gathers them, asking each host only
    for those after the last it has. One request gathers at a time; the others answer
    from what is gathered, so a slow host never holds the server's threads."""

    def __init__(self, hosts: Callable[[], dict[str, int]], token: str, size: int = 200):
        self.hosts, self.token = hosts, token
        self._events: deque[dict] = deque(maxlen=size)
        self._seen: dict[str, int] = {}  # host -> the newest of its ids gathered
        self._count = 0
        self._lock = threading.Lock()  # the panel
        self._gathering = threading.Lock()

    def newest(self, limit: int = 50, after: int = 0) -> list[dict]:
        if self._gathering.acquire(blocking=False):
            try:
                for name, port in self.hosts().items():
                    self._gather(name, port)
            finally:
                self._gathering.release()
        with self._lock:
            return [e for e in reversed(self._events) if e["id"] > after][:limit]

    def _gather(self, name: str, port: int) -> None:
        url = f"http://127.0.0.1:{port}/api/events?limit={self._events.maxlen}&after={self._seen.get(name, 0)}"
        ask = urllib.request.Request(url, headers={"Authorization": f"Bearer {self.token}"})
        try:
            with _DIRECT.open(ask, timeout=ASK_S) as answer:
                events = json.load(answer)["events"]
        except (OSError, ValueError, KeyError) as e:  # a host that died: what was gathered stays
            log.debug("events of host %s: %s", name, e)
            return
        with self._lock:
            for event in reversed(events):  # oldest first
                self._seen[name] = max(self._seen.get(name, 0), event["id"])
                self._count += 1
                self._events.append({**event, "id": self._count})


async def _no_metrics(_request: web.Request) -> web.Response:
    return web.Response(status=404, text=NO_METRICS)


class FrontServer(WebServer):
    """`WebServer` with the run's parts and the hosts' live views merged into its own."""

    def __init__(self, config: Config, view: Callable[[], HostsView], host_token: str,
                 control: CameraControl | None = None):
        web_config, out = config.outputs.web, config.outputs
        assert web_config is not None
        self.view = view
        self.events_of_hosts = HostEvents(lambda: self.view().hosts, host_token)
        forward = Forwarder(self._where, host_token, self.IDLE_TIMEOUT_S)
        location = location_of(out)
        configured = [out.record.filename] + [out.record_for(s.record).filename for s in config.sources]

        def templates() -> list[str]:  # a camera added over HTTP may name its own
            added = control.added() if control is not None else []
            return configured + [out.record_for(s.record).filename for s in added]

        def routes(app: web.Application) -> None:
            add_routes(app, forward)
            app.router.add_get("/metrics", _no_metrics, allow_head=False)

        self._pictures = Preview(web_config.fps, web_config.quality, web_config.width)  # never fed: the hosts encode
        super().__init__(web_config, lambda: self.view().snapshot, self._pictures,
                         cameras=lambda: self.view().running, events=self.events_of_hosts.newest,
                         evidence_dir=out.dir, annotated=annotates(config), control=control,
                         recordings=RecordingFiles(out.dir, templates, out.jsonl.filename, out.record.export_max_s),
                         store=Store(location) if location else None, names=ConfigNames(config), routes=routes)

    def _where(self, camera: str) -> str | None:
        port = self.view().where.get(camera)
        return f"http://127.0.0.1:{port}" if port else None

    def live_view(self) -> dict:
        """The hosts' live views (as of their last status) added up; the door's own
        refusals and cuts, fps and whether the pictures carry boxes."""
        own = super().live_view()
        views = self.view().live_views
        for key in ("viewers", "watched", "encoded"):
            own[key] = sum(v[key] for v in views)
        for key in ("latency", "video"):
            own[key] = {cam: value for v in views for cam, value in v[key].items()}
        own["motion"] = sorted({cam for v in views for cam in v["motion"]})
        return own

    def close(self) -> None:
        super().close()
        self._pictures.close()
