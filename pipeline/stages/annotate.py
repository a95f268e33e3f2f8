"""The stage that draws a frame's results on its picture (how: `pipeline.drawing`)."""
from __future__ import annotations

from typing import Iterable

from pipeline.config import AnnotateSpec
from pipeline.drawing import draw
from pipeline.frames import Frame, Item
from pipeline.metrics.registry import Metrics
from pipeline.runtime.stage import InlineStage
from pipeline.stages.build import BuildContext


class AnnotateStage(InlineStage):
    def __init__(self, spec: AnnotateSpec, metrics: Metrics):
        super().__init__(spec.stage_name, metrics)

    @classmethod
    def from_spec(cls, spec: AnnotateSpec, ctx: BuildContext) -> "AnnotateStage":
        return cls(spec, ctx.metrics)

    def process(self, frame: Frame) -> Iterable[Item]:
        draw(frame.image, frame)
        return (frame,)
