"""Where a camera's recording gets its packets (`RecordingFeed`): from the connection the
camera decodes, or, where its analysis reads the sub-stream (`detect_uri`), from its main
stream, read by a thread of its own (`MainStream`), only demuxed (never decoded).

It lives and fails apart from the analysis: a live main stream that breaks reconnects
under the camera's `reconnect` policy while the sub-stream's frames go on (the recording
has a gap, counted; each backoff step said once), and after `give_up_s` without a packet
the recording stops, reported, while the analysis goes on; a sub-stream that breaks
leaves the recording going. A stop of the run or the camera ends a live main stream's
reading and reconnecting at once, without a word. A file's main stream is read a little ahead of the analysis, never more
(`LEAD_S`), so a looped file does not race ahead, and up to the last analysed frame.
"""
from __future__ import annotations

import logging
import math
import threading
from typing import Callable

from pipeline.config import SourceConfig
from pipeline.sources.connection import Connection, PacketTap, SourceError
from pipeline.sources.reconnect import Reconnect

log = logging.getLogger("pipeline.source")

LEAD_S = 2.0  # a file's main stream is read at most this far ahead of the analysed frames


class MainStream:
    def __init__(self, config: SourceConfig, tap: PacketTap, wait: Callable[[float], None],
                 stopped: Callable[[], bool]):
        self.config = config  # the camera, `uri` being its main stream
        self.tap = tap
        self.wait = wait  # sleeps, waking when the camera is stopped
        self.stopped = stopped  # the run or the camera is stopped (a file's main stream still reads to the end)
        self.reconnect = Reconnect(config.reconnect)
        self.analysed_s = -math.inf  # the newest analysed frame's time on the recording's timeline
        self._finished = False  # the camera has no more frames: a file is read up to them, then ends
        self._stop = threading.Event()
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._run, name=f"main-{config.id}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def analysed(self, t: float | None) -> None:
        """A frame of the analysis at `t` (a file's main stream may read on to `t + LEAD_S`)."""
        if t is not None and t > self.analysed_s and not self.config.network:
            with self._cond:
                self.analysed_s = t
                self._cond.notify_all()

    def finish(self) -> None:
        """The camera ended: a live main stream stops now, a file's after the last frame's packets."""
        if self.config.network:
            self._stop.set()
        with self._cond:
            self._finished = True
            self._cond.notify_all()
        # a live read blocks until its next packet, at most `read_timeout_s`: what comes after is not recorded
        self._thread.join(self.config.read_timeout_s + 1 if self.config.network else None)

    def _ended(self) -> bool:
        """Nothing more to read: finished, or a live main stream whose camera is stopped."""
        return self._stop.is_set() or (self.config.network and self.stopped())

    def _run(self) -> None:
        said: set[str] = set()
        while not self._ended():
            why = "the stream ended"
            try:
                connection = Connection(self.config, lambda _: None, said, tap=self.tap, decode=False)
                try:
                    connection.demux(self._gate(connection))
                finally:
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

    def _gate(self, connection: Connection) -> Callable[[], bool]:
        """Called after each packet: whether to stop reading; a file's waits for the analysis."""
        link = connection.link
        first = [True]

        def stop() -> bool:
            if first[0]:
                first[0] = False
                self.reconnect.frame()
            if self.config.network:
                return self._ended()
            if self._stop.is_set() or link is None or link.offset is None:
                return self._stop.is_set()
            t = (link.last_dts + link.offset) * link.seconds
            with self._cond:
                while t > self.analysed_s + LEAD_S and not self._finished and not self._stop.is_set():
                    self._cond.wait(0.5)
                return self._stop.is_set() or (self._finished and t > self.analysed_s + LEAD_S)
        return stop


class RecordingFeed:
    """A camera's recording as its thread sees it (none: every call does nothing)."""

    def __init__(self, config: SourceConfig, recording: PacketTap | None, wait: Callable[[float], None],
                 stopped: Callable[[], bool]):
        self.recording = recording
        self.network = config.network
        self.main = MainStream(config, recording, wait, stopped) if recording is not None and config.detect_uri \
            else None

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

    def analysed(self, t: float | None) -> None:
        if self.main is not None:
            self.main.analysed(t)

    def finish(self) -> None:
        """The camera has no more frames: its main stream's reader ends before the camera's end of stream goes on."""
        if self.main is not None:
            self.main.finish()
