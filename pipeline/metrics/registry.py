"""Counters and histograms of one run: per camera, per stage, per queue, per engine.

Always on and cheap: a handful of integer updates and one histogram record per frame.
`snapshot()` (typed records, `metrics.snapshot`) is the single source of the periodic log
line, the final summary, the JSON report and the Prometheus endpoint, so they always agree.
"""
from __future__ import annotations

import dataclasses
import os
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Callable

from pipeline.metrics.histogram import Histogram
from pipeline.metrics.snapshot import (CameraSnapshot, DetectorCounts, EngineSnapshot, Latency, QueueSnapshot, Recent,
                                       RecordingStats, RetentionStats, Snapshot, StageSnapshot)
from pipeline.metrics.window import Window
from pipeline.redact import redact


class CameraState(StrEnum):
    """A camera's health; a `str`, so snapshots, events and comparisons read it as text."""

    STARTING = "starting"
    CONNECTING = "connecting"
    STREAMING = "streaming"
    RECONNECTING = "reconnecting"
    FAILED = "failed"
    ENDED = "ended"

    @property
    def done(self) -> bool:
        return self in (CameraState.FAILED, CameraState.ENDED)


@dataclass
class CameraStats:
    frames_in: int = 0
    processed: int = 0
    errors: int = 0
    decode_errors: int = 0
    output_errors: dict[str, str] = field(default_factory=dict)  # output (video, jsonl) -> why it stopped
    video_frames_lost: int = 0  # frames its video does not hold (a full disk, a failed encoder)
    jsonl_lines_lost: int = 0  # JSON lines not written
    store_lost: int = 0  # frames' records and rows the store could not keep (a full queue, a refusing database)
    dropped: dict[str, int] = field(default_factory=lambda: defaultdict(int))  # reason -> frames lost on the way
    skipped: dict[str, int] = field(default_factory=lambda: defaultdict(int))  # `stride`, `max_fps`: left out on purpose
    latency: Histogram = field(default_factory=Histogram)
    state: CameraState = CameraState.STARTING
    detail: str = ""  # redacted when set: state events and /api/cameras carry it
    reconnects: int = 0
    attempts: int = 0  # failed tries to connect since its last frame (0: it streams)
    downtime_s: float = 0.0  # the outages that ended
    down_since: float | None = None  # time.monotonic() of the last frame before the outage going on
    first_out: float | None = None
    last_out: float | None = None
    counts: dict[tuple[str, str, str], int] = field(default_factory=lambda: defaultdict(int))  # (name, event, class)
    occupancy: dict[str, int] = field(default_factory=dict)  # zone -> objects inside now
    stationary: dict[str, int] = field(default_factory=dict)  # zone -> of those, the ones not moving
    segment: str = ""  # the file name of the video (or JSON lines) segment being written
    snapshots_lost: int = 0  # event pictures (frames, crops) that could not be written
    recording: RecordingStats | None = None  # its recording's health (None: not recorded)
    detector: DetectorCounts = field(default_factory=DetectorCounts)
    recent: Window = field(default_factory=lambda: Window(time.monotonic()))

    def outages(self, ended_s: float, since: float | None) -> None:
        """The camera's downtime: `ended_s` of outages over, and the one going on since
        `since` (None: it streams, or it is done), which grows in every snapshot."""
        self.downtime_s, self.down_since = ended_s, since

    def out(self, now: float, latency_s: float) -> None:
        """A frame left the graph at `now` (its latency histogram is recorded outside the lock)."""
        self.processed += 1
        if self.first_out is None:
            self.first_out = now
        self.last_out = now
        self.recent.record(now, latency_s)

    def downtime(self, now: float) -> float:
        return self.downtime_s + (now - self.down_since if self.down_since is not None else 0.0)

    def nested_counts(self) -> dict[str, dict[str, dict[str, int]]]:
        """Analytics counts as {line or zone: {event: {class: n}}}."""
        out: dict[str, dict[str, dict[str, int]]] = {}
        for (name, event, cls), n in sorted(self.counts.items()):
            out.setdefault(name, {}).setdefault(event, {})[cls] = n
        return out

    def snapshot(self, now: float) -> CameraSnapshot:
        span = (self.last_out - self.first_out) if self.first_out is not None and self.last_out is not None else 0.0
        fps = (self.processed - 1) / span if span > 0 and self.processed > 1 else 0.0
        return CameraSnapshot(
            state=self.state.value, detail=self.detail, frames_in=self.frames_in, processed=self.processed,
            dropped=dict(self.dropped), skipped=dict(self.skipped), errors=self.errors, decode_errors=self.decode_errors,
            output_errors=dict(self.output_errors), fps=round(fps, 2), reconnects=self.reconnects, attempts=self.attempts,
            downtime_s=round(self.downtime(now), 2), latency=Latency.of(self.latency),
            recent=recent_of([self.recent], now), counts=self.nested_counts(),
            occupancy=dict(self.occupancy), stationary=dict(self.stationary), segment=self.segment,
            snapshots_lost=self.snapshots_lost, video_frames_lost=self.video_frames_lost,
            jsonl_lines_lost=self.jsonl_lines_lost, store_lost=self.store_lost,
            detector=dataclasses.replace(self.detector),
            recording=dataclasses.replace(self.recording) if self.recording is not None else None)


