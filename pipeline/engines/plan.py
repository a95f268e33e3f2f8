"""How one engine runs, resolved once from its config and the provider its session really
got (the same config runs on a laptop CPU and a GPU server).

On CPU the inference engines get `workers` single-threaded concurrent runs (one per
core): that beats intra-op parallelism inside one run, which pays a synchronisation
cost per operator. On a GPU one worker per session keeps its CUDA stream busy.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from pipeline.config import Config, ModelConfig
from pipeline.engines.session import ModelError
from pipeline.runtime.threads import ThreadPlan, plan_cores


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
        idle = min(e.idle_intra_op_threads or 0, cores) if not on_gpu else 0
        # One batch more than there are workers: a finishing worker finds the next batch
        # already prepared instead of waiting for the batcher.
        plan = EnginePlan("thread", intra, workers, e.max_inflight or workers + 1, shared, idle if idle > 1 else 0)
    if on_gpu and e.cuda_graph:
        check_cuda_graph(model, plan)
    return plan


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
