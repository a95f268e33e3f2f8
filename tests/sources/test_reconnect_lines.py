"""Cameras and main streams (read apart from an analysed sub-stream, `detect_uri`, for the
recording) against a real socket that refuses (127.0.0.1, nothing listening): their
reconnect lines are one per backoff step, not one per attempt, and a stop ends a main
stream's reconnect loop at once and quietly."""
from __future__ import annotations

import logging
import threading
import time

from conftest import detector_model
from pipeline.config import ReconnectConfig, SourceConfig, load_config
from pipeline.config.outputs import RecordConfig
from pipeline.metrics.registry import Metrics
from pipeline.preprocess import Preprocessor
from pipeline.runtime.stage import RunControl
from pipeline.recording.recorder import Recording
from pipeline.sources.camera import VideoSource, wait_unless
from pipeline.sources.main_stream import RecordingFeed
from test_rtsp import free_port

LOST = "main stream lost"
BACKOFF = {"initial_s": 0.25, "max_s": 0.5, "give_up_s": 0}  # waits of 0.25, then 0.5 s (jittered)


def refused_camera(folder, stop: threading.Event) -> tuple[RecordingFeed, Recording]:
    url = f"rtsp://127.0.0.1:{free_port()}/main"
    config = SourceConfig(id="door", uri=url, detect_uri=url.replace("main", "sub"), live=True,
                          reconnect=ReconnectConfig(**BACKOFF))
    record = RecordConfig(enabled=True)
    recording = Recording("door", str(folder), record, None, True, path=lambda stamp: str(folder / f"{stamp}.mp4"),
                          on_failure=lambda e: None)
    camera_stop = threading.Event()
    feed = RecordingFeed(config, recording, lambda s: wait_unless(stop, camera_stop, s),
                         lambda: stop.is_set() or camera_stop.is_set())
    return feed, recording


def lost_lines(caplog) -> int:
    return sum(LOST in r.getMessage() for r in caplog.records)


def test_an_unreachable_main_stream_says_each_backoff_step_once_not_each_attempt(tmp_path, caplog):
    stop = threading.Event()
    feed, recording = refused_camera(tmp_path, stop)
    caplog.set_level(logging.WARNING, "pipeline.source")
    feed.start(time.perf_counter())
    time.sleep(2.5)  # about six attempts
    stop.set()
    feed.finish()
    recording.close()
    assert lost_lines(caplog) == 2  # one per backoff step: 0.25, 0.5


def test_a_stop_ends_the_main_streams_reconnect_loop_at_once_and_quietly(tmp_path, caplog):
    stop = threading.Event()
    feed, recording = refused_camera(tmp_path, stop)
    caplog.set_level(logging.WARNING, "pipeline.source")
    feed.start(time.perf_counter())
    time.sleep(0.3)
    stop.set()  # Ctrl-C: the camera's own thread is still busy elsewhere for a while
    said = lost_lines(caplog)
    assert feed.main is not None
    feed.main._thread.join(2.0)
    assert not feed.main._thread.is_alive()  # ended by the stop itself, before the camera's finish()
    assert lost_lines(caplog) == said  # no line after the stop
    feed.finish()
    recording.close()


def test_an_unreachable_camera_says_each_backoff_step_once_not_each_attempt(model_path, write_config, caplog):
    cfg = load_config(write_config({"sources": [{"id": "door", "uri": f"rtsp://127.0.0.1:{free_port()}/live",
                                                 "reconnect": BACKOFF}],
                                    "models": {"det": detector_model(model_path)},
                                    "graph": [{"detect": {"model": "det"}}]}))
    caplog.set_level(logging.INFO, "pipeline.source")
    control = RunControl()
    lane = type("Lane", (), {"put": lambda self, item: None, "wait_turn": lambda self: None,
                             "end_turn": lambda self: None})()
    source = VideoSource(cfg.sources[0], Preprocessor(cfg.detector), lane, Metrics(), control)
    source.start()
    time.sleep(2.5)  # about six attempts, each wait said as it is ("retrying in 0.4s", "0.6s")
    control.stop.set()
    source.join(10)
    retries = [r.getMessage() for r in caplog.records if "retrying in" in r.getMessage()]
    assert len(retries) == 2, retries  # one per backoff step: 0.25, 0.5
