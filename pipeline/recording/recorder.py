"""A camera's recording: the packets the camera sent, copied into time segments by a
writer of its own (docs/outputs.md: "Recordings").

The thread that reads the camera (its own, or with `detect_uri` the one that reads its
main stream) hands over each packet before decoding it (`packet`): a few integer checks
and a put into a bounded queue, never a wait. The writer thread copies the packets into
segment files (`file`). A full queue drops packets up to the next keyframe
(counted: the recording has a hole, never a broken picture); a write error (a full disk)
stops the recording, counted and reported, while the camera goes on and the files written
stay playable. A segment starts at the first keyframe after each boundary (the wall clock
for live cameras, the media time for files, as `recording.segments` cuts the video), and at a
connection whose stream differs (codec, size, extradata). `spot(t)` says where a frame of
the analysis lies in the files (`segment_plan`).
"""
from __future__ import annotations

import errno
import logging
import math
import os
import queue
import threading
import time
from collections import deque
from typing import Callable

from pipeline.config.outputs import RecordConfig
from pipeline.errors import one_line
from pipeline.metrics.snapshot import RecordingStats
from pipeline.recording.packets import Held
from pipeline.recording.file import RecordingError, SegmentFile, elsewhere, refusal
from pipeline.recording.handover import LATE_S, Handover, OpenSegment
from pipeline.recording.segment_plan import Link, RecordingSpot, Segment, SegmentPlan

log = logging.getLogger("pipeline.recording")

STALL_S = 2.0  # a connected network stream that sends nothing this long has stalled
AUDIO_WAITING = 256  # audio packets of a connection held for its first keyframe, at most
AUDIO = object()  # in the segment slot of a queue item: an audio packet


def say_once(said: set[str], camera: str, what: str) -> None:
    if what not in said:
        said.add(what)
        log.warning("camera %s: recording: %s", camera, what)


