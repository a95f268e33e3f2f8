"""The secondary classifier: crops of selected detections, batched across frames and cameras.

A frame with nothing to classify passes straight through; a frame with crops waits only
for its own crops (its pending count drops to zero in the completion thread). Crops of
many frames and cameras share batches (`max_batch` / `max_wait_ms` of the classifier
model), the classifier engine runs them asynchronously, and frames leave in per-camera
order. With a tracker upstream, `per_track` classifies a track when it appears and again
only every `reclassify_interval` frames or when its box grows by `regrow` (area ratio);
labels are smoothed per track by accumulated score.
"""
from __future__ import annotations

import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field

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


FORGET_AFTER = 300  # updates of its camera after which a vanished track's label state is dropped
FORGET_CHECK_EVERY = 30  # updates of a camera between two looks for vanished tracks


@dataclass
class _Pending:
    frame: Frame
    remaining: int


@dataclass
class _TrackLabel:
    """Score-weighted vote of one track's classifications."""

    votes: dict[int, float] = field(default_factory=lambda: defaultdict(float))
    last_seq: int = -10**9
    last_area: float = 0.0
    seen: int = 0  # the camera's update the track was last on
    inflight: int = 0  # crops of this track submitted and not yet labelled
    waiting: list[tuple[_Pending, int]] = field(default_factory=list)  # rows waiting for those

    def best(self) -> tuple[int, float]:
        cls = max(self.votes, key=self.votes.__getitem__)
        return cls, self.votes[cls] / sum(self.votes.values())


@dataclass
class _CameraTracks:
    """One camera's per-track label state.

    Time is counted in updates (the frames of this camera that reach the stage), the
    tracker's unit: with `stride` or `max_fps` a camera's `seq` advances by several frames
    per update, so a window or a cadence in `seq` would be checked on only some frames,
    or never, and a camera that runs for months would keep every track it ever saw.
    """

    tracks: dict[int, _TrackLabel] = field(default_factory=dict)
    updates: int = 0


def forget_stale(tracks: dict[int, _TrackLabel], update: int) -> None:
    """Drop the labels of tracks gone for a while (a live camera runs for months), unless
    a crop of theirs is still in flight."""
    for tid in [t for t, st in tracks.items()
                if update - st.seen > FORGET_AFTER and not st.inflight and not st.waiting]:
        del tracks[tid]


