"""Prometheus endpoint (`metrics.prometheus_port`): the same snapshot as the JSON report,
read at scrape time, under standard names (`_total` counters, seconds, per-camera /
per-stage / per-model / per-destination labels), served by the `prometheus-client` library.

Labels carry names from the config (camera ids, line and zone names, event destinations),
so the snapshot is redacted before it becomes metrics.
"""
from __future__ import annotations

import errno
from typing import Callable, Iterable, Iterator

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from pipeline.errors import StartupError
from pipeline.metrics.snapshot import CameraSnapshot, DeliveryStats, EngineSnapshot, Latency, RetentionStats, Snapshot
from pipeline.metrics.window import WINDOW_S

SnapshotOf = Callable[[], Snapshot]
Rows = Iterable[tuple[list[str], float | None]]
_QUANTILES: tuple[tuple[str, Callable[[Latency], float | None]], ...] = (
    ("0.5", lambda l: l.p50_ms), ("0.95", lambda l: l.p95_ms), ("0.99", lambda l: l.p99_ms))


def unusable_port(where: str, port: int, host: str, error: OSError) -> str:
    """The one line for a port that cannot be listened on (preflight's probe and the servers' bind)."""
    why = "already in use" if error.errno == errno.EADDRINUSE else f"unusable ({error.strerror or error})"
    return f"{where}: port {port} on {host} is {why}"


def _counter(name: str, doc: str, labels: list[str], rows: Rows) -> CounterMetricFamily:
    m = CounterMetricFamily(name, doc, labels=labels)
    for values, v in rows:
        m.add_metric(values, v)
    return m


def _gauge(name: str, doc: str, labels: list[str], rows: Rows) -> GaugeMetricFamily:
    m = GaugeMetricFamily(name, doc, labels=labels)
    for values, v in rows:
        if v is not None:
            m.add_metric(values, v)
    return m


def _seconds(ms: float | None) -> float | None:
    return None if ms is None else ms / 1000


def _camera_metrics(cams: dict[str, CameraSnapshot]) -> Iterator[Metric]:
    yield _counter("pipeline_camera_frames_in", "Frames decoded per camera", ["camera"],
                   [([c], v.frames_in) for c, v in cams.items()])
    yield _counter("pipeline_camera_frames_processed", "Frames written by the sinks per camera", ["camera"],
                   [([c], v.processed) for c, v in cams.items()])
    yield _counter("pipeline_camera_frames_dropped", "Frames dropped per camera and reason", ["camera", "reason"],
                   [([c, r], n) for c, v in cams.items() for r, n in v.dropped.items()])
    yield _counter("pipeline_camera_frames_skipped", "Frames left out on purpose (stride, max_fps) per camera and reason",
                   ["camera", "reason"], [([c, r], n) for c, v in cams.items() for r, n in v.skipped.items()])
    yield _counter("pipeline_camera_errors", "Frame errors per camera", ["camera"],
                   [([c], v.errors) for c, v in cams.items()])
    yield _counter("pipeline_camera_decode_errors", "Unreadable packets skipped per camera", ["camera"],
                   [([c], v.decode_errors) for c, v in cams.items()])
    yield _counter("pipeline_camera_snapshots_lost", "Event pictures (frames, crops) not written per camera",
                   ["camera"], [([c], v.snapshots_lost) for c, v in cams.items()])
    yield _counter("pipeline_camera_video_frames_lost", "Frames a camera's video could not hold (disk full, "
                   "encoder failed)", ["camera"], [([c], v.video_frames_lost) for c, v in cams.items()])
    yield _counter("pipeline_camera_jsonl_lines_lost", "JSON lines a camera's output could not write", ["camera"],
                   [([c], v.jsonl_lines_lost) for c, v in cams.items()])
    yield _counter("pipeline_camera_store_lost", "Frame records and rows the store could not keep per camera",
                   ["camera"], [([c], v.store_lost) for c, v in cams.items()])
    yield _counter("pipeline_camera_detector_runs", "Frames the detector ran on per camera", ["camera"],
                   [([c], v.detector.runs) for c, v in cams.items()])
    yield _counter("pipeline_camera_frames_gated", "Frames of the detection rate left out for want of motion",
                   ["camera"], [([c], v.detector.gated) for c, v in cams.items()])
    yield _counter("pipeline_camera_frames_predicted", "Frames the detector did not see (the tracker predicts)",
                   ["camera"], [([c], v.detector.predicted) for c, v in cams.items()])
    yield _counter("pipeline_camera_reconnects", "Reconnects of live cameras", ["camera"],
                   [([c], v.reconnects) for c, v in cams.items()])
    yield _counter("pipeline_camera_downtime_seconds", "Time live cameras were disconnected", ["camera"],
                   [([c], v.downtime_s) for c, v in cams.items()])
    yield _gauge("pipeline_camera_fps", f"Output frame rate per camera over the last {WINDOW_S} s", ["camera"],
                 [([c], v.recent.fps) for c, v in cams.items()])
    yield _gauge("pipeline_camera_state", "1 for the camera's current health state", ["camera", "state"],
                 [([c, v.state], 1) for c, v in cams.items()])
    yield _gauge("pipeline_camera_latency_seconds", "End-to-end latency quantiles per camera", ["camera", "quantile"],
                 [([c, q], _seconds(k(v.latency))) for c, v in cams.items() for q, k in _QUANTILES])
    yield _counter("pipeline_analytics_events", "Line crossings and zone entries/exits",
                   ["camera", "name", "event", "class"],
                   [([c, name, event, cls], n) for c, v in cams.items() for name, events in v.counts.items()
                    for event, per_class in events.items() for cls, n in per_class.items()])


