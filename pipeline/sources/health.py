"""What a camera says about itself: its state (logged when it changes), a network camera's
outages and returns (`Reconnect` keeps their times), the unreadable packets it skipped
(counted, logged sparsely: a damaged stretch is one story), a file that breaks off, and
the note its end leaves in the summary."""
from __future__ import annotations

import logging
from typing import Callable

from pipeline.metrics.registry import CameraState, CameraStats, Metrics
from pipeline.sources.connection import SourceError
from pipeline.sources.reconnect import Reconnect

log = logging.getLogger("pipeline.source")

LOG_EVERY_BAD_PACKET = 100  # after the first one, log every Nth


class CameraHealth:
    def __init__(self, camera: str, metrics: Metrics, max_frames: int | None = None):
        self.camera = camera
        self.metrics = metrics
        self.stats: CameraStats = metrics.camera(camera)
        self.max_frames = max_frames  # `--max-frames`: the run is bounded, a camera never reached too
        self._last_try = False  # the other cameras were done at its last failed attempt

    def state(self, state: CameraState, detail: str = "", trouble: bool = False, quiet: bool = False) -> None:
        """Set the camera's state, said when it or its detail changes; `quiet`: a new detail
        alone is not said (another attempt at the same backoff step)."""
        new = self.stats.state != state
        if self.metrics.camera_state(self.camera, state, detail) and (new or not quiet):
            log_fn = log.error if state == CameraState.FAILED else log.warning \
                if trouble or state == CameraState.RECONNECTING else log.info
            log_fn("camera %s: %s%s", self.camera, state, f" ({detail})" if detail else "")

    def streamed(self, reconnect: Reconnect) -> None:
        """A network camera delivered a frame: it streams (again)."""
        reconnect.frame()
        self.stats.reconnects, self.stats.attempts = reconnect.reconnects, reconnect.attempts
        self.stats.outages(reconnect.downtime_s, None)
        if self.stats.state != CameraState.STREAMING:
            self.state(CameraState.STREAMING)

    def lost(self, reconnect: Reconnect, why: str, recorded: Callable[[], bool] = lambda: False) -> float:
        """A network camera's stream broke (or never came): the seconds to wait before the
        next try; a `SourceError` once it has been down for `give_up_s`, unless its main
        stream is still `recorded` (a dead sub-stream: it retries, at the backoff's pace,
        for as long as the recording goes on)."""
        reconnect.lost()
        self.stats.outages(reconnect.downtime_s, reconnect.outage_since)  # the snapshots count the time down on
        if reconnect.gave_up():
            gone = f"no frame for {reconnect.down_for():.1f}s (give_up_s={reconnect.config.give_up_s:g})"
            if not recorded():
                raise SourceError(f"{gone}: {why}")
            why = f"{gone}, its main stream still recorded: {why}"
        self._bounded(reconnect, why)
        retry = reconnect.retry()
        self.stats.attempts = retry.attempt  # the live page and the snapshots show the tries while it is down
        self.state(CameraState.RECONNECTING if reconnect.streamed else CameraState.CONNECTING,
                   f"{why}; attempt {retry.attempt}, retrying in {retry.delay:.1f}s", trouble=True,
                   quiet=not retry.news)
        return retry.delay

    def _bounded(self, reconnect: Reconnect, why: str) -> None:
        """`--max-frames` is taken for "this run ends": a live camera that never delivered
        a frame gives up (a `SourceError`) once every other camera is done, one of them
        with frames, or has not delivered either, and it failed once more after that. Alone,
        or beside cameras still streaming, its `give_up_s` decides."""
        if self.max_frames is None or reconnect.streamed:
            return
        others = [s for cam, s in list(self.metrics.cameras.items()) if cam != self.camera]
        settled = any(s.state.done and s.frames_in for s in others) and all(
            s.state.done or (s.state == CameraState.CONNECTING and not s.frames_in) for s in others)
        if settled and self._last_try:
            raise SourceError(f"never delivered a frame, and the other cameras are done (--max-frames "
                              f"{self.max_frames}): {why}")
        self._last_try = settled

    def bad_packet(self, message: str) -> None:
        self.stats.decode_errors += 1
        self.metrics.error(self.camera)
        n = self.stats.decode_errors
        if n == 1 or n % LOG_EVERY_BAD_PACKET == 0:
            log.warning("camera %s: skipped an unreadable packet (%d so far): %s", self.camera, n, message)

    def file_broken(self, detail: str) -> None:
        """A file that cannot be read on from here: it ends, and says why."""
        self.metrics.error(self.camera)
        self.stats.detail = detail
        log.warning("camera %s: %s", self.camera, detail)

    def ended_detail(self, reason: str) -> str:
        notes = [] if reason == "eof" else [reason]
        if self.stats.decode_errors:
            notes.append(f"{self.stats.decode_errors} unreadable packet(s) skipped")
        if self.stats.detail.startswith(("broken", "ends early")):
            notes.append(self.stats.detail)
        return "; ".join(notes)
