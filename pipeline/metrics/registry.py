"""Counters and histograms of one run: per camera, per stage, per queue, per engine.

Always on and cheap: a handful of integer updates and one histogram record per frame.
`snapshot()` is the single source of the periodic log line, the final summary, the JSON
report and the Prometheus endpoint, so they always agree.
"""
from __future__ import annotations

import os
import threading
import time
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from enum import StrEnum

from pipeline.metrics.histogram import Histogram
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
    dropped: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    latency: Histogram = field(default_factory=Histogram)
    state: CameraState = CameraState.STARTING
    detail: str = ""  # redacted when set: state events and /api/cameras carry it
    reconnects: int = 0
    downtime_s: float = 0.0
    first_out: float | None = None
    last_out: float | None = None
    counts: dict[tuple[str, str, str], int] = field(default_factory=lambda: defaultdict(int))  # (name, event, class)
    occupancy: dict[str, int] = field(default_factory=dict)  # zone -> objects inside now
    segment: str = ""  # the file name of the video (or JSON lines) segment being written

    def nested_counts(self) -> dict[str, dict[str, dict[str, int]]]:
        """Analytics counts as {line or zone: {event: {class: n}}}."""
        out: dict[str, dict[str, dict[str, int]]] = {}
        for (name, event, cls), n in sorted(self.counts.items()):
            out.setdefault(name, {}).setdefault(event, {})[cls] = n
        return out


@dataclass
class RetentionStats:
    """What a folder's retention removed so far, and what the folder held after its last sweep."""

    removed_files: int = 0
    removed_bytes: int = 0
    kept_bytes: int = 0


@dataclass
class StageStats:
    items: int = 0
    busy_s: float = 0.0
    errors: int = 0
    counters: dict[str, int] = field(default_factory=lambda: defaultdict(int))  # stage-specific (calls_saved, ...)


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
    def __init__(self, timeline: bool = False) -> None:
        self.started = time.monotonic()
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
                stats = self.cameras.setdefault(cam, CameraStats())
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
                self.finished = time.monotonic()

    def drop(self, cam: str, reason: str, n: int = 1) -> None:
        with self._lock:
            self.camera(cam).dropped[reason] += n

    def lost(self, cam: str, output: str, n: int) -> None:
        """`n` frames (video) or lines (jsonl) a failed output of `cam` could not write."""
        with self._lock:
            stats = self.camera(cam)
            if output == "video":
                stats.video_frames_lost += n
            else:
                stats.jsonl_lines_lost += n

    def error(self, cam: str, stage: str | None = None) -> None:
        with self._lock:
            self.camera(cam).errors += 1
            if stage is not None:
                self.stages[stage].errors += 1

    def frame_in(self, cam: str) -> None:
        with self._lock:
            self.camera(cam).frames_in += 1

    def frame_out(self, cam: str, latency_s: float) -> None:
        stats = self.camera(cam)
        now = time.monotonic()
        with self._lock:
            stats.processed += 1
            if stats.first_out is None:
                stats.first_out = now
            stats.last_out = now
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
            s.items += items
            s.busy_s += seconds

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

    def snapshot(self) -> dict:
        """Everything measured so far as plain data (the JSON report's shape)."""
        elapsed = (self.finished or time.monotonic()) - self.started
        cams = {}
        for cam, s in self.cameras.items():
            span = (s.last_out - s.first_out) if s.first_out is not None and s.last_out is not None else 0.0
            fps = (s.processed - 1) / span if span > 0 and s.processed > 1 else 0.0
            cams[cam] = {"state": s.state.value, "detail": s.detail, "frames_in": s.frames_in, "processed": s.processed,
                         "dropped": dict(s.dropped), "errors": s.errors, "decode_errors": s.decode_errors,
                         "output_errors": dict(s.output_errors),
                         "video_frames_lost": s.video_frames_lost, "jsonl_lines_lost": s.jsonl_lines_lost,
                         "fps": round(fps, 2),
                         "reconnects": s.reconnects, "downtime_s": round(s.downtime_s, 2),
                         "latency": s.latency.summary_ms(), "counts": s.nested_counts(),
                         "occupancy": dict(s.occupancy), "segment": s.segment}
        total = self.total_latency()
        processed = sum(s.processed for s in self.cameras.values())
        return {
            "elapsed_s": round(elapsed, 3),
            "throughput_fps": round(processed / elapsed, 2) if elapsed > 0 else 0.0,
            "processed": processed,
            "latency": total.summary_ms(),
            "cpu_percent": round(self.cpu_percent, 1),
            "threads": thread_count(),
            "max_threads": self.max_threads,
            "cameras": cams,
            "reached_after": {k: {"p50_ms": v.summary_ms()["p50_ms"], "p99_ms": v.summary_ms()["p99_ms"]}
                              for k, v in sorted(self.reached.items(), key=lambda kv: kv[1].total / max(1, kv[1].count))},
            "stages": {k: {"items": v.items, "busy_s": round(v.busy_s, 3),
                           "busy_fraction": round(v.busy_s / elapsed, 3) if elapsed > 0 else 0.0,
                           "items_per_s": round(v.items / elapsed, 2) if elapsed > 0 else 0.0,
                           **dict(v.counters)}
                       for k, v in self.stages.items()},
            "engines": {k: {"provider": v.provider, "batches": v.batches, "items": v.items,
                            "mean_batch": round(v.items / v.batches, 2) if v.batches else 0.0,
                            "batch_sizes": {str(b): c for b, c in sorted(v.batch_sizes.items())},
                            "inflight": v.inflight, "max_inflight_seen": v.max_inflight_seen,
                            "infer": v.infer.summary_ms()}
                        for k, v in self.engines.items()},
            "queues": {name: {"depth": len(q), "high_water": getattr(q, "high_water", 0),  # type: ignore[arg-type]
                              "dropped": getattr(q, "dropped", 0)} for name, q in self.queues.items()},
            **({"retention": {name: asdict(r) for name, r in self.retention.items()}} if self.retention else {}),
        }
