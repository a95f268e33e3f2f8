"""Machine-readable metadata: one JSON line per frame.

`{"camera", "seq", "pts", "time", "recording"?, "recording_time"?, "pixels"?, "detected", "motion"?,
"detections": [{"box": [x1, y1, x2, y2], "score", "class_id", "class", "predicted", "track"?,
"stationary"?, "labels"?: {classifier: {"label", "id", "score"}}}], "regions"?, "events"?,
"errors"?}` with boxes in frame pixels; `detected`: the detector ran on the frame
(`regions`: on these squares of it only); `motion`: motion was measured and seen on it
(the store's segment activity); `predicted`: the box is the tracker's, not the
detector's; `stationary`: its track has not moved for `track.stationary_s`. A recorded
camera's rows name the recording's file and the frame's time in it (null: in none), and
its boxes and regions are in the recording's pixels (the main stream's, where a
sub-stream is analysed), its latest file's where the frame lies in none; where it has
no file yet to give its size, the row says the size they are in (`pixels`).
With `{camera}` in the file name each camera gets its own file; without it all cameras
share one file (lines of one camera stay in order; the lines of file cameras in the
order of their time, then camera id: `InTimeOrder`). A file run's lines depend on its
files only: the wall-clock `time` of its events (when they were written) is left out,
where a live camera's events carry it. Lines wait in memory and are appended at least
every `flush_s`, whole lines in one write, after the writer's lease (if any) was checked: a killed process
loses at most that much, as with the fragmented video, and never leaves half a line; a
write that a full disk cuts short is cut back to the last whole line (`append_whole`)
and its lines are counted lost, per camera (`on_lost`). A file is created with its
first lines (a camera that never delivers a frame leaves no empty file); `on_file`
hears of it (the run's record of what it wrote, see `sinks.written`). A file that is
already there (a rerun, a camera that returns or resumed) is appended to, never
truncated, said in one log line; a last line an earlier process left half written is
ended first, so the new lines each stay a line of their own. `rotate` moves on
to the next time segment's file: what waits is appended to the current file first, so
a line is in the segment of its frame, once.
"""
from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections import Counter, deque
from typing import Callable

import numpy as np

from pipeline.config.outputs import JsonlOutputConfig
from pipeline.frames import Detections, Frame
from pipeline.recording.segment_plan import RecordingSpot
from pipeline.recording.segments import START, WallSegments, last_stamp

log = logging.getLogger("pipeline.sink")

OnFile = Callable[[str], None]  # a file was created (its path)
OnLost = Callable[[str, int], None]  # (camera, lines) that could not be written


def append_whole(fd: int, data: bytes) -> None:
    """Append `data` whole or not at all: a write the disk cuts short (full, quota) is cut
    back off, so the file still ends with its last whole line; the error is raised."""
    start = os.lseek(fd, 0, os.SEEK_END)
    view = memoryview(data)
    try:
        while view:  # short writes continue where they stopped
            view = view[os.write(fd, view):]
    except OSError:
        os.ftruncate(fd, start)
        raise


