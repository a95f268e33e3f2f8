"""One thread per camera: read its video (`Connection`), time its frames (`Timeline`),
pick the frames to process (`FrameGate`), preprocess them for the detector, and hand
them to the camera's lane.

Preprocessing runs here, in the camera's own thread, rather than in a shared stage: it
parallelises across cameras for free, and the frame then lands in the camera's own lane
of the detector's batcher, where a live camera's `drop_oldest` policy discards stale
frames without ever blocking decode.

Files are read once (or looped). A broken packet is counted and skipped; a file broken
from some point on ends there. Network cameras treat every failure (refused, timed out,
broken before or after their first frame) as an outage and reconnect under one policy
(`Reconnect`) until `give_up_s` passes without a frame; the other cameras go on.
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Protocol

import av

from pipeline.config import SourceConfig
from pipeline.errors import one_line
from pipeline.frames import EndOfStream, Frame, Item, Resume
from pipeline.metrics.registry import CameraState, CameraStats, Metrics
from pipeline.preprocess import Preprocessor
from pipeline.runtime.queues import QueueClosed
from pipeline.runtime.stage import RunControl
from pipeline.sources.connection import Connection, SourceError
from pipeline.sources.gate import FrameGate
from pipeline.sources.reconnect import Reconnect
from pipeline.sources.timeline import Timeline

log = logging.getLogger("pipeline.source")

LOG_EVERY_BAD_PACKET = 100  # after the first one, log every Nth: a damaged stretch is one story
READ_AHEAD_S = 0.005  # a paced file reads its next frame this long before it is due


class Lane(Protocol):
    """The camera's place in the ingress (`runtime.ingress.CameraPort`)."""

    def put(self, item: Item) -> None: ...

    def wait_turn(self) -> None:
        """Wait until the next frame may be read (a file read on demand takes turns)."""
        ...

    def end_turn(self) -> None:
        """The frame read in this turn is handed over (or skipped)."""
        ...


