"""One thread budget for the whole process, planned from the core count and the config.

The seed's pitfall was a worker with over a hundred threads: default-sized pools of
every library stacked on each other. Here every pool is sized explicitly, each engine's
plan (mode, intra-op threads, workers, batches in flight) is resolved once, here, and
the plan is printed at start-up; tests compare the live thread count against `total`.

On CPU the inference engines get `workers` single-threaded concurrent runs (one per
core): that beats intra-op parallelism inside one run, which pays a synchronisation
cost per operator. On a GPU one worker per session keeps its CUDA stream busy. OpenCV's
own pool is switched off: our parallelism is across cameras.
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field, replace

import cv2

from pipeline.config import Config, ModelConfig

log = logging.getLogger("pipeline.threads")


def visible_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def plan_cores(config: Config) -> int:
    """The cores the plan may use: `runtime.threads`, at most the visible cores."""
    cores = visible_cores()
    wanted = config.runtime.threads
    if wanted and wanted > cores:
        log.warning("runtime.threads: %d asked for, %d core(s) visible: planning for %d", wanted, cores, cores)
    return min(wanted or cores, cores)


@dataclass(frozen=True)
class EnginePlan:
    """How one engine runs, resolved once from its config and the provider it really got."""

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


def session_threads(model: ModelConfig, cores: int) -> int:
    """ORT's intra-op threads for a model's session: 1 for dispatcher workers (they
    parallelise across runs), at least 2 for `run_async` (ORT refuses 1), or as configured."""
    e = model.engine
    if e.mode == "async":
        return max(2, e.intra_op_threads or cores)
    return e.intra_op_threads or 1


def plan_engine(model: ModelConfig, cores: int, on_gpu: bool, shared_pool: bool = True) -> EnginePlan:
    """The plan for one model; `on_gpu` says whether its session really got a GPU provider
    (the same config runs on a laptop CPU: there its engine plans as a CPU one)."""
    e = model.engine
    intra = session_threads(model, cores)
    if e.mode == "async":
        return EnginePlan("async", intra, 0, e.max_inflight or 2)
    shared = shared_pool and not on_gpu and e.workers is None and intra == 1
    workers = e.workers or (1 if on_gpu else max(1, cores // intra))
    idle = min(e.idle_intra_op_threads or 0, cores) if not on_gpu else 0
    # One batch more than there are workers: a finishing worker finds the next batch
    # already prepared instead of waiting for the batcher.
    return EnginePlan("thread", intra, workers, e.max_inflight or workers + 1, shared, idle if idle > 1 else 0)


@dataclass(frozen=True)
class Capacity:
    """What the run may use for work that grows with the cameras, decided here only: the
    sink grows its workers as cameras come (configured at start or added while running)."""

    cores: int

    def sink_workers(self, cameras: int) -> int:
        """Encoding workers for this many cameras: one per camera up to half the cores
        (inference needs the rest)."""
        return max(1, min(cameras, self.cores // 2))


@dataclass
class ThreadPlan:
    cores: int
    cameras: int
    decode_threads: int
    engines: dict[str, EnginePlan] = field(default_factory=dict)
    stage_threads: int = 0
    sink_workers: int = 1
    encoder_threads: int = 0
    base_threads: int = 1
    shared_workers: int = 0

    @property
    def total(self) -> int:
        return (self.base_threads + self.cameras + self.decode_threads + self.stage_threads + self.sink_workers
                + self.encoder_threads + self.shared_workers + sum(e.threads() for e in self.engines.values()))

    def describe(self) -> str:
        eng = ", ".join(f"{n}: {e.mode} x{e.workers}{' shared' if e.shared else ''} intra_op={e.intra_op_threads} "
                        f"inflight={e.max_inflight}" for n, e in self.engines.items())
        return (f"thread plan for {self.cores} core(s): {self.cameras} camera thread(s), {self.decode_threads} extra "
                f"decode, {self.stage_threads} stage, {self.sink_workers} sink, {self.encoder_threads} encoder, "
                f"{self.shared_workers} shared inference worker(s); engines [{eng}]; {self.base_threads} already "
                f"running; total <= {self.total}")


def plan_threads(config: Config, base_threads: int, on_gpu: set[str]) -> ThreadPlan:
    """The plan for `config`; `on_gpu` names the models whose session really got a GPU provider."""
    cores = plan_cores(config)
    cv2.setNumThreads(1)
    cameras = len(config.sources)
    decode = sum(max(0, s.thread_count - 1) if s.thread_count != 0 else cores for s in config.sources)
    plan = ThreadPlan(cores=cores, cameras=cameras, decode_threads=decode,
                      stage_threads=sum(s.threads for s in config.graph),
                      sink_workers=Capacity(cores).sink_workers(cameras), base_threads=base_threads,
                      encoder_threads=cameras if config.outputs.video.enabled else 0)
    for name in config.used_models():
        p = plan_engine(config.models[name], cores, name in on_gpu)
        plan.engines[name] = p
        if p.shared:
            plan.shared_workers = max(plan.shared_workers, p.workers)
    return plan