class Recording:
    """One camera's recording. `path(stamp)` is the file of the segment starting then
    (named by its true start, `segment_plan`); `on_failure` reports
    a write error once (the camera's outputs count it); `on_video(held, stream)` gets a
    copy of every video packet written, on the recording's timeline (event clips)."""

    def __init__(self, camera: str, root: str, config: RecordConfig, segment_s: float | None, live: bool,
                 path: Callable[[str], str], on_failure: Callable[[BaseException], None],
                 on_file: Callable[[str], None] | None = None):
        self.camera = camera
        self.config = config
        self.on_failure = on_failure
        self.on_file = on_file  # each segment file once it exists (the run's record of what it wrote)
        self.on_video: Callable | None = None
        self.stats = RecordingStats()
        self.plan = SegmentPlan(root, path, segment_s, live)
        # a live recording's timeline counts from here (its camera's timeline's: the source
        # sets it), a reconnect being a gap in time and a silent stream a stall; None: the
        # camera's media time, never the wall clock (a file's: its loops just go on)
        self.origin: float | None = time.perf_counter() if live else None
        self._queue: queue.Queue = queue.Queue(config.queue)
        self._stopped = False
        self._skipping = True  # until a keyframe: a connection's start, or after packets were dropped
        self._behind = False  # packets are being dropped: the writer fell behind
        self._hole: list[float] | None = None  # the stretch of the timeline not recorded, open until a keyframe
        self._link: Link | None = None  # the connection's, the latest
        self._said: set[str] = set()
        self.writer = RecordingWriter(self)

    # -- the reading thread -----------------------------------------------------------
    def connect(self, video, audio, rate) -> Link:
        """A connection (a reconnect, a file's next pass) starts: its packets follow."""
        link = Link(video, audio if self.config.audio else None, rate)
        self._link = link
        self._skipping = True
        self.writer.start()
        return link

    def disconnect(self) -> None:
        """The connection ended: a network camera's recording has a hole until it is back."""
        if self._link is not None:
            self._go(self._link, self._link.end_order())
        self.writer.connected = False
        if self.origin is not None and not self._stopped:
            self.stats.state = "reconnecting"
            end = self.plan.last_link.end() if self.plan.last_link is not None else None
            if end is not None and self._hole is None and self.plan.segments:
                self._hole = [float(end[0]), math.inf]
                self.plan.segments[-1].holes.append(self._hole)

    def packet(self, packet, link: Link) -> None:
        """Every packet the connection demuxes, before it is decoded."""
        if self._stopped:
            return
        if packet.stream_index != link.index:
            if packet.stream_index == link.audio_index:
                self._audio(packet, link)
            return
        self._go(link, link.arrived(packet))

    def picture(self, frame, link: Link) -> None:
        """A picture the connection decoded, before the analysis sees it: where the stream
        has no timestamps its time comes from its place in display order (`stamps`)."""
        self._go(link, link.picture(frame))

    def _go(self, link: Link, ready: list) -> None:
        """The packets whose timestamps are known go on (where they were made, said once)."""
        for p, pts, dts in ready:
            if not self._stopped:
                self._video(p, link, pts, dts)
        if link.news:
            say_once(self._said, self.camera, link.news)
            link.news = ""

    def _video(self, packet, link: Link, pts: int, dts: int) -> None:
        key = packet.is_keyframe
        if self._skipping and not key:
            if self._behind:
                self.stats.dropped += 1
            return
        if key and not link.describe(bytes(packet)):
            return  # (the link's news says so)
        if self._queue.full():
            self._drop(link, pts)
            return
        try:
            wall_s = None if self.origin is None else time.perf_counter() - self.origin
            segment = self.plan.anchored(link, pts, dts, wall_s) if key else None
        except RecordingError as e:  # its container cannot hold the video: found before any row names the file
            return self.failed(e)
        if self._hole is not None:  # a gap in what was recorded: the recording goes on after it
            self._hole[1] = (pts + link.offset) * link.seconds
            self._hole = None
            self.stats.gaps += 1
        if self._skipping:
            self.stats.state = "recording"  # from a keyframe: the start, its stream back, the writer caught up
        self._skipping = self._behind = False
        self._queue.put_nowait((packet, link, pts + link.offset, dts + link.offset, segment))
        if link.audio_waiting:
            waiting, link.audio_waiting = link.audio_waiting, []
            for audio in waiting:
                self._audio(audio, link)

    def _audio(self, packet, link: Link) -> None:
        """Audio goes where the video is recorded; before the connection's first keyframe it
        waits for it (a file's audio may come first)."""
        if link.offset is None:
            if len(link.audio_waiting) < AUDIO_WAITING:
                link.audio_waiting.append(packet)
        elif not self._skipping:
            try:
                self._queue.put_nowait((packet, link, 0, 0, AUDIO))
            except queue.Full:
                self.stats.dropped += 1

    def _drop(self, link: Link, pts: int) -> None:
        """The writer is behind: drop up to the next keyframe, a hole in the recording."""
        self.stats.dropped += 1
        self._skipping = self._behind = True
        if self._hole is None and link.offset is not None and self.plan.segments:
            self._hole = [(pts + link.offset) * link.seconds, math.inf]
            self.plan.segments[-1].holes.append(self._hole)
            say_once(self._said, self.camera, "the writer fell behind: packets dropped up to the next keyframe")

    # -- the analysis' side ----------------------------------------------------------
    def spot(self, t: float | None) -> RecordingSpot | None:
        """Where the frame at `t` on the recording's timeline lies in its files (None: in
        none: before the first keyframe, in a hole, or after the recording stopped)."""
        if t is None or (self._stopped and t > self.writer.written_s):
            return None
        return self.plan.spot(t)

    def close(self, timeout: float = 30.0) -> None:
        """Write what waits, finish the file (the camera ended)."""
        self._stopped = True
        self.writer.stop(timeout)

    def failed(self, error: BaseException) -> None:
        """The recording cannot go on (its writer failed, its main stream gave up): nothing
        more is queued; what was written stays."""
        self._stopped = True
        self.stats.state, self.stats.error = "failed", one_line(error)
        self.on_failure(error)


