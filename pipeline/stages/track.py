"""The track stage: a tracker per camera (`stages.bytetrack`), on every frame.

A frame the detector ran on updates the tracker; any other frame (left out by
`detect.fps` or the motion gate, or whose run failed) gets the tracker's confirmed tracks
as predicted rows (`Detections.predicted`), moved on along their motion and aged by
nothing. A run on regions (`detect.regions`) looks only at them: a confirmed track it did
not cover is held (not matched, not aged) and shown as predicted beside the run's own rows,
so the objects of a frame are never fewer than the tracks that stood there.

An object whose detected box has stayed where it stopped (overlapping it by `STILL_IOU`)
for `stationary_s` of the camera's time is stationary: its box stays put, its rows say so
(zones count it apart, the gate does not run the detector for it), and it is re-detected
only when a run covers it (motion touching it, or a refresh). After every frame the
camera's tracks go back to its detector's gate (`runtime.track_feedback`); there a track
moves until its box has stayed put for `SETTLED_S` (or `stationary_s`, if shorter): a person
standing in a quiet scene is not re-detected at the full rate for all of `stationary_s`,
and one who moves on shows as motion, which runs the detector again.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

import numpy as np

from pipeline.config import TrackSpec
from pipeline.decoders.nms import iou_matrix
from pipeline.frames import ClassNames, Detections, EndOfStream, Frame, Item
from pipeline.metrics.registry import Metrics
from pipeline.runtime.stage import InlineStage
from pipeline.runtime.track_feedback import TrackFeedbacks, TrackView
from pipeline.stages import motion
from pipeline.stages.build import BuildContext
from pipeline.stages.bytetrack import ByteTracker, TrackState, load_solver

STILL_IOU = 0.7  # a box overlapping where its object stopped this much has not moved
SETTLED_S = 2.0  # a track whose box stayed put this long no longer moves for the detector's gate


@dataclass
class Stillness:
    """Since when each track has stood still: where its detected box stopped (`anchor`)
    and when (seconds of the camera's time)."""

    stationary_s: float
    anchor: dict[int, tuple[np.ndarray, float]] = field(default_factory=dict)

    def observe(self, ids: np.ndarray, boxes: np.ndarray, t: float) -> None:
        """Detected boxes of confirmed tracks: one that left its anchor starts again."""
        for tid, box in zip(ids.tolist(), boxes):
            a = self.anchor.get(tid)
            if a is None or iou_matrix(box[None], a[0][None])[0, 0] < STILL_IOU:
                self.anchor[tid] = (np.array(box, np.float64), t)

    def stationary(self, ids: np.ndarray, t: float) -> np.ndarray:
        return self.still_for(ids, t, self.stationary_s)

    def still_for(self, ids: np.ndarray, t: float, seconds: float) -> np.ndarray:
        """Which tracks have stood at their anchor for `seconds` by `t`."""
        since = np.array([self.anchor.get(tid, (None, t))[1] for tid in ids.tolist()], np.float64)
        return (t - since) >= seconds - 1e-9 if len(ids) else np.zeros(0, bool)

    def keep(self, ids: np.ndarray) -> None:
        """Only these tracks exist still."""
        alive = set(ids.tolist())
        self.anchor = {k: v for k, v in self.anchor.items() if k in alive}


class CameraTracks:
    """One camera's tracker, its tracks' stillness and its frames' time."""

    def __init__(self, spec: TrackSpec, names: ClassNames, size: tuple[float, float] | None):
        self.tracker = ByteTracker(spec, size)
        self.still = Stillness(spec.stationary_s)
        self.names = names
        self.size = size
        self._bounds = np.array([size[0], size[1], size[0], size[1]], np.float64) if size is not None else None
        self.t: float | None = None  # the last frame's time
        self.step_s = 1 / 15         # seconds between the frames it sees (the filter's step)

    def step(self, frame: Frame) -> None:
        t = frame.pts_seconds if frame.pts_seconds is not None else frame.seq / float(frame.rate or 15)
        if self.t is not None and t > self.t:
            self.step_s = t - self.t
        self.t = t
        tr = self.tracker.tracks
        still = self.still.stationary(tr.id, t)
        self.tracker.hold_still(still)
        det = frame.detections
        if frame.detected and det is not None:
            held = None
            if frame.plan is not None and frame.plan.regions is not None:
                held = (tr.state == TrackState.TRACKED) & ~frame.plan.covers(motion.to_xyxy(tr.mean))
            held_ids = tr.id[held] if held is not None else np.zeros(0, np.int64)
            det.track_id = self.tracker.update(det.xyxy, det.score, det.class_id, held)
            det.predicted = np.zeros(len(det), bool)
            det.origin = self.tracker.tracks.first_of(det.track_id)
            confirmed = det.track_id >= 0
            self.still.observe(det.track_id[confirmed], det.xyxy[confirmed], t)
            det.stationary = self.still.stationary(det.track_id, t) & confirmed
            tr = self.tracker.tracks
            rows = np.isin(tr.id, held_ids) & (tr.state == TrackState.TRACKED)
            kept = self._predicted(rows, self.still.stationary(tr.id[rows], t))
            frame.detections = det.extended(kept) if len(kept) else det
            self.still.keep(self.tracker.tracks.id)
        else:  # every track moves on, none starts or ends: the stillness kept stands
            self.tracker.predict()
            rows = self.tracker.tracks.state == TrackState.TRACKED
            frame.detections = self._predicted(rows, still[rows])

    def _predicted(self, rows: np.ndarray, stationary: np.ndarray) -> Detections:
        """The tracks of `rows` as the tracker sees them now, marked predicted."""
        tr = self.tracker.tracks
        boxes = motion.to_xyxy(tr.mean[rows])
        if self._bounds is not None:
            np.clip(boxes, 0, self._bounds, out=boxes)
        ids = tr.id[rows]
        return Detections(boxes.astype(np.float32), tr.last_score[rows].astype(np.float32), tr.class_id[rows], self.names,
                          track_id=ids, predicted=np.ones(len(ids), bool), stationary=stationary)

    def view(self, frame: Frame) -> TrackView:
        """The camera's confirmed tracks after this frame, for its detector's gate."""
        tr = self.tracker.tracks
        rows = tr.state == TrackState.TRACKED
        t = self.t if self.t is not None else 0.0
        return TrackView(frame.seq, t, motion.to_xyxy(tr.mean[rows]).astype(np.float32),
                         (tr.mean[rows, 4:6] / self.step_s).astype(np.float32),
                         ~self.still.still_for(tr.id[rows], t, min(SETTLED_S, self.still.stationary_s)),
                         tr.class_id[rows])


class TrackStage(InlineStage):
    """Per-camera trackers; frames arrive in order (the detector restores it)."""

    def __init__(self, spec: TrackSpec, metrics: Metrics, names: ClassNames | None = None,
                 feedbacks: TrackFeedbacks | None = None):
        super().__init__(spec.stage_name, metrics)
        self.spec = spec
        self.names = names or ClassNames()
        self.feedbacks = feedbacks  # where each camera's tracks go back to its detector's gate
        self.cameras: dict[str, CameraTracks] = {}
        load_solver()

    @classmethod
    def from_spec(cls, spec: TrackSpec, ctx: BuildContext) -> "TrackStage":
        return cls(spec, ctx.metrics, ctx.detector_names, ctx.feedbacks)

    def process(self, frame: Frame) -> Iterable[Item]:
        cam = self.cameras.get(frame.camera)
        if cam is None:
            size = frame.size if frame.converted or frame.picture is not None else None  # no picture: size unknown
            cam = self.cameras[frame.camera] = CameraTracks(self.spec, self.names, size)
        try:
            cam.step(frame)
        finally:  # the gate of a file camera waits for this frame's update: it always comes
            feedback = self.feedbacks.get(frame.camera) if self.feedbacks is not None else None
            if feedback is not None:
                feedback.publish(cam.view(frame))
        return (frame,)

    def end(self, eos: EndOfStream) -> Iterable[Item]:
        self.cameras.pop(eos.camera, None)
        if self.feedbacks is not None:
            self.feedbacks.close(eos.camera)
        return (eos,)
