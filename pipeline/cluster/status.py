"""What a pipeline host reports to the driver each poll, built in one place (`of`): small
and independent of the frame rate (per camera counters and states, one latency histogram
to merge, event destinations' counts)."""
from __future__ import annotations

from dataclasses import dataclass, field

from pipeline.metrics.histogram import Histogram
from pipeline.metrics.snapshot import CameraSnapshot, DeliveryStats, EngineSnapshot, Snapshot


@dataclass
class HostStatus:
    host: str
    node: str
    cameras: dict[str, CameraSnapshot] = field(default_factory=dict)  # camera -> its entry of the host's snapshot
    open: list[str] = field(default_factory=list)           # cameras whose outputs are not final yet
    latency_counts: list[int] = field(default_factory=lambda: [0] * len(Histogram().counts))
    latency_total: float = 0.0
    latency_max: float = 0.0
    engines: dict[str, EngineSnapshot] = field(default_factory=dict)
    events: dict[str, DeliveryStats] = field(default_factory=dict)
    outputs_failed: dict[str, str] = field(default_factory=dict)
    cpu_percent: float | None = None
    recent_counts: list[int] = field(default_factory=lambda: [0] * len(Histogram().counts))  # the last WINDOW_S
    recent_total: float = 0.0
    recent_max: float = 0.0
    live_view: dict | None = None  # its web server's live view (`WebServer.live_view`), where it serves one

    @classmethod
    def of(cls, host: str, node: str, snap: Snapshot, latency: Histogram, recent: Histogram,
           open_cameras: list[str], outputs_failed: dict[str, str], live_view: dict | None = None) -> "HostStatus":
        """From a host's pipeline snapshot, its latency histogram and its recent one."""
        return cls(host, node, snap.cameras, open_cameras, latency.counts.tolist(), latency.total, latency.max,
                   snap.engines, snap.events, outputs_failed, snap.cpu_percent, recent.counts.tolist(),
                   recent.total, recent.max, live_view)

    def latency(self) -> Histogram:
        return Histogram.from_counts(self.latency_counts, self.latency_total, self.latency_max)

    def recent_latency(self) -> Histogram:
        """Its cameras' latency over the recent window (`metrics.window`), as of this status."""
        return Histogram.from_counts(self.recent_counts, self.recent_total, self.recent_max)