def _recording_metrics(cams: dict[str, CameraSnapshot]) -> Iterator[Metric]:
    recs = {c: v.recording for c, v in cams.items() if v.recording is not None}
    for name, doc, key in (("bytes", "Bytes recorded per camera", "bytes"),
                           ("packets", "Packets recorded per camera", "packets"),
                           ("dropped_packets", "Packets left out of the recording (its writer fell behind)", "dropped"),
                           ("gaps", "Holes in the recording: reconnects of its stream, drops", "gaps"),
                           ("stalls", "Times a connected live stream sent nothing for a while", "stalls"),
                           ("segments", "Recording files begun per camera", "segments")):
        yield _counter(f"pipeline_recording_{name}", doc, ["camera"], [([c], getattr(r, key)) for c, r in recs.items()])
    yield _gauge("pipeline_recording_bytes_per_second", "Recording rate over the last seconds", ["camera"],
                 [([c], r.bytes_per_s) for c, r in recs.items()])
    yield _gauge("pipeline_recording_state", "1 for the recording's state and current file",
                 ["camera", "state", "file"], [([c, r.state, r.file], 1) for c, r in recs.items()])


def _stage_metrics(s: Snapshot) -> Iterator[Metric]:
    yield _gauge("pipeline_stage_reached_seconds", "Time from capture to a stage boundary (quantiles)",
                 ["stage", "quantile"],
                 [([k, q], _seconds(key(v))) for k, v in s.reached_after.items()
                  for q, key in (_QUANTILES[0], _QUANTILES[2])])
    yield _counter("pipeline_stage_items", "Items handled per stage", ["stage"],
                   [([k], v.items) for k, v in s.stages.items()])
    yield _counter("pipeline_stage_busy_seconds", "Busy time per stage", ["stage"],
                   [([k], v.busy_s) for k, v in s.stages.items()])
    yield _counter("pipeline_stage_calls_saved", "Classifications skipped thanks to tracking", ["stage"],
                   [([k], v.counters["calls_saved"]) for k, v in s.stages.items() if "calls_saved" in v.counters])
    yield _gauge("pipeline_queue_depth", "Items waiting per queue", ["queue"],
                 [([k], v.depth) for k, v in s.queues.items()])
    yield _counter("pipeline_queue_dropped", "Items dropped per queue", ["queue"],
                   [([k], v.dropped) for k, v in s.queues.items()])


