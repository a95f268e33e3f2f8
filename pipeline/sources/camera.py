"""One thread per camera: read its video (`Connection`), make the frames to process from
its pictures (`Framing`: timeline, gate, pacing, preprocessing) and hand them to the
camera's lane.

Files are read once (or looped). A broken packet is counted and skipped; a file broken
from some point on ends there. Network cameras treat every failure (refused, timed out,
broken before or after their first frame) as an outage and reconnect under one policy
(`Reconnect`) until `give_up_s` passes without a frame; the other cameras go on.

A recorded camera hands every packet to its recording before decoding it; one analysed
on its sub-stream (`detect_uri`) decodes only that, and its main stream is read by a
thread of its own for the recording (`RecordingFeed`), ended before the camera's end of
stream goes on (the recording closes behind it). With the live page on, the camera's
live streams (`live`) tap the same connections: the one decoded ("sub"), and the main
stream read for the recording ("main").
"""
from __future__ import annotations

import functools
import logging
import threading
import time
from typing import Protocol

from pipeline.config import SourceConfig
from pipeline.errors import one_line
from pipeline.frames import EndOfStream, Item, Resume
from pipeline.live.hub import LiveHub
from pipeline.metrics.registry import CameraState, CameraStats, Metrics
from pipeline.preprocess import Preprocessor
from pipeline.runtime.queues import QueueClosed
from pipeline.runtime.stage import RunControl
from pipeline.sources.connection import Connection, PacketTap, SourceError
from pipeline.sources.detect_gate import DetectGate
from pipeline.sources.framing import Framing
from pipeline.sources.health import CameraHealth
from pipeline.sources.main_stream import RecordingFeed
from pipeline.sources.reconnect import Reconnect

log = logging.getLogger("pipeline.source")

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


def wait_unless(stop: threading.Event, stop_camera: threading.Event, seconds: float) -> None:
    """Sleep, waking at once when the run or this camera is stopped."""
    deadline = time.monotonic() + seconds
    while not (stop.is_set() or stop_camera.is_set()):
        left = deadline - time.monotonic()
        if left <= 0:
            return
        stop_camera.wait(min(left, 0.1))


