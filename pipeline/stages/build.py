"""What a stage is built from besides its spec: the run's config, metrics and control,
the engines (one per model, created once and shared by the stages that use it), the
ingress the first stage is fed by, and the frames' views (`sinks.views`)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from pipeline.config import Config
from pipeline.engines.batching import BatchPolicy
from pipeline.engines.protocol import InferenceEngine
from pipeline.frames import ClassNames
from pipeline.metrics.registry import Metrics
from pipeline.runtime.ingress import Ingress
from pipeline.runtime.stage import RunControl
from pipeline.runtime.track_feedback import TrackFeedbacks
from pipeline.sinks.views import Views


class Engines(Protocol):
    """The run's engines (`engines.engine_registry.EngineRegistry`), by model name."""

    def __call__(self, model: str) -> InferenceEngine: ...

    def policy(self, model: str) -> BatchPolicy:
        """The batch rule of the model's engine (its preferred batch is measured)."""
        ...


@dataclass
class BuildContext:
    config: Config
    metrics: Metrics
    control: RunControl
    engines: Engines
    ingress: Ingress | None = None   # the cameras' lanes, which feed the first stage
    views: Views | None = None       # which frames are shown, and their pictures (the annotate stage draws on them)
    feedbacks: TrackFeedbacks | None = None  # the cameras' tracks for their gates

    @property
    def queue_size(self) -> int:
        return self.config.runtime.queue_size

    @property
    def detector_names(self) -> ClassNames:
        return ClassNames(self.config.detector.labels)
