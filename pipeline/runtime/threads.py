"""One thread budget for the whole process, planned from the core count and the config.

The seed's pitfall was a worker with over a hundred threads: default-sized pools of
every library stacked on each other. Here every pool is sized explicitly and the plan
is printed at start-up; tests compare the live thread count against `total`.

On CPU the inference engines get `workers` single-threaded concurrent runs (one per
core): measured here, that beats intra-op parallelism inside one run, which pays a
synchronisation cost per operator. On a GPU one worker per session keeps its CUDA
stream busy. OpenCV's own pool is switched off: our parallelism is across cameras.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

import cv2

from pipeline.config import Config, ModelConfig


def visible_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


@dataclass
class EnginePlan:
    intra_op_threads: int
    workers: int
    mode: str
    shared: bool = False  # its workers are the process's shared CPU pool

    def threads(self) -> int:
        """Threads this session adds: its own dispatcher workers plus ORT's intra-op pool
        (the calling thread is one of the intra-op threads, so the pool has intra - 1)."""
        own = 0 if self.shared else self.workers
        return own + (self.intra_op_threads - 1) * (self.workers if self.mode == "thread" else 1)


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
        eng = ", ".join(f"{n}: {e.mode} x{e.workers}{' shared' if e.shared else ''} intra_op={e.intra_op_threads}"
                        for n, e in self.engines.items())
        return (f"thread plan for {self.cores} core(s): {self.cameras} camera thread(s), {self.decode_threads} extra "
                f"decode, {self.stage_threads} stage, {self.sink_workers} sink, {self.encoder_threads} encoder, "
                f"{self.shared_workers} shared inference worker(s); engines [{eng}]; {self.base_threads} already "
                f"running; total <= {self.total}")


def plan_cores(config: Config) -> int:
    return config.runtime.threads or visible_cores()


def used_models(config: Config) -> list[str]:
    return sorted({s.options["model"] for s in config.graph if "model" in s.options})


def intra_op_threads(model: ModelConfig, cores: int) -> int:
    """ORT's intra-op threads for a session: 1 for dispatcher workers (they parallelise
    across runs), at least 2 for `run_async` (ORT refuses 1), or as configured."""
    e = model.engine
    if e.mode == "async":
        return max(2, e.intra_op_threads or cores)
    return e.intra_op_threads or 1


def plan_threads(config: Config, stage_threads: int, base_threads: int, on_gpu: set[str]) -> ThreadPlan:
    """The plan for `config`; `on_gpu` names the models whose session really got a GPU
    provider (the same config runs on a laptop CPU: there its engines plan as CPU ones)."""
    cores = plan_cores(config)
    cv2.setNumThreads(1)
    cameras = len(config.sources)
    decode = sum(max(0, s.thread_count - 1) if s.thread_count != 0 else cores for s in config.sources)
    plan = ThreadPlan(cores=cores, cameras=cameras, decode_threads=decode, stage_threads=stage_threads,
                      sink_workers=max(1, min(cameras, cores // 2)), base_threads=base_threads,
                      encoder_threads=cameras if config.outputs.video.enabled else 0)
    for name in used_models(config):
        m = config.models[name]
        e = m.engine
        mode = "thread" if e.mode == "auto" else e.mode
        gpu = name in on_gpu
        intra = intra_op_threads(m, cores)
        shared = False
        workers = 0
        if mode != "async":
            shared = not gpu and e.workers is None and intra == 1
            workers = e.workers or (1 if gpu else max(1, cores // intra))
        plan.engines[name] = EnginePlan(intra_op_threads=intra, workers=workers, mode=mode, shared=shared)
        if shared:
            plan.shared_workers = max(plan.shared_workers, workers)
    return plan
