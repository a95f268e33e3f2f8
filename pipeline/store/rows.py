"""The store's rows, built from the frames' JSON line records: the live writer hands each
record the sink wrote (or would write), the rebuild each line it reads back, to the same
`RowBuilder`, so both give the same rows.

A frame's wall time is its camera's `origin` (epoch seconds, from the store's run log)
plus the frame's `time` in its stream. Per (camera, track): first and last seen, the best
detected (not predicted) sighting's score, box, class, time and recording spot; each
classifier's latest label; the zones it entered and the lines it crossed (with their
direction), from the events; the snapshot of its first event that has one (the evidence
writes pictures of events only). Events become rows as they are; line crossings and zone
entries add to their minute's counts. A recording segment (named by the frames' records)
gets its start and end from the frames in it, its size from the file, and its activity:
the time from a camera's previous frame to each frame with motion (`motion` in the
record) or with objects (any detection), at most `GAP_S` per frame. A record naming a
file no row may name (`store.paths`: outside the folder, a link, another camera's) has
that name left out, said once in a line naming the file and the camera.
"""
from __future__ import annotations

import json
import logging
import math
import os
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Callable

from pipeline.store.paths import evidence_problem, recording_problem

log = logging.getLogger("pipeline.store")

GAP_S = 2.0  # a frame counts for at most this long towards its segment's activity (an outage is no activity)
STALE_S = 120.0  # a track unseen this long (on its camera's clock) is final and leaves memory

CountKey = tuple[str, int, str, str, str, str]  # camera, minute, kind, name, class, direction


@dataclass
class TrackRow:
    run: int
    camera: str
    track: int
    cls: str | None
    first_seen: float
    last_seen: float
    best_score: float | None = None
    best_box: list[float] | None = None
    best_time: float | None = None
    labels: dict[str, str] = field(default_factory=dict)
    zones: list[str] = field(default_factory=list)
    lines: list[tuple[str, str]] = field(default_factory=list)  # (line, direction), in the order crossed
    snapshot: str | None = None
    recording: str | None = None
    recording_time: float | None = None

    def values(self) -> tuple:
        """The row of `tracks`, in `TRACK_COLUMNS` order."""
        return (self.run, self.camera, self.track, self.cls, self.first_seen, self.last_seen, self.best_score,
                _json(self.best_box), self.best_time, _json(self.labels), _json(self.zones),
                _json(sorted({line for line, _ in self.lines})), self.snapshot, self.recording, self.recording_time)


TRACK_COLUMNS = ("run", "camera", "track", "class", "first_seen", "last_seen", "best_score", "best_box",
                 "best_time", "labels", "zones", "lines", "snapshot", "recording", "recording_time")
EVENT_COLUMNS = ("run", "camera", "time", "event", "track", "class", "line", "zone", "direction", "snapshot",
                 "clip", "recording", "recording_time")
SEGMENT_COLUMNS = ("camera", "path", "start", "end", "bytes", "motion_s", "objects_s")


@dataclass
class SegmentRow:
    camera: str
    path: str
    start: float
    end: float
    bytes: int | None = None
    motion_s: float = 0.0
    objects_s: float = 0.0

    def values(self) -> tuple:
        return (self.camera, self.path, self.start, self.end, self.bytes, round(self.motion_s, 6),
                round(self.objects_s, 6))


@dataclass
class Rows:
    """What one flush writes: tracks to insert or update, new events, counts to add to,
    segments to insert or update."""

    tracks: list[TrackRow] = field(default_factory=list)
    events: list[tuple] = field(default_factory=list)
    counts: Counter = field(default_factory=Counter)
    segments: list[SegmentRow] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.tracks) + len(self.events) + len(self.counts) + len(self.segments)

    def merge(self, later: "Rows") -> None:
        """Add a later flush's rows (a track or segment in both: its latest state, once)."""
        tracks = {(t.camera, t.track): t for t in self.tracks + later.tracks}
        segments = {s.path: s for s in self.segments + later.segments}
        self.tracks, self.segments = list(tracks.values()), list(segments.values())
        self.events.extend(later.events)
        self.counts.update(later.counts)


def _json(value: object) -> str | None:
    return None if value is None else json.dumps(value, separators=(",", ":"))


@dataclass
class CameraRows:
    """One camera's state in one run: its live tracks, its segments, its previous frame."""

    tracks: dict[int, TrackRow] = field(default_factory=dict)
    segments: dict[str, SegmentRow] = field(default_factory=dict)
    previous: float | None = None  # the wall time of its previous frame
    latest: float = -math.inf


