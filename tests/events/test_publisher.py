"""Events to a real Mosquitto broker: the tracking config's line crossings and zone events
arrive in order, equal to the JSON lines'; a broker stopped mid-run costs the pipeline
nothing, and the events it missed arrive once it is back."""
from __future__ import annotations

import os
import time

import pytest
import yaml

from brokers import Mosquitto, Subscriber, available
from conftest import ROOT, read_jsonl
from recordings import times

_MISSING = available()
if _MISSING and os.environ.get("CI", "").lower() in ("1", "true", "yes"):
    raise RuntimeError(f"CI: {_MISSING}")
pytestmark = pytest.mark.skipif(_MISSING is not None, reason=_MISSING or "")


def tracking_config(tmp_path, port: int, realtime: bool) -> dict:
    cfg = yaml.safe_load((ROOT / "configs" / "tracking.yaml").read_text())
    for s in cfg["sources"]:
        s["uri"] = str((ROOT / "configs" / s["uri"]).resolve())
        s["realtime"] = realtime
    for m in cfg["models"].values():
        m["path"] = str((ROOT / "configs" / m["path"]).resolve())
        m["labels"] = str((ROOT / "configs" / m["labels"]).resolve())
    cfg["graph"] = [g for g in cfg["graph"] if "classify" not in g]  # the events come from tracking and analytics
    cfg["outputs"] = {"dir": str(tmp_path / "out"), "video": {"enabled": False},
                      "events": {"mqtt": {"host": "127.0.0.1", "port": port}}}
    return cfg


def frame_events(records: list[dict]) -> list[dict]:
    """The events of a file run's JSON lines (without the wall-clock time their messages carry)."""
    return [e for r in records for e in r.get("events", [])]


def run(cfg: dict, write_config, during=None, max_frames: int | None = None) -> dict:
    from pipeline.config import load_config
    from pipeline.graph import Pipeline

    p = Pipeline(load_config(write_config(cfg)), max_frames=max_frames)
    p.start()
    if during:
        during(p)
    assert p.wait(300)
    p.close()
    return p.snapshot()


def test_the_tracking_configs_events_arrive_in_order_equal_to_the_json_lines(tmp_path, write_config, model_path):
    broker = Mosquitto(tmp_path / "broker").start()
    sub = Subscriber(broker.port)
    try:
        snap = run(tracking_config(tmp_path, broker.port, realtime=False), write_config, max_frames=150)
        expected = frame_events(read_jsonl(str(tmp_path / "out" / "detections.jsonl")))
        got = sub.wait_for(len(expected), 20)
    finally:
        sub.close()
        broker.stop()
    crossings = [e for e in expected if e["event"] == "cross"]
    assert len(crossings) >= 5  # the sample clips really have crossings
    assert all(isinstance(m["time"], float) for m in got)  # when it was written (a file run's JSON lines leave it out)
    for cam in ("campus", "street"):
        assert [{k: v for k, v in m.items() if k != "time"} for m in got if m["camera"] == cam] == \
            [e for e in expected if e["camera"] == cam]
    states = [(m["camera"], m["state"]) for m in sub.messages if m["event"] == "state"]
    assert ("campus", "streaming") in states and ("campus", "ended") in states
    assert snap.events[f"mqtt://127.0.0.1:{broker.port}"].dropped == 0


def test_a_broker_that_goes_away_costs_nothing_and_its_events_arrive_after(tmp_path, write_config, model_path):
    broker = Mosquitto(tmp_path / "broker").start()
    sub = Subscriber(broker.port)
    gone = {}

    def outage(p) -> None:
        time.sleep(3)
        broker.stop()
        street = p.metrics.camera("street")
        gone["at"] = street.processed
        held = lambda: p.side.events.stats()[f"mqtt://127.0.0.1:{broker.port}"].waiting  # noqa: E731
        deadline = time.monotonic() + 60  # the broker stays away until events were held back and frames went on
        while (held() < 1 or street.processed - gone["at"] < 25) and time.monotonic() < deadline:
            time.sleep(0.1)
        gone["after"], gone["held"] = street.processed, held()
        broker.start()

    cfg = tracking_config(tmp_path, broker.port, realtime=True)
    cfg["sources"] = [s for s in cfg["sources"] if s["id"] == "street"]  # 10 s of cars crossing a line
    cfg["graph"][-2]["analytics"]["cameras"].pop("campus")
    try:
        snap = run(cfg, write_config, outage)
        expected = frame_events(read_jsonl(str(tmp_path / "out" / "detections.jsonl")))
        got = sub.wait_for(len(expected), 30)
    finally:
        sub.close()
        broker.stop()
    # the camera went on while the broker was down (a sink that waited for the broker would process nothing)
    assert gone["after"] - gone["at"] >= 25
    assert sum(snap.cameras["street"].dropped.values()) == 0 and snap.cameras["street"].processed == 250
    assert gone["held"] >= 1  # crossings happened while the broker was away: they waited in the buffer
    # every event, in order, the ones held back during the outage included
    assert expected and [{k: v for k, v in m.items() if k != "time"} for m in got] == expected


def test_a_recorded_cameras_events_name_the_recording_and_the_time_of_their_frame_in_it(tmp_path, write_config,
                                                                                      model_path):
    """With recording on, the events sent (and written) had no `recording`: the page's
    "play the recording" button never showed."""
    broker = Mosquitto(tmp_path / "broker").start()
    sub = Subscriber(broker.port)
    cfg = tracking_config(tmp_path, broker.port, realtime=False)
    cfg["sources"] = [s for s in cfg["sources"] if s["id"] == "street"]  # cars crossing a line from the start
    cfg["graph"][-2]["analytics"]["cameras"].pop("campus")
    cfg["outputs"]["record"] = {"enabled": True, "segment_s": 2}
    try:
        run(cfg, write_config, max_frames=100)
        rows = read_jsonl(str(tmp_path / "out" / "detections.jsonl"))
        expected = frame_events(rows)
        got = [m for m in sub.wait_for(len(expected), 20) if m["event"] != "state"]
    finally:
        sub.close()
        broker.stop()
    row_of = {r["seq"]: r for r in rows}
    crossings = [m for m in got if m["event"] == "cross"]
    assert crossings  # the cars really cross the line in these frames
    for m in got:
        row = row_of[m["seq"]]
        assert (m["recording"], m["recording_time"]) == (row["recording"], row["recording_time"]), m
        shown = [float(t) for t in times(str(tmp_path / "out" / m["recording"]))]
        assert min(abs(t - m["recording_time"]) for t in shown) < 1e-3  # a picture of that file, at that time
