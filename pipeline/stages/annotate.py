"""The stage that draws a frame's results on the picture it is shown in (which frames are
shown, and at what size: `sinks.views`; how it is drawn: `pipeline.drawing`). A frame
nobody shows is passed on as it is: it costs nothing here."""
from __future__ import annotations

from typing import Iterable

from pipeline.config import AnnotateSpec
from pipeline.drawing import draw
from pipeline.frames import EndOfStream, Frame, Item
from pipeline.metrics.registry import Metrics
from pipeline.runtime.stage import InlineStage
from pipeline.sinks.views import Views
from pipeline.stages.build import BuildContext


class AnnotateStage(InlineStage):
    def __init__(self, spec: AnnotateSpec, metrics: Metrics, views: Views):
        super().__init__(spec.stage_name, metrics)
        self.views = views

    @classmethod
    def from_spec(cls, spec: AnnotateSpec, ctx: BuildContext) -> "AnnotateStage":
        return cls(spec, ctx.metrics, ctx.views or Views(ctx.config.outputs.video, annotated=True))

    def process(self, frame: Frame) -> Iterable[Item]:
        view = self.views.show(frame)
        if view is not None:
            draw(view.image, frame, view.scale)
        return (frame,)

    def end(self, eos: EndOfStream) -> Iterable[Item]:
        self.views.end(eos.camera)
        return (eos,)
