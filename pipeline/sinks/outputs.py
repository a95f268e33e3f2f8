"""The files each camera writes: its annotated video and its JSON lines.

The two outputs fail separately: a video writer that fails (disk full, a folder that
vanished) stops that camera's video loudly (one error line, the camera's detail, the
exit status) while its JSON lines go on, and the reverse. With `{camera}` in the JSON
lines file name each camera has its own file; without it the cameras share one, closed
when the last of them ends.

A camera that may run on more than one machine in turn (a cluster) writes under a lease:
`Lease` is a small file per camera in `outputs.dir/.leases/` holding the epoch of the
writer that owns its outputs. The driver grants a new epoch before a camera moves (and
before its outputs are cut back to where it resumes); every writer checks its epoch
before each write reaches the disk (JSON lines at each flush, video at each fragment),
so a host that was only presumed dead (hung, cut off) never writes again when it wakes.
A camera that returns under an id that ran before continues in new files (its next
video segment, its JSON lines appended): nothing it wrote is overwritten.

Every file is entered in the folder's record of what the run wrote (`WrittenIndex`)
once it exists: retention removes nothing else. What a failed output could not write
is counted per camera (`video_frames_lost`, `jsonl_lines_lost`): what its last file
does not hold and every frame after.
"""
from __future__ import annotations

import logging
import os
import threading
from dataclasses import replace

from pipeline.config import OutputsConfig
from pipeline.frames import Frame, Resume
from pipeline.metrics.registry import Metrics
from pipeline.sinks.jsonl import JsonlWriter, frame_record
from pipeline.sinks.segments import START, CameraSegments, WallSegments, last_stamp
from pipeline.sinks.video import OnPacket, VideoWriter, segment_path
from pipeline.sinks.written import SHARED, WrittenIndex

log = logging.getLogger("pipeline.sink")

LEASES = ".leases"


class Fenced(Exception):
    """The camera's lease moved to another writer: this one must not write again."""


class Lease:
    """A writer's claim on one camera's outputs: valid while the lease file holds its epoch."""

    def __init__(self, folder: str, camera: str, epoch: int):
        self.path = lease_path(folder, camera)
        self.epoch = epoch

    @staticmethod
    def grant(folder: str, camera: str) -> int:
        """The next epoch of `camera`'s outputs, written atomically (a reader sees the old
        file or the new one, never a torn one); earlier writers are fenced from now on."""
        path = lease_path(folder, camera)
        epoch = read_epoch(path) + 1
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            f.write(str(epoch))
        os.replace(tmp, path)
        return epoch

    def check(self) -> None:
        """Raise `Fenced` when another writer holds the camera now. Read every time (a
        write happens about once a second per output): a cached inode could be reused."""
        holder = read_epoch(self.path)
        if holder != self.epoch:
            raise Fenced(f"lease {self.epoch} of {self.path} was taken over (epoch {holder})")


def lease_path(folder: str, camera: str) -> str:
    return os.path.join(folder, LEASES, f"{camera}.lease")


def read_epoch(path: str) -> int:
    try:
        with open(path) as f:
            return int(f.read().strip() or 0)
    except (FileNotFoundError, ValueError):
        return 0


def next_segment(path: str) -> int:
    """The first video segment of `path` not written yet."""
    n = 0
    while os.path.exists(segment_path(path, n)):
        n += 1
    return n