class VideoSource:
    def __init__(self, config: SourceConfig, preprocess: Preprocessor, lane: Lane, metrics: Metrics,
                 control: RunControl, max_frames: int | None = None, resume: Resume = Resume()):
        self.config = config
        self.camera = config.id
        self.preprocess = preprocess
        self.lane = lane  # where its frames go; a file waits for its turn before reading the next frame
        self.metrics = metrics
        self.control = control
        self.max_frames = max_frames
        # where it picks up: frames of its file processed elsewhere, and where its numbering
        # and timeline continue (`max_frames` counts the frames of the id across moves)
        self.resume = resume
        self._said: set[str] = set()  # decoder fallbacks said once per camera, not per connection
        self.stop_event = threading.Event()  # this camera only (removed while the others go on)
        self.stats: CameraStats = metrics.camera(self.camera)
        self.gate = FrameGate(config.stride, config.max_fps)
        self.reconnect = Reconnect(config.reconnect)
        self.timeline: Timeline | None = None
        self.paced = config.realtime or (bool(config.live) and not config.network)
        self._next_due: float | None = None  # paced: when the next frame is about due
        self._seq = self.resume.seq  # the next frame's number
        self._time_offset: int | None = None  # the resumed timeline's start, in the output time base
        self._thread = threading.Thread(target=self._run, name=f"source-{self.camera}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def stop(self) -> None:
        """Stop this camera only: it ends as if signalled; its frames drain as usual."""
        self.stop_event.set()

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

    def _state(self, state: CameraState, detail: str = "", trouble: bool = False) -> None:
        if self.metrics.camera_state(self.camera, state, detail):
            log_fn = log.error if state == CameraState.FAILED else log.warning \
                if trouble or state == CameraState.RECONNECTING else log.info
            log_fn("camera %s: %s%s", self.camera, state, f" ({detail})" if detail else "")

    def _wait(self, seconds: float) -> None:
        """Sleep, waking at once when the run or this camera is stopped."""
        deadline = time.monotonic() + seconds
        while not (self.control.stop.is_set() or self.stop_event.is_set()):
            left = deadline - time.monotonic()
            if left <= 0:
                return
            self.stop_event.wait(min(left, 0.1))

    def _stopping(self) -> bool:
        return (self.control.stop.is_set() or self.stop_event.is_set()
                or (self.max_frames is not None and self._seq >= self.max_frames))

    # -- the thread ---------------------------------------------------------------------
    def _run(self) -> None:
        eos = EndOfStream(self.camera, "eof")
        self.timeline = Timeline(self.camera, self.config.network, self.config.loop, phase_s=self.config.phase_s)
        try:
            if self.config.network:
                self._run_live()
            else:
                self._run_file()
            if self.control.stop.is_set() or self.stop_event.is_set():
                eos.reason = "stopped"
        except SourceError as e:
            eos.reason, eos.error = "failed", str(e)
            self._state(CameraState.FAILED, str(e))
        except QueueClosed:
            return
        except Exception as e:  # a bug or an unexpected library error: contain it to this camera
            eos.reason, eos.error = "failed", one_line(e)
            self._state(CameraState.FAILED, eos.error)
            log.exception("camera %s: source crashed", self.camera)
        self.stats.downtime_s = self.reconnect.total_downtime()
        if eos.reason != "failed":
            self._state(CameraState.ENDED, self._ended_detail(eos.reason))
        try:
            self.lane.put(eos)
        except QueueClosed:
            pass

    def _ended_detail(self, reason: str) -> str:
        notes = [] if reason == "eof" else [reason]
        if self.stats.decode_errors:
            notes.append(f"{self.stats.decode_errors} unreadable packet(s) skipped")
        if self.stats.detail.startswith(("broken", "ends early")):
            notes.append(self.stats.detail)
        return "; ".join(notes)

    def _run_file(self) -> None:
        """Read the file once, or over and over with `loop` (timestamps keep increasing)."""
        self._state(CameraState.CONNECTING)
        while True:
            connection = Connection(self.config, self._bad_packet, self._said)
            try:
                self._state(CameraState.STREAMING)
                assert self.timeline is not None
                self.timeline.new_connection()
                try:
                    self._pump(connection)
                except SourceError as e:  # the rest of the file is unreadable: it ends here
                    self.metrics.error(self.camera)
                    self.stats.detail = f"broken after frame {self._seq}: {e}"
                    log.warning("camera %s: %s", self.camera, self.stats.detail)
                    return
                if connection.ended_early:
                    self.metrics.error(self.camera)
                    self.stats.detail = f"ends early after frame {self._seq} (truncated or corrupt: " \
                                        f"{connection.ended_early})"
                    log.warning("camera %s: %s", self.camera, self.stats.detail)
                    return
            finally:
                connection.close()
            if not self.config.loop or self._stopping() or connection.stats.frames == 0:
                return

    def _run_live(self) -> None:
        rc = self.reconnect
        while not self._stopping():
            self._state(CameraState.RECONNECTING if rc.streamed else CameraState.CONNECTING, self.stats.detail)
            why = ""
            try:
                connection = Connection(self.config, self._bad_packet, self._said)
                try:
                    assert self.timeline is not None
                    self.timeline.new_connection()
                    self._pump(connection)
                    why = "the stream ended"
                finally:
                    connection.close()
            except SourceError as e:
                why = str(e)
            if self._stopping():
                return
            rc.lost()
            self.stats.downtime_s = rc.total_downtime()
            if rc.gave_up():
                raise SourceError(f"no frame for {rc.down_for():.1f}s (give_up_s={rc.config.give_up_s:g}): {why}")
            delay = rc.next_delay()
            self._state(CameraState.RECONNECTING if rc.streamed else CameraState.CONNECTING,
                        f"{why}; retrying in {delay:.1f}s", trouble=True)
            self._wait(delay)

    # -- frames -------------------------------------------------------------------------
    def _bad_packet(self, message: str) -> None:
        self.stats.decode_errors += 1
        self.metrics.error(self.camera)
        n = self.stats.decode_errors
        if n == 1 or n % LOG_EVERY_BAD_PACKET == 0:
            log.warning("camera %s: skipped an unreadable packet (%d so far): %s", self.camera, n, message)

    def _pump(self, connection: Connection) -> None:
        """Emit every frame of one connection. A file is read on demand: its next frame is
        decoded when the lane has room for it, so its latency starts when it is read (as
        in a loop that reads a frame when it is ready for one), not while it waits. The
        turn to read spans decoding and handing over one frame, never a paced wait."""
        self.lane.wait_turn()
        for vf in connection.frames(self._stopping):
            if self.config.network:
                self.reconnect.frame()
                self.stats.reconnects = self.reconnect.reconnects
                if self.stats.state != CameraState.STREAMING:
                    self._state(CameraState.STREAMING)
            self._emit(vf, connection)
            self.lane.end_turn()
            if self._stopping():
                return
            if self._next_due is not None:
                # a camera's next frame does not exist before it is due: reading it just
                # before then keeps its decoding off the cores the frames at hand need
                wait = self._next_due - READ_AHEAD_S - time.perf_counter()
                if wait > 0:
                    self._wait(wait)
            self.lane.wait_turn()

    def _emit(self, vf: av.VideoFrame, connection: Connection) -> None:
        assert self.timeline is not None
        now = time.perf_counter()
        seq = self._seq
        self._seq += 1
        tb = self.timeline.time_base(connection.time_base)
        pts = self.timeline.pts(vf.pts, connection.time_base, connection.rate)
        if self._time_offset is None:  # a resumed live camera (or returning id) continues its timeline
            self._time_offset = round(self.resume.time_s / tb) - pts if self.resume.time_s else 0
        pts += self._time_offset
        reason = self.gate.reject(seq, float(pts * tb))  # also for skipped frames: the same frames are kept
        if seq < self.resume.start_at:
            return  # processed before this camera moved here
        self.metrics.frame_in(self.camera)
        if reason:
            self.metrics.drop(self.camera, reason)
            return
        if self.paced:
            # a paced file plays a camera: its frame arrives at its due time; when we get
            # to it late, it waited meanwhile (as in a camera's socket): stamped when due
            due = self.timeline.due(pts, tb)
            if due > now:
                self._wait(due - now)
            now = due
            self._next_due = due + float(1 / connection.rate)
        image = vf.to_ndarray(format="bgr24", threads=1)  # swscale would start its own pool per camera
        frame = Frame(camera=self.camera, seq=seq, pts=pts, time_base=tb, image=image, t_capture=now,
                      rate=connection.rate)
        frame.stamps["capture"] = now
        try:
            frame.tensor, frame.letterbox = self.preprocess(image)
        except Exception as e:
            self.metrics.error(self.camera)
            self.metrics.drop(self.camera, "preprocess_error")
            log.warning("camera %s frame %d: preprocess failed: %s", self.camera, seq, one_line(e))
            return
        frame.stamp("preprocess")
        self.lane.put(frame)
