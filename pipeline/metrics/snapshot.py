"""A metrics snapshot as typed records: what every view of a run reads (the progress line,
the summary, the JSON report, Prometheus, `/api/cameras`, the cluster's merged view, the
benchmark). A field renamed here is a type error in its readers, not a silent `None`.

`to_dict()` is the JSON report's shape (and the page's): optional sections (events,
retention, a cluster's hosts) appear only where the run has them.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from pipeline.metrics.histogram import Histogram
from pipeline.metrics.window import WINDOW_S
from pipeline.redact import redact_data


@dataclass
class Latency:
    """Percentiles of a latency histogram, in milliseconds (None: nothing measured)."""

    p50_ms: float | None = None
    p95_ms: float | None = None
    p99_ms: float | None = None
    mean_ms: float | None = None
    max_ms: float | None = None

    @classmethod
    def of(cls, h: Histogram) -> "Latency":
        def ms(v: float | None) -> float | None:
            return None if v is None else round(v * 1000, 2)

        return cls(ms(h.percentile(50)), ms(h.percentile(95)), ms(h.percentile(99)), ms(h.mean()),
                   ms(h.max if h.count else None))


@dataclass
class Recent:
    """Figures over the last `window_s` seconds (`metrics.window`): what the live page,
    `/api/cameras` and the periodic log show, 0 fps during an outage; the report's
    `fps` and `latency` beside them cover the whole run."""

    window_s: float = float(WINDOW_S)
    fps: float = 0.0
    latency: Latency = field(default_factory=Latency)


@dataclass
class RecordingStats:
    """A camera's recording as it stands: kept up to date by its writer, copied into
    each snapshot (`/api/cameras`, the report, the summary, Prometheus)."""

    state: str = "waiting"  # waiting (for a keyframe), recording, reconnecting (its stream), failed, ended
    file: str = ""          # the segment being written (relative to outputs.dir)
    segments: int = 0
    packets: int = 0
    bytes: int = 0
    bytes_per_s: float = 0.0  # over the last ten seconds or so
    dropped: int = 0        # packets dropped while the writer was behind (up to the next keyframe)
    gaps: int = 0           # holes in the recording: reconnects of its stream, drops
    stalls: int = 0         # times a connected live stream sent nothing for `STALL_S`
    audio: str = ""         # "copied", or why it is left out
    error: str = ""


@dataclass
class DetectorCounts:
    """Which of a camera's frames the detector ran on: `runs` (frames it saw), `gated`
    (frames of the detection rate left out for want of motion), `predicted` (frames it
    did not see, gated or between the rate's frames: the tracker predicts on them)."""

    runs: int = 0
    gated: int = 0
    predicted: int = 0


@dataclass
class CameraSnapshot:
    state: str = "starting"
    detail: str = ""
    frames_in: int = 0
    processed: int = 0
    dropped: dict[str, int] = field(default_factory=dict)  # reason -> frames lost on the way
    skipped: dict[str, int] = field(default_factory=dict)  # reason (`stride`, `max_fps`) -> frames left out on purpose
    errors: int = 0
    decode_errors: int = 0
    output_errors: dict[str, str] = field(default_factory=dict)  # output (video, jsonl) -> why it stopped
    fps: float = 0.0  # over the run: its frames from the first to the last one out, outages included
    reconnects: int = 0
    attempts: int = 0  # failed tries to connect since its last frame: counts up while it is down
    downtime_s: float = 0.0  # the outage going on included
    latency: Latency = field(default_factory=Latency)  # over the run
    recent: Recent = field(default_factory=Recent)
    counts: dict[str, dict[str, dict[str, int]]] = field(default_factory=dict)  # line or zone -> event -> class -> n
    occupancy: dict[str, int] = field(default_factory=dict)  # zone -> objects inside now
    stationary: dict[str, int] = field(default_factory=dict)  # zone -> of those, the ones not moving
    segment: str = ""
    snapshots_lost: int = 0  # event pictures (frames, crops) that could not be written
    video_frames_lost: int = 0  # frames its video could not hold (disk full, the encoder failed)
    jsonl_lines_lost: int = 0  # JSON lines its output could not write
    store_lost: int = 0  # frame records and rows the store could not keep (the JSON lines hold them)
    recording: RecordingStats | None = None
    detector: DetectorCounts = field(default_factory=DetectorCounts)
    host: str | None = None  # on a cluster: where it runs (None: its host died), its node, how often it moved
    node: str | None = None
    moves: int = 0

    @property
    def dropped_total(self) -> int:
        return sum(self.dropped.values())


@dataclass
class StageSnapshot:
    items: int = 0
    busy_s: float = 0.0
    busy_fraction: float = 0.0
    items_per_s: float = 0.0
    counters: dict[str, int] = field(default_factory=dict)  # stage-specific (calls_saved, ...)


@dataclass
class EngineSnapshot:
    provider: str = ""
    batches: int = 0
    items: int = 0
    mean_batch: float = 0.0
    batch_sizes: dict[str, int] = field(default_factory=dict)  # batch size (as text) -> batches
    inflight: int = 0
    max_inflight_seen: int = 0
    infer: Latency = field(default_factory=Latency)


@dataclass
class QueueSnapshot:
    depth: int = 0
    high_water: int = 0
    dropped: int = 0


@dataclass
class RetentionStats:
    """What a folder's retention removed so far, and what the folder held after its last sweep."""

    removed_files: int = 0
    removed_bytes: int = 0
    kept_bytes: int = 0


@dataclass
class DeliveryStats:
    """One event destination's figures."""

    sent: int = 0
    waiting: int = 0
    dropped: int = 0

    def add(self, other: "DeliveryStats") -> None:
        self.sent += other.sent
        self.waiting += other.waiting
        self.dropped += other.dropped


@dataclass
class HostSnapshot:
    """A cluster host as the driver sees it."""

    node: str = ""
    alive: bool = True
    cpu_percent: float | None = None
    cameras: list[str] = field(default_factory=list)


@dataclass
class DriverSnapshot:
    polls: int = 0
    work_s: float = 0.0


@dataclass
class Snapshot:
    elapsed_s: float = 0.0
    throughput_fps: float = 0.0  # over the run
    processed: int = 0
    latency: Latency = field(default_factory=Latency)  # over the run
    recent: Recent = field(default_factory=Recent)  # every camera's frames over the last few seconds
    cpu_percent: float = 0.0
    threads: int | None = None
    max_threads: int | None = None
    thread_plan: int | None = None
    cameras: dict[str, CameraSnapshot] = field(default_factory=dict)
    reached_after: dict[str, Latency] = field(default_factory=dict)  # stage boundary -> time from capture
    stages: dict[str, StageSnapshot] = field(default_factory=dict)
    engines: dict[str, EngineSnapshot] = field(default_factory=dict)
    queues: dict[str, QueueSnapshot] = field(default_factory=dict)
    retention: dict[str, RetentionStats] = field(default_factory=dict)  # folder ("outputs", "events") -> counts
    events: dict[str, DeliveryStats] = field(default_factory=dict)  # destination -> counts
    hosts: dict[str, HostSnapshot] = field(default_factory=dict)  # a cluster's hosts
    incidents: list[str] = field(default_factory=list)
    driver: DriverSnapshot | None = None

    @property
    def events_lost(self) -> int:
        """Events dropped or still unsent, all destinations together."""
        return sum(d.dropped + d.waiting for d in self.events.values())

    def redacted(self) -> "Snapshot":
        """The same snapshot with every text (names, details, reasons) masked of secrets."""
        return redact_data(self)

    def to_dict(self) -> dict[str, Any]:
        """The JSON report's shape: optional sections only where the run has them; stage
        counters beside the stage's own figures."""
        out = dataclasses.asdict(self)
        for name, stage in out["stages"].items():
            out["stages"][name] = {**stage, **stage.pop("counters")}
        for key in ("retention", "events", "hosts", "incidents"):
            if not out[key]:
                del out[key]
        for key in ("threads", "max_threads", "thread_plan", "driver"):
            if out[key] is None:
                del out[key]
        for camera in out["cameras"].values():
            if camera["recording"] is None:
                del camera["recording"]
            if not self.hosts:
                for key in ("host", "node", "moves"):
                    del camera[key]
        return out
