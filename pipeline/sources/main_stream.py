"""Where a camera's recording gets its packets (`RecordingFeed`): from the connection the
camera decodes, or, where its analysis reads the sub-stream (`detect_uri`), from its main
stream, read by a thread of its own (`MainStream`), only demuxed (never decoded).

It lives and fails apart from the analysis: a live main stream that breaks reconnects
under the camera's `reconnect` policy while the sub-stream's frames go on (the recording
has a gap, counted; each backoff step said once), and after `give_up_s` without a packet
the recording stops, reported, while the analysis goes on; a sub-stream that breaks
leaves the recording going (its camera retries it past `give_up_s` while the main stream
is `recorded`). A stop of the run or the camera ends a live main stream's reading and
reconnecting at once, without a word. A file's main stream is read a little ahead of the
analysis, never more (`LEAD_S`), so a looped file does not race ahead, and up to the last
analysed frame; once that far ahead it waits for the analysis to move `BATCH_S` on, so that
one wake of its thread reads a batch of packets, not one a frame; a frame of its sub-stream is placed on the recording's timeline pass by
pass, on the two files' first pictures (`place`).
"""
from __future__ import annotations

import logging
import math
import threading
from dataclasses import dataclass
from typing import Callable

from pipeline.config import SourceConfig
from pipeline.frames import Frame
from pipeline.live.hub import LiveHub
from pipeline.live.stream import LiveStream
from pipeline.sources.connection import Connection, PacketTap, SourceError
from pipeline.sources.reconnect import Reconnect

log = logging.getLogger("pipeline.source")

LEAD_S = 2.0  # a file's main stream is read at most this far ahead of the analysed frames
BATCH_S = 0.5  # ... and, when it got that far, read on once the analysis moved this much


@dataclass
class Pass:
    """One pass over a file's main stream (one connection): where the analysis' frames of
    the same pass of the sub-stream go on the recording's timeline (seconds)."""

    start: float | None = None  # its first recorded picture
    read: float = -math.inf  # the newest packet's decode time read
    end: float | None = None  # one frame after its last picture, once it ended (-inf: nothing recorded)


class Passes:
    """A file's main stream pass by pass, as its sub-stream's frames are placed on it
    (`place`); kept from the pass the analysis is in on. Its reader's condition guards it."""

    def __init__(self, cond: threading.Condition):
        self.cond = cond
        self.passes: dict[int, Pass] = {}
        self.begun = 0  # passes begun
        self.wanted: tuple[int, float] | None = None  # a frame waits for this place: read on up to it

    def place(self, number: int, after_s: float, reading: Callable[[], bool]) -> float | None:
        """Where a frame of a file's sub-stream lies on the recording's timeline: `after_s`
        after the first picture of the same pass (`number`) of the main stream as it is
        after the first of its own (the two files' timestamps may start apart, and their
        passes differ in length). None: past that pass's last picture, or never read.
        Waits until the main stream is read up to it, while it is `reading`."""
        with self.cond:
            if not self._reached(number, after_s):  # the reader, where it waits, reads on for it
                self.wanted = (number, after_s)
                self.cond.notify_all()
                while not self._reached(number, after_s) and reading():
                    self.cond.wait(0.5)
                self.wanted = None
            for gone in [k for k in self.passes if k < number]:  # the analysis is past them
                del self.passes[gone]
            done = self.passes.get(number)
        if done is None or done.start is None:
            return None
        t = done.start + after_s
        return None if done.end is not None and t > done.end - 1e-6 else t

    def _reached(self, number: int, after_s: float) -> bool:
        """The main stream is read past `after_s` into pass `number`, or that pass ended."""
        if self.begun > number + 1:
            return True
        done = self.passes.get(number)
        return done is not None and (done.end is not None or (done.start is not None
                                                               and done.read >= done.start + after_s))

    def awaited(self) -> bool:
        """A frame waits for a place the main stream has not read yet (the caller holds `cond`)."""
        return self.wanted is not None and not self._reached(*self.wanted)

    def begin(self) -> Pass:
        with self.cond:
            done = self.passes[self.begun] = Pass()
            self.begun += 1
            return done

    def read(self, done: Pass, start_s: float | None, t: float) -> None:
        """The pass is read up to `t` (the caller holds `cond`)."""
        done.start, done.read = start_s, t
        if self.wanted is not None:
            self.cond.notify_all()

    def end(self, done: Pass, link) -> None:
        end = link.end() if link is not None else None
        with self.cond:
            done.end = float(end[0]) if end is not None else -math.inf
            self.cond.notify_all()


