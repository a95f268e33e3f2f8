"""The files each camera writes: its annotated video (each frame's `view` the video takes,
`sinks.views`), its JSON lines (every frame) and its recording
(`recording.recorder`: every JSON line of a recorded camera names the recording's file and
the frame's time in it, its boxes in the recording's pixels).

The outputs fail separately: a video writer that fails (disk full, a folder that
vanished) stops that camera's video loudly (one error line, the camera's detail, the
exit status) while its JSON lines go on, and the reverse. With `{camera}` in the JSON
lines file name each camera has its own file; without it the cameras share one, closed
when the last of them ends.

A camera that may run on more than one machine in turn writes under a lease (`sinks.lease`).
A camera that returns under an id that ran before, or runs again beside recordings of
an earlier run, continues in new files (its next video segment); any run's JSON lines
are appended to a file already there, and its video never replaces one (`VideoWriter`
takes the next free name): nothing written before is overwritten, and the rows of a
recording kept stay.
"""
from __future__ import annotations

import contextlib
import logging
import os
from dataclasses import replace
from typing import Callable

from pipeline.config import OutputsConfig
from pipeline.config.outputs import RecordConfig
from pipeline.frames import Frame, Resume
from pipeline.metrics.registry import CameraStats, Metrics
from pipeline.sinks.encoder import OnPacket, VideoWriter
from pipeline.sinks.jsonl import JsonlFiles, JsonlWriter, frame_record
from pipeline.sinks.lease import Fenced, Lease
from pipeline.recording.recorder import Recording
from pipeline.recording.segment_plan import RecordingSpot
from pipeline.recording.segments import START, CameraSegments, last_stamp, segment_path
from pipeline.sinks.views import Views
from pipeline.sinks.written import SHARED, WrittenIndex

log = logging.getLogger("pipeline.sink")

def next_segment(path: str) -> int:
    """The first video segment of `path` not written yet."""
    n = 0
    while os.path.exists(segment_path(path, n)):
        n += 1
    return n


def time_segments(out: OutputsConfig, cam: str, live: bool, own_jsonl: bool) -> CameraSegments | None:
    """Time-named files for a camera when asked for (None: one file each); new stamps come
    after any the camera already has on disk."""
    length = out.video.segment_for(live)
    if length is None and not any(START in f for f in (out.video.filename, out.jsonl.filename)):
        return None
    patterns = ([out.video_path(cam, START)] if out.video.enabled else []) \
        + ([out.jsonl_path(cam, START)] if out.jsonl.enabled and own_jsonl else [])
    return CameraSegments(length, live, last_stamp(*patterns))


def open_recording(out: OutputsConfig, cam: str, live: bool, record: RecordConfig,
                   on_failure: Callable[[BaseException], None], on_file: Callable[[str], None]) -> Recording:
    """A camera's recording: it writes from the camera's first keyframe on, each file
    named by its true start (never one already on disk)."""
    return Recording(cam, out.dir, record, record.segment_for(live, out.video.segment_s), live,
                     path=lambda stamp: out.record_path(cam, record.filename, stamp), on_failure=on_failure,
                     on_file=on_file)


def beside_recordings(out: OutputsConfig, cam: str, record: RecordConfig | None) -> bool:
    """Whether a recorded camera runs beside recordings of an earlier run: it goes on as
    an id that returns (the rows those recordings' playback reads are never overwritten)."""
    return record is not None and record.enabled and last_stamp(out.record_path(cam, record.filename)) is not None


class OutputFailures:
    """The outputs that stopped on an error, each said once (`camera/output` -> why): the
    camera's other outputs go on, and its frames for a stopped one are counted lost."""

    def __init__(self, metrics: Metrics, stage: str):
        self.metrics = metrics
        self.stage = stage  # the stage its errors are counted against
        self.failed: dict[str, str] = {}

    def fail(self, cam: str, output: str, error: BaseException) -> None:
        why = f"{type(error).__name__}: {getattr(error, 'strerror', None) or error}"
        if getattr(error, "filename", None):
            why += f" ({error.filename})"  # type: ignore[attr-defined]
        self.failed[f"{cam}/{output}"] = why
        self.metrics.camera(cam).output_errors[output] = why
        self.metrics.error(cam, self.stage)
        log.error("camera %s: %s output failed, no more is written to it: %s", cam, output, why)

    def working(self, cam: str, output: str, count_lost: bool = True) -> bool:
        """Whether the camera's output still writes; a frame for a stopped one is lost."""
        if f"{cam}/{output}" not in self.failed:
            return True
        if count_lost:
            self.metrics.lost(cam, output, 1)
        return False

    def forget(self, cam: str) -> None:
        """The camera starts again (an id that returns): its outputs write again."""
        self.failed = {k: v for k, v in self.failed.items() if not k.startswith(f"{cam}/")}