class VideoSource:
    def __init__(self, config: SourceConfig, preprocess: Preprocessor, lane: Lane, metrics: Metrics,
                 control: RunControl, max_frames: int | None = None, resume: Resume = Resume(),
                 recording: PacketTap | None = None, gate: DetectGate | None = None, live: LiveHub | None = None):
        self.config = config
        self.analysed = config.analysed()  # what is decoded: the sub-stream where it has one
        self.camera = config.id
        self.preprocess = preprocess
        self.lane = lane  # where its frames go; a file waits for its turn before reading the next frame
        self.metrics = metrics
        self.control = control
        self.max_frames = max_frames
        # where it picks up: frames of its file processed elsewhere, and where its numbering
        # and timeline continue (`max_frames` counts the frames of the id across moves)
        self.resume = resume
        self.gate = gate  # which of its frames the detector sees (None: every frame)
        self._said: set[str] = set()  # decoder fallbacks said once per camera, not per connection
        self.stop_event = threading.Event()  # this camera only (removed while the others go on)
        self._wait = functools.partial(wait_unless, control.stop, self.stop_event)  # sleeps, waking when stopped
        self.health = CameraHealth(self.camera, metrics, max_frames)
        self.stats: CameraStats = self.health.stats
        self.reconnect = Reconnect(config.reconnect)
        self.framing: Framing | None = None  # made when its thread starts
        self.feed = RecordingFeed(config, recording, self._wait, self._stopped, live)
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

    def _stopped(self) -> bool:
        """The run or this camera is stopped."""
        return self.control.stop.is_set() or self.stop_event.is_set()

    def _stopping(self) -> bool:
        return self._stopped() or (self.max_frames is not None and self._seq >= self.max_frames)

    @property
    def _seq(self) -> int:
        """The next frame's number."""
        return self.framing.seq if self.framing is not None else self.resume.seq

    # -- the thread ---------------------------------------------------------------------
    def _run(self) -> None:
        eos = EndOfStream(self.camera, "eof")
        self.framing = Framing(self.analysed, self.preprocess, self.metrics, self.resume, self._wait, self.gate,
                               self._stopped, self.feed.place)
        self.feed.start(self.framing.timeline.started)
        try:
            if self.config.network:
                self._run_live()
            else:
                self._run_file()
            if self._stopped():
                eos.reason = "stopped"
        except SourceError as e:
            eos.reason, eos.error = "failed", str(e)
            self.health.state(CameraState.FAILED, str(e))
        except QueueClosed:
            return
        except Exception as e:  # a bug or an unexpected library error: contain it to this camera
            eos.reason, eos.error = "failed", one_line(e)
            self.health.state(CameraState.FAILED, eos.error)
            log.exception("camera %s: source crashed", self.camera)
        self.feed.finish()
        self.stats.outages(self.reconnect.total_downtime(), None)
        if eos.reason != "failed":
            self.health.state(CameraState.ENDED, self.health.ended_detail(eos.reason))
        try:
            self.lane.put(eos)
        except QueueClosed:
            pass

    def _run_file(self) -> None:
        """Read the file once, or over and over with `loop` (timestamps keep increasing)."""
        self.health.state(CameraState.CONNECTING)
        while True:
            connection = Connection(self.analysed, self.health.bad_packet, self._said, tap=self.feed.tap, also=self.feed.live)
            try:
                self.health.state(CameraState.STREAMING)
                assert self.framing is not None
                self.framing.timeline.new_connection()
                try:
                    self._pump(connection)
                except SourceError as e:  # the rest of the file is unreadable: it ends here
                    self.health.file_broken(f"broken after frame {self._seq}: {e}")
                    return
                if connection.ended_early:
                    self.health.file_broken(f"ends early after frame {self._seq} (truncated or corrupt: "
                                            f"{connection.ended_early})")
                    return
            finally:
                connection.close()
            if not self.config.loop or self._stopping() or connection.stats.frames == 0:
                return

    def _run_live(self) -> None:
        rc = self.reconnect
        while not self._stopping():
            self.health.state(CameraState.RECONNECTING if rc.streamed else CameraState.CONNECTING, self.stats.detail)
            why = ""
            try:
                connection = Connection(self.analysed, self.health.bad_packet, self._said, tap=self.feed.tap, also=self.feed.live)
                try:
                    assert self.framing is not None
                    self.framing.timeline.new_connection()
                    self._pump(connection)
                    why = "the stream ended"
                finally:
                    connection.close()
            except SourceError as e:
                why = str(e)
            if self._stopping():
                return
            self._wait(self.health.lost(rc, why, self.feed.recorded))

    def _pump(self, connection: Connection) -> None:
        """Emit every frame of one connection. A file is read on demand: its next frame is
        decoded when the lane has room for it, so its latency starts when it is read (as
        in a loop that reads a frame when it is ready for one), not while it waits. The
        turn to read spans decoding and handing over one frame, never a paced wait."""
        self.lane.wait_turn()
        for vf in connection.frames(self._stopping):
            if self.config.network:
                self.health.streamed(self.reconnect)
            assert self.framing is not None
            frame = self.framing(vf, connection)
            if frame is not None:
                self.feed.analysed(frame, vf)
                self.lane.put(frame)
            self.lane.end_turn()
            if self._stopping():
                return
            if self.framing.next_due is not None:
                # a camera's next frame does not exist before it is due: reading it just
                # before then keeps its decoding off the cores the frames at hand need
                wait = self.framing.next_due - READ_AHEAD_S - time.perf_counter()
                if wait > 0:
                    self._wait(wait)
            self.lane.wait_turn()
