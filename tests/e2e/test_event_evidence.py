"""Evidence with every event, on `configs/tracking.yaml` with snapshots and clips on: one
snapshot per event (the JPEG of the frame that confirmed it, the same picture as that
frame of the annotated video), a crop of the object, a playable clip around each event's
time, and the picture on MQTT's retained snapshot topic."""
from __future__ import annotations

import os
import threading

import av
import cv2
import numpy as np
import paho.mqtt.client as mqtt
import pytest
import yaml

from conftest import ROOT, read_jsonl, run_pipeline

brokers = pytest.importorskip("brokers")
if brokers.available() and os.environ.get("CI", "").lower() in ("1", "true", "yes"):
    raise RuntimeError(f"CI: {brokers.available()}")
pytestmark = pytest.mark.skipif(brokers.available() is not None, reason=brokers.available() or "")

PRE_S, POST_S = 2.0, 2.0


def tracking_config(model_path, sample_path, broker_port: int) -> dict:
    """configs/tracking.yaml, campus only, with snapshots, clips and MQTT on."""
    cfg = yaml.safe_load((ROOT / "configs" / "tracking.yaml").read_text())
    cfg["sources"] = [{"id": "campus", "uri": sample_path("vtest.mp4")}]
    for model in cfg["models"].values():
        model["path"] = model_path(os.path.basename(model["path"]))
        model["labels"] = str(ROOT / "models" / os.path.basename(model["labels"]))
    cfg["graph"][3]["analytics"]["cameras"].pop("street")
    cfg["outputs"] = {"jsonl": {"filename": "{camera}.jsonl"},
                      "video": {"options": {"g": "20"}},  # a keyframe every 2 s: clips start close to pre_s
                      "events": {"snapshots": True, "clips": {"pre_s": PRE_S, "post_s": POST_S},
                                 "mqtt": {"host": "127.0.0.1", "port": broker_port}}}
    return cfg


class Pictures:
    """Retained JPEGs on pipeline/+/snapshot, as an NVR dashboard would take them."""

    def __init__(self, port: int):
        self.got: list[bytes] = []
        self.ready = threading.Event()
        self.client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="test-pictures")
        self.client.on_connect = lambda c, u, f, r, p: (c.subscribe("pipeline/+/snapshot"), self.ready.set())
        self.client.on_message = lambda c, u, m: self.got.append(bytes(m.payload))
        self.client.connect("127.0.0.1", port)
        self.client.loop_start()
        assert self.ready.wait(10)

    def close(self) -> None:
        self.client.loop_stop()
        self.client.disconnect()


def test_every_event_has_its_snapshot_crop_and_clip(tmp_path, model_path, sample_path, write_config):
    broker = brokers.Mosquitto(tmp_path / "broker").start()
    pictures = Pictures(broker.port)
    out = tmp_path / "out"
    try:
        run_pipeline(tracking_config(model_path, sample_path, broker.port), write_config, str(out), max_frames=120)
    finally:
        pictures.close()
        broker.stop()
    records = read_jsonl(str(out / "campus.jsonl"))
    events = [(r["seq"], r["time"], e) for r in records for e in r.get("events", [])]
    assert len(events) >= 3, "the campus clip's first 12 s have people crossing the path"
    with av.open(str(out / "campus.mp4")) as c:
        video = {i: f.to_ndarray(format="bgr24") for i, f in enumerate(c.decode(video=0))}
    snapshots = {e["snapshot"] for _, _, e in events}
    assert len(snapshots) == len({seq for seq, _, _ in events})  # one picture per frame that confirmed events
    for seq, at, event in events:
        picture = cv2.imread(str(out / event["snapshot"]))
        assert picture is not None and picture.shape == video[seq].shape
        diff = np.abs(picture.astype(int) - video[seq].astype(int)).mean()
        assert diff < 6, f"the snapshot of seq {seq} is not that frame of the video ({diff:.1f})"
        crop = cv2.imread(str(out / event["crop"]))
        assert crop is not None and 0 < crop.shape[0] <= picture.shape[0]
    end = max(r["time"] for r in records)
    clips: dict[str, list[float]] = {}
    for _, at, event in events:  # events close together share a clip
        clips.setdefault(event["clip"], []).append(at)
    time_of = {r["seq"]: r["time"] for r in records}
    for clip, times_of_events in clips.items():
        with av.open(str(out / clip)) as c:
            decoded = [(float(f.pts * f.time_base), f.to_ndarray(format="bgr24")) for f in c.decode(video=0)]
        times = [t for t, _ in decoded]
        first = time_of[int(np.argmin([np.abs(decoded[0][1].astype(int) - video[i].astype(int)).mean()
                                           for i in range(len(video))]))]  # the video's picture that starts it
        start = max(0.0, min(times_of_events) - PRE_S)  # (the video begins at 0)
        assert times[0] == 0 and start - 2.05 < first <= start + 0.05, clip  # from the keyframe at or before pre_s
        assert first + times[-1] >= min(max(times_of_events) + POST_S, end) - 0.15, clip
        assert np.all(np.diff(times) > 0)
    assert pictures.got and all(cv2.imdecode(np.frombuffer(p, np.uint8), cv2.IMREAD_COLOR) is not None
                                for p in pictures.got)