def show_segment(stats: CameraStats, writer: VideoWriter | None, jsonl: str | None) -> None:
    """The camera's current file in its metrics (`/api/cameras`, the live page): its
    video's, else its JSON lines' where they moved to a new file (`jsonl`)."""
    if writer is not None:
        stats.segment = os.path.basename(writer.file)
    elif jsonl is not None:
        stats.segment = os.path.basename(jsonl)


def frame_line(files: "CameraOutputs", frame: Frame) -> dict:
    """The frame's JSON line as a record (`sinks.jsonl.frame_record`), as its camera writes it."""
    recording = files.recordings.get(frame.camera)
    return frame_record(frame, files.spot(frame), recording is not None, frame.camera in files.live,
                        recording.plan.size if recording is not None else None)


class CameraOutputs:
    """Every camera's writers; `write` and `close` of one camera are called from one thread.
    With time segments (`outputs.video.segment_s`, or `{start}` in a file name) a camera's
    video and JSON lines move to their next files together, at the same frame; see
    `recording.segments`. `is_open` tells retention which files are still being written."""

    def __init__(self, outputs: OutputsConfig, metrics: Metrics, stage: str = "sink",
                 index: WrittenIndex | None = None, views: Views | None = None):
        self.outputs = outputs
        self.metrics = metrics
        self.failures = OutputFailures(metrics, stage)
        self._fail = self.failures.fail
        self.views = views or Views(outputs.video)  # decided here where the graph has no annotate stage
        self.index = index or WrittenIndex(outputs.dir)
        self.video: dict[str, VideoWriter] = {}
        self.jsonl = JsonlFiles(outputs.jsonl, outputs.jsonl_path, self._jsonl_writer)
        self.segments: dict[str, CameraSegments] = {}  # cameras with time-named files
        self.recordings: dict[str, Recording] = {}
        self.record_names: dict[str, str] = {}  # camera -> its recording's file name (kept once it ends: retention)
        self.fenced: set[str] = set()  # cameras whose lease another writer took: nothing more is written
        self.ran: set[str] = set()  # cameras opened before: an id that returns continues its files
        self.live: set[str] = set()  # live cameras: their events' JSON lines say when they were written

    def _jsonl_writer(self, cam: str | None, path: str, lease=None) -> JsonlWriter:
        """A camera's JSON lines writer (`cam` None: the one all cameras share), whose file
        is entered in the record of what the run wrote and whose lost lines are counted."""
        owner = SHARED if cam is None else cam
        return JsonlWriter(path, self.outputs.jsonl.flush_s, lease, on_file=lambda f: self.index.add(owner, f),
                           on_lost=lambda c, n: self.metrics.lost(c, "jsonl", n))

    def open(self, cam: str, live: bool, resume: Resume = Resume(), on_packet: OnPacket | None = None,
             record: RecordConfig | None = None) -> None:
        """Open the outputs of a camera (at start-up, or one added while running);
        `on_packet` sees every packet its video encoder makes, in every segment (event
        clips); `record`: its recording's settings (`record_for`), where it has one."""
        out = self.outputs
        self.failures.forget(cam)
        self.fenced.discard(cam)
        if cam in self.ran or beside_recordings(out, cam, record):  # new segments (JSON lines are always appended)
            segment = next_segment(out.video_path(cam)) if out.video.enabled else 0
            resume = replace(resume, segment=max(resume.segment, segment))
        self.ran.add(cam)
        (self.live.add if live else self.live.discard)(cam)
        if (seg := time_segments(out, cam, live, own_jsonl=self.jsonl.shared is None)) is not None:
            self.segments[cam] = seg
        lease = Lease(out.dir, cam, resume.epoch).check if resume.epoch else None
        if out.jsonl.enabled:
            self.jsonl.open(cam, lease, out.video.segment_for(live), live)
        if out.video.enabled:
            # live cameras (and cameras that may move between machines) write crash-safe fragmented MP4
            fragmented = out.video.fragmented if out.video.fragmented is not None else live or resume.segment > 0
            self.video[cam] = VideoWriter(out.video_path(cam), out.video, fragmented=fragmented,
                                          segment=resume.segment, lease=lease, on_packet=on_packet,
                                          on_file=lambda f: self.index.add(cam, f))
        if record is not None and record.enabled:
            self.record_names[cam] = record.filename
            recording = self.recordings[cam] = open_recording(out, cam, live, record,
                                                              lambda e: self._fail(cam, "recording", e),
                                                              lambda f: self.index.add(cam, f))
            self.metrics.camera(cam).recording = recording.stats
        self.metrics.outputs_opened(cam)

    def write(self, frame: Frame) -> dict | None:
        cam, record = frame.camera, None
        if cam in self.fenced:
            return None
        picture = self.views.video_picture(frame)  # None: not in the video
        writer = self.video.get(cam)
        seg = self.segments.get(cam)
        start = seg.next(frame, writer is not None and writer.needs_new_file(picture)) if seg is not None else None
        try:
            if writer is not None and self.failures.working(cam, "video"):
                try:
                    if start is not None:
                        writer.cut(self.outputs.video_path(cam, start))
                    if picture is not None:
                        writer.write(frame, picture)
                except Fenced:
                    raise
                except Exception as e:
                    self._fail(cam, "video", e)
                    self.metrics.lost(cam, "video", writer.abandon())
            if cam in self.jsonl.writers and self.failures.working(cam, "jsonl"):
                try:
                    record = frame_line(self, frame)
                    self.jsonl.write(cam, start, record)
                except Fenced:
                    raise
                except Exception as e:
                    self._fail(cam, "jsonl", e)
        except Fenced as e:
            self._fence(cam, e)
        jsonl = self.outputs.jsonl_path(cam, start) if start is not None else None
        show_segment(self.metrics.camera(cam), writer, jsonl)
        return record  # its JSON line, where one was made (the store takes it)

    def spot(self, frame: Frame) -> RecordingSpot | None:
        """Where the frame lies in its camera's recording (None: no recording, or in none of its files)."""
        recording = self.recordings.get(frame.camera)
        return recording.spot(frame.record_time) if recording is not None else None

    def is_open(self, path: str) -> bool:
        """Whether a file is still being written (retention never removes it)."""
        files = [w.open_file for w in list(self.video.values())] + self.jsonl.open_files() \
            + [f for r in list(self.recordings.values()) for f in r.writer.open_files]
        return os.path.abspath(path) in {os.path.abspath(f) for f in files if f}

    def _fence(self, cam: str, why: Fenced) -> None:
        """Another writer owns the camera now: stop, leaving its files as they are."""
        self.fenced.add(cam)
        log.error("camera %s: its outputs moved to another writer; this one stops writing (%s)", cam, why)
        writer = self.video.get(cam)
        if writer is not None:
            with contextlib.suppress(Exception):
                writer.close()  # its file sees no more bytes: the lease refuses them
        jw = self.jsonl.writers.get(cam)
        if jw is not None:
            jw.discard()

    def close(self, cam: str, last: bool) -> None:
        """Finalise a camera's files; `last`: no other camera is open (a shared file closes)."""
        writer = self.video.get(cam)
        try:
            if writer is not None and self.failures.working(cam, "video", count_lost=False) \
                    and cam not in self.fenced:
                try:
                    writer.close()
                except Fenced:
                    raise
                except Exception as e:
                    self._fail(cam, "video", e)
                    self.metrics.lost(cam, "video", writer.abandon())
            for closing in self.jsonl.close(cam, last):
                try:
                    closing.close()
                except Fenced:
                    raise
                except Exception as e:  # its last lines (counted lost) could not be written
                    self._fail(cam, "jsonl", e)
        except Fenced as e:
            self._fence(cam, e)
        finally:
            recording = self.recordings.pop(cam, None)
            if recording is not None:
                recording.close()  # after its camera's last packet: the main stream's reader has ended
            self.video.pop(cam, None)
            self.jsonl.writers.pop(cam, None)
            self.segments.pop(cam, None)
            self.views.end(cam)
            self.metrics.outputs_closed(cam)
