"""The live page of a run over processes (`run --processes N` with `outputs.web`): one web
server on the config's port and token, in the parent, as one process's run serves it.

What is the run's as a whole it answers itself: the page, `/api/cameras` and `/metrics`
from the driver's merged snapshot, the store's queries, the recordings and their boxes,
exports and the events' evidence (files on the disk every host writes to). A camera's
live routes (its stills, MJPEG, motion view and video socket) are relayed to the web
server of the host process that decodes it (`web.forward`): each host serves its own
cameras on 127.0.0.1 behind a token made for the run, so no picture is encoded or
copied in the parent but for the relay's bytes. The events' panel gathers each host's
newest events (`HostEvents`). A camera moved to another host after its host died is
relayed to the new one from the next request on; cameras added over HTTP are placed by
the driver (`process_run.ProcessRun`).
"""
from __future__ import annotations

import json
import logging
import secrets
import threading
import urllib.error
import urllib.request
from collections import deque
from dataclasses import replace
from typing import Callable

from pipeline.cluster.driver import ClusterDriver, HostState
from pipeline.config import Config
from pipeline.config.outputs import WebConfig
from pipeline.control import CameraControl
from pipeline.side_outputs import annotates
from pipeline.sinks.preview import Preview
from pipeline.store.connections import location_of
from pipeline.store.filters import ConfigNames
from pipeline.store.queries import Store
from pipeline.web.forward import Forwarder, add_routes
from pipeline.web.recordings import RecordingFiles
from pipeline.web.server import WebServer

log = logging.getLogger("pipeline.web")

ASK_S = 2.0  # a host answers its own events from memory


def host_web(web: WebConfig) -> WebConfig:
    """A host process's own server: loopback, any free port, a token made for this run, no control."""
    return replace(web, host="127.0.0.1", port=0, token=secrets.token_urlsafe(32), control=False)


class HostEvents:
    """The hosts' newest events as one panel: each host numbers its own (`RecentEvents`),
    so the front numbers them again in the order it first sees them, asking each host
    only for those after the last it has."""

    def __init__(self, hosts: Callable[[], list[HostState]], token: str, size: int = 200):
        self.hosts, self.token = hosts, token
        self._events: deque[dict] = deque(maxlen=size)
        self._seen: dict[str, int] = {}  # host -> the newest of its ids gathered
        self._count = 0
        self._lock = threading.Lock()

    def newest(self, limit: int = 50, after: int = 0) -> list[dict]:
        with self._lock:
            for host in self.hosts():
                if host.web is not None:
                    self._gather(host.name, host.web)
            return [e for e in reversed(self._events) if e["id"] > after][:limit]

    def _gather(self, name: str, port: int) -> None:
        url = f"http://127.0.0.1:{port}/api/events?limit={self._events.maxlen}&after={self._seen.get(name, 0)}"
        ask = urllib.request.Request(url, headers={"Authorization": f"Bearer {self.token}"})
        try:
            with urllib.request.urlopen(ask, timeout=ASK_S) as answer:
                events = json.load(answer)["events"]
        except (OSError, ValueError, KeyError) as e:  # a host that died: what was gathered stays
            log.debug("events of host %s: %s", name, e)
            return
        for event in reversed(events):  # oldest first
            self._seen[name] = max(self._seen.get(name, 0), event["id"])
            self._count += 1
            self._events.append({**event, "id": self._count})


class FrontServer(WebServer):
    """`WebServer` with the run's parts and the hosts' live views merged into its own."""

    def __init__(self, config: Config, hosts: Callable[[], ClusterDriver], host_token: str,
                 control: CameraControl | None = None):
        web = config.outputs.web
        assert web is not None
        out = config.outputs
        self.driver_of = hosts
        self.events_of_hosts = HostEvents(lambda: self.driver_of().alive(), host_token)
        forward = Forwarder(self._where, host_token, self.IDLE_TIMEOUT_S)
        location = location_of(out)
        configured = [out.record.filename] + [out.record_for(s.record).filename for s in config.sources]

        def templates() -> list[str]:  # a camera added over HTTP may name its own
            added = control.added() if control is not None else []
            return configured + [out.record_for(s.record).filename for s in added]

        super().__init__(web, lambda: self.driver_of().snapshot(), Preview(web.fps, web.quality, web.width),
                         cameras=lambda: self.driver_of().running(), events=self.events_of_hosts.newest,
                         evidence_dir=out.dir, annotated=annotates(config), control=control,
                         recordings=RecordingFiles(out.dir, templates, out.jsonl.filename,
                                                   out.record.export_max_s),
                         store=Store(location) if location else None, names=ConfigNames(config),
                         routes=lambda app: add_routes(app, forward))

    def _where(self, camera: str) -> str | None:
        driver = self.driver_of()
        run = driver.cameras.get(camera)
        host = driver.hosts.get(run.host) if run is not None and run.host and not run.done else None
        return f"http://127.0.0.1:{host.web}" if host is not None and host.alive and host.web else None

    def live_view(self) -> dict:
        """The hosts' live views (as of their last status) added up; the door's own
        refusals and cuts, fps and whether the pictures carry boxes."""
        own = super().live_view()
        views = [h.status.live_view for h in self.driver_of().alive() if h.status and h.status.live_view]
        for key in ("viewers", "watched", "encoded"):
            own[key] = sum(v[key] for v in views)
        for key in ("latency", "video"):
            own[key] = {cam: value for v in views for cam, value in v[key].items()}
        own["motion"] = sorted({cam for v in views for cam in v["motion"]})
        return own
