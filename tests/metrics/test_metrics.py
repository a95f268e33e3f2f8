"""Histograms, counters, and the Prometheus endpoint of a real run scraped over HTTP."""
from __future__ import annotations

import re
import time
import urllib.request

import pytest

from conftest import detector_model
from pipeline.metrics.histogram import Histogram
from pipeline.metrics.registry import Metrics


def test_histogram_percentiles_are_within_a_few_percent():
    h = Histogram()
    for ms in range(1, 101):
        h.record(ms / 1000)
    assert h.percentile(50) == pytest.approx(0.050, rel=0.06)
    assert h.percentile(99) == pytest.approx(0.099, rel=0.06)
    assert h.percentile(100) == pytest.approx(0.100, rel=1e-9)  # capped at the true maximum
    assert Histogram().percentile(50) is None


def test_histograms_merge_by_adding_counts():
    a, b = Histogram(), Histogram()
    a.record(0.01)
    b.record(1.0)
    a.merge(b)
    assert a.count == 2 and a.max == 1.0


def test_counters_create_their_camera_on_first_use():
    m = Metrics()
    m.frame_in("new")
    m.drop("other", "queue_full")
    m.error("third")
    snap = m.snapshot()
    assert snap.cameras["new"].frames_in == 1
    assert snap.cameras["other"].dropped == {"queue_full": 1}
    assert snap.cameras["third"].errors == 1


def test_lost_event_pictures_are_counted_per_camera_and_exported():
    from pipeline.metrics.prometheus import SnapshotCollector

    m = Metrics()
    m.frame_in("cam")
    m.snapshot_lost("cam", 3)
    snap = m.snapshot()
    assert snap.cameras["cam"].snapshots_lost == 3
    exported = {s.name: s.value for metric in SnapshotCollector(lambda: snap).collect() for s in metric.samples}
    assert exported["pipeline_camera_snapshots_lost_total"] == 3


