"""The last stage: hands each camera's frames to its outputs (`CameraOutputs`: annotated
video, JSON lines), the live view, the events' evidence and destinations
(`EventEvidence`), the store (`store.writer`: each frame's record) and the live page's
video sockets (`live.hub`: the record of each frame of a watched camera), and closes the
camera's files when its end-of-stream arrives.

Encoding is the costliest per-frame CPU work after inference, so the sink runs a small
pool of workers; each camera is pinned to one worker (its frames stay in order, its
encoder is touched by one thread) and cameras are spread over the workers.
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Callable

from pipeline.config import OutputsConfig
from pipeline.config.outputs import RecordConfig
from pipeline.frames import EndOfStream, Frame, Item, Resume
from pipeline.live.hub import LiveHub
from pipeline.metrics.registry import Metrics
from pipeline.runtime.queues import BoundedQueue, QueueClosed
from pipeline.runtime.stage import RunControl
from pipeline.runtime.threads import Capacity
from pipeline.events.event_evidence import EventEvidence
from pipeline.sinks.camera_files import CameraOutputs, frame_line
from pipeline.sinks.jsonl import frame_pixels
from pipeline.sinks.preview import Preview
from pipeline.sinks.views import Views
from pipeline.sinks.written import WrittenIndex
from pipeline.store.runlog import ClockLog
from pipeline.store.writer import StoreWriter

log = logging.getLogger("pipeline.sink")


def boxes_size(files: CameraOutputs, frame: Frame, record: dict) -> tuple[int, int] | None:
    """The pixels a frame's record's boxes are in: those it names, else its recording's
    (the file it lies in, else the latest), else the analysed picture's."""
    if record.get("pixels"):
        return tuple(record["pixels"])  # type: ignore[return-value]
    recording = files.recordings.get(frame.camera)
    if recording is not None:
        spot = files.spot(frame)
        return (spot.width, spot.height) if spot is not None else recording.plan.size
    return frame_pixels(frame)


