"""Snapshots of events: the annotated frame that confirmed an event, at its full size, and
the object's crop with a margin, as JPEG under `<outputs.dir>/events/<camera>/`.

The sink names the files when it writes the frame (so its JSON line carries the paths)
and hands the frame to one small worker thread, which encodes the frame once however many
events it confirmed, writes the files, and only then lets the events go to their
destinations (with the picture, for MQTT's retained snapshot topic): whoever gets an
event can open its snapshot. A picture that cannot be written (a full disk) leaves no
partial file; it is counted per camera (`snapshots_lost`: the summary, the report, the
metrics and the exit status), said (the first, then every 100th), and the events sent
name only the pictures written, with `snapshot_error` saying why one is missing (the
JSON line, written before the pictures, names them as planned). Frames without events
cost nothing here.
"""
from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import queue
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Callable

import cv2
import numpy as np

from pipeline.config.outputs import EventsConfig
from pipeline.errors import one_line
from pipeline.frames import Event, Frame
from pipeline.events.clips import ClipRecorder, ClipRef
from pipeline.events.publisher import EventPublisher
from pipeline.recording.segment_plan import RecordingSpot

log = logging.getLogger("pipeline.evidence")

RECORDING_LEAD_S = 10.0  # a recording's clip ring keeps this much more: its packets run ahead of the analysis

Deliver = Callable[[list[Event], bytes | None], None]  # the frame's events (paths filled in) and its JPEG
Picture = Callable[[Frame], np.ndarray]  # a frame's snapshot picture (`Views.snapshot`)
LOG_EVERY_LOST = 100  # pictures lost: the first is said, then one line per this many (a full disk is one story)


def stamp(seconds: float) -> str:
    """Wall-clock time, UTC, ISO-8601 basic with milliseconds: sortable in file names."""
    t = datetime.fromtimestamp(seconds, timezone.utc)
    return t.strftime("%Y%m%dT%H%M%S") + f".{t.microsecond // 1000:03d}Z"


# The names of an event's files under events/<camera>/ (snapshot, crops, clip and its parts
# at size changes): retention removes no other
EVIDENCE_NAME = r"\d{8}T\d{6}\.\d{3}Z_\d+(?:_\d+_[^/]*\.crop\.jpg|\.jpg|(?:\.part\d+)?\.mp4)"

OnFile = Callable[[str, str], None]  # (camera, path): a file was written (the run's record, `sinks.written`)


@dataclass
class Job:
    frame: Frame
    frame_path: str
    crops: list[tuple[str, tuple[int, int, int, int]]]  # (path, box with margin)
    events: list[Event] = field(default_factory=list)
    camera: str = ""


