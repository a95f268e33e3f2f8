"""The last stage: writes each camera's frames (annotated video, JSON lines) and closes
its files when the camera's end-of-stream arrives.

Encoding is the costliest per-frame CPU work after inference, so the sink runs a small
pool of workers; each camera is pinned to one worker (its frames stay in order, its
encoder is touched by one thread) and cameras are spread over the workers.

The two outputs fail separately: a video writer that fails (disk full, a folder that
vanished) stops that camera's video loudly (one error line, the camera's detail, the
exit status) while its JSON lines go on, and the reverse.
"""
from __future__ import annotations

import logging
import os
import threading
import time

from pipeline.config import OutputsConfig
from pipeline.frames import EndOfStream, Frame, Item, Resume
from pipeline.metrics.registry import Metrics
from pipeline.runtime.queues import BoundedQueue, QueueClosed
from pipeline.runtime.stage import RunControl
from pipeline.sinks.events import EventPublisher
from pipeline.sinks.jsonl import JsonlWriter, frame_record
from pipeline.sinks.preview import Preview
from pipeline.sinks.video import VideoWriter

log = logging.getLogger("pipeline.sink")


class SinkStage:
    name = "sink"

    def __init__(self, outputs: OutputsConfig, cameras: list[str], metrics: Metrics, control: RunControl,
                 workers: int, queue_size: int, live: set[str] | None = None, preview: Preview | None = None,
                 events: EventPublisher | None = None):
        self.outputs = outputs
        self.preview = preview  # the live view: offered every frame, keeps only watched cameras' newest
        self.events = events    # MQTT / webhook: every event of every frame
        self.metrics = metrics
        self.control = control
        self.workers = max(1, min(workers, len(cameras)))
        self.queues = [BoundedQueue(f"sink[{i}]", queue_size, "block") for i in range(self.workers)]
        for q in self.queues:
            metrics.queues[q.name] = q
        self.route: dict[str, BoundedQueue] = {}
        self.video: dict[str, VideoWriter] = {}
        self.jsonl: dict[str, JsonlWriter] = {}
        self.failed: dict[str, str] = {}  # "camera/output" -> why it stopped
        self._shared_jsonl: JsonlWriter | None = None
        if outputs.jsonl.enabled and "{camera}" not in outputs.jsonl.filename:
            self._shared_jsonl = JsonlWriter(os.path.join(outputs.dir, outputs.jsonl.filename), outputs.jsonl.flush_s)
        self.pending: set[str] = set()
        self.done = threading.Event()
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        for cam in cameras:
            self.add_camera(cam, cam in (live or set()))
        if not cameras:
            self.done.set()  # nothing to wait for until a camera is added

    def add_camera(self, cam: str, live: bool, resume: Resume = Resume()) -> None:
        """Open the outputs of a camera (at start-up, or one added while running)."""
        out = self.outputs
        with self._lock:
            loads = {id(q): 0 for q in self.queues}
            for routed in self.route.values():
                loads[id(routed)] += 1
            self.route[cam] = min(self.queues, key=lambda q: loads[id(q)])  # the worker with fewest cameras
            self.pending.add(cam)
            self.done.clear()
        self.failed = {k: v for k, v in self.failed.items() if not k.startswith(f"{cam}/")}
        if out.jsonl.enabled:
            if self._shared_jsonl is not None and self._shared_jsonl.closed:  # every camera had ended
                self._shared_jsonl = JsonlWriter(self._shared_jsonl.path, out.jsonl.flush_s, append=True)
            self.jsonl[cam] = self._shared_jsonl or JsonlWriter(out.jsonl_path(cam), out.jsonl.flush_s, resume.append)
        if out.video.enabled:
            # live cameras (and cameras that may move between machines) write crash-safe fragmented MP4
            fragmented = out.video.fragmented if out.video.fragmented is not None else live or resume.segment > 0
            self.video[cam] = VideoWriter(out.video_path(cam), out.video, fragmented=fragmented,
                                          segment=resume.segment)

    def emit(self, item: Item) -> None:
        self.route[item.camera].put(item)

    def start(self) -> None:
        for i, q in enumerate(self.queues):
            t = threading.Thread(target=self._loop, args=(q,), name=f"sink-{i}", daemon=True)
            self._threads.append(t)
            t.start()

    def join(self, timeout: float | None = None) -> None:
        for t in self._threads:
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

    def _fail(self, cam: str, output: str, error: BaseException) -> None:
        why = f"{type(error).__name__}: {getattr(error, 'strerror', None) or error}"
        if getattr(error, "filename", None):
            why += f" ({error.filename})"  # type: ignore[attr-defined]
        self.failed[f"{cam}/{output}"] = why
        self.metrics.camera(cam).output_errors[output] = why
        self.metrics.error(cam, self.name)
        log.error("camera %s: %s output failed, no more is written to it: %s", cam, output, why)

    def _write(self, frame: Frame) -> None:
        t0 = time.perf_counter()
        frame.stamps[self.name] = t0
        cam = frame.camera
        writer = self.video.get(cam)
        if writer is not None and f"{cam}/video" not in self.failed:
            try:
                writer.write(frame)
            except Exception as e:
                self._fail(cam, "video", e)
                self._close_quietly(writer)
        jw = self.jsonl.get(cam)
        if jw is not None and f"{cam}/jsonl" not in self.failed:
            try:
                jw.write(frame_record(frame))
            except Exception as e:
                self._fail(cam, "jsonl", e)
        if self.preview is not None:
            self.preview.offer(frame)
        if self.events is not None:
            for event in frame.events:
                self.events.publish(event)
        done = time.perf_counter()
        self.metrics.stage_busy(self.name, done - t0)
        self.metrics.frame_out(cam, done - frame.t_capture)
        self.metrics.boundaries(frame.t_capture, frame.stamps)

    @staticmethod
    def _close_quietly(writer: VideoWriter) -> None:
        try:
            writer.close()
        except Exception:
            pass

    def _close_camera(self, cam: str) -> None:
        with self._lock:
            if cam not in self.pending:
                return
            self.pending.discard(cam)
        writer = self.video.get(cam)
        if writer is not None and f"{cam}/video" not in self.failed:
            try:
                writer.close()
            except Exception as e:
                self._fail(cam, "video", e)
        jw = self.jsonl.get(cam)
        if jw is not None and jw is not self._shared_jsonl:
            jw.close()
        with self._lock:
            self.route.pop(cam, None)
            self.video.pop(cam, None)
            if jw is not self._shared_jsonl:
                self.jsonl.pop(cam, None)
            if not self.pending:
                if self._shared_jsonl is not None:
                    self._shared_jsonl.close()
                self.done.set()

    def close(self) -> None:
        for q in self.queues:
            q.close()