def _engine_metrics(engines: dict[str, EngineSnapshot]) -> Iterator[Metric]:
    yield _counter("pipeline_engine_batches", "Batches run per model", ["model"],
                   [([k], v.batches) for k, v in engines.items()])
    yield _counter("pipeline_engine_items", "Items inferred per model", ["model"],
                   [([k], v.items) for k, v in engines.items()])
    yield _gauge("pipeline_engine_inflight", "Batches in flight per model", ["model"],
                 [([k], v.inflight) for k, v in engines.items()])
    yield _counter("pipeline_engine_batch_size", "Batches run per model and batch size", ["model", "size"],
                   [([k, b], n) for k, v in engines.items() for b, n in v.batch_sizes.items()])
    yield _gauge("pipeline_engine_mean_batch", "Mean batch size per model", ["model"],
                 [([k], v.mean_batch) for k, v in engines.items()])
    yield _gauge("pipeline_engine_inference_seconds", "Batch inference time quantiles per model", ["model", "quantile"],
                 [([k, q], _seconds(key(v.infer))) for k, v in engines.items() for q, key in _QUANTILES])


def _event_metrics(destinations: dict[str, DeliveryStats]) -> Iterator[Metric]:
    yield _counter("pipeline_events_sent", "Events delivered per destination", ["destination"],
                   [([d], v.sent) for d, v in destinations.items()])
    yield _counter("pipeline_events_dropped", "Events lost per destination", ["destination"],
                   [([d], v.dropped) for d, v in destinations.items()])
    yield _gauge("pipeline_events_waiting", "Events not yet delivered per destination", ["destination"],
                 [([d], v.waiting) for d, v in destinations.items()])


def _retention_metrics(folders: dict[str, RetentionStats]) -> Iterator[Metric]:
    yield _counter("pipeline_retention_removed_files", "Files removed to stay within the budget", ["folder"],
                   [([f], v.removed_files) for f, v in folders.items()])
    yield _counter("pipeline_retention_removed_bytes", "Bytes removed to stay within the budget", ["folder"],
                   [([f], v.removed_bytes) for f, v in folders.items()])
    yield _gauge("pipeline_retention_kept_bytes", "Bytes the folder held after its last sweep", ["folder"],
                 [([f], v.kept_bytes) for f, v in folders.items()])


class SnapshotCollector:
    def __init__(self, snapshot: SnapshotOf):
        self.snapshot = snapshot

    def collect(self) -> Iterator[Metric]:
        s = self.snapshot().redacted()
        yield from _camera_metrics(s.cameras)
        yield from _recording_metrics(s.cameras)
        yield from _stage_metrics(s)
        yield from _engine_metrics(s.engines)
        yield from _event_metrics(s.events)
        yield from _retention_metrics(s.retention)
        yield _gauge("pipeline_process_cpu_percent", "Process CPU use (100 = one core)", [], [([], s.cpu_percent)])
        yield _gauge("pipeline_process_threads", "Threads of the process", [], [([], s.threads)])
        yield _counter("pipeline_frames_processed", "Frames written, all cameras", [], [([], s.processed)])


class PrometheusExporter:
    """Serves `/metrics` on its own port; a port that cannot be listened on is a `StartupError`."""

    def __init__(self, snapshot: SnapshotOf, port: int, addr: str = "127.0.0.1"):
        self.registry = CollectorRegistry()
        self.registry.register(SnapshotCollector(snapshot))  # type: ignore[arg-type]
        try:  # its server (http.server's) binds with SO_REUSEADDR: a restart is not refused on TIME-WAIT
            self._server, self._thread = start_http_server(port, addr=addr, registry=self.registry)
        except OSError as e:
            raise StartupError(unusable_port("metrics.prometheus_port", port, addr, e)) from None
        self.port = self._server.server_port

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
