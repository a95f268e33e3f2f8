"""The secondary classifier: crops of selected detections, batched across frames and cameras.

A frame with nothing to classify passes straight through; a frame with crops waits only
for its own labels (its pending count drops to zero in the completion thread). Crops of
many frames and cameras share batches (`max_batch` / `max_wait_ms` of the classifier
model), the classifier engine runs them asynchronously, and frames leave in per-camera
order. With a tracker upstream, `per_track` classifies a track only now and then and
labels its other rows from its smoothed votes (`track_labels`).
"""
from __future__ import annotations

import time

import numpy as np

from pipeline.config import ClassifySpec, ModelConfig
from pipeline.decoders.layouts import classify
from pipeline.engines.batching import BatchPolicy
from pipeline.engines.protocol import Chunks, InferenceEngine
from pipeline.frames import Attribute, ClassNames, EndOfStream, Frame, Item
from pipeline.metrics.registry import Metrics
from pipeline.preprocess import Preprocessor
from pipeline.runtime.queues import BoundedQueue
from pipeline.runtime.stage import RunControl, contain
from pipeline.stages.build import BuildContext
from pipeline.stages.crops import CropPolicy
from pipeline.stages.inference import InferenceStage
from pipeline.stages.track_labels import Labelled, PendingFrame, TrackLabel, TrackLabels


Ref = tuple[PendingFrame, int, "TrackLabel | None", int]  # (frame, row, its track's labels, submission number)


