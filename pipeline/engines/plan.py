"""The process's thread plan, in one place: how each engine runs (resolved once from its
config and the provider its session really got: the same config runs on a laptop CPU and
a GPU server), and every thread of the process sized with it.

The seed's pitfall was a worker with over a hundred threads: default-sized pools of
every library stacked on each other. Here every pool is sized explicitly: ORT's pools by
each engine's plan, what grows with the cameras by `runtime.threads.Capacity`; every
other thread the run starts is counted (a camera's recording threads, the side outputs'
as they start); the plan is printed at start-up, and tests compare the live thread count
against `total`.

On CPU the inference engines get `workers` single-threaded concurrent runs (one per
core): that beats intra-op parallelism inside one run, which pays a synchronisation
cost per operator. On a GPU one worker per session keeps its CUDA stream busy.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace

from pipeline.config import Config, ModelConfig
from pipeline.engines.session import ModelError
from pipeline.config.limits import visible_cores
from pipeline.runtime.threads import Capacity

log = logging.getLogger("pipeline.threads")


@dataclass(frozen=True)
class EnginePlan:
    mode: str               # "thread" (dispatcher workers) or "async" (run_async)
    intra_op_threads: int   # ORT intra-op threads per run
    workers: int            # dispatcher threads (0 in async mode)
    max_inflight: int       # batches submitted and not yet consumed
    shared: bool = False    # its workers are the process's shared CPU pool
    idle_intra_op_threads: int = 0  # >1: a second session for lone batches while nothing else runs

    def threads(self) -> int:
        """Threads this session adds: its own dispatcher workers plus ORT's intra-op pools
        (the calling thread is one of the intra-op threads, so a pool has intra - 1)."""
        own = 0 if self.shared else self.workers
        wide = max(0, self.idle_intra_op_threads - 1)
        return own + (self.intra_op_threads - 1) * (self.workers if self.mode == "thread" else 1) + wide

    def with_workers(self, workers: int) -> "EnginePlan":
        return replace(self, workers=workers, max_inflight=workers + 1, shared=False)

    def describe(self) -> str:
        return (f"{self.mode} x{self.workers}{' shared' if self.shared else ''} intra_op={self.intra_op_threads} "
                f"inflight={self.max_inflight}")


def session_threads(model: ModelConfig, cores: int) -> int:
    """ORT's intra-op threads for a model's session: 1 for dispatcher workers (they
    parallelise across runs), at least 2 for `run_async` (ORT refuses 1), or as configured."""
    e = model.engine
    if e.mode == "async":
        return max(2, e.intra_op_threads or cores)
    return e.intra_op_threads or 1


def wide_threads(model: ModelConfig, cores: int, on_gpu: bool) -> int:
    """Intra-op threads of the second session that takes a lone batch while nothing else
    runs (`idle_intra_op_threads`; CPU dispatcher workers only); 0: none."""
    if on_gpu or model.engine.mode == "async":
        return 0
    idle = min(model.engine.idle_intra_op_threads or 0, cores)
    return idle if idle > 1 else 0


def check_cuda_graph(model: ModelConfig, plan: EnginePlan) -> None:
    """A captured CUDA graph replays fixed buffer addresses on the thread that captured it:
    it needs IOBinding, dispatcher threads, and one worker per session."""
    wrong = []
    if not model.engine.io_binding:
        wrong.append("io_binding: true")
    if plan.mode != "thread":
        wrong.append("mode: thread")
    if plan.workers != 1:
        wrong.append(f"workers: 1 (planned {plan.workers})")
    if wrong:
        raise ModelError(f"models.{model.name}.engine.cuda_graph: needs {', '.join(wrong)}")


def plan_engine(model: ModelConfig, cores: int, on_gpu: bool, shared_pool: bool = True) -> EnginePlan:
    """The plan for one model; `on_gpu` says whether its session really got a GPU provider."""
    e = model.engine
    intra = session_threads(model, cores)
    if e.mode == "async":
        plan = EnginePlan("async", intra, 0, e.max_inflight or 2)
    else:
        shared = shared_pool and not on_gpu and e.workers is None and intra == 1
        workers = e.workers or (1 if on_gpu else max(1, cores // intra))
        # One batch more than there are workers: a finishing worker finds the next batch
        # already prepared instead of waiting for the batcher.
        plan = EnginePlan("thread", intra, workers, e.max_inflight or workers + 1, shared,
                          wide_threads(model, cores, on_gpu))
    if on_gpu and e.cuda_graph:
        check_cuda_graph(model, plan)
    return plan


def plan_cores(config: Config) -> int:
    """The cores the plan may use: `runtime.threads`, at most the visible cores."""
    cores = visible_cores()
    wanted = config.runtime.threads
    if wanted and wanted > cores:
        log.warning("runtime.threads: %d asked for, %d core(s) visible: planning for %d", wanted, cores, cores)
    return min(wanted or cores, cores)


@dataclass
class ThreadPlan:
    """Threads of the whole process: fixed ones (stages, engines, the side outputs) and
    those that come with each camera (its reader, its decoder's extra threads, its
    encoder, its recording's writer and main-stream reader, sink workers). The live view
    is a fixed few among the side outputs' (its loop and its pool), whatever its connections."""

    cores: int
    base_threads: int                    # already running when the plan was made
    stage_threads: int = 0
    shared_workers: int = 0              # the shared CPU inference pool
    engines: dict[str, EnginePlan] = field(default_factory=dict)
    decode_threads: int = 0              # extra FFmpeg threads of the cameras so far
    encoders: bool = True                # one encoder thread per camera
    cameras: int = 0
    recorders: int = 0                   # a writer per recorded camera
    main_streams: int = 0                # a reader per main stream read apart from its sub-stream
    side_threads: int = 0                # event destinations and their clients, snapshots, retention, live view

    def add_camera(self, decoder_threads: int, recorded: bool = False, main_stream: bool = False) -> None:
        """A camera joins: its thread, its decoder's extra threads, its encoder, and where
        it is recorded its recording's writer and (`main_stream`) the reader of its main stream."""
        self.cameras += 1
        self.decode_threads += max(0, decoder_threads - 1) if decoder_threads != 0 else self.cores
        self.recorders += recorded
        self.main_streams += recorded and main_stream

    @property
    def total(self) -> int:
        per_camera = self.cameras * (2 if self.encoders else 1) + self.decode_threads + self.recorders \
            + self.main_streams
        return (self.base_threads + self.stage_threads + self.shared_workers + per_camera + self.side_threads
                + Capacity(self.cores).sink_workers(self.cameras) + sum(e.threads() for e in self.engines.values()))

    def describe(self) -> str:
        engines = ", ".join(f"{n}: {e.describe()}" for n, e in self.engines.items())
        return (f"thread plan for {self.cores} core(s): {self.cameras} camera thread(s), {self.decode_threads} extra "
                f"decode, {self.stage_threads} stage, {Capacity(self.cores).sink_workers(self.cameras)} sink, "
                f"{self.cameras if self.encoders else 0} encoder, {self.recorders} recording writer(s), "
                f"{self.main_streams} main-stream reader(s), {self.side_threads} side-output, "
                f"{self.shared_workers} shared inference worker(s); engines [{engines}]; {self.base_threads} already "
                f"running; total <= {self.total}")


def plan_threads(config: Config, base_threads: int, on_gpu: set[str]) -> ThreadPlan:
    """The process's thread plan before any camera joins; `on_gpu` names the models whose
    session really got a GPU provider."""
    plan = ThreadPlan(cores=plan_cores(config), base_threads=base_threads,
                      stage_threads=sum(s.threads for s in config.graph), encoders=config.outputs.video.enabled)
    for name in config.used_models():
        p = plan_engine(config.models[name], plan.cores, name in on_gpu)
        plan.engines[name] = p
        if p.shared:
            plan.shared_workers = max(plan.shared_workers, p.workers)
    return plan
