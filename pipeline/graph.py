"""Builds the stage graph from a config, wires the queues, and runs it: start, drain, stop.

    sources (1 thread per camera: decode + preprocess)
      -> detect (per-camera lanes -> batcher -> engine -> decode/NMS, in order)
      -> [track] -> [classify ...] -> [analytics] -> [annotate] -> sink (video + JSON lines)

Each stage is built from its spec by `pipeline.stages.STAGES`. Usable as a library
without the CLI (one shard of a multi-machine deployment runs
`Pipeline(config.subset([...]))`): `start()`, `wait()`, `stop()`, `close()`,
`snapshot()`. The config is never modified. Models are checked before a camera starts
(`pipeline.preflight`); sessions it opened are passed in, else they are opened here.
"""
from __future__ import annotations

import logging
import time

import onnxruntime as ort

from pipeline.config import Config, DetectSpec, SourceConfig
from pipeline.engines.engine import Engine, open_wide_session
from pipeline.engines.pool import WorkerPool
from pipeline.engines.session import GPU_PROVIDERS, ModelError, create_session
from pipeline.errors import one_line
from pipeline.frames import Resume
from pipeline.metrics.registry import Metrics, thread_count
from pipeline.preprocess import Preprocessor
from pipeline.runtime.stage import RunControl, Stage
from pipeline.runtime.threads import Capacity, ThreadPlan, plan_cores, plan_threads, session_threads
from pipeline.sinks.events import EventPublisher
from pipeline.sinks.preview import Preview
from pipeline.sinks.stage import SinkStage
from pipeline.sources.video import VideoSource
from pipeline.stages import STAGES
from pipeline.stages.build import BuildContext
from pipeline.stages.detect import DetectStage
from pipeline.web.server import WebServer

log = logging.getLogger("pipeline.graph")