class MainStream:
    def __init__(self, config: SourceConfig, tap: PacketTap, wait: Callable[[float], None],
                 stopped: Callable[[], bool], live: LiveStream | None = None):
        self.config = config  # the camera, `uri` being its main stream
        self.tap = tap
        self.live = live  # its live stream: it sees the packets after the recording
        self.wait = wait  # sleeps, waking when the camera is stopped
        self.stopped = stopped  # the run or the camera is stopped (a file's main stream still reads to the end)
        self.reconnect = Reconnect(config.reconnect)
        self.analysed_s = -math.inf  # the newest analysed frame's time on the recording's timeline
        self._resume_at = -math.inf  # the analysed time a waiting file reader reads on at
        self._finished = False  # the camera has no more frames: a file is read up to them, then ends
        self._stop = threading.Event()
        self._cond = threading.Condition()
        self.passes = Passes(self._cond)  # a file's, matched to its sub-stream's
        self._thread = threading.Thread(target=self._run, name=f"main-{config.id}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def analysed(self, t: float | None) -> None:
        """A frame of the analysis at `t` (a file's main stream may read on to `t + LEAD_S`)."""
        if t is not None and t > self.analysed_s and not self.config.network:
            with self._cond:
                self.analysed_s = t
                if t >= self._resume_at:
                    self._cond.notify_all()

    def place(self, number: int, after_s: float) -> float | None:
        """Where a frame of a file's sub-stream lies on the recording's timeline (`Passes.place`)."""
        return self.passes.place(number, after_s, self._thread.is_alive)

    def finish(self) -> None:
        """The camera ended: a live main stream stops now, a file's after the last frame's packets."""
        if self.config.network:
            self._stop.set()
        with self._cond:
            self._finished = True
            self._cond.notify_all()
        # a live read blocks until its next packet, at most `read_timeout_s`: what comes after is not recorded
        self._thread.join(self.config.read_timeout_s + 1 if self.config.network else None)

    @property
    def recording(self) -> bool:
        """Still read and recorded: not given up, its recording not stopped."""
        return self._thread.is_alive() and self.tap.stats.state != "failed"

    def _ended(self) -> bool:
        """Nothing more to read: finished, or a live main stream whose camera is stopped."""
        return self._stop.is_set() or (self.config.network and self.stopped())

    def _run(self) -> None:
        said: set[str] = set()
        while not self._ended():
            why = "the stream ended"
            try:
                connection = Connection(self.config, lambda _: None, said, tap=self.tap, decode=False, also=self.live)
                done = None if self.config.network else self.passes.begin()  # live: matched by arrival
                try:
                    connection.demux(self._gate(connection, done))
                finally:
                    if done is not None:
                        self.passes.end(done, connection.link)
                    connection.close()
            except SourceError as e:
                why = str(e)
                if not self.config.network:
                    self.tap.failed(e)
                    return
            if self._ended() or (not self.config.network and (not self.config.loop or self._finished)):
                return
            if self.config.network and not self._lost(why):
                return

    def _lost(self, why: str) -> bool:
        """The live main stream broke: wait to try again (False: it gave up)."""
        rc = self.reconnect
        rc.lost()
        if rc.gave_up():
            self.tap.failed(SourceError(f"main stream: no packet for {rc.down_for():.1f}s "
                                        f"(give_up_s={rc.config.give_up_s:g}): {why}"))
            return False
        retry = rc.retry()
        if retry.news:
            log.warning("camera %s: main stream lost (%s); the recording resumes when it is back (retrying in %.1fs)",
                        self.config.id, why, retry.delay)
        self.wait(retry.delay)
        return not self._ended()

    def _gate(self, connection: Connection, done: Pass | None) -> Callable[[], bool]:
        """Called after each packet: whether to stop reading; a file's waits for the analysis
        (unless a frame waits for it)."""
        link = connection.link
        first = [True]

        def stop() -> bool:
            if first[0]:
                first[0] = False
                self.reconnect.frame()
            if self.config.network:
                return self._ended()
            if self._stop.is_set() or link is None or link.offset is None or done is None:
                return self._stop.is_set()
            t = (link.last_dts + link.offset) * link.seconds
            with self._cond:
                self.passes.read(done, link.start_s, t)
                if t > self.analysed_s + LEAD_S:
                    self._resume_at = t - LEAD_S + BATCH_S
                    while self.analysed_s < self._resume_at and not (self.passes.awaited() or self._finished
                                                                      or self._stop.is_set()):
                        self._cond.wait(0.5)
                    self._resume_at = -math.inf
                return self._stop.is_set() or (self._finished and t > self.analysed_s + LEAD_S)
        return stop


class RecordingFeed:
    """A camera's recording as its thread sees it (none: every call does nothing), and the
    live stream of what it decodes (`live`: "sub", where the live page is on)."""

    def __init__(self, config: SourceConfig, recording: PacketTap | None, wait: Callable[[float], None],
                 stopped: Callable[[], bool], live: LiveHub | None = None):
        self.recording = recording
        self.network = config.network
        self.live = live.stream(config.id, "sub") if live is not None else None
        self.main = None
        if recording is not None and config.detect_uri:
            self.main = MainStream(config, recording, wait, stopped,
                                   live.stream(config.id, "main") if live is not None else None)

    def start(self, origin: float) -> None:
        """The camera's timeline starts at `origin`: a network camera's recording counts from
        there too, so that a sub-stream's frames and the main stream's packets are on one
        clock. A file's (a paced one playing a camera too) keeps its media time: its loops
        follow each other seamlessly, as its frames' timeline does, wherever the wall clock is."""
        if self.recording is not None:
            self.recording.origin = origin if self.network else None
        if self.main is not None:
            self.main.start()

    @property
    def tap(self) -> PacketTap | None:
        """What the camera's own connections hand their packets to."""
        return self.recording if self.main is None else None

    @property
    def place(self) -> Callable[[int, float], float | None] | None:
        """How a file's sub-stream frames are matched to its main stream, pass by pass
        (`MainStream.place`); None: by time (a live camera's by arrival, on one clock)."""
        return self.main.place if self.main is not None and not self.network else None

    def recorded(self) -> bool:
        """Whether a main stream read apart is still being recorded (not given up, not
        failed): its camera does not give up on a dead sub-stream meanwhile."""
        return self.main is not None and self.main.recording

    def analysed(self, frame: Frame, picture) -> None:
        """A frame of the camera made from `picture`: its picture's media time on the live
        stream; a file's main stream may read on past its place on the recording."""
        frame.live_time = self.live.media_time(picture) if self.live is not None else None
        if self.main is not None:
            self.main.analysed(frame.record_time)

    def finish(self) -> None:
        """The camera has no more frames: its main stream's reader ends before the camera's end of stream goes on."""
        if self.main is not None:
            self.main.finish()
