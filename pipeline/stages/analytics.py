"""Zone and line-crossing analytics on tracked objects, per camera, from the YAML:

    - analytics:
        cameras:
          campus:
            lines: [{name: gate, points: [[100, 300], [700, 300]], classes: [person]}]
            zones: [{name: lawn, polygon: [[0, 400], [760, 400], [760, 570], [0, 570]]}]

An object's position is the bottom centre of its box (where it touches the ground). A
line crossing is its step from the last frame to this one intersecting the line:
direction `in` when it moves from the left of the line (seen from the first point
towards the second) to its right, `out` the other way. Zones report objects inside per
class on every frame and `enter` / `exit` events. Events go on the frame (JSON lines) and
into the camera's counts (summary, metrics); lines and zones are drawn by `overlay`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

import cv2
import numpy as np

from pipeline.config import ConfigError
from pipeline.frames import EndOfStream, Frame, Item
from pipeline.metrics.registry import Metrics
from pipeline.runtime.stage import RunControl, Stage

FORGET_AFTER = 30  # frames without a sighting before a track's state is dropped (the tracker's default max_age)


@dataclass
class Line:
    name: str
    a: np.ndarray
    b: np.ndarray
    classes: set[str] | None
    counts: dict[str, int] = field(default_factory=lambda: {"in": 0, "out": 0})

    def side(self, p: np.ndarray) -> float:
        d = self.b - self.a
        return float(d[0] * (p[1] - self.a[1]) - d[1] * (p[0] - self.a[0]))

    def crossed(self, p0: np.ndarray, p1: np.ndarray) -> str | None:
        """`in`/`out` when the step p0 -> p1 crosses the segment a-b, else None."""
        right0, right1 = self.side(p0) > 0, self.side(p1) > 0  # on the line counts as left
        if right0 == right1:
            return None
        d = p1 - p0
        t0 = d[0] * (self.a[1] - p0[1]) - d[1] * (self.a[0] - p0[0])
        t1 = d[0] * (self.b[1] - p0[1]) - d[1] * (self.b[0] - p0[0])
        if t0 * t1 > 0:
            return None  # the step passes beside the segment, not through it
        return "in" if right1 else "out"


@dataclass
class Zone:
    name: str
    polygon: np.ndarray
    classes: set[str] | None
    inside: dict[int, str] = field(default_factory=dict)  # track -> class

    def contains(self, p: np.ndarray) -> bool:
        return cv2.pointPolygonTest(self.polygon, (float(p[0]), float(p[1])), False) >= 0


@dataclass
class CameraAnalytics:
    lines: list[Line]
    zones: list[Zone]
    last: dict[int, tuple[np.ndarray, int]] = field(default_factory=dict)  # track -> (anchor, seq seen)


def _points(value, path: str, n: int | None, problems: list[str]) -> np.ndarray | None:
    try:
        arr = np.asarray(value, np.float32)
    except (TypeError, ValueError):
        arr = np.zeros((0,))
    if arr.ndim != 2 or arr.shape[1] != 2 or (n is not None and len(arr) != n) or (n is None and len(arr) < 3):
        problems.append(f"{path}: expected {n or '3 or more'} [x, y] points")
        return None
    return arr


def parse_analytics(options: dict, path: str, labels: list[str]) -> dict[str, CameraAnalytics]:
    problems: list[str] = []
    out: dict[str, CameraAnalytics] = {}
    for cam, spec in (options.get("cameras") or {}).items():
        cpath = f"{path}.cameras.{cam}"
        lines, zones = [], []
        for i, ln in enumerate((spec or {}).get("lines", [])):
            pts = _points(ln.get("points"), f"{cpath}.lines[{i}].points", 2, problems)
            classes = ln.get("classes")
            problems += [f"{cpath}.lines[{i}].classes: unknown class {c!r}" for c in classes or [] if c not in labels]
            if pts is not None:
                lines.append(Line(str(ln.get("name", f"line{i}")), pts[0], pts[1], set(classes) if classes else None))
        for i, zn in enumerate((spec or {}).get("zones", [])):
            pts = _points(zn.get("polygon"), f"{cpath}.zones[{i}].polygon", None, problems)
            classes = zn.get("classes")
            problems += [f"{cpath}.zones[{i}].classes: unknown class {c!r}" for c in classes or [] if c not in labels]
            if pts is not None:
                zones.append(Zone(str(zn.get("name", f"zone{i}")), pts.reshape(-1, 1, 2),
                                  set(classes) if classes else None))
        out[str(cam)] = CameraAnalytics(lines, zones)
    if problems:
        raise ConfigError(problems)
    return out


class AnalyticsStage(Stage):
    def __init__(self, name: str, options: dict, path: str, labels: list[str], cameras: list[str],
                 metrics: Metrics, control: RunControl, queue_size: int):
        super().__init__(name, metrics, control, queue_size)
        self.labels = labels
        self.cameras = parse_analytics(options, path, labels)
        unknown = [c for c in self.cameras if c not in cameras]
        if unknown:
            raise ConfigError([f"{path}.cameras.{c}: no camera with this id" for c in unknown])

    def _name(self, class_id: int) -> str:
        return self.labels[class_id] if 0 <= class_id < len(self.labels) else str(class_id)

    def process(self, frame: Frame) -> Iterable[Item]:
        cam = self.cameras.get(frame.camera)
        det = frame.detections
        if cam is None or det is None or det.track_id is None:
            return (frame,)
        counts = self.metrics.camera(frame.camera).counts
        for i in range(len(det)):
            tid = int(det.track_id[i])
            if tid < 0:
                continue
            x1, _, x2, y2 = det.xyxy[i]
            anchor = np.array([(x1 + x2) / 2, y2], np.float32)
            cls = self._name(int(det.class_id[i]))
            prev = cam.last[tid][0] if tid in cam.last else None
            cam.last[tid] = (anchor, frame.seq)
            for line in cam.lines:
                if prev is None or (line.classes and cls not in line.classes):
                    continue
                direction = line.crossed(prev, anchor)
                if direction:
                    line.counts[direction] += 1
                    counts[f"{line.name}.{direction}.{cls}"] += 1
                    frame.events.append(self._event(frame, tid, cls, "cross", line=line.name, direction=direction))
            for zone in cam.zones:
                if zone.classes and cls not in zone.classes:
                    continue
                inside = zone.contains(anchor)
                if inside and tid not in zone.inside:
                    zone.inside[tid] = cls
                    counts[f"{zone.name}.enter.{cls}"] += 1
                    frame.events.append(self._event(frame, tid, cls, "enter", zone=zone.name))
                elif not inside and tid in zone.inside:
                    del zone.inside[tid]
                    counts[f"{zone.name}.exit.{cls}"] += 1
                    frame.events.append(self._event(frame, tid, cls, "exit", zone=zone.name))
        for tid, (_, seq) in list(cam.last.items()):
            if frame.seq - seq > FORGET_AFTER:  # long gone: forget it, and stop counting it inside
                del cam.last[tid]
                for zone in cam.zones:
                    zone.inside.pop(tid, None)
        return (frame,)

    @staticmethod
    def _event(frame: Frame, track: int, cls: str, event: str, **extra) -> dict:
        return {"camera": frame.camera, "seq": frame.seq, "pts": frame.pts, "track": track, "class": cls,
                "event": event, **extra}

    def end(self, eos: EndOfStream) -> Iterable[Item]:
        return (eos,)

    def overlay(self, image: np.ndarray, frame: Frame) -> None:
        """Draw this camera's lines (with in/out counts) and zones (with objects inside)."""
        cam = self.cameras.get(frame.camera)
        if cam is None:
            return
        scale = max(0.4, image.shape[0] / 1200)
        for zone in cam.zones:
            cv2.polylines(image, [zone.polygon.astype(np.int32)], True, (255, 200, 0), 2, cv2.LINE_AA)
            x, y = zone.polygon[0, 0]
            cv2.putText(image, f"{zone.name}: {len(zone.inside)} inside", (int(x) + 4, int(y) + 16),
                        cv2.FONT_HERSHEY_SIMPLEX, scale, (255, 200, 0), 1, cv2.LINE_AA)
        for line in cam.lines:
            a, b = tuple(int(v) for v in line.a), tuple(int(v) for v in line.b)
            cv2.line(image, a, b, (0, 220, 255), 2, cv2.LINE_AA)
            cv2.putText(image, f"{line.name}: in {line.counts['in']} out {line.counts['out']}", (a[0] + 4, a[1] - 6),
                        cv2.FONT_HERSHEY_SIMPLEX, scale, (0, 220, 255), 1, cv2.LINE_AA)
