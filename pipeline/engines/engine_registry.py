"""The engines of one run: one per model the graph uses, each made (and its batch costs
measured) once, on first use, from the model's opened sessions, and shared by the stages
of that model."""
from __future__ import annotations

import logging

from pipeline.config import Config
from pipeline.engines.batching import BatchPolicy
from pipeline.engines.engine import Engine, describe, describe_costs
from pipeline.engines.model_check import OpenModel
from pipeline.engines.plan import ThreadPlan
from pipeline.engines.pool import WorkerPool
from pipeline.engines.profile import profile, regions_per_run
from pipeline.engines.session import ModelError
from pipeline.errors import one_line
from pipeline.metrics.registry import Metrics

log = logging.getLogger("pipeline.graph")


class EngineRegistry:
    def __init__(self, config: Config, plan: ThreadPlan, models: dict[str, OpenModel], metrics: Metrics):
        self.config = config
        self.plan = plan
        self.metrics = metrics
        self._models = models
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
            opened = self._models.pop(name)
            engine = Engine(model, plan, opened.session, self.metrics.engines[name],
                            self.shared_pool if plan.shared else None, opened.wide, priority)
            self.engines[name] = engine
            try:  # runs of every batch size: ORT allocates its buffers now, not on a camera's first frame
                profile(engine)
            except Exception as e:
                raise ModelError(f"models.{name}: test inference failed: {one_line(e)}") from None
            log.info(describe(engine))
            log.info(describe_costs(engine))
        return self.engines[name]

    def policy(self, name: str) -> BatchPolicy:
        return self(name).policy

    def regions_per_run(self, name: str) -> int:
        """The regions of one frame that cost no more than one run of the model (measured)."""
        return regions_per_run(getattr(self(name), "batch_costs", None) or {})

    def __getitem__(self, name: str) -> Engine:
        return self.engines[name]

    def items(self):
        return self.engines.items()

    def close(self) -> None:
        for engine in self.engines.values():
            engine.close()
        if self.shared_pool is not None:
            self.shared_pool.close()