def recent_latency(windows: list[Window], now: float) -> Histogram:
    """The latencies of `windows` over their window ending `now`, as one histogram."""
    latency = Histogram()
    for w in windows:
        latency.merge(w.latency(now))
    return latency


def recent_of(windows: list[Window], now: float) -> Recent:
    """The recent figures of `windows` together: their rates summed, their latencies merged."""
    return Recent(fps=round(sum(w.rate(now) for w in windows), 2), latency=Latency.of(recent_latency(windows, now)))


@dataclass
class StageStats:
    items: int = 0
    busy_s: float = 0.0
    errors: int = 0
    counters: dict[str, int] = field(default_factory=lambda: defaultdict(int))  # stage-specific (calls_saved, ...)

    def snapshot(self, elapsed: float) -> StageSnapshot:
        return StageSnapshot(self.items, round(self.busy_s, 3), round(self.busy_s / elapsed, 3) if elapsed > 0 else 0.0,
                             round(self.items / elapsed, 2) if elapsed > 0 else 0.0, dict(self.counters))


@dataclass
class EngineStats:
    batches: int = 0
    items: int = 0
    inflight: int = 0
    max_inflight_seen: int = 0
    batch_sizes: dict[int, int] = field(default_factory=lambda: defaultdict(int))
    infer: Histogram = field(default_factory=Histogram)
    provider: str = ""
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def submitted(self) -> None:
        with self._lock:
            self.inflight += 1
            self.max_inflight_seen = max(self.max_inflight_seen, self.inflight)

    def finished(self, items: int, seconds: float) -> None:
        with self._lock:
            self.inflight -= 1
            self.batches += 1
            self.items += items
            self.batch_sizes[items] += 1
        self.infer.record(seconds)

    def snapshot(self) -> EngineSnapshot:
        with self._lock:
            sizes = {str(b): c for b, c in sorted(self.batch_sizes.items())}
            return EngineSnapshot(self.provider, self.batches, self.items,
                                  round(self.items / self.batches, 2) if self.batches else 0.0, sizes, self.inflight,
                                  self.max_inflight_seen, Latency.of(self.infer))

    def reset(self) -> None:
        """Forget what was counted so far (start-up checks and warm-up runs)."""
        with self._lock:
            self.batches = self.items = self.inflight = self.max_inflight_seen = 0
            self.batch_sizes.clear()
            self.infer = Histogram()