class RowBuilder:
    """Rows from one run's frame records; `take` hands over what changed since the last
    call. `root` is `outputs.dir` (the segments' sizes). No row names a file that is gone:
    the live writer is told of retention's removals (`forget`), the rebuild looks (`exists`)."""

    def __init__(self, run: int, root: str, exists: Callable[[str], bool] | None = None):
        self.run = run
        self.root = root
        self.cameras: dict[str, CameraRows] = {}
        self._dirty_tracks: dict[tuple[str, int], TrackRow] = {}
        self._dirty_segments: set[tuple[str, str]] = set()
        self._pending = Rows()
        self.gone = GoneFiles(root, exists)
        self.refused = RefusedFiles(root)

    def add(self, record: dict, origin: float) -> None:
        """One frame's record (`sinks.jsonl.frame_record`), its camera's clock at `origin`."""
        if record.get("time") is None:
            return  # a frame without a timestamp has no place in time
        cam = record["camera"]
        if not self.refused.recording(cam, record.get("recording")):
            record = {**record, "recording": None, "recording_time": None}
        state = self.cameras.setdefault(cam, CameraRows())
        wall = origin + record["time"]
        step = 0.0 if state.previous is None else min(max(wall - state.previous, 0.0), GAP_S)
        state.previous, state.latest = wall, max(state.latest, wall)
        for det in record.get("detections") or ():
            if "track" in det:
                self._sighting(cam, state, det, wall, record)
        for event in record.get("events") or ():
            self._event(cam, state, event, wall, record)
        self._segment(cam, state, record, wall, step)

    def _sighting(self, cam: str, state: CameraRows, det: dict, wall: float, record: dict) -> None:
        row = self._track(cam, state, det["track"], det.get("class"), wall)
        row.last_seen = max(row.last_seen, wall)
        if not det.get("predicted") and (row.best_score is None or det["score"] > row.best_score):
            row.best_score, row.best_box, row.best_time, row.cls = det["score"], det["box"], wall, det.get("class")
            row.recording, row.recording_time = record.get("recording"), record.get("recording_time")
        for stage, label in (det.get("labels") or {}).items():
            row.labels[stage] = label["label"]

    def _track(self, cam: str, state: CameraRows, track: int, cls: str | None, wall: float) -> TrackRow:
        row = state.tracks.get(track)
        if row is None:
            row = state.tracks[track] = TrackRow(self.run, cam, track, cls, wall, wall)
        self._dirty_tracks[(cam, track)] = row
        return row

    def _event(self, cam: str, state: CameraRows, e: dict, wall: float, record: dict) -> None:
        e = self.refused.event(cam, e)
        kind, cls = e.get("event"), e.get("class")
        self._pending.events.append((self.run, cam, wall, kind, e.get("track"), cls, e.get("line"), e.get("zone"),
                                     e.get("direction"), e.get("snapshot"), e.get("clip"), e.get("recording"),
                                     e.get("recording_time")))
        minute = int(wall // 60) * 60
        if kind == "cross" and e.get("line") is not None:
            self._pending.counts[(cam, minute, "line", e["line"], cls or "", e.get("direction") or "")] += 1
        elif kind == "enter" and e.get("zone") is not None:
            self._pending.counts[(cam, minute, "zone", e["zone"], cls or "", "enter")] += 1
        if e.get("track") is None:
            return
        row = self._track(cam, state, e["track"], cls, wall)
        if kind == "enter" and e.get("zone") is not None and e["zone"] not in row.zones:
            row.zones.append(e["zone"])
        if kind == "cross" and e.get("line") is not None:
            crossed = (e["line"], e.get("direction") or "")
            if crossed not in row.lines:
                row.lines.append(crossed)
        if row.snapshot is None and e.get("snapshot"):
            row.snapshot = e["snapshot"]

    def _segment(self, cam: str, state: CameraRows, record: dict, wall: float, step: float) -> None:
        path = record.get("recording")
        if path is None or record.get("recording_time") is None or self.gone.has(path):
            return
        seg = state.segments.get(path)
        start = wall - record["recording_time"]
        if seg is None:
            seg = state.segments[path] = SegmentRow(cam, path, start, wall)
        seg.start, seg.end = min(seg.start, start), max(seg.end, wall)
        if record.get("motion"):
            seg.motion_s += step
        if record.get("detections"):
            seg.objects_s += step
        self._dirty_segments.add((cam, path))

    def end_camera(self, cam: str) -> None:
        """The camera ended in this run: its tracks are final, its segments closed."""
        state = self.cameras.get(cam)
        if state is not None:
            self._dirty_segments.update((cam, p) for p in state.segments)
            state.latest = math.inf  # every track is stale now

    def forget(self, paths: list[str]) -> None:
        """Files retention removed: their segments leave memory, and no row built from now
        on names them (a track's snapshot or recording, a late frame's segment)."""
        self.gone.add(paths)
        for state in self.cameras.values():
            for path in paths:
                state.segments.pop(path, None)
        self._dirty_segments = {(c, p) for c, p in self._dirty_segments if not self.gone.has(p)}

    def take(self) -> Rows:
        """The rows changed since the last call; tracks unseen for `STALE_S` leave memory."""
        rows, self._pending = self._pending, Rows()
        rows.events = [self.gone.event(e) for e in rows.events]
        rows.tracks = [self.gone.track(t) for t in self._dirty_tracks.values()]
        self._dirty_tracks = {}
        for cam, path in sorted(self._dirty_segments):
            seg = self.cameras[cam].segments[path]
            if self.gone.has(path):
                continue
            seg.bytes = _size(os.path.join(self.root, path))
            rows.segments.append(seg)
        self._dirty_segments = set()
        for cam, state in list(self.cameras.items()):
            for track in [t for t, row in state.tracks.items() if row.last_seen < state.latest - STALE_S]:
                del state.tracks[track]
            if state.latest == math.inf:
                del self.cameras[cam]
        return rows


class RefusedFiles:
    """The files rows must not name for what they are (`store.paths`), each said once
    (the last `KEPT` remembered: a run of months names new segments all along)."""

    KEPT = 10000

    def __init__(self, root: str):
        self.root = root
        self._sound: dict[tuple[str, str, object], bool] = {}  # (camera, kind, path) -> may be named

    def _named(self, cam: str, kind: str, path: object, problem: Callable[[str, object, str], str | None]) -> bool:
        key = (cam, kind, path if isinstance(path, str) else repr(path))  # a JSON value: str, or any other
        if key not in self._sound:
            why = problem(self.root, path, cam)
            if why is not None:
                log.warning("store: camera %s names %s %s: refused, %s (no row names it)", cam, kind,
                            path if isinstance(path, str) else repr(path), why)
            self._sound[key] = why is None
            if len(self._sound) > self.KEPT:
                del self._sound[next(iter(self._sound))]
        return self._sound[key]

    def recording(self, cam: str, path: object) -> bool:
        """Whether a row may name `path` as one of the camera's recordings (None: no file, it may)."""
        return path is None or self._named(cam, "recording", path, recording_problem)

    def event(self, cam: str, e: dict) -> dict:
        """The event with the files no row may name left out."""
        bad = [k for k, problem in (("snapshot", evidence_problem), ("clip", evidence_problem),
                                    ("recording", recording_problem))
               if e.get(k) is not None and not self._named(cam, k, e[k], problem)]
        if not bad:
            return e
        return {**e, **{k: None for k in bad}, **({"recording_time": None} if "recording" in bad else {})}


class GoneFiles:
    """The files rows must not name: those retention removed (the last `KEPT`: later
    records may still name them) and, for a rebuild (`exists`), those not on disk."""

    KEPT = 10000

    def __init__(self, root: str, exists: Callable[[str], bool] | None = None):
        self.root = root
        self.exists = exists
        self._removed: dict[str, None] = {}  # oldest first
        self._looked: dict[str, bool] = {}  # the rebuild's answers: a finished folder does not change

    def add(self, paths: list[str]) -> None:
        self._removed.update(dict.fromkeys(paths))
        while len(self._removed) > self.KEPT:
            del self._removed[next(iter(self._removed))]

    def has(self, path: str | None) -> bool:
        if path is None:
            return False
        if path in self._removed:
            return True
        if self.exists is None:
            return False
        if path not in self._looked:
            self._looked[path] = not self.exists(os.path.join(self.root, path))
        return self._looked[path]

    def track(self, row: TrackRow) -> TrackRow:
        """The track as written: its snapshot and recording left out where gone."""
        if not self.has(row.snapshot) and not self.has(row.recording):
            return row
        kept = not self.has(row.recording)
        return replace(row, snapshot=None if self.has(row.snapshot) else row.snapshot,
                       recording=row.recording if kept else None, recording_time=row.recording_time if kept else None)

    def event(self, e: tuple) -> tuple:
        """An event row (`EVENT_COLUMNS`) with its snapshot, clip and recording left out where gone."""
        snapshot, clip, recording, recording_time = e[9:13]
        if not (self.has(snapshot) or self.has(clip) or self.has(recording)):
            return e
        kept = not self.has(recording)
        return e[:9] + (None if self.has(snapshot) else snapshot, None if self.has(clip) else clip,
                        recording if kept else None, recording_time if kept else None)


def _size(path: str) -> int | None:
    try:
        return os.stat(path).st_size
    except OSError:
        return None