class RecordingWriter:
    """The recording's own thread: packets from the queue into segment files."""

    def __init__(self, recording: Recording):
        self.recording = recording
        self.stats = recording.stats
        self.connected = False
        self.written_s = -math.inf  # the latest picture written, on the timeline
        self._queue = recording._queue
        self.files = Handover(on_audio=self._count, on_late=self._late)
        self._closing = threading.Event()
        self._rate: deque[tuple[float, int]] = deque(maxlen=10)
        self._thread = threading.Thread(target=self._run, name=f"record-{recording.camera}", daemon=True)

    def start(self) -> None:
        """A connection begins: the writer runs from its camera's first connection on."""
        self.connected = True
        if self._thread.ident is None and not self._closing.is_set():
            self._thread.start()

    @property
    def open_file(self) -> str | None:
        """The segment being written."""
        return self.files.current.segment.path if self.files.current is not None else None

    @property
    def open_files(self) -> list[str]:
        """Every file open: the segment being written and, just after a cut, the one before."""
        return self.files.files

    def _run(self) -> None:
        stalled = False
        while True:
            try:
                item = self._queue.get(timeout=STALL_S)
            except queue.Empty:
                if self._closing.is_set():
                    break
                if self.recording.origin is not None and self.connected and not stalled:
                    self.stats.stalls += 1
                    stalled = True
                continue
            if item is None:
                break
            stalled = False
            try:
                self._write(*item)
            except Exception as e:
                self._fail(e)
                return
        self._finish("ended")

    def _write(self, packet, link: Link, pts: int, dts: int, segment: Segment | None) -> None:
        if segment is AUDIO:
            if packet.pts is not None and packet.dts is not None:
                self.files.audio(link, packet)
            return
        key = packet.is_keyframe
        if self.recording.on_video is not None:
            self.recording.on_video(Held(bytes(packet), pts, dts, link.time_base, key), link.video)
        if segment is not None:
            self.files.cut(self._open(segment, link), link, (packet, pts, dts))
        else:
            self.files.video(link, packet, pts, dts, key)
        self.recording.plan.fragment_bytes = self.files.largest_fragment
        if self.files.torn:  # a segment closed short: its disk is full
            raise OSError(errno.ENOSPC, "its disk could not take all of a segment")
        if pts * link.seconds > self.written_s:
            self.written_s = pts * link.seconds
        self._count(packet.size)

    def _late(self) -> None:
        self.stats.audio = "copied" + self.files.late_note
        say_once(self.recording._said, self.recording.camera,
                 f"audio delivered more than {LATE_S:g} s of video after its segment's cut is left out (counted)")

    def _open(self, segment: Segment, link: Link) -> OpenSegment:
        audio = link.audio
        if audio is not None:
            ext = os.path.splitext(segment.path)[1].lower()
            why = refusal(ext, audio, link.audio_codec)
            if why is not None:
                audio = None
                self.stats.audio = f"left out: the {ext} container cannot hold {link.audio_codec} ({why})"
                say_once(self.recording._said, self.recording.camera,
                         f"audio {self.stats.audio}; {elsewhere(link.audio, link.audio_codec)}")
            else:
                self.stats.audio = "copied" + self.files.late_note
        opened = OpenSegment(segment, SegmentFile(segment.path, link.video, link.codec, audio))
        if self.recording.on_file is not None:
            self.recording.on_file(segment.path)
        self.stats.segments += 1
        self.stats.file = segment.file
        return opened

    def _count(self, size: int) -> None:
        self.stats.packets += 1
        self.stats.bytes += size
        now = time.monotonic()
        if not self._rate or now - self._rate[-1][0] >= 1.0:
            self._rate.append((now, self.stats.bytes))
            t0, b0 = self._rate[0]
            self.stats.bytes_per_s = round((self.stats.bytes - b0) / (now - t0), 1) if now > t0 else 0.0

    def _fail(self, error: BaseException) -> None:
        try:
            self.files.close()
        except Exception:  # the disk is full: each file as far as it took it
            pass
        self.recording.failed(error)
        self._say_torn()

    def _say_torn(self) -> None:
        """Files the disk could not take all of fail the recording, saying what each holds."""
        if self.files.torn:
            if self.stats.state != "failed":
                self.recording.failed(OSError(errno.ENOSPC, "its disk could not take all of its files"))
            self.stats.error += f" ({'; '.join(self.files.torn)})"
            self.files.torn = []

    def _finish(self, state: str) -> None:
        try:
            self.files.close()
        except Exception as e:  # the last fragment could not be written: the file plays up to the one before
            self._fail(e)
            return
        self._say_torn()
        if self.stats.state != "failed":  # (a recording refused before its writer began stays failed)
            self.stats.state = state

    def stop(self, timeout: float) -> None:
        self._closing.set()
        if self._thread.ident is None:  # its camera never connected
            self._finish("ended")
            return
        try:
            self._queue.put_nowait(None)
        except queue.Full:
            pass  # the writer drains it, then finds it closing
        self._thread.join(timeout)
