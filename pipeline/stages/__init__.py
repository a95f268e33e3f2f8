"""The stages a graph is built from: each stage type's spec (`pipeline.config.stages`)
and the class that runs it (built with `from_spec(spec, BuildContext)`)."""
from __future__ import annotations

from pipeline.config import AnalyticsSpec, AnnotateSpec, ClassifySpec, DetectSpec, StageSpec, TrackSpec
from pipeline.stages.analytics import AnalyticsStage
from pipeline.stages.annotate import AnnotateStage
from pipeline.stages.classify import ClassifyStage
from pipeline.stages.detect import DetectStage
from pipeline.stages.track import TrackStage

STAGES: dict[type[StageSpec], type] = {
    DetectSpec: DetectStage,
    TrackSpec: TrackStage,
    ClassifySpec: ClassifyStage,
    AnalyticsSpec: AnalyticsStage,
    AnnotateSpec: AnnotateStage,
}
