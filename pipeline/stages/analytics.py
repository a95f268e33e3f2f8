"""Zone and line-crossing analytics on tracked objects, per camera (`AnalyticsSpec`).

An object's position is the bottom centre of its box (where it touches the ground).
Each line and zone sees the object on one side (left/right of the line, seen from its
first point towards its second; inside/outside the zone). A change of side is only
*pending* at first: it counts once the object has been on the new side for
`min_frames` frames (counted from its first detected position there, confirmed by a
detection: frames the detector did not see count as time, a predicted box never
confirms), or moved `min_distance` pixels past the line or edge, and going back before
that cancels it. Without this, one person standing on a line is counted
six times in two seconds (detections jitter by a few pixels). A line counts `in` for a
move from its left to its right and `out` the other way, and only when the step that
changed sides went through the segment itself, not past its ends. A track is first seen
where its first detection was (`Detections.origin`): the tracker confirms an object only
after a few detections, and a crossing made during them counts.

Lines and zones can be replaced while running (`update`, a reload of the config): each
camera takes its new ones on its next frame, in the thread that runs the stage. A line or
zone whose spec did not change goes on as it was; a line moved or re-classed under its
name keeps its counts (the sides of the tracks start afresh); a changed zone starts empty
(who is inside the new polygon enters it). The run's counts (metrics, report, JSON lines
already written) are never touched.

Results travel with the frame: events (JSON lines), and the counts as they stand after
this frame (`Frame.lines`, `Frame.zones`), which the annotate stage draws: whatever
thread draws the frame, it shows this frame's numbers.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Iterable, TypeVar

import cv2
import numpy as np

from pipeline.config.stages import AnalyticsSpec, CameraAnalyticsSpec, LineSpec, ZoneSpec
from pipeline.frames import ClassNames, EndOfStream, Event, Frame, Item, LineCount, ZoneCount
from pipeline.metrics.registry import Metrics
from pipeline.runtime.stage import InlineStage
from pipeline.stages.build import BuildContext


@dataclass
class Side:
    """Where one track is relative to one line or zone, with a change under way."""

    side: bool                      # right of the line / inside the zone
    pending: bool | None = None     # the side it moved to, not yet confirmed
    since: int = 0                  # the camera's update it was first seen on the pending side
    through: bool = False           # lines: the step to the pending side crossed the segment


class Geometry:
    """A line or a zone: the side a point is on, and how far from the border."""

    def __init__(self, spec: LineSpec | ZoneSpec):
        self.spec = spec
        self.classes = set(spec.classes) if spec.classes else None
        self.sides: dict[int, Side] = {}

    def applies(self, cls: str) -> bool:
        return self.classes is None or cls in self.classes

    def locate(self, p: np.ndarray) -> tuple[bool, float]:
        raise NotImplementedError

    def step(self, track: int, p: np.ndarray, prev: np.ndarray | None, now: int) -> bool | None:
        """Feed one detected position, on the camera's update `now`; returns the newly
        confirmed side when a change counts: the object was first seen on the new side
        `min_frames` - 1 updates ago (frames between detections, predicted, count as time
        there; only a detection confirms)."""
        side, distance = self.locate(p)
        state = self.sides.get(track)
        if state is None:
            self.sides[track] = self.first(side)
            state = self.sides[track]
            if state.side == side:
                return None
        if side == state.side:
            state.pending = None  # back before the change counted: cancelled
            return None
        if state.pending != side:
            state.pending, state.since = side, now
            state.through = self.through(prev, p)
        far = self.spec.min_distance is not None and distance >= self.spec.min_distance
        if now - state.since + 1 < self.spec.min_frames and not far:
            return None
        state.side, state.pending = side, None
        return side if state.through else None

    def first(self, side: bool) -> Side:
        """A track seen for the first time: lines take its side as it is; zones start it
        outside, so an object that appears inside a zone enters it."""
        return Side(side)

    def through(self, prev: np.ndarray | None, p: np.ndarray) -> bool:
        return True

    def forget(self, track: int) -> None:
        self.sides.pop(track, None)


class Line(Geometry):
    def __init__(self, spec: LineSpec):
        super().__init__(spec)
        self.a, self.b = (np.asarray(pt, np.float64) for pt in spec.points)
        self.counts = {"in": 0, "out": 0}

    def locate(self, p: np.ndarray) -> tuple[bool, float]:
        d = self.b - self.a
        cross = float(d[0] * (p[1] - self.a[1]) - d[1] * (p[0] - self.a[0]))
        return cross > 0, abs(cross) / float(np.hypot(*d))  # on the line counts as left

    def through(self, prev: np.ndarray | None, p: np.ndarray) -> bool:
        """Whether the step prev -> p passes through the segment (not beside its ends)."""
        if prev is None:
            return False
        d = p - prev
        t0 = d[0] * (self.a[1] - prev[1]) - d[1] * (self.a[0] - prev[0])
        t1 = d[0] * (self.b[1] - prev[1]) - d[1] * (self.b[0] - prev[0])
        return bool(t0 * t1 <= 0)


class Zone(Geometry):
    def __init__(self, spec: ZoneSpec):
        super().__init__(spec)
        self.polygon = np.asarray(spec.polygon, np.float32).reshape(-1, 1, 2)
        self.inside: dict[int, str] = {}  # track -> class
        self.stationary: set[int] = set()  # of the tracks inside, those not moving

    def locate(self, p: np.ndarray) -> tuple[bool, float]:
        signed = cv2.pointPolygonTest(self.polygon, (float(p[0]), float(p[1])), True)
        return signed >= 0, abs(signed)

    def first(self, side: bool) -> Side:
        return Side(False)

    def settle(self, track: int, stationary: bool) -> str | None:
        """The track's state in the zone: `stationary` when one inside stops moving,
        `moving` when it goes on (None: no change, or not inside)."""
        if track not in self.inside or stationary == (track in self.stationary):
            return None
        if stationary:
            self.stationary.add(track)
            return "stationary"
        self.stationary.discard(track)
        return "moving"

    def forget(self, track: int) -> None:
        super().forget(track)
        self.inside.pop(track, None)
        self.stationary.discard(track)


G = TypeVar("G", Line, Zone)


def _carried(old: list[G], specs: list, make: Callable[..., G]) -> list[G]:
    """The lines or zones of `specs`, going on from `old` by name: an unchanged one as it
    is, a changed line with its counts, anything else new."""
    by_name = {g.spec.name: g for g in old}
    made: list[G] = []
    for spec in specs:
        before = by_name.get(spec.name)
        if before is not None and before.spec == spec:
            made.append(before)
            continue
        g = make(spec)
        if isinstance(g, Line) and isinstance(before, Line):
            g.counts = before.counts
        made.append(g)
    return made


@dataclass
class CameraAnalytics:
    """One camera's lines and zones, and where each track was last seen.

    Time on a side (`min_frames`) is counted in `updates`, the frames of this camera that
    reached the tracker (with `stride` or `max_fps` its `seq` advances by several a frame).
    A track is forgotten in the tracker's own unit, `runs` (frames the detector ran on: the
    unit of its `max_age`): a window in any other unit would forget a track the tracker
    still holds, which then re-enters its zone without an exit.
    """

    spec: CameraAnalyticsSpec  # what its lines and zones were made from
    lines: list[Line]
    zones: list[Zone]
    updates: int = 0
    runs: int = 0
    last: dict[int, tuple[np.ndarray, int]] = field(default_factory=dict)  # track -> (anchor, run seen on)


class AnalyticsStage(InlineStage):
    def __init__(self, spec: AnalyticsSpec, names: ClassNames, metrics: Metrics):
        super().__init__(spec.stage_name, metrics)
        self.names = names
        self.spec = spec
        self.cameras: dict[str, CameraAnalytics] = {}  # made on a camera's first frame, dropped at its end

    @classmethod
    def from_spec(cls, spec: AnalyticsSpec, ctx: BuildContext) -> "AnalyticsStage":
        return cls(spec, ctx.detector_names, ctx.metrics)

    def update(self, spec: AnalyticsSpec) -> None:
        """New lines and zones (a reload): each camera takes them on its next frame."""
        self.spec = spec

    def _camera(self, camera: str) -> CameraAnalytics | None:
        """The camera's lines and zones; a camera that ended and is added again starts
        afresh, one whose spec was replaced (`update`) takes the new one."""
        cam = self.cameras.get(camera)
        wanted = self.spec.cameras.get(camera)
        if wanted is None:
            self.cameras.pop(camera, None)
            return None
        if cam is None:
            cam = self.cameras[camera] = CameraAnalytics(wanted, [Line(s) for s in wanted.lines],
                                                         [Zone(s) for s in wanted.zones])
        elif cam.spec is not wanted:
            cam.spec = wanted
            cam.lines = _carried(cam.lines, wanted.lines, Line)
            cam.zones = _carried(cam.zones, wanted.zones, Zone)
        return cam

    def process(self, frame: Frame) -> Iterable[Item]:
        cam = self._camera(frame.camera)
        det = frame.detections
        if cam is None:
            return (frame,)
        if det is not None and det.track_id is not None:
            self._observe(cam, frame)
        frame.lines = [LineCount(ln.spec.name, tuple(ln.a), tuple(ln.b), ln.counts["in"], ln.counts["out"])
                       for ln in cam.lines]
        frame.zones = [ZoneCount(z.spec.name, z.polygon, len(z.inside), len(z.stationary),
                                 dict(Counter(z.inside.values()))) for z in cam.zones]
        stats = self.metrics.camera(frame.camera)  # set even with no zones: a reload may have taken them away
        stats.occupancy = {z.name: z.inside for z in frame.zones}
        stats.stationary = {z.name: z.stationary for z in frame.zones}
        return (frame,)

    def _observe(self, cam: CameraAnalytics, frame: Frame) -> None:
        det = frame.detections
        assert det is not None and det.track_id is not None
        cam.updates += 1
        cam.runs += frame.detected
        predicted = det.predicted if det.predicted is not None else np.zeros(len(det), bool)
        stationary = det.stationary if det.stationary is not None else np.zeros(len(det), bool)
        for i in range(len(det)):
            tid = int(det.track_id[i])
            if tid < 0:
                continue
            cls = self.names(int(det.class_id[i]))
            if predicted[i]:  # the tracker's guess: it moves nothing across a line or a border
                if tid in cam.last:
                    cam.last[tid] = (cam.last[tid][0], cam.runs)
            else:
                origin = det.origin[i] if det.origin is not None and tid not in cam.last else None
                if origin is not None and np.isfinite(origin).all():  # the path it took while not yet a track
                    self._step(cam, frame, tid, cls, origin)
                self._step(cam, frame, tid, cls, det.xyxy[i])
            for zone in cam.zones:
                change = zone.settle(tid, bool(stationary[i]))
                if change is not None:
                    self.metrics.camera(frame.camera).counts[(zone.spec.name, change, cls)] += 1
                    if zone.spec.alert_stationary:
                        frame.events.append(self._event(frame, tid, cls, change, zone=zone.spec.name))
        for tid, (_, seen) in list(cam.last.items()):
            if cam.runs - seen > self.spec.forget_after:  # the tracker has dropped it: forget it, stop counting it inside
                del cam.last[tid]
                for g in (*cam.lines, *cam.zones):
                    g.forget(tid)

    def _step(self, cam: CameraAnalytics, frame: Frame, tid: int, cls: str, box: np.ndarray) -> None:
        """A detected position of track `tid`: the lines it crosses and the zones it enters or leaves."""
        counts = self.metrics.camera(frame.camera).counts
        x1, _, x2, y2 = box
        anchor = np.array([(x1 + x2) / 2, y2], np.float64)
        prev = cam.last[tid][0] if tid in cam.last else None
        cam.last[tid] = (anchor, cam.runs)
        for line in cam.lines:
            if not line.applies(cls):
                continue
            side = line.step(tid, anchor, prev, cam.updates)
            if side is not None:
                direction = "in" if side else "out"
                line.counts[direction] += 1
                counts[(line.spec.name, direction, cls)] += 1
                frame.events.append(self._event(frame, tid, cls, "cross", line=line.spec.name,
                                                direction=direction))
        for zone in cam.zones:
            if not zone.applies(cls):
                continue
            side = zone.step(tid, anchor, prev, cam.updates)
            if side is None:
                continue
            event = "enter" if side else "exit"
            if side:
                zone.inside[tid] = cls
            else:
                zone.inside.pop(tid, None)
                zone.stationary.discard(tid)
            counts[(zone.spec.name, event, cls)] += 1
            frame.events.append(self._event(frame, tid, cls, event, zone=zone.spec.name))

    @staticmethod
    def _event(frame: Frame, track: int, cls: str, event: str, **extra: str) -> Event:
        return Event(frame.camera, frame.seq, frame.pts, track, cls, event, **extra)

    def end(self, eos: EndOfStream) -> Iterable[Item]:
        self.cameras.pop(eos.camera, None)
        return (eos,)