class CameraOutputs:
    """Every camera's writers; `write` and `close` of one camera are called from one thread.
    With time segments (`outputs.video.segment_s`, or `{start}` in a file name) a camera's
    video and JSON lines move to their next files together, at the same frame; see
    `sinks.segments`. `is_open` tells retention which files are still being written."""

    def __init__(self, outputs: OutputsConfig, metrics: Metrics, stage: str = "sink",
                 index: WrittenIndex | None = None):
        self.outputs = outputs
        self.metrics = metrics
        self.stage = stage  # the stage its errors are counted against
        self.index = index or WrittenIndex(outputs.dir)
        self.video: dict[str, VideoWriter] = {}
        self.jsonl: dict[str, JsonlWriter] = {}
        self.segments: dict[str, CameraSegments] = {}  # cameras with time-named files
        self.failed: dict[str, str] = {}  # "camera/output" -> why it stopped
        self.fenced: set[str] = set()  # cameras whose lease another writer took: nothing more is written
        self.ran: set[str] = set()  # cameras opened before: an id that returns continues its files
        self._lock = threading.Lock()
        self._shared_jsonl: JsonlWriter | None = None
        self._shared_segments: WallSegments | None = None
        if outputs.jsonl.enabled and "{camera}" not in outputs.jsonl.filename:
            self._shared_jsonl = self._jsonl_writer(SHARED, os.path.join(outputs.dir, outputs.jsonl.filename))

    def _jsonl_writer(self, cam: str, path: str, append: bool = False, lease=None) -> JsonlWriter:
        return JsonlWriter(path, self.outputs.jsonl.flush_s, append, lease, on_file=lambda f: self.index.add(cam, f),
                           on_lost=lambda c, n: self.metrics.lost(c, "jsonl", n))

    def open(self, cam: str, live: bool, resume: Resume = Resume(), on_packet: OnPacket | None = None) -> None:
        """Open the outputs of a camera (at start-up, or one added while running);
        `on_packet` sees every packet its video encoder makes, in every segment (event clips)."""
        out = self.outputs
        self.failed = {k: v for k, v in self.failed.items() if not k.startswith(f"{cam}/")}
        self.fenced.discard(cam)
        if cam in self.ran:  # the id returns: new segments, JSON lines appended
            segment = next_segment(out.video_path(cam)) if out.video.enabled else 0
            resume = replace(resume, segment=max(resume.segment, segment), append=True)
        self.ran.add(cam)
        self._open_segments(cam, live)
        lease = Lease(out.dir, cam, resume.epoch).check if resume.epoch else None
        if out.jsonl.enabled:
            with self._lock:
                if self._shared_jsonl is not None and self._shared_jsonl.closed:  # every camera had ended
                    self._shared_jsonl = self._jsonl_writer(SHARED, self._shared_jsonl.path, append=True)
                self.jsonl[cam] = self._shared_jsonl or self._jsonl_writer(cam, out.jsonl_path(cam), resume.append,
                                                                           lease)
        if out.video.enabled:
            # live cameras (and cameras that may move between machines) write crash-safe fragmented MP4
            fragmented = out.video.fragmented if out.video.fragmented is not None else live or resume.segment > 0
            self.video[cam] = VideoWriter(out.video_path(cam), out.video, fragmented=fragmented,
                                          segment=resume.segment, lease=lease, on_packet=on_packet,
                                          on_file=lambda f: self.index.add(cam, f))
        self.metrics.outputs_opened(cam)

    def _open_segments(self, cam: str, live: bool) -> None:
        """Time-named files for this camera (and the shared JSON lines) when asked for;
        new stamps come after any this camera already has on disk."""
        out = self.outputs
        length = out.video.segment_for(live)
        shared = self._shared_jsonl is not None
        patterns = ([out.video_path(cam, START)] if out.video.enabled else []) \
            + ([out.jsonl_path(cam, START)] if out.jsonl.enabled and not shared else [])
        if length is not None or any(START in f for f in (out.video.filename, out.jsonl.filename)):
            self.segments[cam] = CameraSegments(length, live, last_stamp(*patterns))
        if shared and self._shared_segments is None and (length is not None or START in out.jsonl.filename):
            self._shared_segments = WallSegments(length, last_stamp(out.jsonl_path("", START)))

    def write(self, frame: Frame) -> None:
        cam = frame.camera
        if cam in self.fenced:
            return
        writer = self.video.get(cam)
        seg = self.segments.get(cam)
        start = seg.next(frame, writer is not None and writer.needs_new_file(frame)) if seg is not None else None
        try:
            if writer is not None and self._working(cam, "video"):
                try:
                    if start is not None:
                        writer.cut(self.outputs.video_path(cam, start))
                    writer.write(frame)
                except Fenced:
                    raise
                except Exception as e:
                    self._fail(cam, "video", e)
                    self.metrics.lost(cam, "video", writer.abandon())
            jw = self.jsonl.get(cam)
            if jw is not None and self._working(cam, "jsonl"):
                try:
                    self._next_jsonl(cam, jw, start)
                    jw.write(frame_record(frame))
                except Fenced:
                    raise
                except Exception as e:
                    self._fail(cam, "jsonl", e)
        except Fenced as e:
            self._fence(cam, e)
        self._show_segment(cam, writer, start)

    def _working(self, cam: str, output: str) -> bool:
        """Whether the camera's output still writes; a frame for a failed one is lost."""
        if f"{cam}/{output}" not in self.failed:
            return True
        self.metrics.lost(cam, output, 1)
        return False

    def _next_jsonl(self, cam: str, jw: JsonlWriter, start: str | None) -> None:
        if jw is not self._shared_jsonl:
            if start is not None:
                jw.rotate(self.outputs.jsonl_path(cam, start))
        elif self._shared_segments is not None:
            with self._lock:
                shared = self._shared_segments.next()
                if shared is not None:
                    jw.rotate(self.outputs.jsonl_path("", shared))

    def _show_segment(self, cam: str, writer: VideoWriter | None, start: str | None) -> None:
        """The camera's current file in its metrics (`/api/cameras`, the live page)."""
        stats = self.metrics.camera(cam)
        if writer is not None:
            stats.segment = os.path.basename(writer.file)
        elif start is not None:
            stats.segment = os.path.basename(self.outputs.jsonl_path(cam, start))

    def is_open(self, path: str) -> bool:
        """Whether a file is still being written (retention never removes it)."""
        files = [w.open_file for w in list(self.video.values())]
        files += [j.path for j in list(self.jsonl.values()) + [self._shared_jsonl] if j is not None and not j.closed]
        return os.path.abspath(path) in {os.path.abspath(f) for f in files if f}

    def _fence(self, cam: str, why: Fenced) -> None:
        """Another writer owns the camera now: stop, leaving its files as they are."""
        self.fenced.add(cam)
        log.error("camera %s: its outputs moved to another writer; this one stops writing (%s)", cam, why)
        writer = self.video.get(cam)
        if writer is not None:
            self._close_quietly(writer)  # its file sees no more bytes: the lease refuses them
        jw = self.jsonl.get(cam)
        if jw is not None:
            jw.discard()

    def close(self, cam: str, last: bool) -> None:
        """Finalise a camera's files; `last`: no other camera is open (a shared file closes)."""
        writer = self.video.get(cam)
        try:
            if writer is not None and f"{cam}/video" not in self.failed and cam not in self.fenced:
                try:
                    writer.close()
                except Fenced:
                    raise
                except Exception as e:
                    self._fail(cam, "video", e)
                    self.metrics.lost(cam, "video", writer.abandon())
            with self._lock:
                jw = self.jsonl.pop(cam, None)
                for closing in ([jw] if jw is not None and jw is not self._shared_jsonl else []) \
                        + ([self._shared_jsonl] if last and self._shared_jsonl is not None else []):
                    try:
                        closing.close()
                    except Fenced:
                        raise
                    except Exception as e:  # its last lines (counted lost) could not be written
                        self._fail(cam, "jsonl", e)
        except Fenced as e:
            self._fence(cam, e)
        finally:
            self.video.pop(cam, None)
            self.jsonl.pop(cam, None)
            self.segments.pop(cam, None)
            self.metrics.outputs_closed(cam)

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
