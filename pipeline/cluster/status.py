"""What a pipeline host reports to the driver each poll, built in one place (`of`): small
and independent of the frame rate (per camera counters and states, one latency histogram
to merge, event destinations' counts)."""
from __future__ import annotations

from dataclasses import dataclass, field

from pipeline.metrics.histogram import Histogram


@dataclass
class HostStatus:
    host: str
    node: str
    cameras: dict[str, dict] = field(default_factory=dict)  # camera -> its entry of the host's snapshot
    open: list[str] = field(default_factory=list)           # cameras whose outputs are not final yet
    latency_counts: list[int] = field(default_factory=lambda: [0] * len(Histogram().counts))
    latency_total: float = 0.0
    latency_max: float = 0.0
    engines: dict[str, dict] = field(default_factory=dict)
    events: dict[str, dict] = field(default_factory=dict)   # destination -> sent, waiting, dropped
    outputs_failed: dict[str, str] = field(default_factory=dict)
    cpu_percent: float | None = None

    @classmethod
    def of(cls, host: str, node: str, snap: dict, latency: Histogram, open_cameras: list[str],
           outputs_failed: dict[str, str]) -> "HostStatus":
        """From a host's pipeline snapshot and its latency histogram."""
        return cls(host, node, snap["cameras"], open_cameras, latency.counts.tolist(), latency.total, latency.max,
                   snap["engines"], snap.get("events") or {}, outputs_failed, snap["cpu_percent"])

    def latency(self) -> Histogram:
        return Histogram.from_counts(self.latency_counts, self.latency_total, self.latency_max)
