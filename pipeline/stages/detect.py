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
from pipeline.decoders.merge import merge_regions
from pipeline.engines.batching import BatchPolicy
from pipeline.engines.protocol import Chunks, InferenceEngine
from pipeline.frames import Detections, EndOfStream, Frame, Item, Letterbox
from pipeline.metrics.registry import Metrics
from pipeline.runtime.ingress import Ingress
from pipeline.runtime.stage import RunControl, contain
from pipeline.stages.build import BuildContext
from pipeline.stages.inference import InferenceStage


def _inputs(frame: Frame) -> list[tuple[object, Letterbox]]:
    """The detector's inputs of a frame: each region's, or the whole frame's."""
    if frame.region_inputs:
        return frame.region_inputs
    assert frame.letterbox is not None
    return [(frame.tensor, frame.letterbox)]


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
        """Work-conserving batching: frames for the detector are taken only when the engine
        has room for a batch, then what is waiting. A frame never waits while a worker is
        idle; frames are held back for a fuller batch only while every worker is busy
        anyway, and only up to the engine's target batch (where batching really saves cost
        per item: on a GPU, not on a CPU). Frames the detector does not see (and ends of
        stream) need no room: they pass at once, in their camera's order."""
        ready = lambda: self.engine.wait_ready(timeout=0)  # noqa: E731
        free = lambda item: not isinstance(item, Frame) or not item.runs_detector  # noqa: E731
        while not self.control.abort.is_set():
            items = self.ingress.collect(self.policy.target, self.policy.max_wait_s,
                                         hold=lambda: not self.engine.has_idle_worker(), ready=ready, free=free)
            frames: list[Frame] = []
            for item in items:
                item.order = self._next_order(item.camera)
                if isinstance(item, Frame) and item.runs_detector:
                    item.stamp(f"{self.name}.batched")
                    frames.append(item)
            if frames:
                for f in frames:
                    self.metrics.detector(f.camera, True)
                self.submit([t for f in frames for t, _ in _inputs(f)], frames)
            for item in items:
                if isinstance(item, EndOfStream):
                    self.ingress.remove_camera(item.camera)
                    self._orders.pop(item.camera, None)
                    self.pass_through(item)
                elif not item.runs_detector:
                    self.metrics.detector(item.camera, False, item.plan.reason if item.plan else "")
                    item.stamp(self.name)
                    self.pass_through(item)

    def credit_back(self) -> None:
        self.ingress.wake()  # frames for the detector may be taken again

    def complete(self, frames: list[Frame], result: Chunks | BaseException) -> list[Frame]:
        t0 = time.perf_counter()
        if isinstance(result, BaseException):
            for f in frames:
                self._failed(f, result)
        else:
            decoded: list = []
            for n, outputs in result:
                try:
                    decoded += self.decoder.decode(outputs, n)
                except Exception as e:
                    decoded += [e] * n
            i = 0
            for f in frames:
                inputs = _inputs(f)
                self._finish(f, decoded[i:i + len(inputs)], [box for _, box in inputs])
                i += len(inputs)
        for f in frames:
            f.tensor = f.region_inputs = None  # the model input is no longer needed; free it early
            f.stamp(self.name)
        self.metrics.stage_busy(self.name, time.perf_counter() - t0, len(frames))
        return frames

    def _failed(self, frame: Frame, error: BaseException) -> None:
        contain(self.metrics, self.name, frame, error)
        frame.detections = Detections.empty(self.decoder.names)

    def _finish(self, frame: Frame, decoded: list, boxes: list[Letterbox]) -> None:
        """The frame's detections from those of its inputs (the whole frame, or each region),
        in frame pixels."""
        error = next((d for d in decoded if isinstance(d, Exception)), None)
        if error is not None:
            self._failed(frame, error)
            return
        for det, box in zip(decoded, boxes):
            det.xyxy = box.to_frame(det.xyxy)
        if frame.region_inputs:
            assert frame.plan is not None and frame.plan.regions is not None
            frame.detections = merge_regions(decoded, frame.plan.regions, frame.size, self.model.nms_iou)
        else:
            frame.detections = decoded[0]
        frame.detected = True

    def stop(self) -> None:
        self.ingress.close()
        super().stop()

    def close(self) -> None:
        self.ingress.close()
        super().close()
