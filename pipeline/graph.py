"""Builds the stage graph from a config, wires the queues, and runs it: start, drain, stop.

    sources (1 thread per camera: decode + preprocess)
      -> detect (per-camera lanes -> batcher -> engine -> decode/NMS, in order)
      -> [classify] -> [annotate] -> sink (video + JSON lines)

Usable as a library without the CLI (one shard of a multi-machine deployment runs
`Pipeline(config.subset([...]))`): `start()`, `wait()`, `stop()`, `snapshot()`.
Everything that can be checked is checked while building (models load, their input
and output fit the config, a warm-up batch decodes), before any camera starts.
"""
from __future__ import annotations

import logging
import os
import time

import numpy as np

from pipeline.config import Config, ConfigError, ModelConfig
from pipeline.decoders.layouts import DetectionDecoder
from pipeline.engines.engine import Engine
from pipeline.engines.pool import WorkerPool
from pipeline.engines.session import GPU_PROVIDERS, ModelError, create_session
from pipeline.metrics.registry import EngineStats, Metrics, thread_count
from pipeline.runtime.stage import RunControl, Stage
from pipeline.runtime.threads import ThreadPlan, intra_op_threads, plan_cores, plan_threads, used_models
from pipeline.sinks.stage import SinkStage
from pipeline.sources.video import VideoSource
from pipeline.stages.analytics import AnalyticsStage
from pipeline.stages.annotate import AnnotateStage, Labels
from pipeline.stages.classify import ClassifyStage
from pipeline.stages.detect import DetectStage
from pipeline.stages.preprocess import Preprocessor
from pipeline.stages.track import TrackStage

log = logging.getLogger("pipeline.graph")

_STAGE_THREADS = {"detect": 2, "track": 1, "classify": 2, "analytics": 1, "annotate": 1}


