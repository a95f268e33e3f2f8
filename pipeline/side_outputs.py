"""What the sink feeds besides each camera's files, for the whole run: the event
destinations, the events' evidence (snapshots, clips) and the live page's recent
events, the store (every track, event, segment and count), the disk budget (which the
store follows), and the live view with its web server and each camera's live video
(`live.hub`: its own packets for the page's video sockets); each only where the
config asks for it. Which frames are shown, and in what picture (`Views`), follows from
the video's settings and the live view's viewers. The graph starts, aborts and closes
them with the run."""
from __future__ import annotations

from typing import Any, Mapping, Protocol

from pipeline.config import Config
from pipeline.control import CameraControl, Runs
from pipeline.metrics.registry import Metrics
from pipeline.events.event_evidence import EventEvidence, RecentEvents
from pipeline.events.publisher import EventPublisher
from pipeline.events.homeassistant import HomeAssistant
from pipeline.live.hub import LiveHub
from pipeline.sinks.preview import Preview
from pipeline.sinks.retention import OutputRetention
from pipeline.sinks.views import Views, annotates
from pipeline.sinks.written import WrittenIndex
from pipeline.store.opening import store_writer
from pipeline.store.runlog import ClockLog
from pipeline.store.connections import location_of
from pipeline.store.filters import ConfigNames
from pipeline.store.queries import Store
from pipeline.stages.analytics import AnalyticsStage
from pipeline.web.live_api import add_routes
from pipeline.web.recordings import RecordingFiles
from pipeline.web.server import WebServer

class Run(Runs, Protocol):
    """What the side outputs need of the run they serve (`graph.Pipeline`)."""

    config: Config
    metrics: Metrics
    stages: list[Any]  # those of the graph, built after the side outputs

    def snapshot(self) -> dict: ...

    def is_open(self, path: str) -> bool:
        """Whether the run still writes this file (retention leaves it)."""
        ...

    def cameras_written(self) -> Mapping[str, str | None]:
        """The cameras whose files this run wrote (retention removes only theirs), each with
        its recording's file name (None: it has no recording)."""
        ...


def record_names(pipeline: Run) -> list[str]:
    """The recordings' file name templates the page serves: the config's (files of earlier
    runs too) and those of cameras added while running."""
    out = pipeline.config.outputs
    configured = [out.record.filename] + [out.record_for(s.record).filename for s in pipeline.config.sources]
    return configured + [name for name in pipeline.cameras_written().values() if name]


def latency_p95(metrics: Metrics, camera: str) -> float | None:
    """The camera's capture-to-record latency, P95 over the last seconds (None: no frame yet)."""
    stats = metrics.cameras.get(camera)
    return stats.recent.latency(metrics.clock()).percentile(95) if stats is not None else None


class SideOutputs:
    def __init__(self, pipeline: Run):
        out = pipeline.config.outputs
        publisher = EventPublisher(out.events)
        self.events = publisher if publisher else None
        if self.events is not None:
            pipeline.metrics.state_listeners.append(self.events.camera_state)
        mqtt = out.events.mqtt
        self.home = HomeAssistant(out.events) if mqtt is not None and mqtt.homeassistant is not None else None
        if self.home is not None:  # the sink hands it every frame (`home.frame`)
            pipeline.metrics.state_listeners.append(self.home.camera_state)
        self.recent = RecentEvents()
        self.index = WrittenIndex(out.dir)  # what the run wrote: retention removes nothing else
        self.preview: Preview | None = None
        self.live: LiveHub | None = None  # the cameras' live video, for the page's sockets
        if out.web is not None:
            self.preview = Preview(out.web.fps, out.web.quality, out.web.width)
            self.live = LiveHub(lambda camera: latency_p95(pipeline.metrics, camera))
        self.views = Views(out.video, annotates(pipeline.config), self.preview.wants if self.preview else None)
        self.evidence = EventEvidence(out.dir, out.events, self.events, self.recent,
                                      on_lost=pipeline.metrics.snapshot_lost, on_file=self.index.add,
                                      picture=self.views.snapshot)
        self.store = store_writer(out, lambda cam, n: pipeline.metrics.lost(cam, "store", n),
                                  str(pipeline.config.base_dir))
        # every frame's record: into the store, or with the store off its clocks into the run log
        self.records = self.store or ClockLog(out.dir, str(pipeline.config.base_dir))
        self.retention = OutputRetention(
            out, lambda path: pipeline.is_open(path) or self.evidence.is_open(path), pipeline.metrics,
            self.index, cameras=pipeline.cameras_written, on_removed=self.store.forget if self.store else None)
        self.web: WebServer | None = None
        if out.web is not None and self.preview is not None and self.live is not None:
            live = self.live
            control = CameraControl(pipeline, pipeline.config) if out.web.control else None
            recordings = RecordingFiles(out.dir, lambda: record_names(pipeline), out.jsonl.filename,
                                        out.record.export_max_s)
            location = location_of(out)
            store = Store(location) if location else None
            self.web = WebServer(out.web, pipeline.snapshot, self.preview, cameras=lambda: pipeline.metrics.cameras,
                                 events=self.recent.newest, evidence_dir=out.dir, control=control,
                                 recordings=recordings, annotated=annotates(pipeline.config), store=store,
                                 names=ConfigNames(pipeline.config, lambda: [s.spec for s in pipeline.stages
                                                                            if isinstance(s, AnalyticsStage)]),
                                 routes=lambda app: add_routes(app, live.find), video=live.viewers)

    def start(self) -> None:
        for part in (self.store, self.events, self.home, self.evidence, self.retention, self.web):
            if part is not None:
                part.start()

    def abort(self) -> None:
        """A second signal: a flush to event destinations that are away ends at once."""
        if self.events is not None:
            self.events.abort()
        if self.home is not None:
            self.home.abort()

    def close(self) -> None:
        """The evidence first (its snapshots deliver events), then the destinations."""
        for part in (self.evidence, self.events, self.home, self.web, self.preview, self.retention, self.store):
            if part is not None:
                part.close()