class ClassifyStage(InferenceStage):
    def __init__(self, spec: ClassifySpec, model: ModelConfig, engine: InferenceEngine, policy: BatchPolicy,
                 detector: ClassNames, metrics: Metrics, control: RunControl, queue_size: int):
        super().__init__(spec.stage_name, engine, policy, metrics, control, pass_through_room=8)
        self.input: BoundedQueue[Item] = BoundedQueue(self.name, queue_size, "block")
        metrics.queues[self.name] = self.input
        self.model = model
        self.names = ClassNames(model.labels)
        self.crops = CropPolicy.from_spec(spec, detector)
        self.per_track = spec.per_track
        self.reclassify_interval = spec.reclassify_interval
        self.regrow = spec.regrow
        self.preprocess = Preprocessor(model)
        self._inputs: list = []  # crops preprocessed for the next batch
        self._refs: list[tuple[_Pending, int, _TrackLabel | None]] = []  # (frame, row, its track's label)
        self._first_crop_at = 0.0
        self._cameras: dict[str, _CameraTracks] = defaultdict(_CameraTracks)
        self._lock = threading.Lock()
        self.counters = metrics.stages[self.name].counters
        engine.on_free(self._worker_freed)

    @classmethod
    def from_spec(cls, spec: ClassifySpec, ctx: BuildContext) -> "ClassifyStage":
        engine = ctx.engine(spec.model)
        return cls(spec, ctx.config.models[spec.model], engine, engine.policy, ctx.detector_names, ctx.metrics,
                   ctx.control, ctx.queue_size)

    def accept(self, item: Item) -> None:
        self.input.put(item)

    def stop(self) -> None:
        self.input.close()
        super().stop()

    # -- input side ---------------------------------------------------------------------
    def _worker_freed(self) -> None:
        self.input.wake()

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
                self._cameras.pop(item.camera, None)
                self.pass_through(item)
                continue
            self._take(item)
            if self._batch_due():
                self._flush()

    def _take(self, frame: Frame) -> None:
        t0 = time.perf_counter()
        frame.stamps[self.name] = t0
        pending = _Pending(frame, 1)  # the 1 is this method's hold: released at the end
        if self.per_track:
            self._count_update(frame.camera)
        try:
            det = frame.detections
            rows = self.crops.rows(det)
            chosen: list[tuple[int, _TrackLabel | None]] = []
            if len(rows):
                assert det is not None
                det.attribute(self.name, self.names)
                chosen = self._rows_to_classify(frame, rows, pending)
            for r, state in chosen:
                assert det is not None
                try:
                    tensor, _ = self.preprocess(self.crops.crop(frame.image, det.xyxy[r]))
                except Exception as e:  # this crop only: the frame's other rows go on
                    contain(self.metrics, self.name, frame, e)
                    continue
                with self._lock:
                    pending.remaining += 1
                    if state is not None:
                        state.inflight += 1
                if not self._inputs:
                    self._first_crop_at = time.perf_counter()
                self._inputs.append(tensor)
                self._refs.append((pending, r, state))
                if len(self._inputs) >= self.policy.target:
                    self._flush()
        except Exception as e:
            contain(self.metrics, self.name, frame, e)
        if self._release(pending):
            self.pass_through(frame)
        self.metrics.stage_busy(self.name, time.perf_counter() - t0)

    def _count_update(self, camera: str) -> None:
        """One more update of the camera; every `FORGET_CHECK_EVERY`, its vanished tracks
        are forgotten, whether or not this frame has anything to classify."""
        cam = self._cameras[camera]
        cam.updates += 1
        if cam.updates % FORGET_CHECK_EVERY == 0:
            with self._lock:
                forget_stale(cam.tracks, cam.updates)

    def _release(self, pending: _Pending) -> bool:
        """One awaited label (or the hold) is done; True when the frame has all it waits for."""
        with self._lock:
            pending.remaining -= 1
            return pending.remaining == 0

    def _rows_to_classify(self, frame: Frame, rows: np.ndarray,
                          pending: _Pending) -> list[tuple[int, _TrackLabel | None]]:
        """The rows to crop, each with its track's label state. With per-track
        classification: only rows of confirmed tracks that are new, whose label is stale or
        whose box grew; the others get their track's smoothed label at once or, while the
        track's first classification is in flight, wait for it. Tentative rows (no track id
        yet) wait for their track to be confirmed."""
        det = frame.detections
        if not self.per_track or det is None or det.track_id is None:
            return [(int(r), None) for r in rows]
        cam = self._cameras[frame.camera]
        attr = det.attributes[self.name]
        chosen = []
        for r in rows:
            tid = int(det.track_id[r])
            if tid < 0:
                continue
            x1, y1, x2, y2 = det.xyxy[r]
            area = float((x2 - x1) * (y2 - y1))
            with self._lock:
                state = cam.tracks.setdefault(tid, _TrackLabel())
                state.seen = cam.updates
                due = ((not state.votes and not state.inflight) or frame.seq - state.last_seq >= self.reclassify_interval
                       or area > self.regrow * max(state.last_area, 1.0))
                if due:
                    state.last_seq, state.last_area = frame.seq, area
                    chosen.append((int(r), state))
                    continue
                if state.votes:
                    attr.class_id[r], attr.score[r] = state.best()
                else:  # its first classification is in flight: this row gets that label too
                    state.waiting.append((pending, int(r)))
                    pending.remaining += 1
                self.counters["calls_saved"] += 1
        return chosen

    def _flush(self) -> None:
        if not self._inputs:
            return
        crops, refs = self._inputs, self._refs
        self._inputs, self._refs = [], []
        self.submit(crops, refs)

    # -- completion side ----------------------------------------------------------------
    def complete(self, refs: list[tuple[_Pending, int, _TrackLabel | None]],
                 result: Chunks | BaseException) -> list[Item]:
        t0 = time.perf_counter()
        if isinstance(result, BaseException):
            for pending, _, _ in {id(p): (p, 0, None) for p, _, _ in refs}.values():
                contain(self.metrics, self.name, pending.frame, result)
            ids = np.full((len(refs),), -1, np.int64)
            scores = np.zeros((len(refs),), np.float32)
        else:
            parts = [classify(outputs[0][:n], self.model.softmax) for n, outputs in result]
            ids = np.concatenate([p[0] for p in parts])
            scores = np.concatenate([p[1] for p in parts])
        ready = []
        for (pending, row, state), cls, score in zip(refs, ids, scores):
            labelled = [(pending, row)]
            if state is not None:
                with self._lock:
                    state.inflight -= 1
                    if cls >= 0:
                        state.votes[int(cls)] += float(score)
                    if state.votes:
                        cls, score = state.best()
                    labelled += state.waiting  # released even when this classification failed
                    state.waiting = []
            for p, r in labelled:
                det = p.frame.detections
                assert det is not None
                attr: Attribute = det.attributes[self.name]
                attr.class_id[r], attr.score[r] = cls, score
                if self._release(p):
                    p.frame.stamp(f"{self.name}.done")
                    ready.append(p.frame)
        self.metrics.stage_busy(f"{self.name}.attach", time.perf_counter() - t0, len(refs))
        return ready