class Pipeline:
    def __init__(self, config: Config, output_dir: str | None = None, max_frames: int | None = None,
                 timeline: bool = False):
        self.config = config
        if output_dir:
            config.outputs.dir = os.path.abspath(output_dir)
        self.metrics = Metrics(timeline)
        self.control = RunControl()
        self.max_frames = max_frames
        self.engines: dict[str, Engine] = {}
        self.shared_pool: WorkerPool | None = None
        self.sources: list[VideoSource] = []
        self.sink: SinkStage | None = None
        self.started = False
        self.stages: list[Stage] = []
        stage_threads = sum(_STAGE_THREADS[s.type] for s in config.graph)
        base_threads = thread_count()
        cores = plan_cores(config)
        try:
            # Sessions first: only they tell which provider a model really got, and the
            # thread plan differs between a GPU server and a laptop running the same config.
            self._sessions = {name: create_session(config.models[name], intra_op_threads(config.models[name], cores),
                                                   config.models[name].engine.inter_op_threads)
                              for name in used_models(config)}
            on_gpu = {n for n, s in self._sessions.items() if s.get_providers()[0] in GPU_PROVIDERS}
            self.plan: ThreadPlan = plan_threads(config, stage_threads, base_threads, on_gpu)
            self._build()
        except BaseException:
            self.close()
            raise

    # -- building -------------------------------------------------------------------------
    def _engine(self, name: str) -> Engine:
        if name not in self.engines:
            model = self.config.models[name]
            p = self.plan.engines[name]
            if p.shared and self.shared_pool is None:
                self.shared_pool = WorkerPool("inference", self.plan.shared_workers)
            engine = Engine(model, self.metrics.engines[name], p.intra_op_threads, p.workers,
                            self.shared_pool if p.shared else None, session=self._sessions.pop(name))
            self.engines[name] = engine
            self._warm_up(model, engine)
            engine.stats = self.metrics.engines[name] = EngineStats(provider=engine.stats.provider)  # not the warm-up
            log.info(engine.describe())
        return self.engines[name]

    @staticmethod
    def _warm_up(model: ModelConfig, engine: Engine) -> None:
        """One real batch through the model and its decoder: a wrong layout or output shape
        fails here with the model's name, not on the first camera frame."""
        w, h = model.input_size
        sample = np.zeros((3, h, w), np.float32)
        try:
            chunks = engine.infer([sample])
        except Exception as e:
            raise ModelError(f"models.{model.name}: test inference failed: {str(e).splitlines()[0]}") from None
        if model.layout == "classifier":
            out = chunks[0][1][0]
            if out.ndim < 2 or out.shape[0] < 1:
                raise ModelError(f"models.{model.name}: classifier output shape {list(out.shape)} is not [batch, C]")
            if model.labels and int(np.prod(out.shape[1:])) != len(model.labels):
                raise ModelError(f"models.{model.name}: model has {int(np.prod(out.shape[1:]))} classes but "
                                 f"labels lists {len(model.labels)}")
            return
        try:
            decoder = DetectionDecoder(model)
            for n, outputs in chunks:
                decoder.decode(outputs, n)
        except Exception as e:
            shapes = [list(o.shape) for o in chunks[0][1]]
            raise ModelError(f"models.{model.name}: output {shapes} does not fit layout {model.layout}: {e}") from None

    def _build(self) -> None:
        cfg = self.config
        q = cfg.runtime.queue_size
        detect_cfg = cfg.graph[0]
        detect_model = cfg.models[detect_cfg.options["model"]]
        secondary: list[str] = []
        for sc in cfg.graph:
            if sc.type == "classify":
                secondary = cfg.models[sc.options["model"]].labels
        labels = Labels(detect_model.labels, secondary)
        cameras = [s.id for s in cfg.sources]
        overlays = []
        for sc in cfg.graph:
            if sc.type == "detect":
                if self.stages:
                    raise ConfigError([f"{sc.path}: only the first stage may be a detect stage"])
                stage: Stage = DetectStage("detect", detect_model, self._engine(detect_model.name), self.metrics,
                                           self.control, q)
            elif sc.type == "classify":
                model = cfg.models[sc.options["model"]]
                stage = ClassifyStage(f"classify.{model.name}", model, self._engine(model.name), detect_model.labels,
                                      sc.options, self.metrics, self.control, q)
            elif sc.type == "track":
                stage = TrackStage("track", sc.options, self.metrics, self.control, q)
            elif sc.type == "analytics":
                stage = AnalyticsStage("analytics", sc.options, sc.path, detect_model.labels, cameras, self.metrics,
                                       self.control, q)
                overlays.append(stage.overlay)
            else:
                stage = AnnotateStage("annotate", labels, self.metrics, self.control, q, overlays)
            self.stages.append(stage)
        self.sink = SinkStage(cfg.outputs, cameras, labels, self.metrics, self.control, self.plan.sink_workers, q,
                              live={s.id for s in cfg.sources if s.live})
        for a, b in zip(self.stages, self.stages[1:]):
            a.emit = b.input.put
        self.stages[-1].emit = self.sink.emit
        detect: DetectStage = self.stages[0]  # type: ignore[assignment]
        for s in cfg.sources:
            detect.add_camera(s.id, s.queue.size, s.queue.policy)
            self.sources.append(VideoSource(s, Preprocessor(detect_model), detect.lanes.lane(s.id).put, self.metrics,
                                            self.control, self.max_frames))

    # -- running --------------------------------------------------------------------------
    def start(self) -> None:
        assert self.sink is not None
        log.info(self.plan.describe())
        self.started = True
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
        so files are finalised at once (still playable, possibly shorter)."""
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
        if self.started:
            for source in self.sources:
                source.join(max(0.0, deadline - time.monotonic()))
            assert self.sink is not None
            self.sink.done.wait(max(0.0, deadline - time.monotonic()))
            self.control.abort.set()
            self.sink.join(max(0.0, deadline - time.monotonic()))
            for stage in self.stages:
                stage.join(max(0.0, deadline - time.monotonic()))
        for stage in self.stages:
            stage.close()
        for engine in self.engines.values():
            engine.close()
        if self.shared_pool is not None:
            self.shared_pool.close()
        if self.sink is not None:
            self.sink.close()

    def snapshot(self) -> dict:
        self.metrics.sample_process()
        snap = self.metrics.snapshot()
        snap["thread_plan"] = self.plan.total
        return snap

