"""The engines of one run: a session per model the graph uses, each engine made (and its
batch costs measured) once, on first use, and shared by the stages of that model.

Sessions are opened first because only they tell which provider a model really got: the
thread plan differs between a GPU server and a laptop running the same config.
"""
from __future__ import annotations

import logging

import onnxruntime as ort

from pipeline.config import Config
from pipeline.engines.engine import Engine, describe, describe_costs, open_wide_session
from pipeline.engines.plan import session_threads
from pipeline.engines.pool import WorkerPool
from pipeline.engines.profile import profile
from pipeline.engines.session import GPU_PROVIDERS, ModelError, create_session
from pipeline.errors import one_line
from pipeline.metrics.registry import Metrics
from pipeline.runtime.threads import ThreadPlan, plan_cores

log = logging.getLogger("pipeline.graph")


def open_sessions(config: Config, given: dict[str, ort.InferenceSession]) -> dict[str, ort.InferenceSession]:
    """A session per model the graph uses: those given (opened by the start-up checks), else new."""
    sessions = dict(given)
    cores = plan_cores(config)
    for name in config.used_models():
        if name not in sessions:
            m = config.models[name]
            sessions[name] = create_session(m, session_threads(m, cores), m.engine.inter_op_threads)
    return sessions


def gpu_models(sessions: dict[str, ort.InferenceSession]) -> set[str]:
    return {n for n, s in sessions.items() if s.get_providers()[0] in GPU_PROVIDERS}


class EngineRegistry:
    def __init__(self, config: Config, plan: ThreadPlan, sessions: dict[str, ort.InferenceSession],
                 metrics: Metrics):
        self.config = config
        self.plan = plan
        self.metrics = metrics
        self._sessions = sessions
        self.engines: dict[str, Engine] = {}
        self.shared_pool: WorkerPool | None = None

    def __call__(self, name: str) -> Engine:
        """The engine of a model, made and profiled on first use."""
        if name not in self.engines:
            model, plan = self.config.models[name], self.plan.engines[name]
            if plan.shared and self.shared_pool is None:
                self.shared_pool = WorkerPool("inference", self.plan.shared_workers)
            # a free worker finishes frames under way before it starts new ones: the engine
            # of a later stage goes first
            priority = max(i for i, spec in enumerate(self.config.graph) if getattr(spec, "model", None) == name)
            engine = Engine(model, plan, self._sessions.pop(name), self.metrics.engines[name],
                            self.shared_pool if plan.shared else None, open_wide_session(model, plan), priority)
            self.engines[name] = engine
            try:  # runs of every batch size: ORT allocates its buffers now, not on a camera's first frame
                profile(engine)
            except Exception as e:
                raise ModelError(f"models.{name}: test inference failed: {one_line(e)}") from None
            log.info(describe(engine))
            log.info(describe_costs(engine))
        return self.engines[name]

    def __getitem__(self, name: str) -> Engine:
        return self.engines[name]

    def items(self):
        return self.engines.items()

    def close(self) -> None:
        for engine in self.engines.values():
            engine.close()
        if self.shared_pool is not None:
            self.shared_pool.close()
