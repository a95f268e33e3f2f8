"""The detector stage: dynamic batching across cameras, asynchronous inference, decode + NMS.

Two threads and no waiting on inference:
- the batcher waits until the engine can take a batch, then forms it from the ingress's
  per-camera lanes, oldest frame first: at once when a worker is idle, else (every worker
  busy) up to the policy's target batch or `max_wait_ms`; it stamps each frame's gap-free
  `order` and submits;
- the completion thread decodes each finished batch (layout decode, score filter,
  class-aware NMS, boxes back to frame pixels) and releases frames per camera in order.
Preprocessing itself runs in each camera's source thread (see `sources.framing`).
"""
from __future__ import annotations

import time

from pipeline.config import DetectSpec, ModelConfig
from pipeline.decoders.layouts import DetectionDecoder
from pipeline.engines.batching import BatchPolicy
from pipeline.engines.protocol import Chunks, InferenceEngine
from pipeline.frames import Detections, EndOfStream, Frame, Item
from pipeline.metrics.registry import Metrics
from pipeline.runtime.ingress import Ingress
from pipeline.runtime.stage import RunControl, contain
from pipeline.stages.build import BuildContext
from pipeline.stages.inference import InferenceStage


class DetectStage(InferenceStage):
    """Fed by the ingress (the cameras' lanes), which the graph builds in front of it."""

    def __init__(self, name: str, model: ModelConfig, engine: InferenceEngine, policy: BatchPolicy,
                 metrics: Metrics, control: RunControl, ingress: Ingress):
        super().__init__(name, engine, policy, metrics, control, pass_through_room=4)
        self.model = model
        self.decoder = DetectionDecoder(model)
        self.ingress = ingress
        self._orders: dict[str, int] = {}
        engine.on_free(self.ingress.wake)

    @classmethod
    def from_spec(cls, spec: DetectSpec, ctx: BuildContext) -> "DetectStage":
        assert ctx.ingress is not None
        return cls(spec.stage_name, ctx.config.models[spec.model], ctx.engines(spec.model),
                   ctx.engines.policy(spec.model), ctx.metrics, ctx.control, ctx.ingress)

    def accept(self, item: Item) -> None:
        self.ingress.put(item)

    def _next_order(self, camera: str) -> int:
        n = self._orders.get(camera, 0)
        self._orders[camera] = n + 1
        return n

    def feed_loop(self) -> None:
        """Work-conserving batching: wait for room in the engine first, then take what is
        waiting. A frame never waits while a worker is idle; frames are held back for a
        fuller batch only while every worker is busy anyway, and only up to the engine's
        target batch (where batching really saves cost per item: on a GPU, not on a CPU)."""
        while not self.control.abort.is_set():
            if not self.engine.wait_ready(timeout=0.2):
                continue
            items = self.ingress.collect(self.policy.target, self.policy.max_wait_s,
                                         hold=lambda: not self.engine.has_idle_worker())
            frames: list[Frame] = []
            for item in items:
                item.order = self._next_order(item.camera)
                if isinstance(item, Frame):
                    item.stamp(f"{self.name}.batched")
                    frames.append(item)
            if frames:
                self.submit([f.tensor for f in frames], frames)
            for item in items:
                if isinstance(item, EndOfStream):
                    self.ingress.remove_camera(item.camera)
                    self._orders.pop(item.camera, None)
                    self.pass_through(item)

    def complete(self, frames: list[Frame], result: Chunks | BaseException) -> list[Frame]:
        t0 = time.perf_counter()
        if isinstance(result, BaseException):
            for f in frames:
                contain(self.metrics, self.name, f, result)
                f.detections = Detections.empty(self.decoder.names)
        else:
            i = 0
            for n, outputs in result:
                try:
                    decoded: list = self.decoder.decode(outputs, n)
                except Exception as e:
                    decoded = [e] * n
                for det in decoded:
                    f = frames[i]
                    i += 1
                    if isinstance(det, Exception):
                        contain(self.metrics, self.name, f, det)
                        f.detections = Detections.empty(self.decoder.names)
                        continue
                    assert f.letterbox is not None
                    det.xyxy = f.letterbox.to_frame(det.xyxy)
                    f.detections = det
        for f in frames:
            f.tensor = None  # the model input is no longer needed; free it early
            f.stamp(self.name)
        self.metrics.stage_busy(self.name, time.perf_counter() - t0, len(frames))
        return frames

    def stop(self) -> None:
        self.ingress.close()
        super().stop()

    def close(self) -> None:
        self.ingress.close()
        super().close()