class Snapshots:
    def __init__(self, root: str, deliver: Deliver, quality: int = 85, margin: float = 0.2, queue_size: int = 64,
                 on_lost: Callable[[str, int], None] | None = None, on_file: OnFile | None = None,
                 picture: Picture | None = None):
        self.root = root           # outputs.dir: paths in events are relative to it
        self.deliver = deliver
        self.picture = picture or (lambda frame: frame.image)  # made in this thread, not the sink's
        self.on_lost = on_lost     # (camera, pictures): pictures that could not be written
        self.on_file = on_file
        self.quality = quality
        self.margin = margin
        self._jobs: queue.Queue[Job | None] = queue.Queue(queue_size)
        self._thread: threading.Thread | None = None
        self.written = 0
        self.lost = 0  # pictures (frames and crops) not written

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="snapshots", daemon=True)
        self._thread.start()

    def frame(self, frame: Frame, wall_time: float) -> None:
        """Name the snapshot files of this frame's events (into the events, now) and queue
        the frame for encoding; the events are delivered once the files are written."""
        folder = os.path.join("events", frame.camera)
        base = f"{stamp(wall_time)}_{frame.seq}"
        job = Job(frame, os.path.join(folder, f"{base}.jpg"), [], frame.events, frame.camera)
        for i, event in enumerate(frame.events):
            event.snapshot = job.frame_path
            box = self._box(frame, event)
            if box is not None:
                event.crop = os.path.join(folder, f"{base}_{i}_{event.name}.crop.jpg")
                job.crops.append((event.crop, box))
        self._jobs.put(job)

    def _box(self, frame: Frame, event: Event) -> tuple[int, int, int, int] | None:
        """The event's object, grown by the margin and clipped to the frame."""
        det = frame.detections
        if det is None or det.track_id is None:
            return None
        rows = np.flatnonzero(det.track_id == event.track)
        if not len(rows):
            return None
        x1, y1, x2, y2 = det.xyxy[rows[0]]
        mx, my = (x2 - x1) * self.margin, (y2 - y1) * self.margin
        w, h = frame.size
        box = (int(max(0, x1 - mx)), int(max(0, y1 - my)), int(min(w, x2 + mx)), int(min(h, y2 + my)))
        return box if box[2] > box[0] and box[3] > box[1] else None

    def _loop(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            jpeg, events = self._write(job)
            try:
                self.deliver(events, jpeg)
            except Exception:  # a destination's trouble is its own; the next frame goes on
                log.exception("snapshots: delivering events failed")

    def _write(self, job: Job) -> tuple[bytes | None, list[Event]]:
        """The frame's JPEG (None: not written) and its events as they go out: naming only
        the pictures written, with `snapshot_error` where one is missing. The events are
        copies: the sink may still be writing the originals into the JSON lines."""
        events = [dataclasses.replace(e) for e in job.events]
        try:
            image = self.picture(job.frame)
            jpeg = self._encode(image)
            self._save(job.camera, job.frame_path, jpeg)
        except Exception as e:
            why = self._lost(job, job.frame_path, e, 1 + len(job.crops))
            for event in events:
                event.snapshot, event.crop, event.snapshot_error = None, None, why
            return None, events
        self.written += 1
        for path, (x1, y1, x2, y2) in job.crops:
            try:
                self._save(job.camera, path, self._encode(image[y1:y2, x1:x2]))
            except Exception as e:
                why = self._lost(job, path, e, 1)
                for event in events:
                    if event.crop == path:
                        event.crop, event.snapshot_error = None, f"crop: {why}"
        return jpeg, events

    def _encode(self, image: np.ndarray) -> bytes:
        ok, buf = cv2.imencode(".jpg", image, [cv2.IMWRITE_JPEG_QUALITY, self.quality])
        if not ok:
            raise ValueError("JPEG encoding failed")
        return buf.tobytes()

    def _lost(self, job: Job, path: str, error: Exception, pictures: int) -> str:
        """Count and say (the first, then every Nth) pictures not written; why, in words."""
        why = error.strerror if isinstance(error, OSError) and error.strerror else one_line(error)
        before, self.lost = self.lost, self.lost + pictures
        if before == 0 or before // LOG_EVERY_LOST != self.lost // LOG_EVERY_LOST:
            log.warning("camera %s: snapshot %s could not be written (%s); %d picture(s) lost so far", job.camera,
                        path, why, self.lost)
        if self.on_lost is not None:
            self.on_lost(job.camera, pictures)
        return why

    def _save(self, camera: str, relative: str, data: bytes) -> None:
        path = os.path.join(self.root, relative)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = path + ".tmp"
        try:
            with open(tmp, "wb") as f:
                f.write(data)
            os.replace(tmp, path)  # a reader never sees half a picture
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)  # a full disk leaves no half-written picture behind
            raise
        if self.on_file is not None:
            self.on_file(camera, path)

    def close(self, timeout: float = 10.0) -> None:
        """Write what is queued, then stop."""
        if self._thread is None:
            return
        self._jobs.put(None)
        self._thread.join(timeout)


class RecentEvents:
    """The newest events of the run (with their evidence paths), for the live page's panel."""

    def __init__(self, size: int = 200):
        self._events: deque[dict] = deque(maxlen=size)
        self._lock = threading.Lock()
        self._count = 0

    def add(self, events: list[Event]) -> None:
        with self._lock:
            for event in events:
                self._count += 1
                self._events.append({**event.to_dict(), "id": self._count})

    def newest(self, limit: int = 50, after: int = 0) -> list[dict]:
        """Up to `limit` events newer than id `after`, newest first."""
        with self._lock:
            return [e for e in reversed(self._events) if e["id"] > after][:limit]


