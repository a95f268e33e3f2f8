"""The last stage: writes each camera's frames (annotated video, JSON lines) and closes
its files when the camera's end-of-stream arrives.

Encoding is the costliest per-frame CPU work after inference, so the sink runs a small
pool of workers; each camera is pinned to one worker (its frames stay in order, its
encoder is touched by one thread) and cameras are spread over the workers.
"""
from __future__ import annotations

import logging
import os
import threading
import time

from pipeline.config import OutputsConfig
from pipeline.frames import EndOfStream, Frame, Item
from pipeline.metrics.registry import Metrics
from pipeline.runtime.queues import BoundedQueue, QueueClosed
from pipeline.runtime.stage import RunControl, Threaded, contain
from pipeline.sinks.jsonl import JsonlWriter, frame_record
from pipeline.sinks.video import VideoWriter
from pipeline.stages.annotate import Labels

log = logging.getLogger("pipeline.sink")


class SinkStage(Threaded):
    name = "sink"

    def __init__(self, outputs: OutputsConfig, cameras: list[str], labels: Labels, metrics: Metrics,
                 control: RunControl, workers: int, queue_size: int, live: set[str] | None = None):
        self.outputs = outputs
        self.labels = labels
        self.metrics = metrics
        self.control = control
        self.workers = max(1, min(workers, len(cameras)))
        self.queues = [BoundedQueue(f"sink[{i}]", queue_size, "block") for i in range(self.workers)]
        for q in self.queues:
            metrics.queues[q.name] = q
        self.route = {cam: self.queues[i % self.workers] for i, cam in enumerate(cameras)}
        self.video: dict[str, VideoWriter] = {}
        self.jsonl: dict[str, JsonlWriter] = {}
        self._shared_jsonl: JsonlWriter | None = None
        self.cameras = cameras
        self.live = live or set()
        self.pending = set(cameras)
        self.done = threading.Event()
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []

    def _open_jsonl(self, cameras: list[str]) -> None:
        cfg = self.outputs.jsonl
        if not cfg.enabled:
            return
        if "{camera}" in cfg.filename:
            for cam in cameras:
                self.jsonl[cam] = JsonlWriter(os.path.join(self.outputs.dir, cfg.filename.format(camera=cam)))
        else:
            self._shared_jsonl = JsonlWriter(os.path.join(self.outputs.dir, cfg.filename))
            for cam in cameras:
                self.jsonl[cam] = self._shared_jsonl

    def emit(self, item: Item) -> None:
        self.route[item.camera].put(item)

    def start(self) -> None:
        self._open_jsonl(self.cameras)
        for i, q in enumerate(self.queues):
            t = threading.Thread(target=self._loop, args=(q,), name=f"sink-{i}", daemon=True)
            self._threads.append(t)
            t.start()

    def _loop(self, q: BoundedQueue) -> None:
        mine = [cam for cam, routed in self.route.items() if routed is q]
        try:
            while not self.control.abort.is_set():
                item = q.get(timeout=0.2)
                if item is None:
                    continue
                if isinstance(item, EndOfStream):
                    self._end(item)
                else:
                    self._write(item)
        except QueueClosed:
            pass
        finally:
            for cam in mine:  # abort path: finalise whatever is still open
                self._close_camera(cam)

    def _writer(self, cam: str) -> VideoWriter | None:
        if not self.outputs.video.enabled:
            return None
        w = self.video.get(cam)
        if w is None:
            path = os.path.join(self.outputs.dir, self.outputs.video.filename.format(camera=cam))
            fragmented = self.outputs.video.fragmented
            if fragmented is None:
                fragmented = cam in self.live
            w = self.video[cam] = VideoWriter(path, self.outputs.video, fragmented=fragmented)
        return w

    def _write(self, frame: Frame) -> None:
        t0 = time.perf_counter()
        frame.stamps[self.name] = t0
        try:
            writer = self._writer(frame.camera)
            if writer is not None:
                writer.write(frame)
            jw = self.jsonl.get(frame.camera)
            if jw is not None:
                jw.write(frame_record(frame, self.labels))
        except Exception as e:
            contain(self.metrics, self.name, frame, e)
        done = time.perf_counter()
        self.metrics.stage_busy(self.name, done - t0)
        self.metrics.frame_out(frame.camera, done - frame.t_capture)
        self.metrics.boundaries(frame.t_capture, frame.stamps)

    def _end(self, eos: EndOfStream) -> None:
        self._close_camera(eos.camera)

    def _close_camera(self, cam: str) -> None:
        with self._lock:
            if cam not in self.pending:
                return
            self.pending.discard(cam)
        writer = self.video.get(cam)
        if writer is not None:
            try:
                writer.close()
            except Exception as e:
                log.error("camera %s: could not finalise %s: %s", cam, writer.path, e)
        jw = self.jsonl.get(cam)
        if jw is not None and jw is not self._shared_jsonl:
            jw.close()
        with self._lock:
            if not self.pending:
                if self._shared_jsonl is not None:
                    self._shared_jsonl.close()
                self.done.set()

    def close(self) -> None:
        for q in self.queues:
            q.close()
