"""Builds the stage graph from a config, wires it, and runs it: start, drain, stop.

    sources (1 thread per camera: decode + preprocess)
      -> ingress (per-camera lanes, files read on demand)
      -> detect (batcher -> engine -> decode/NMS, in order)
      -> [track] -> [classify ...] -> [analytics] -> [annotate] -> sink (video + JSON lines)

Each stage is built from its spec by `pipeline.stages.STAGES`; every stage, the sink
included, is a `Stage` (start / accept / stop / join / close). Usable as a library
without the CLI (one shard of a multi-machine deployment runs
`Pipeline(config.subset([...]))`): `start()`, `wait()`, `stop()`, `close()`,
`snapshot()`, and cameras added or removed while running. The config is never modified.
Models are opened and checked once (`engines.model_check`): by the start-up checks, which
pass them in, or here for those not given.
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Callable, TypeVar

import cv2

from pipeline.config import AnalyticsSpec, Config, ConfigError, SourceConfig, TrackSpec, cameras_problem, entry_stage
from pipeline.engines.engine_registry import EngineRegistry
from pipeline.engines.model_check import OpenModel, open_models
from pipeline.engines.plan import ThreadPlan, plan_threads
from pipeline.engines.session import ModelError
from pipeline.errors import CameraInUse
from pipeline.frames import ClassNames, Resume
from pipeline.metrics.registry import Metrics, thread_count
from pipeline.metrics.snapshot import Snapshot
from pipeline.preprocess import Preprocessor
from pipeline.runtime.ingress import Ingress
from pipeline.runtime.stage import RunControl, Stage
from pipeline.runtime.threads import Capacity
from pipeline.runtime.track_feedback import TrackFeedbacks
from pipeline.side_outputs import SideOutputs
from pipeline.sinks.sink import SinkStage
from pipeline.sinks.views import converts_every_frame
from pipeline.sources.camera import VideoSource
from pipeline.sources.borders import Borders
from pipeline.sources.detect_gate import DetectGate, phase_of
from pipeline.stages import STAGES
from pipeline.stages.build import BuildContext

log = logging.getLogger("pipeline.graph")
T = TypeVar("T")


def detect_gate(config: Config, engines: EngineRegistry, s: SourceConfig, feedbacks: TrackFeedbacks) -> DetectGate:
    """Which of the camera's frames its detector sees. Only a gate on motion, or one that
    watches the camera's lines and zones behind a rate, reads the camera's tracks (a file
    camera's waits for them: the same decisions however far the graph got, a live one's
    never); for the others the tracker hands back nothing."""
    entry = entry_stage(config.graph)
    assert entry is not None
    rate = entry.rate(s.id)
    analytics = next((g for g in config.graph if isinstance(g, AnalyticsSpec)), None)
    borders = Borders()
    if rate.at_borders and analytics is not None:
        borders = Borders.of(analytics.cameras.get(s.id), ClassNames(config.detector.labels))
    feedback = feedbacks.open(s.id, wait=not s.live) if rate.motion or borders else None
    return DetectGate(rate, s.motion, max(config.models[entry.model].input_size),
                      engines.regions_per_run(entry.model), feedback, borders, phase_of(s.id))


def counting_threads(plan: ThreadPlan, make: Callable[[], T]) -> T:
    """What `make` returns, the threads it started counted in the plan as the side
    outputs' (threads libraries start, an MQTT client's, are known once started)."""
    before = thread_count()
    made = make()
    plan.side_threads += max(0, thread_count() - before)
    return made


def side_outputs(pipeline: Pipeline) -> SideOutputs:
    """The run's side outputs in its thread plan: the threads they start as they are made
    (the live view's encoder) and the live view's pool, whose threads start as requests come."""
    side = counting_threads(pipeline.plan, lambda: SideOutputs(pipeline))
    if side.web is not None:
        pipeline.plan.side_threads += side.web.WORKERS
    return side


class Pipeline:
    def __init__(self, config: Config, max_frames: int | None = None, timeline: bool = False,
                 models: dict[str, OpenModel] | None = None):
        self.config = config
        self.metrics, self.control, self.max_frames = Metrics(timeline), RunControl(), max_frames
        self.sources: list[VideoSource] = []
        self._adding = threading.Lock()  # cameras added while running: one at a time
        self.stages: list[Stage] = []
        self.started = False
        try:
            opened, problems = open_models(config, models)
            if problems:
                raise ModelError(*problems)
            self.plan: ThreadPlan = plan_threads(config, thread_count(), {n for n, m in opened.items() if m.on_gpu})
            self.engines = EngineRegistry(config, self.plan, opened, self.metrics)
            self._build()
        except BaseException:
            self.close()
            raise

    # -- building -------------------------------------------------------------------------
    def _build(self) -> None:
        cfg = self.config
        too_many = cameras_problem(cfg.sources, cfg.outputs)
        if too_many:
            raise ConfigError([f"sources: {too_many}"])
        entry = entry_stage(cfg.graph)
        assert entry is not None, "read_graph refuses a graph that does not start with its entry stage"
        # Little's law: the batches in flight keep the detector busy; file frames waiting
        # besides need only fill its next batch. More only adds latency.
        self.ingress = Ingress(f"{entry.stage_name}.lanes", self.engines.policy(entry.model).target,
                               on_drop=lambda item, why: self.metrics.drop(item.camera, why))
        self.metrics.queues[self.ingress.name] = self.ingress
        self.side = side_outputs(self)
        self.feedbacks = TrackFeedbacks(any(isinstance(spec, TrackSpec) for spec in cfg.graph))
        ctx = BuildContext(cfg, self.metrics, self.control, self.engines, self.ingress, self.side.views, self.feedbacks)
        self.stages = [STAGES[type(spec)].from_spec(spec, ctx) for spec in cfg.graph]
        self.sink = SinkStage(cfg.outputs, self.metrics, self.control, Capacity(self.plan.cores),
                              cfg.runtime.queue_size, self.side.evidence, self.side.preview, self.side.index,
                              self.side.views, on_frame=None if self.side.home is None else self.side.home.frame,
                              store=self.side.records, live=self.side.live)
        for a, b in zip(self.stages, [*self.stages[1:], self.sink]):
            a.emit = b.accept
        self.stages.append(self.sink)
        for s in cfg.sources:
            self._source(s, Resume())

    def _source(self, s: SourceConfig, resume: Resume) -> VideoSource:
        assert s.queue.policy is not None
        self.sink.add_camera(s.id, bool(s.live), resume, self.config.outputs.record_for(s.record))
        port = self.ingress.add_camera(s.id, s.queue.size or self.ingress.read_budget, s.queue.policy)
        self.plan.add_camera(s.thread_count, s.id in self.sink.files.recordings, bool(s.detect_uri))
        preprocess = Preprocessor(self.config.detector, from_picture=not converts_every_frame(self.config))
        source = VideoSource(s, preprocess, port, self.metrics, self.control, self.max_frames, resume,
                             self.sink.files.recordings.get(s.id), detect_gate(self.config, self.engines, s, self.feedbacks), self.side.live)
        self.sources.append(source)
        return source

    # -- cameras while running ----------------------------------------------------------------
    def add_camera(self, source: SourceConfig, resume: Resume = Resume()) -> None:
        """Start one more camera while running (its analytics, if any, come from the graph's
        specs); `resume` picks up a camera that ran elsewhere. The id must not be running
        (`CameraInUse`): its files and counters are one camera's; and the cameras with it
        must fit the machine (`ConfigError` naming the limit)."""
        with self._adding:
            if source.id in self.cameras() or any(s.camera == source.id and s.running for s in self.sources):
                raise CameraInUse(f"camera {source.id} is already running")
            running = [s.config for s in self.sources if s.running]
            too_many = cameras_problem([*running, source], self.config.outputs)
            if too_many:
                raise ConfigError([f"camera {source.id} cannot be added: {too_many}"])
            self.sources = [s for s in self.sources if s.camera != source.id]
            started = self._source(source, resume)
            if self.started:
                started.start()

    def remove_camera(self, camera: str) -> None:
        """Stop one camera: its frames drain and its files are finalised; the others go on."""
        for s in self.sources:
            if s.camera == camera:
                s.stop()

    def cameras(self) -> list[str]:
        """The cameras still running (not ended)."""
        return sorted(self.sink.pending)

    # -- running --------------------------------------------------------------------------
    def start(self) -> None:
        cv2.setNumThreads(1)  # OpenCV's own pool off: our parallelism is across cameras
        self.started = True
        counting_threads(self.plan, self.side.start)  # event destinations' clients, snapshots, retention, web
        log.info(self.plan.describe())
        for stage in reversed(self.stages):
            stage.start()
        for source in self.sources:
            source.start()

    def wait(self, timeout: float | None = None) -> bool:
        """True once every camera's end of stream reached the sink (all files final)."""
        return self.sink.done.wait(timeout)

    def stop(self, abort: bool = False) -> None:
        """Stop reading: the graph drains and finalises. `abort` also discards queued work
        and wakes every waiting thread, so files are finalised at once (still playable,
        possibly shorter)."""
        self.control.stop.set()
        if abort:
            self.control.abort.set()
            for stage in self.stages:
                stage.stop()
            self.side.abort()

    def close(self, timeout: float = 30.0) -> None:
        """Join every thread and release engines; call after `wait()` or `stop()` (or to
        discard a pipeline that was built but never started)."""
        deadline = time.monotonic() + timeout
        left = lambda: max(0.0, deadline - time.monotonic())  # noqa: E731
        if self.started:
            for source in self.sources:
                source.join(left())
            self.sink.done.wait(left())
            self.control.abort.set()
            for stage in self.stages:
                stage.join(left())
        for stage in self.stages:
            stage.close()
        for part in (getattr(self, "engines", None), getattr(self, "side", None)):
            if part is not None:
                part.close()

    def is_open(self, path: str) -> bool:
        """Whether a camera's file at `path` is still being written."""
        return self.sink.files.is_open(path)

    def cameras_written(self) -> dict[str, str | None]:
        """Cameras whose outputs this run opened, each with its recording's name (or None)."""
        return {cam: self.sink.files.record_names.get(cam) for cam in list(self.sink.files.ran)}

    @property
    def outputs_failed(self) -> dict[str, str]:
        """Outputs that stopped on an error ("camera/output" -> why)."""
        return dict(self.sink.failed) if hasattr(self, "sink") else {}

    def snapshot(self) -> Snapshot:
        self.metrics.sample_process()
        snap = self.metrics.snapshot()
        snap.thread_plan = self.plan.total
        if getattr(self, "side", None) is not None and self.side.events is not None:
            snap.events = self.side.events.stats()
        return snap