class EventEvidence:
    """What the sink does with a frame's events: their wall-clock time, evidence paths
    (clip, snapshot) and place in the recording go into the events before the frame's JSON
    line is written, then the events go to the live page's panel and to the destinations,
    once their snapshot exists."""

    def __init__(self, root: str, config: EventsConfig, publisher: EventPublisher | None, recent: RecentEvents,
                 on_lost: Callable[[str, int], None] | None = None, on_file: OnFile | None = None,
                 picture: Picture | None = None):
        self.root = root
        self.on_file = on_file
        self.publisher = publisher
        self.recent = recent
        self.clips = config.clips
        self.recorders: dict[str, ClipRecorder] = {}
        self.by_time: set[str] = set()  # cameras whose clips come from their recording: events placed by time
        self.snapshots = Snapshots(root, self._deliver, on_lost=on_lost, on_file=on_file,
                                   picture=picture) if config.snapshots else None

    def start(self) -> None:
        if self.snapshots is not None:
            self.snapshots.start()

    def on_packet(self, camera: str) -> Callable | None:
        """The camera's clip recorder, fed every encoded packet (None: clips are off)."""
        recorder = self._recorder(camera, 0.0)
        return recorder.packet if recorder is not None else None

    def recording_clips(self, camera: str) -> Callable | None:
        """The camera's clip recorder fed by its recording (original quality): `add(held,
        stream)` on the recording's timeline, where its events are placed (None: clips are off)."""
        recorder = self._recorder(camera, RECORDING_LEAD_S)
        if recorder is None:
            return None
        self.by_time.add(camera)
        return recorder.add

    def _recorder(self, camera: str, lead_s: float) -> ClipRecorder | None:
        self.by_time.discard(camera)
        if self.clips is None:
            return None
        on_file = self.on_file
        recorder = self.recorders[camera] = ClipRecorder(
            os.path.join(self.root, "events", camera), self.clips.pre_s, self.clips.post_s,
            int(self.clips.max_mb * 1e6), lead_s, on_file=None if on_file is None else lambda path: on_file(camera, path),
            max_s=self.clips.max_s)
        return recorder

    def frame(self, frame: Frame, spot: RecordingSpot | None = None) -> None:
        """Called by the sink for a frame with events, before its JSON line; `spot`: where
        the frame lies in its camera's recording (None: not recorded)."""
        wall = time.time()
        recorder = self.recorders.get(frame.camera)
        by_time = frame.camera in self.by_time
        for event in frame.events:
            event.time = round(wall, 3)
            if spot is not None:
                event.recording, event.recording_time = spot.file, spot.time
            if recorder is not None and (frame.record_time is not None or not by_time):
                self._clip(event, recorder.event(f"{stamp(wall)}_{frame.seq}", frame.record_time if by_time else None))
        if self.snapshots is not None:
            self.snapshots.frame(frame, wall)  # the events go on once the pictures are written
        else:
            self._deliver(frame.events, None)

    def _clip(self, event: Event, clip: ClipRef) -> None:
        if clip.path is not None:
            event.clip = os.path.relpath(clip.path, self.root)
        event.clip_pre_s = clip.pre_s
        event.clip_note = clip.note or None

    def _deliver(self, events: list[Event], jpeg: bytes | None) -> None:
        self.recent.add(events)
        if self.publisher is None:
            return
        for event in events:
            self.publisher.publish(event.to_dict())
        if jpeg is not None and events:
            self.publisher.picture(events[0].camera, jpeg)

    def is_open(self, path: str) -> bool:
        """Whether `path` is a clip still being written."""
        clips = [c for r in list(self.recorders.values()) for c in r.open_files]
        return os.path.abspath(path) in {os.path.abspath(c) for c in clips}

    def close_camera(self, camera: str) -> None:
        recorder = self.recorders.pop(camera, None)
        if recorder is not None:
            recorder.close()

    def close(self) -> None:
        """Write the snapshots queued and finish the clips under way."""
        if self.snapshots is not None:
            self.snapshots.close()
        for camera in list(self.recorders):
            self.close_camera(camera)