def thread_count() -> int:
    """Threads of this process as the kernel counts them (includes ORT's and FFmpeg's own)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Threads:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return threading.active_count()


class Metrics:
    def __init__(self, timeline: bool = False, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock  # monotonic: times the frames out, the run and the recent figures
        self.started = clock()
        self.timeline: list[tuple[float, float]] | None = [] if timeline else None
        self._lock = threading.RLock()  # counters update under it and may create their camera
        self.cameras: dict[str, CameraStats] = {}
        self.stages: dict[str, StageStats] = defaultdict(StageStats)
        self.engines: dict[str, EngineStats] = defaultdict(EngineStats)
        self.queues: dict[str, object] = {}
        self.reached: dict[str, Histogram] = {}
        self.max_threads = 0
        self._cpu_mark = (time.monotonic(), os.times())
        self.cpu_percent = 0.0
        self.state_listeners: list = []  # called (camera, state, detail) on every camera state change
        self._open_outputs: set[str] = set()
        self.retention: dict[str, RetentionStats] = {}  # folder ("outputs", "events") -> its retention's counts
        self.finished: float | None = None  # when the last open camera's outputs were final: run time ends there

    def camera(self, cam: str) -> CameraStats:
        stats = self.cameras.get(cam)
        if stats is None:
            with self._lock:
                stats = self.cameras.setdefault(cam, CameraStats(recent=Window(self.clock())))
        return stats

    def camera_state(self, cam: str, state: CameraState, detail: str = "") -> bool:
        """Set a camera's health state; True (and listeners told) when it changed."""
        stats = self.camera(cam)
        state, detail = CameraState(state), redact(detail)
        if stats.state == state and stats.detail == detail:
            return False
        changed = stats.state != state
        stats.state, stats.detail = state, detail
        if changed:
            for listener in self.state_listeners:
                listener(cam, state, detail)
        return True

    def outputs_opened(self, cam: str) -> None:
        with self._lock:
            self._open_outputs.add(cam)
            self.finished = None

    def outputs_closed(self, cam: str) -> None:
        """A camera's files are final; with the last one the run's time stops (waiting for
        event destinations at shutdown is no run time)."""
        with self._lock:
            self._open_outputs.discard(cam)
            if not self._open_outputs:
                self.finished = self.clock()

    def drop(self, cam: str, reason: str, n: int = 1) -> None:
        with self._lock:
            self.camera(cam).dropped[reason] += n

    def lost(self, cam: str, output: str, n: int) -> None:
        """`n` frames (video), lines (jsonl) or records (store) an output of `cam` could not write."""
        field = {"video": "video_frames_lost", "store": "store_lost"}.get(output, "jsonl_lines_lost")
        with self._lock:
            stats = self.camera(cam)
            setattr(stats, field, getattr(stats, field) + n)

    def error(self, cam: str, stage: str | None = None) -> None:
        with self._lock:
            self.camera(cam).errors += 1
            if stage is not None:
                self.stages[stage].errors += 1

    def snapshot_lost(self, cam: str, pictures: int = 1) -> None:
        with self._lock:
            self.camera(cam).snapshots_lost += pictures

    def detector(self, cam: str, ran: bool, reason: str = "") -> None:
        """The detector runs on a frame of `cam`, or leaves it out (`still`: gated for want of motion)."""
        with self._lock:
            counts = self.camera(cam).detector
            counts.runs, counts.predicted, counts.gated = (counts.runs + ran, counts.predicted + (not ran),
                                                           counts.gated + (reason == "still"))

    def frame_in(self, cam: str, skipped: str | None = None) -> None:
        """A frame decoded; `skipped`: why the camera's settings leave it out (`stride`, `max_fps`), not a drop."""
        with self._lock:
            stats = self.camera(cam)
            stats.frames_in += 1
            if skipped:
                stats.skipped[skipped] += 1

    def frame_out(self, cam: str, latency_s: float) -> None:
        stats = self.camera(cam)
        now = self.clock()
        with self._lock:
            stats.out(now, latency_s)
            if self.timeline is not None:
                self.timeline.append((time.perf_counter(), latency_s))
        stats.latency.record(latency_s)

    def boundaries(self, t_capture: float, stamps: dict[str, float]) -> None:
        """Time from capture to each stage boundary a frame passed: where latency builds up."""
        for name, t in stamps.items():
            h = self.reached.get(name)
            if h is None:
                with self._lock:
                    h = self.reached.setdefault(name, Histogram())
            h.record(t - t_capture)

    def stage_busy(self, stage: str, seconds: float, items: int = 1) -> None:
        with self._lock:
            s = self.stages[stage]
            s.items, s.busy_s = s.items + items, s.busy_s + seconds

    def sample_process(self) -> None:
        """Update CPU% since the last sample and the peak thread count."""
        now, times = time.monotonic(), os.times()
        last_t, last_times = self._cpu_mark
        elapsed = now - last_t
        if elapsed > 0.05:
            used = (times.user - last_times.user) + (times.system - last_times.system)
            self.cpu_percent = 100.0 * used / elapsed
            self._cpu_mark = (now, times)
        self.max_threads = max(self.max_threads, thread_count())

    def total_latency(self) -> Histogram:
        """Every camera's latency in one histogram."""
        total = Histogram()
        for s in list(self.cameras.values()):
            total.merge(s.latency)
        return total

    def snapshot(self) -> Snapshot:
        """Everything measured so far. Cameras, stages and engines come and go while it is
        taken (an HTTP add, a poll): each table is copied under the lock first."""
        now = self.clock()
        with self._lock:  # each camera's counters as one moment (they change under this lock)
            cameras = {cam: c.snapshot(now) for cam, c in list(self.cameras.items())}
            stages, engines, queues = list(self.stages.items()), list(self.engines.items()), list(self.queues.items())
            reached, retention = list(self.reached.items()), list(self.retention.items())
        elapsed = (self.finished or now) - self.started
        processed = sum(c.processed for c in cameras.values())
        return Snapshot(
            elapsed_s=round(elapsed, 3), throughput_fps=round(processed / elapsed, 2) if elapsed > 0 else 0.0,
            processed=processed, latency=Latency.of(self.total_latency()), cameras=cameras,
            recent=recent_of([c.recent for c in list(self.cameras.values())], now),
            cpu_percent=round(self.cpu_percent, 1), threads=thread_count(), max_threads=self.max_threads,
            reached_after={k: Latency.of(h) for k, h in sorted(reached, key=lambda kv: kv[1].total / max(1, kv[1].count))},
            stages={k: v.snapshot(elapsed) for k, v in stages},
            engines={k: v.snapshot() for k, v in engines},
            queues={name: QueueSnapshot(len(q), getattr(q, "high_water", 0), getattr(q, "dropped", 0))  # type: ignore[arg-type]
                    for name, q in queues},
            retention={name: dataclasses.replace(r) for name, r in retention})