class Pipeline:
    def __init__(self, config: Config, max_frames: int | None = None, timeline: bool = False,
                 sessions: dict[str, ort.InferenceSession] | None = None):
        self.config = config
        self.metrics = Metrics(timeline)
        self.control = RunControl()
        self.max_frames = max_frames
        self.engines: dict[str, Engine] = {}
        self.shared_pool: WorkerPool | None = None
        self.sources: list[VideoSource] = []
        self.stages: list[Stage] = []
        self.sink: SinkStage | None = None
        self.preview: Preview | None = None
        self.web: WebServer | None = None
        self.events: EventPublisher | None = None
        self.started = False
        base_threads = thread_count()
        try:
            # Sessions first: only they tell which provider a model really got, and the
            # thread plan differs between a GPU server and a laptop running the same config.
            self._sessions = dict(sessions or {})
            cores = plan_cores(config)
            for name in config.used_models():
                if name not in self._sessions:
                    m = config.models[name]
                    self._sessions[name] = create_session(m, session_threads(m, cores), m.engine.inter_op_threads)
            on_gpu = {n for n, s in self._sessions.items() if s.get_providers()[0] in GPU_PROVIDERS}
            self.plan: ThreadPlan = plan_threads(config, base_threads, on_gpu)
            self._build()
        except BaseException:
            self.close()
            raise

    # -- building -------------------------------------------------------------------------
    def _engine(self, name: str) -> Engine:
        if name not in self.engines:
            model = self.config.models[name]
            plan = self.plan.engines[name]
            if plan.shared and self.shared_pool is None:
                self.shared_pool = WorkerPool("inference", self.plan.shared_workers)
            engine = Engine(model, plan, self._sessions.pop(name), self.metrics.engines[name],
                            self.shared_pool if plan.shared else None, open_wide_session(model, plan))
            # a free worker finishes frames under way before it starts new ones: the engine
            # of a later stage goes first
            engine.priority = max(i for i, spec in enumerate(self.config.graph) if getattr(spec, "model", None) == name)
            self.engines[name] = engine
            try:  # runs of every batch size: ORT allocates its buffers now, not on a camera's first frame
                engine.profile()
            except Exception as e:
                raise ModelError(f"models.{name}: test inference failed: {one_line(e)}") from None
            log.info(engine.describe())
            log.info(engine.describe_costs())
        return self.engines[name]

    def _build(self) -> None:
        cfg = self.config
        ctx = BuildContext(cfg, self.metrics, self.control, self._engine)
        for spec in cfg.graph:
            self.stages.append(STAGES[type(spec)].from_spec(spec, ctx))
        web = cfg.outputs.web
        if web is not None:
            self.preview = Preview(web.fps, web.quality, web.width)
            self.web = WebServer(web, self.snapshot, self.preview)
        events = EventPublisher(cfg.outputs.events)
        if events:
            self.events = events
            self.metrics.state_listeners.append(events.camera_state)
        self.sink = SinkStage(cfg.outputs, self.metrics, self.control, Capacity(self.plan.cores),
                              cfg.runtime.queue_size, preview=self.preview, events=self.events)
        for s in cfg.sources:
            self.sink.add_camera(s.id, bool(s.live))
        for a, b in zip(self.stages, self.stages[1:]):
            a.emit = b.accept
        self.stages[-1].emit = self.sink.accept
        detect = self.stages[0]
        assert isinstance(detect, DetectStage) and isinstance(cfg.graph[0], DetectSpec)
        # Little's law: the batches in flight (one more than the workers) keep the detector
        # busy; frames of files waiting besides need only fill its next batch. More only
        # adds latency. Files are read on demand within that budget.
        detect.lanes.read_budget = max(1, min(cfg.detector.batching.max_batch, detect.engine.preferred_batch))
        for s in cfg.sources:
            self._source(s, Resume())

    def _source(self, s: SourceConfig, resume: Resume) -> VideoSource:
        detect = self.stages[0]
        assert isinstance(detect, DetectStage) and s.queue.policy is not None
        detect.add_camera(s.id, s.queue.size or detect.lanes.read_budget, s.queue.policy)
        block = s.queue.policy == "block"
        source = VideoSource(s, Preprocessor(self.config.detector), detect.lanes.lane(s.id).put, self.metrics,
                             self.control, self.max_frames,
                             room=(lambda key=s.id: detect.lanes.wait_turn(key)) if block else None,
                             read_done=(lambda key=s.id: detect.lanes.end_turn(key)) if block else None,
                             start_at=resume.start_at)
        self.sources.append(source)
        return source

    # -- cameras while running ----------------------------------------------------------------
    def add_camera(self, source: SourceConfig, resume: Resume = Resume()) -> None:
        """Start one more camera while running (its analytics, if any, come from the graph's
        specs); `resume` picks up a camera that ran elsewhere. The id must not be running."""
        assert self.sink is not None
        if any(s.camera == source.id and s.running for s in self.sources):
            raise ValueError(f"camera {source.id} is already running")
        self.sources = [s for s in self.sources if s.camera != source.id]
        self.sink.add_camera(source.id, bool(source.live), resume)
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
        assert self.sink is not None
        return sorted(self.sink.pending)

    # -- running --------------------------------------------------------------------------
    def start(self) -> None:
        assert self.sink is not None
        log.info(self.plan.describe())
        self.started = True
        if self.web is not None:
            self.web.start()
        self.sink.start()
        for stage in reversed(self.stages):
            stage.start()
        for source in self.sources:
            source.start()

    def wait(self, timeout: float | None = None) -> bool:
        """True once every camera's end of stream reached the sink (all files final)."""
        assert self.sink is not None
        return self.sink.done.wait(timeout)

    def stop(self, abort: bool = False) -> None:
        """Stop reading: the graph drains and finalises. `abort` also discards queued work
        and wakes every waiting thread, so files are finalised at once (still playable,
        possibly shorter)."""
        self.control.stop.set()
        if abort:
            self.control.abort.set()
            for stage in self.stages:
                stage.input.close()
                stage.close()

    def close(self, timeout: float = 30.0) -> None:
        """Join every thread and release engines; call after `wait()` or `stop()` (or to
        discard a pipeline that was built but never started)."""
        deadline = time.monotonic() + timeout
        left = lambda: max(0.0, deadline - time.monotonic())  # noqa: E731
        if self.started:
            for source in self.sources:
                source.join(left())
            assert self.sink is not None
            self.sink.done.wait(left())
            self.control.abort.set()
            self.sink.join(left())
            for stage in self.stages:
                stage.join(left())
        for stage in self.stages:
            stage.close()
        for engine in self.engines.values():
            engine.close()
        if self.shared_pool is not None:
            self.shared_pool.close()
        if self.sink is not None:
            self.sink.close()
        if self.events is not None:
            self.events.close()
        if self.web is not None:
            self.web.close()
        if self.preview is not None:
            self.preview.close()

    @property
    def outputs_failed(self) -> dict[str, str]:
        """Outputs that stopped on an error ("camera/output" -> why)."""
        return dict(self.sink.failed) if self.sink is not None else {}

    def snapshot(self) -> dict:
        self.metrics.sample_process()
        snap = self.metrics.snapshot()
        snap["thread_plan"] = self.plan.total
        if self.events is not None:
            snap["events"] = self.events.stats()
        return snap