def open_for_appending(path: str) -> int:
    """`path` opened to append to: what an earlier run wrote there stays (a rerun, a camera
    that returns), said once; a last line it left half written (killed mid-write, a torn
    copy) is ended with a newline first, so no new line is glued to it (a rebuild counts
    it among the lines that are not frame records)."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            append_whole(fd, b"\n")
            log.warning("%s: its last line was left half written (%d bytes in all); it is ended there and this "
                        "run's lines follow it", path, size)
        elif size:
            log.info("%s: already holds %d bytes; this run's lines are appended after them", path, size)
    except OSError:
        os.close(fd)
        raise
    return fd


def frame_record(frame: Frame, spot: RecordingSpot | None = None, recorded: bool = False,
                 wall_time: bool = True, size: tuple[int, int] | None = None) -> dict:
    """The frame's JSON line; `recorded`: its camera has a recording, `spot` where the
    frame lies in it, `size` its latest pictures' size (where the frame lies in none);
    `wall_time`: its events say when they were written (live cameras)."""
    pixels = frame_pixels(frame) if recorded else None  # the boxes' size, where it may not be the recording's
    target = (spot.width, spot.height) if spot is not None else size if recorded else None
    target = target if target is not None and all(target) else None
    scale = _scale(pixels, target)
    items = _entries(frame.detections, scale) if frame.detections is not None else []
    record: dict = {"camera": frame.camera, "seq": frame.seq, "pts": frame.pts,
                    "time": None if frame.pts_seconds is None else round(frame.pts_seconds, 6)}
    if recorded:
        record["recording"] = spot.file if spot is not None else None
        record["recording_time"] = spot.time if spot is not None else None
        if target is None and pixels is not None:
            record["pixels"] = list(pixels)  # never in the recording's pixels: say which
    record["detected"] = frame.detected
    if frame.plan is not None and frame.plan.motion is not None and len(frame.plan.motion.boxes):
        record["motion"] = True
    record["detections"] = items
    if frame.plan is not None and frame.plan.regions is not None:
        regions = frame.plan.regions if scale is None else frame.plan.regions * scale
        record["regions"] = [[round(float(v), 1) for v in r] for r in regions]
    if frame.events:
        record["events"] = [e.to_dict() for e in frame.events]
        if not wall_time:
            for e in record["events"]:
                e.pop("time", None)
    if frame.errors:
        record["errors"] = frame.errors
    return record


def frame_pixels(frame: Frame) -> tuple[int, int] | None:
    """The analysed picture's size, never converting it to know (None: not known): the
    pixels its boxes are in (the live stream's records say so too)."""
    if frame.letterbox is not None:
        w, h = frame.letterbox.frame_w, frame.letterbox.frame_h
    elif frame.picture is not None or frame.converted:  # type: ignore[attr-defined]
        w, h = frame.size  # type: ignore[attr-defined]
    else:
        return None
    return (int(w), int(h)) if w and h else None


def _entries(det: Detections, scale: np.ndarray | None) -> list[dict]:
    """Each detection's entry of the JSON line; every column is read into Python values
    once (a quiet frame writes its tracks' lines 15 times a second, per camera)."""
    boxes = (det.xyxy if scale is None else det.xyxy * scale).tolist()
    scores, classes = det.score.tolist(), det.class_id.tolist()
    predicted = det.predicted.tolist() if det.predicted is not None else None
    tracks = det.track_id.tolist() if det.track_id is not None else None
    stationary = det.stationary.tolist() if det.stationary is not None else None
    attributes = [(stage, attr, attr.class_id.tolist(), attr.score.tolist()) for stage, attr in det.attributes.items()]
    items = []
    for i in range(len(det)):
        cid = int(classes[i])
        entry: dict = {"box": [round(v, 2) for v in boxes[i]], "score": round(scores[i], 4),
                       "class_id": cid, "class": det.names(cid), "predicted": bool(predicted is not None and predicted[i])}
        if tracks is not None and tracks[i] >= 0:
            entry["track"] = int(tracks[i])
        if stationary is not None and stationary[i]:
            entry["stationary"] = True
        labels = {stage: {"label": attr.names(int(ids[i])), "id": int(ids[i]), "score": round(attr_scores[i], 4)}
                  for stage, attr, ids, attr_scores in attributes if ids[i] >= 0}
        if labels:
            entry["labels"] = labels
        items.append(entry)
    return items


def _scale(pixels: tuple[int, int] | None, target: tuple[int, int] | None) -> np.ndarray | None:
    """How boxes in the frame's pixels become the recording's (None: the same size, or unknown)."""
    if pixels is None or target is None or pixels == target:
        return None
    return np.array([target[0] / pixels[0], target[1] / pixels[1]] * 2, np.float32)


class JsonlWriter:
    """Thread-safe appender; one instance per output file, opened on its first line.
    `lease` raises when this writer may no longer write (its camera moved elsewhere)."""

    def __init__(self, path: str, flush_s: float = 1.0, lease: Callable[[], None] | None = None,
                 on_file: OnFile | None = None, on_lost: OnLost | None = None):
        self.path = path
        self.flush_s = flush_s
        self.lease = lease
        self.on_file = on_file
        self.on_lost = on_lost
        self._fd: int | None = None
        self._pending: list[tuple[str, str]] = []  # (camera, line)
        self._closed = False
        self._flushed = time.monotonic()
        self._lock = threading.Lock()

    def write(self, record: dict) -> None:
        line = json.dumps(record, separators=(",", ":")) + "\n"
        with self._lock:
            if self._closed:
                return
            self._pending.append((record.get("camera", ""), line))
            now = time.monotonic()
            if now - self._flushed >= self.flush_s:
                self._flush()
                self._flushed = now

    def _flush(self) -> None:
        if not self._pending:
            return
        if self.lease is not None:
            self.lease()
        pending, self._pending = self._pending, []
        try:
            if self._fd is None:
                self._fd = open_for_appending(self.path)
                if self.on_file is not None:
                    self.on_file(self.path)
            append_whole(self._fd, "".join(line for _, line in pending).encode("utf-8"))
        except OSError:
            if self.on_lost is not None:
                for camera, n in Counter(camera for camera, _ in pending).items():
                    self.on_lost(camera, n)
            raise

    def rotate(self, path: str) -> None:
        """Finish the current file; the next lines start `path` (a new segment's file)."""
        with self._lock:
            self._flush()
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
            self.path = path
            self._flushed = time.monotonic()

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        with self._lock:
            self._closed = True
            try:
                self._flush()
            finally:
                self.discard()

    def discard(self) -> None:
        """Close without writing what waits (the writer lost its lease)."""
        self._closed = True
        self._pending.clear()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class InTimeOrder:
    """The lines of the file cameras that share one file, in the order of their frames'
    time (then camera id, then number), whatever order the cameras finish their frames
    in: a file run writes the same file every time. A line waits until every other file
    camera on the file has a later one waiting, or has ended; live cameras' lines never
    wait (they are written as they come)."""

    def __init__(self) -> None:
        self.waiting: dict[str, deque[tuple[tuple, dict]]] = {}
        self.open: set[str] = set()

    def add_camera(self, cam: str) -> None:
        self.waiting.setdefault(cam, deque())
        self.open.add(cam)

    def add(self, cam: str, record: dict) -> list[dict]:
        """Take the camera's next line; the lines that may be written now, in order."""
        key = (record.get("time") or 0.0, cam, record.get("seq", 0))
        self.waiting[cam].append((key, record))
        return self._ready()

    def end(self, cam: str) -> list[dict]:
        """The camera sends no more lines."""
        self.open.discard(cam)
        return self._ready()

    def _ready(self) -> list[dict]:
        out = []
        while True:
            if any(not self.waiting[c] for c in self.open):
                return out  # an open camera may still send an earlier line
            heads = [(q[0][0], c) for c, q in self.waiting.items() if q]
            if not heads:
                return out
            _, cam = min(heads)
            out.append(self.waiting[cam].popleft()[1])
            if not self.waiting[cam] and cam not in self.open:
                del self.waiting[cam]


MakeWriter = Callable[..., "JsonlWriter"]  # (camera or None: shared, path, lease=None)


class JsonlFiles:
    """Every camera's JSON lines writer: a file of its own (`{camera}` in the name), or the
    one all cameras share, closed when the last of them ends and reopened for appending
    when a camera comes after that; with time segments the shared file moves on by the
    wall clock (`WallSegments`), a camera's own with its video (`CameraSegments`)."""

    def __init__(self, config: JsonlOutputConfig, path: Callable[[str, str | None], str], make: MakeWriter):
        self.config = config
        self.path = path  # (camera, segment start or None) -> file
        self.make = make
        self.writers: dict[str, JsonlWriter] = {}
        self._lock = threading.Lock()
        self.shared: JsonlWriter | None = None
        self._shared_segments: WallSegments | None = None
        self._order = InTimeOrder()  # the shared file's lines of file cameras
        self._merge = threading.Lock()  # held from a line's place in that order until it is written
        if config.enabled and "{camera}" not in config.filename:
            self.shared = make(None, path("", None))

    def open(self, cam: str, lease: Callable[[], None] | None, segment_s: float | None, live: bool = False) -> None:
        with self._lock:
            if self.shared is None:
                self.writers[cam] = self.make(cam, self.path(cam, None), lease)
                return
            if self.shared.closed:  # every camera had ended
                self.shared = self.make(None, self.shared.path)
            if not live:
                with self._merge:
                    self._order.add_camera(cam)
            self.writers[cam] = self.shared
            if self._shared_segments is None and (segment_s is not None or START in self.config.filename):
                self._shared_segments = WallSegments(segment_s, last_stamp(self.path("", START)))

    def next(self, cam: str, start: str | None) -> JsonlWriter:
        """The camera's writer, moved on to its next segment (`start`: the camera's, a
        shared file's by the wall clock)."""
        jw = self.writers[cam]
        if jw is not self.shared:
            if start is not None:
                jw.rotate(self.path(cam, start))
        elif self._shared_segments is not None:
            with self._lock:
                shared = self._shared_segments.next()
                if shared is not None:
                    jw.rotate(self.path("", shared))
        return jw

    def write(self, cam: str, start: str | None, record: dict) -> None:
        """The camera's next line (`start`: its next segment begins with it)."""
        jw = self.next(cam, start)
        if jw is not self.shared or cam not in self._order.waiting:
            jw.write(record)
            return
        with self._merge:
            for ready in self._order.add(cam, record):
                jw.write(ready)

    def close(self, cam: str, last: bool) -> list[JsonlWriter]:
        """The camera leaves: the writers to close now (its own; with `last`, no other camera
        is open, the shared one too). Its lines that waited for the other cameras' go now."""
        if self.shared is not None and self.writers.get(cam) is self.shared:
            with self._merge:
                for ready in self._order.end(cam):
                    self.shared.write(ready)
        with self._lock:
            jw = self.writers.pop(cam, None)
            return ([jw] if jw is not None and jw is not self.shared else []) \
                + ([self.shared] if last and self.shared is not None else [])

    def open_files(self) -> list[str]:
        return [j.path for j in list(self.writers.values()) + [self.shared] if j is not None and not j.closed]
