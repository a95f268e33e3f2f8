"""The files each camera writes: its annotated video and its JSON lines.

The two outputs fail separately: a video writer that fails (disk full, a folder that
vanished) stops that camera's video loudly (one error line, the camera's detail, the
exit status) while its JSON lines go on, and the reverse. With `{camera}` in the JSON
lines file name each camera has its own file; without it the cameras share one, closed
when the last of them ends.
"""
from __future__ import annotations

import logging
import os
import threading

from pipeline.config import OutputsConfig
from pipeline.frames import Frame, Resume
from pipeline.metrics.registry import Metrics
from pipeline.sinks.jsonl import JsonlWriter, frame_record
from pipeline.sinks.video import VideoWriter

log = logging.getLogger("pipeline.sink")


class CameraOutputs:
    """Every camera's writers; `write` and `close` of one camera are called from one thread."""

    def __init__(self, outputs: OutputsConfig, metrics: Metrics, stage: str = "sink"):
        self.outputs = outputs
        self.metrics = metrics
        self.stage = stage  # the stage its errors are counted against
        self.video: dict[str, VideoWriter] = {}
        self.jsonl: dict[str, JsonlWriter] = {}
        self.failed: dict[str, str] = {}  # "camera/output" -> why it stopped
        self._lock = threading.Lock()
        self._shared_jsonl: JsonlWriter | None = None
        if outputs.jsonl.enabled and "{camera}" not in outputs.jsonl.filename:
            self._shared_jsonl = JsonlWriter(os.path.join(outputs.dir, outputs.jsonl.filename), outputs.jsonl.flush_s)

    def open(self, cam: str, live: bool, resume: Resume = Resume()) -> None:
        """Open the outputs of a camera (at start-up, or one added while running)."""
        out = self.outputs
        self.failed = {k: v for k, v in self.failed.items() if not k.startswith(f"{cam}/")}
        if out.jsonl.enabled:
            with self._lock:
                if self._shared_jsonl is not None and self._shared_jsonl.closed:  # every camera had ended
                    self._shared_jsonl = JsonlWriter(self._shared_jsonl.path, out.jsonl.flush_s, append=True)
                self.jsonl[cam] = self._shared_jsonl or JsonlWriter(out.jsonl_path(cam), out.jsonl.flush_s,
                                                                    resume.append)
        if out.video.enabled:
            # live cameras (and cameras that may move between machines) write crash-safe fragmented MP4
            fragmented = out.video.fragmented if out.video.fragmented is not None else live or resume.segment > 0
            self.video[cam] = VideoWriter(out.video_path(cam), out.video, fragmented=fragmented,
                                          segment=resume.segment)

    def write(self, frame: Frame) -> None:
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

    def close(self, cam: str, last: bool) -> None:
        """Finalise a camera's files; `last`: no other camera is open (a shared file closes)."""
        writer = self.video.get(cam)
        if writer is not None and f"{cam}/video" not in self.failed:
            try:
                writer.close()
            except Exception as e:
                self._fail(cam, "video", e)
        with self._lock:
            jw = self.jsonl.pop(cam, None)
            self.video.pop(cam, None)
            if jw is not None and jw is not self._shared_jsonl:
                jw.close()
            if last and self._shared_jsonl is not None:
                self._shared_jsonl.close()

    def _fail(self, cam: str, output: str, error: BaseException) -> None:
        why = f"{type(error).__name__}: {getattr(error, 'strerror', None) or error}"
        if getattr(error, "filename", None):
            why += f" ({error.filename})"  # type: ignore[attr-defined]
        self.failed[f"{cam}/{output}"] = why
        self.metrics.camera(cam).output_errors[output] = why
        self.metrics.error(cam, self.stage)
        log.error("camera %s: %s output failed, no more is written to it: %s", cam, output, why)

    @staticmethod
    def _close_quietly(writer: VideoWriter) -> None:
        try:
            writer.close()
        except Exception:
            pass