class ClassifyStage(InferenceStage):
    def __init__(self, spec: ClassifySpec, model: ModelConfig, engine: InferenceEngine, policy: BatchPolicy,
                 detector: ClassNames, metrics: Metrics, control: RunControl, queue_size: int):
        super().__init__(spec.stage_name, engine, policy, metrics, control, pass_through_room=8)
        self.input: BoundedQueue[Item] = BoundedQueue(self.name, queue_size, "block")
        metrics.queues[self.name] = self.input
        self.model = model
        self.names = ClassNames(model.labels)
        self.crops = CropPolicy.from_spec(spec, detector)
        self.preprocess = Preprocessor(model)
        self._inputs: list = []  # crops preprocessed for the next batch
        self._refs: list[Ref] = []
        self._first_crop_at = 0.0
        self.labels = TrackLabels(spec, metrics.stages[self.name].counters) if spec.per_track else None
        engine.on_free(self.input.wake)

    @classmethod
    def from_spec(cls, spec: ClassifySpec, ctx: BuildContext) -> "ClassifyStage":
        return cls(spec, ctx.config.models[spec.model], ctx.engines(spec.model), ctx.engines.policy(spec.model),
                   ctx.detector_names, ctx.metrics, ctx.control, ctx.queue_size)

    def accept(self, item: Item) -> None:
        self.input.put(item)

    def stop(self) -> None:
        self.input.close()
        super().stop()

    # -- input side ---------------------------------------------------------------------
    def _batch_due(self) -> bool:
        return self.policy.due(len(self._inputs), self.engine.has_idle_worker())

    def feed_loop(self) -> None:
        """Crops of many frames form a batch only while every worker is busy anyway (and at
        most `max_wait_ms`): the same work-conserving rule as the detector's batcher."""
        wait_s = self.policy.max_wait_s
        while not self.control.abort.is_set():
            timeout = 0.2
            if self._inputs:
                timeout = max(0.0, self._first_crop_at + wait_s - time.perf_counter())
            item = self.input.get(timeout=timeout)
            if item is None:
                if self._inputs and (self._batch_due() or time.perf_counter() >= self._first_crop_at + wait_s):
                    self._flush()
                continue
            if isinstance(item, EndOfStream):
                self._flush()
                if self.labels is not None:
                    self.labels.end(item.camera)
                self.pass_through(item)
                continue
            self._take(item)
            if self._batch_due():
                self._flush()

    def _take(self, frame: Frame) -> None:
        t0 = time.perf_counter()
        frame.stamps[self.name] = t0
        pending = PendingFrame(frame)  # held until the end of this method
        if self.labels is not None:
            self.labels.update(frame.camera)
        try:
            det = frame.detections
            rows = self.crops.rows(det)
            if len(rows):
                assert det is not None
                det.attribute(self.name, self.names)
                for r, state, number in self._rows_to_classify(frame, rows, pending):
                    self._crop(pending, r, state, number)
        except Exception as e:
            contain(self.metrics, self.name, frame, e)
        if pending.done():
            self.pass_through(frame)
        self.metrics.stage_busy(self.name, time.perf_counter() - t0)

    def _rows_to_classify(self, frame: Frame, rows: np.ndarray,
                          pending: PendingFrame) -> list[tuple[int, TrackLabel | None, int]]:
        """Every row, or with per-track classification the rows due (the others are
        labelled from their track's votes now, or once those are back)."""
        det = frame.detections
        if self.labels is None or det is None or det.track_id is None:
            fresh = rows if det is None or det.predicted is None else rows[~det.predicted[rows]]
            return [(int(r), None, 0) for r in fresh]  # a predicted box is no new sight of its object
        chosen, labelled = self.labels.choose(frame, rows, pending)
        self._attach(labelled)
        return chosen

    def _crop(self, pending: PendingFrame, row: int, state: TrackLabel | None, number: int) -> None:
        frame, det = pending.frame, pending.frame.detections
        assert det is not None
        pending.more()
        try:
            tensor, _ = self.preprocess(self.crops.crop(frame.image, det.xyxy[row]))
        except Exception as e:  # this crop only: the frame's other rows go on
            contain(self.metrics, self.name, frame, e)
            self._attach(self._labelled(pending, row, state, number, -1, 0.0))
            return
        if not self._inputs:
            self._first_crop_at = time.perf_counter()
        self._inputs.append(tensor)
        self._refs.append((pending, row, state, number))
        if len(self._inputs) >= self.policy.target:
            self._flush()

    def _labelled(self, pending: PendingFrame, row: int, state: TrackLabel | None, number: int, cls: int,
                  score: float) -> Labelled:
        """The rows labelled now that this crop's classification is back."""
        if state is None or self.labels is None:
            return [(pending, row, cls, score)]
        return self.labels.back(state, number, pending, row, cls, score)

    def _attach(self, labelled: Labelled) -> list[Frame]:
        """Labels into their rows; the frames that now have every label they wait for."""
        ready = []
        for waiter, row, cls, score in labelled:
            det = waiter.frame.detections
            assert det is not None
            attr: Attribute = det.attributes[self.name]
            attr.class_id[row], attr.score[row] = cls, score
            if waiter.done():
                ready.append(waiter.frame)
        return ready

    def _flush(self) -> None:
        if not self._inputs:
            return
        crops, refs = self._inputs, self._refs
        self._inputs, self._refs = [], []
        self.submit(crops, refs)

    # -- completion side ----------------------------------------------------------------
    def complete(self, refs: list[Ref], result: Chunks | BaseException) -> list[Item]:
        t0 = time.perf_counter()
        if isinstance(result, BaseException):
            for pending in {id(p): p for p, _, _, _ in refs}.values():
                contain(self.metrics, self.name, pending.frame, result)
            ids = np.full((len(refs),), -1, np.int64)
            scores = np.zeros((len(refs),), np.float32)
        else:
            parts = [classify(outputs[0][:n], self.model.softmax) for n, outputs in result]
            ids = np.concatenate([p[0] for p in parts])
            scores = np.concatenate([p[1] for p in parts])
        ready: list[Item] = []
        for (pending, row, state, number), cls, score in zip(refs, ids, scores):
            for frame in self._attach(self._labelled(pending, row, state, number, int(cls), float(score))):
                frame.stamp(f"{self.name}.done")
                ready.append(frame)
        self.metrics.stage_busy(f"{self.name}.attach", time.perf_counter() - t0, len(refs))
        return ready