class SinkStage:
    """Pins each camera to one of its workers; workers are added as cameras come (up to
    what `capacity` allows for that many cameras), so cameras added while running get the
    same encoder capacity as cameras configured at start."""

    name = "sink"

    def __init__(self, outputs: OutputsConfig, metrics: Metrics, control: RunControl, capacity: Capacity,
                 queue_size: int, evidence: EventEvidence, preview: Preview | None = None,
                 index: WrittenIndex | None = None, views: Views | None = None,
                 on_frame: Callable[[Frame], None] | None = None, store: StoreWriter | ClockLog | None = None,
                 live: LiveHub | None = None):
        self.files = CameraOutputs(outputs, metrics, self.name, index,
                                   views or Views(outputs.video, wants=preview.wants if preview is not None else None))
        self.evidence = evidence  # every event: its snapshot and clip, then the panel and the destinations
        self.preview = preview    # the live view: offered every frame, keeps only watched cameras' newest
        self.on_frame = on_frame  # every frame written, as it stands (Home Assistant's status)
        self.store = store  # every frame's record: the store's writer, or (store off) the run log's clocks
        self.live = live  # a watched camera's records, to its live streams' viewers
        self.metrics = metrics
        self.control = control
        self.capacity = capacity
        self.queue_size = queue_size
        self.queues: list[BoundedQueue] = []
        self.route: dict[str, BoundedQueue] = {}
        self.pending: set[str] = set()
        self.done = threading.Event()
        self.done.set()  # nothing to wait for until a camera is added
        self._started = False
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []

    @property
    def failed(self) -> dict[str, str]:
        """Outputs that stopped on an error ("camera/output" -> why)."""
        return self.files.failures.failed

    def add_camera(self, cam: str, live: bool, resume: Resume = Resume(), record: RecordConfig | None = None) -> None:
        """Open the outputs of a camera (at start-up, or one added while running); a
        recorded camera's event clips come from its recording."""
        with self._lock:
            if len(self.queues) < self.capacity.sink_workers(len(self.route) + 1):
                self._add_worker()
            loads = {id(q): 0 for q in self.queues}
            for routed in self.route.values():
                loads[id(routed)] += 1
            self.route[cam] = min(self.queues, key=lambda q: loads[id(q)])  # the worker with fewest cameras
            self.pending.add(cam)
            self.done.clear()
        if record is None or not record.enabled:
            self.files.open(cam, live, resume, on_packet=self.evidence.on_packet(cam))
            return
        self.files.open(cam, live, resume, record=record)
        self.files.recordings[cam].on_video = self.evidence.recording_clips(cam)

    def _add_worker(self) -> None:
        q: BoundedQueue = BoundedQueue(f"sink[{len(self.queues)}]", self.queue_size, "block")
        self.metrics.queues[q.name] = q
        self.queues.append(q)
        if self._started:
            self._start_worker(q)

    @property
    def workers(self) -> int:
        return len(self.queues)

    def accept(self, item: Item) -> None:
        route = self.route.get(item.camera)
        if route is None and self.control.abort.is_set():
            return  # aborted: the camera's files are final, what still comes is given up
        assert route is not None, f"camera {item.camera} has no open outputs"
        route.put(item)

    def start(self) -> None:
        with self._lock:
            self._started = True
            for q in self.queues:
                self._start_worker(q)

    def _start_worker(self, q: BoundedQueue) -> None:
        t = threading.Thread(target=self._loop, args=(q,), name=f"sink-{len(self._threads)}", daemon=True)
        self._threads.append(t)
        t.start()

    def join(self, timeout: float | None = None) -> None:
        for t in list(self._threads):
            t.join(timeout)

    def _loop(self, q: BoundedQueue) -> None:
        try:
            while not self.control.abort.is_set():
                item = q.get(timeout=0.2)
                if item is None:
                    continue
                if isinstance(item, EndOfStream):
                    self._close_camera(item.camera)
                else:
                    self._write(item)
        except QueueClosed:
            pass
        finally:
            for cam in [c for c, routed in list(self.route.items()) if routed is q]:
                self._close_camera(cam)  # abort path: finalise whatever is still open

    def _write(self, frame: Frame) -> None:
        t0 = time.perf_counter()
        frame.stamps[self.name] = t0
        if frame.events:  # the evidence paths and the recording's spot go into the events before the JSON line
            self.evidence.frame(frame, self.files.spot(frame))
        record = self.files.write(frame)
        if self.store is not None:
            captured = time.time() - (time.perf_counter() - frame.t_capture)  # t_capture: a perf_counter reading
            record = record if record is not None else frame_line(self.files, frame)
            self.store.offer(record, captured)
        if self.live is not None and self.live.watched(frame.camera):
            record = record if record is not None else frame_line(self.files, frame)
            try:
                self.live.frame(frame, record, boxes_size(self.files, frame, record), frame_pixels(frame))
            except Exception as e:  # the page's video is a viewer's extra: it never stops the files
                self.live.failed(frame.camera, e)
        if self.preview is not None:
            self.preview.offer(frame)
        if self.on_frame is not None:
            self.on_frame(frame)
        done = time.perf_counter()
        self.metrics.stage_busy(self.name, done - t0)
        self.metrics.frame_out(frame.camera, done - frame.t_capture)
        self.metrics.boundaries(frame.t_capture, frame.stamps)

    def _close_camera(self, cam: str) -> None:
        with self._lock:
            if cam not in self.pending:
                return
            self.pending.discard(cam)
            last = not self.pending
        self.files.close(cam, last)
        self.evidence.close_camera(cam)
        if self.store is not None:
            self.store.camera_ended(cam)
        with self._lock:
            self.route.pop(cam, None)
            if not self.pending:
                self.done.set()

    def stop(self) -> None:
        """Abort: queued frames are given up; each worker finalises its cameras' files."""
        for q in self.queues:
            q.close()

    close = stop
