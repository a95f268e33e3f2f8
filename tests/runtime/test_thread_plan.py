"""The thread plan printed at start-up is true: a run with several cameras (recorded, one
analysing a sub-stream, one with its annotated video), the live view and an MQTT
destination never has more threads than the plan says, as Python counts them and as
the kernel does (ORT's and FFmpeg's own included)."""
from __future__ import annotations

import threading

import pytest

from brokers import Mosquitto, available
from recordings import null_detector
from pipeline.config import load_config
from pipeline.graph import Pipeline
from pipeline.metrics.registry import thread_count


class Peaks:
    """The most threads seen while it runs (started before the run: the plan counts it)."""

    def __init__(self):
        self.python = self.kernel = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="peaks", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.005):
            self.python = max(self.python, threading.active_count())
            self.kernel = max(self.kernel, thread_count())

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def test_a_runs_threads_never_exceed_its_thread_plan(tmp_path, short_clips, write_config):
    if available():
        pytest.skip(available())
    broker = Mosquitto(tmp_path / "broker").start()
    clip = short_clips["vtest"]
    # paced: every camera's threads run at once for the clip's length, whatever the load (a
    # loaded CI run of unpaced clips ended cameras before others started: the peak sampled low)
    config = {"sources": [{"id": "rec", "uri": clip, "realtime": True},
                          {"id": "sub", "uri": clip, "detect_uri": short_clips["bikes"], "realtime": True},
                          {"id": "plain", "uri": clip, "record": {"enabled": False}, "realtime": True}],
              "models": {"det": null_detector(tmp_path)}, "graph": [{"detect": {"model": "det"}}],
              "outputs": {"dir": str(tmp_path / "out"), "video": {"enabled": True}, "record": {"enabled": True},
                          "web": {"port": 0},
                          "events": {"mqtt": {"host": "127.0.0.1", "port": broker.port}}}}
    before = threading.active_count()  # Python's threads (the plan's base counts the kernel's: native ones too)
    peaks = Peaks()
    try:
        p = Pipeline(load_config(write_config(config)))
        p.start()
        try:
            assert p.wait(120)
        finally:
            p.close()
    finally:
        peaks.stop()
        broker.stop()
    planned = p.plan.total
    assert peaks.python > before + 9  # a running graph was sampled (cameras, stages, workers)
    assert peaks.python <= planned, (peaks.python, p.plan.describe())
    assert peaks.kernel <= planned, (peaks.kernel, p.plan.describe())