def scrape(port: int) -> dict[str, float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    values = {}
    for line in text.splitlines():
        m = re.match(r"^([a-z_]+(?:\{[^}]*\})?) ([0-9.eE+-]+)$", line)
        if m:
            values[m.group(1)] = float(m.group(2))
    return values


def test_prometheus_endpoint_serves_the_report_numbers(tmp_path, sample_path, model_path, write_config):
    from pipeline.config import load_config
    from pipeline.graph import Pipeline
    from pipeline.metrics.prometheus import PrometheusExporter

    cfg = {"sources": [{"id": "street", "uri": sample_path("bikes.mp4"), "realtime": True}],
           "models": {"det": detector_model(model_path)}, "graph": [{"detect": {"model": "det"}}],
           "outputs": {"dir": str(tmp_path / "out")}}
    p = Pipeline(load_config(write_config(cfg)), max_frames=40)
    exporter = PrometheusExporter(p.snapshot, 0)
    try:
        p.start()
        while p.metrics.camera("street").processed < 5:
            time.sleep(0.05)
        during = scrape(exporter.port)
        assert during['pipeline_camera_state{camera="street",state="streaming"}'] == 1
        assert during['pipeline_camera_frames_processed_total{camera="street"}'] >= 5
        assert p.wait(60)
        p.close()
        after = scrape(exporter.port)
    finally:
        exporter.close()
    report = p.snapshot()
    cam = report.cameras["street"]
    assert after['pipeline_camera_frames_processed_total{camera="street"}'] == cam.processed == 40
    assert after['pipeline_camera_frames_in_total{camera="street"}'] == cam.frames_in
    assert after['pipeline_engine_batches_total{model="det"}'] == report.engines["det"].batches
    assert after['pipeline_engine_items_total{model="det"}'] == 40
    assert after['pipeline_camera_latency_seconds{camera="street",quantile="0.99"}'] == pytest.approx(
        cam.latency.p99_ms / 1000)
    assert after['pipeline_camera_state{camera="street",state="ended"}'] == 1
    reached = report.reached_after  # latency builds up along the graph, and is reported per boundary
    assert reached["capture"].p50_ms <= reached["detect"].p50_ms <= reached["sink"].p99_ms
    assert after['pipeline_stage_reached_seconds{quantile="0.99",stage="sink"}'] == pytest.approx(
        reached["sink"].p99_ms / 1000)


def test_run_time_ends_when_the_last_cameras_outputs_are_final():
    """Waiting for event destinations at shutdown is no run time: elapsed (and fps) stop
    with the last camera's files, and go on if a camera is added after."""
    m = Metrics()
    m.outputs_opened("a")
    m.frame_out("a", 0.01)
    m.outputs_closed("a")
    first = m.snapshot()
    time.sleep(0.05)
    assert m.snapshot().elapsed_s == first.elapsed_s
    m.outputs_opened("b")
    time.sleep(0.05)
    assert m.snapshot().elapsed_s > first.elapsed_s


def test_camera_states_are_text_and_their_detail_is_redacted():
    from pipeline.metrics.registry import CameraState

    m = Metrics()
    seen = []
    m.state_listeners.append(lambda cam, state, detail: seen.append((state, detail)))
    m.camera_state("a", CameraState.FAILED, "rtsp://admin:S3cretPass@10.0.0.7/stream: refused")
    snap = m.snapshot().cameras["a"]
    assert snap.state == "failed" and type(snap.state) is str
    assert "S3cretPass" not in snap.detail and "S3cretPass" not in seen[0][1] and seen[0][0] == "failed"


def test_snapshots_taken_while_cameras_stages_and_engines_come_and_go_are_whole():
    """Cameras added over HTTP while `/api/cameras` is polled: every snapshot is taken from
    tables that other threads grow at the same time; none may fail, each is consistent."""
    import threading

    from pipeline.metrics.prometheus import SnapshotCollector

    m = Metrics()
    stop = threading.Event()
    failures: list[BaseException] = []

    def come_and_go(k: int) -> None:
        i = 0
        while not stop.is_set():
            cam = f"c{k}-{i}"
            m.frame_in(cam)
            m.frame_out(cam, 0.01)
            m.stage_busy(f"stage{i % 50}", 0.001)
            m.engines[f"e{k}-{i % 50}"].submitted()
            m.boundaries(0.0, {f"b{i % 40}": 0.001})
            i += 1

    def read() -> None:
        try:
            while not stop.is_set():
                snap = m.snapshot()
                assert all(c.processed <= c.frames_in for c in snap.cameras.values())
                assert snap.processed == sum(c.processed for c in snap.cameras.values())
                snap.to_dict()
                list(SnapshotCollector(lambda: snap).collect())
        except BaseException as e:
            failures.append(e)

    threads = [threading.Thread(target=come_and_go, args=(k,)) for k in range(2)]
    threads += [threading.Thread(target=read) for _ in range(2)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 60
    while len(m.cameras) <= 1000 and not failures and time.monotonic() < deadline:
        time.sleep(0.05)  # the tables must really grow while they are read, however slow the machine
    stop.set()
    for t in threads:
        t.join()
    assert not failures, failures[0]
    assert len(m.cameras) > 1000


def test_recording_health_reads_the_same_in_the_report_the_summary_and_prometheus():
    from prometheus_client import CollectorRegistry, generate_latest

    from pipeline.metrics.prometheus import SnapshotCollector
    from pipeline.metrics.report import summary_table
    from pipeline.metrics.snapshot import RecordingStats

    m = Metrics()
    m.frame_in("plain")
    rec = m.camera("door").recording = RecordingStats(state="recording", file="door.rec.20261201T120000Z.mp4",
                                                      segments=2, packets=300, bytes=2_500_000, bytes_per_s=125_000.0,
                                                      dropped=12, gaps=1)
    snap = m.snapshot()
    rec.bytes += 1  # the snapshot holds a copy: the writer goes on meanwhile
    report = snap.to_dict()["cameras"]
    assert report["door"]["recording"]["bytes"] == 2_500_000 and "recording" not in report["plain"]
    assert "recording recording: 2.5 MB in 2 segment(s), 1.00 Mbit/s (1 gap(s), 12 packet(s) dropped)" in \
        summary_table(snap)
    registry = CollectorRegistry()
    registry.register(SnapshotCollector(lambda: snap))  # type: ignore[arg-type]
    text = generate_latest(registry).decode()
    assert 'pipeline_recording_bytes_total{camera="door"} 2.5e+06' in text
    assert 'pipeline_recording_gaps_total{camera="door"} 1.0' in text
    assert 'pipeline_recording_dropped_packets_total{camera="door"} 12.0' in text
    assert 'pipeline_recording_state{camera="door",file="door.rec.20261201T120000Z.mp4",state="recording"} 1.0' in text
    assert 'camera="plain"' not in text.split("pipeline_recording_bytes_total")[1].split("# HELP")[0]


class Clock:
    """A monotonic clock the test moves on by hand."""

    def __init__(self, t: float = 1000.0):
        self.t = t

    def __call__(self) -> float:
        return self.t

    def stream(self, m: Metrics, camera: str, seconds: float, fps: float, latency_s: float) -> None:
        """`camera` sends `fps` frames a second for `seconds`, each `latency_s` old when out."""
        for _ in range(round(seconds * fps)):
            self.t += 1 / fps
            m.frame_out(camera, latency_s)


def test_recent_fps_is_zero_during_an_outage_and_back_after_it_while_the_run_average_lags():
    """A 30 fps camera down for 19 s: the lifetime average read 13.6 fps after it (and 27
    fps beside "reconnecting" during it); the recent rate (last 10 s) reads 0 during the
    outage and 30 ten seconds after it, and the periodic line shows it, labelled."""
    from pipeline.metrics.report import progress_line

    clock = Clock()
    m = Metrics(clock=clock)
    clock.stream(m, "door", 15, 30, 0.04)
    streaming = m.snapshot().cameras["door"]
    assert streaming.recent.fps == pytest.approx(30, rel=0.05) and streaming.recent.window_s == 10
    clock.t += 19
    down = m.snapshot()
    assert down.cameras["door"].recent.fps == 0 and down.recent.fps == 0
    assert down.cameras["door"].fps == pytest.approx(30, rel=0.05)  # the run's average, first to last frame
    assert "last 10s: 0.0 fps total" in progress_line(down) and "door: 450f 0.0fps" in progress_line(down)
    clock.stream(m, "door", 10, 30, 0.04)
    back = m.snapshot().cameras["door"]
    assert back.recent.fps == pytest.approx(30, rel=0.05)
    assert back.fps < 20  # the run's average holds the outage


def test_recent_p99_forgets_a_slow_start_that_the_runs_p99_keeps():
    """The header's P99 was the run's: a second-long start-up stall read 1061 ms for ever."""
    clock = Clock()
    m = Metrics(clock=clock)
    clock.stream(m, "a", 2, 10, 1.0)  # start-up: every frame a second late
    for _ in range(120):  # then both cameras at 10 fps for 12 s
        clock.t += 0.1
        m.frame_out("a", 0.05)
        m.frame_out("b", 0.02)
    snap = m.snapshot()
    assert snap.latency.p99_ms == pytest.approx(1000, rel=0.06)
    assert snap.recent.latency.p99_ms == pytest.approx(50, rel=0.06)
    assert snap.cameras["b"].recent.latency.p99_ms == pytest.approx(20, rel=0.06)
    assert snap.recent.fps == pytest.approx(20, rel=0.05)
    assert snap.to_dict()["cameras"]["a"]["recent"]["latency"]["p99_ms"] == snap.cameras["a"].recent.latency.p99_ms


def test_downtime_grows_while_the_camera_stays_down():
    """`downtime_s` froze at the figure of the first failed retry while the outage went on."""
    from pipeline.config import ReconnectConfig
    from pipeline.sources.health import CameraHealth
    from pipeline.sources.reconnect import Reconnect

    clock = Clock()
    m = Metrics(clock=clock)
    reconnect = Reconnect(ReconnectConfig(initial_s=30, max_s=30, give_up_s=0), clock=clock, jitter=lambda: 1.0)
    health = CameraHealth("door", m)
    health.streamed(reconnect)
    clock.t += 2
    health.lost(reconnect, "connection refused")  # the next try is 30 s away
    assert m.snapshot().cameras["door"].downtime_s == pytest.approx(2)
    clock.t += 10
    assert m.snapshot().cameras["door"].downtime_s == pytest.approx(12)
    clock.t += 5
    health.streamed(reconnect)
    clock.t += 5
    assert m.snapshot().cameras["door"].downtime_s == pytest.approx(17)  # back: it stops growing
