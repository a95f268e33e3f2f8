"""Home Assistant over MQTT, against a real Mosquitto broker and a real run of the
pipeline on the campus clip (a counting line and a zone, motion measured, snapshots on):
every entity announced with a retained config that follows Home Assistant's documented
discovery schema, each reading a status topic the run really publishes, each template
(rendered with Jinja, as Home Assistant does) giving the run's own figures; the process's
availability `online` while it runs, `offline` after a clean shutdown, and `offline` from
the broker (the last will) when the process is killed."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter

import numpy as np
import pytest
import yaml
from jinja2.sandbox import ImmutableSandboxedEnvironment

from brokers import Mosquitto, available, free_port
from conftest import ROOT, detector_model, read_jsonl, run_pipeline
from pipeline.config import read_config
from pipeline.config.outputs import EventsConfig, HomeAssistantConfig, MqttConfig
from pipeline.frames import ClassNames, Detections, DetectPlan, Event, Frame, LineCount, Motion, ZoneCount
from pipeline.metrics.registry import CameraState
from pipeline.events.senders import MqttSender, camera_topic
from pipeline.events.homeassistant import CameraStatus, HomeAssistant

_MISSING = available()
if _MISSING and os.environ.get("CI", "").lower() in ("1", "true", "yes"):
    raise RuntimeError(f"CI: {_MISSING}")
pytestmark = pytest.mark.skipif(_MISSING is not None, reason=_MISSING or "")

PREFIX, NODE = "ha-test", "site-7"
COMPONENT_KEYS = {  # what this project sends of each component's documented options, by their full names
    "sensor": {"state_topic", "value_template", "device_class", "state_class", "unit_of_measurement", "options",
               "icon", "json_attributes_topic", "json_attributes_template"},
    "binary_sensor": {"state_topic", "value_template", "device_class", "payload_on", "payload_off", "icon"},
    "camera": {"topic", "icon", "image_encoding"},
}
COMMON_KEYS = {"name", "unique_id", "availability_topic", "payload_available", "payload_not_available", "device",
               "origin"}
DEVICE_KEYS = {"identifiers", "name", "model", "manufacturer", "sw_version"}
# Home Assistant's abbreviations of the keys above: a payload that used one beside a full key is ambiguous
ABBREVIATIONS = {"stat_t", "val_tpl", "dev_cla", "stat_cla", "unit_of_meas", "ops", "ic", "json_attr_t",
                 "json_attr_tpl", "uniq_id", "avty_t", "pl_avail", "pl_not_avail", "dev", "o", "pl_on", "pl_off",
                 "t", "img_e", "ids", "mf", "mdl", "sw", "~"}
SENSOR_CLASSES = {"measurement", "total", "total_increasing"}
BINARY_CLASSES = {"motion", "occupancy", "presence", "moving"}
TOPIC = re.compile(rf"^{PREFIX}/(sensor|binary_sensor|camera)/{NODE}/[A-Za-z0-9_-]+/config$")
JINJA = ImmutableSandboxedEnvironment()


class Broker:
    """Everything published on the broker, in order, and the retained value of each topic."""

    def __init__(self, port: int, name: str = "test-listener"):
        import paho.mqtt.client as mqtt

        self.messages: list[tuple[str, bytes, bool]] = []
        self.lock = threading.Lock()
        self.ready = threading.Event()
        self.client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=name)
        self.client.on_connect = lambda c, u, f, r, p: (c.subscribe("#", qos=1), self.ready.set())
        self.client.on_message = self._got
        self.client.connect("127.0.0.1", port)
        self.client.loop_start()
        assert self.ready.wait(10)

    def _got(self, client, userdata, m) -> None:
        with self.lock:
            self.messages.append((m.topic, bytes(m.payload), bool(m.retain)))

    def on(self, topic: str) -> list[bytes]:
        with self.lock:
            return [p for t, p, _ in self.messages if t == topic]

    def last(self) -> dict[str, bytes]:
        with self.lock:
            return {t: p for t, p, _ in self.messages}

    def wait(self, predicate, timeout: float = 60) -> bool:
        deadline = time.monotonic() + timeout
        while not predicate() and time.monotonic() < deadline:
            time.sleep(0.05)
        return predicate()

    def close(self) -> None:
        self.client.loop_stop()
        self.client.disconnect()


def retained(port: int) -> dict[str, bytes]:
    """What a client connecting now gets: the retained messages only."""
    late = Broker(port, "test-late")
    time.sleep(1.0)
    late.close()
    assert all(r for _, _, r in late.messages)
    return late.last()


def campus_config(model_path, sample_path, port: int, out: str) -> dict:
    """configs/tracking.yaml's campus camera (its line and zone), motion measured, snapshots
    on, the video off, Home Assistant on."""
    cfg = yaml.safe_load((ROOT / "configs" / "tracking.yaml").read_text())
    analytics = next(s for s in cfg["graph"] if "analytics" in s)["analytics"]
    return {"sources": [{"id": "campus", "uri": sample_path("vtest.mp4")}],
            "models": {"detector": detector_model(model_path, score_threshold=0.1)},
            "graph": [{"detect": {"model": "detector", "motion": True}}, {"track": {}},
                      {"analytics": {"cameras": {"campus": analytics["cameras"]["campus"]}}}],
            "outputs": {"dir": out, "video": {"enabled": False}, "jsonl": {"filename": "{camera}.jsonl"},
                        "events": {"snapshots": True, "flush_timeout_s": 5,
                                   "mqtt": {"host": "127.0.0.1", "port": port,
                                            "homeassistant": {"discovery_prefix": PREFIX, "node_id": NODE,
                                                              "interval_s": 0.5}}}}}


def check_schema(topic: str, payload: dict) -> str:
    """The payload against Home Assistant's discovery schema; returns the component."""
    m = TOPIC.match(topic)
    assert m, topic
    component = m.group(1)
    keys = set(payload)
    assert not keys & ABBREVIATIONS, (topic, keys & ABBREVIATIONS)
    assert keys <= COMMON_KEYS | COMPONENT_KEYS[component], (topic, keys - COMMON_KEYS - COMPONENT_KEYS[component])
    for key in ("name", "unique_id", "availability_topic", "payload_available", "payload_not_available"):
        assert isinstance(payload[key], str) and payload[key], (topic, key)
    device = payload["device"]
    assert set(device) <= DEVICE_KEYS and device["name"] == "campus"
    assert isinstance(device["identifiers"], list) and device["identifiers"]
    assert all(isinstance(device[k], str) for k in DEVICE_KEYS - {"identifiers"})
    if component == "camera":
        assert isinstance(payload["topic"], str)
        return component
    assert isinstance(payload["state_topic"], str) and isinstance(payload["value_template"], str)
    JINJA.parse(payload["value_template"])
    if "json_attributes_template" in payload:
        assert payload["json_attributes_topic"] == payload["state_topic"]
    if component == "binary_sensor":
        assert payload["device_class"] in BINARY_CLASSES and (payload["payload_on"], payload["payload_off"]) == (
            "ON", "OFF")
    elif payload.get("device_class") == "enum":
        assert isinstance(payload["options"], list) and "state_class" not in payload
    else:  # a number (its state class says how it adds up), or text (the last event)
        assert payload.get("state_class", "measurement") in SENSOR_CLASSES
    return component


def render(payload: dict, status: dict, key: str = "value_template") -> str:
    return JINJA.from_string(payload[key]).render(value_json=status)


def test_every_camera_topic_is_the_cameras_own():
    assert camera_topic("pipeline/{camera}/events", "gate", "snapshot") == "pipeline/gate/snapshot"
    assert camera_topic("events/{camera}", "gate", "status") == "events/gate/status"
    assert camera_topic("site/events", "gate", "snapshot") == "site/gate/snapshot"
    assert camera_topic("{camera}", "gate", "status") == "gate/status"


def test_the_snapshots_of_two_cameras_go_to_topics_of_their_own(tmp_path):
    """An events topic that does not end in the camera's level (one shared topic) still
    gives each camera its own retained snapshot, as the camera entities read them."""
    broker = Mosquitto(tmp_path / "broker").start()
    seen = Broker(broker.port)
    sender = MqttSender(MqttConfig(host="127.0.0.1", port=broker.port, topic="site/events"))
    try:
        sender.start()
        assert seen.wait(sender.client.is_connected, 20)
        assert sender.picture("door", b"door-jpeg") and sender.picture("yard", b"yard-jpeg")
        assert seen.wait(lambda: len(seen.messages) >= 2, 20)
    finally:
        sender.close()
        seen.close()
        broker.stop()
    assert seen.last() == {"site/door/snapshot": b"door-jpeg", "site/yard/snapshot": b"yard-jpeg"}


def test_home_assistant_options_are_checked_and_all_problems_said_at_once(tmp_path, model_path, sample_path):
    cfg = campus_config(model_path, sample_path, free_port(), str(tmp_path / "out"))
    cfg["outputs"]["events"]["mqtt"]["homeassistant"] = {"discovery_prefix": "ha/#", "node_id": "site 7",
                                                         "interval_s": 0, "prefix": "x"}
    problems = read_config(cfg, tmp_path)[1]
    where = "outputs.events.mqtt.homeassistant"
    assert sorted(problems) == sorted([
        f"{where}.discovery_prefix: expected MQTT topic levels without wildcards or empty levels, got 'ha/#'",
        f"{where}.node_id: letters, digits, '_' and '-' only, got 'site 7'",
        f"{where}.interval_s: must be > 0, got 0.0",
        f"{where}.prefix: unknown key (known: discovery_prefix, interval_s, node_id)"])
    cfg["outputs"]["events"]["mqtt"]["homeassistant"] = {}
    assert read_config(cfg, tmp_path)[1] == []


def test_a_run_announces_each_entity_and_keeps_its_state_current(tmp_path, model_path, sample_path, write_config):
    broker = Mosquitto(tmp_path / "broker").start()
    seen = Broker(broker.port)
    out = tmp_path / "out"
    try:
        snap = run_pipeline(campus_config(model_path, sample_path, broker.port, str(out)), write_config, str(out),
                            max_frames=100)
        assert seen.wait(lambda: seen.on(f"{NODE}/availability")[-1:] == [b"offline"], 10)
        kept = retained(broker.port)
    finally:
        seen.close()
        broker.stop()
    assert seen.on(f"{NODE}/availability") == [b"online", b"offline"]  # online after connect, offline at the end
    configs = {t: json.loads(p) for t, p in kept.items() if t.startswith(f"{PREFIX}/")}
    components = Counter(check_schema(t, p) for t, p in configs.items())
    ids = [p["unique_id"] for p in configs.values()]
    assert len(set(ids)) == len(ids)
    assert len({json.dumps(p["device"], sort_keys=True) for p in configs.values()}) == 1  # one device: the camera
    by_name = {p["name"]: p for p in configs.values()}

    # the entities the run showed: each direction of the line, per class counted; the zone and its classes inside
    events = [e for r in read_jsonl(str(out / "campus.jsonl")) for e in r.get("events", [])]
    crossed = Counter((e["class"], e["direction"]) for e in events if e["event"] == "cross")
    assert crossed, "people cross the campus path in the clip's first 10 s"
    expected = {"State", "Objects", "Motion", "Last event", "Snapshot", "path in", "path out", "lawn occupancy",
                *(f"path {d} {c}" for c, _ in crossed for d in ("in", "out")), "person present"}
    assert expected <= set(by_name), expected - set(by_name)
    assert components["camera"] == 1

    # every state topic is really published on; the templates give the run's own figures
    status_topic = by_name["State"]["state_topic"]
    statuses = [json.loads(p) for p in seen.on(status_topic)]
    assert len(statuses) >= 3 and kept[status_topic] == seen.on(status_topic)[-1]  # retained: the newest
    assert {p["state_topic"] for p in configs.values() if "state_topic" in p} == {status_topic}
    final = statuses[-1]
    assert render(by_name["State"], final) == "ended"
    assert any(render(by_name["State"], s) == "streaming" for s in statuses)
    for (cls, direction), n in crossed.items():
        assert render(by_name[f"path {direction} {cls}"], final) == str(n)
    for direction in ("in", "out"):
        assert render(by_name[f"path {direction}"], final) == str(sum(n for (_, d), n in crossed.items()
                                                                            if d == direction))
    lawn = [p for name, p in by_name.items() if name.startswith("lawn ") and name != "lawn occupancy"]
    assert lawn and render(by_name["lawn occupancy"], final) == str(snap.cameras["campus"].occupancy["lawn"])
    assert sum(int(render(p, final)) for p in lawn) == snap.cameras["campus"].occupancy["lawn"]
    assert any(render(by_name["person present"], s) == "ON" for s in statuses)
    assert any(render(by_name["Motion"], s) == "ON" for s in statuses)
    assert render(by_name["Objects"], final) == "OFF"  # the camera ended: nothing in sight any more
    last = events[-1]
    assert render(by_name["Last event"], final).startswith(f"{last['event']} ")
    assert json.loads(render(by_name["Last event"], final, "json_attributes_template"))["seq"] == last["seq"]
    assert kept[by_name["Snapshot"]["topic"]][:2] == b"\xff\xd8"  # a JPEG, retained


def test_the_broker_says_offline_when_the_process_is_killed(tmp_path, model_path, sample_path, write_config):
    broker = Mosquitto(tmp_path / "broker").start()
    seen = Broker(broker.port)
    cfg = campus_config(model_path, sample_path, broker.port, str(tmp_path / "out"))
    proc = subprocess.Popen([sys.executable, "-m", "pipeline", "run", "--config", write_config(cfg)], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        status = camera_topic("pipeline/{camera}/events", "campus", "status")
        assert seen.wait(lambda: any(b'"streaming"' in p for p in seen.on(status)), 120)
        assert seen.on(f"{NODE}/availability") == [b"online"]
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
        assert seen.wait(lambda: seen.on(f"{NODE}/availability")[-1:] == [b"offline"], 30)  # the last will
        assert retained(broker.port)[f"{NODE}/availability"] == b"offline"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
        seen.close()
        broker.stop()


def a_frame(seq: int, moving: bool = False, people: int = 0, crossing: bool = False) -> Frame:
    """A frame of camera `gate` as the sink gets it: motion measured, `people` tracked, the
    line `door`, and (`crossing`) a person crossing it inwards."""
    det = Detections(np.zeros((people, 4), np.float32), np.ones((people,), np.float32),
                     np.zeros((people,), np.int64), ClassNames(["person"]), track_id=np.arange(people))
    motion = Motion(np.ones((1, 4), np.float32) if moving else np.zeros((0, 4), np.float32))
    frame = Frame("gate", seq, seq, None, None, 0.0, detections=det, plan=DetectPlan(True, "motion", motion),
                  lines=[LineCount("door", (0.0, 0.0), (1.0, 1.0), int(crossing), 0)])
    if crossing:
        frame.events = [Event("gate", seq, seq, 1, "person", "cross", line="door", direction="in")]
    return frame


def test_motion_and_objects_seen_between_two_messages_still_show():
    status = CameraStatus()
    status.observe(a_frame(1, moving=True, people=2))
    status.observe(a_frame(2))
    first, second = status.message(), status.message()
    assert (first["motion"], first["objects"], first["present"]) == ("ON", "ON", {"person": 2})
    assert (second["motion"], second["objects"], second["present"]) == ("OFF", "OFF", {"person": 0})
    status.state = CameraState.ENDED
    status.observe(a_frame(3, moving=True, people=1))  # a frame still on its way when the camera ended
    assert (status.message()["objects"], status.message()["motion"]) == ("OFF", "OFF")


def home_config(port: int, flush_timeout_s: float = 5) -> EventsConfig:
    return EventsConfig(flush_timeout_s=flush_timeout_s, mqtt=MqttConfig(
        host="127.0.0.1", port=port, homeassistant=HomeAssistantConfig(discovery_prefix=PREFIX, node_id=NODE,
                                                                       interval_s=0.2)))


def test_a_broker_that_lost_its_retained_messages_gets_everything_again_and_so_does_home_assistant(tmp_path):
    broker = Mosquitto(tmp_path / "broker").start()
    home = HomeAssistant(home_config(broker.port))
    status = camera_topic("pipeline/{camera}/events", "gate", "status")
    try:
        home.start()
        home.camera_state("gate", CameraState.STREAMING, "")
        home.frame(a_frame(1, people=1, crossing=True))
        first = Broker(broker.port)
        assert first.wait(lambda: b'"in":1' in (first.last().get(status) or b""), 30)
        first.close()
        before = retained(broker.port)
        assert before[f"{NODE}/availability"] == b"online" and json.loads(before[status])["lines"]["door"]["in"] == 1
        configs = {t for t in before if t.startswith(f"{PREFIX}/")}
        broker.stop()
        (tmp_path / "broker" / "mosquitto.db").unlink(missing_ok=True)  # back without what was retained
        broker = Mosquitto(tmp_path / "broker", broker.port).start()
        seen = Broker(broker.port)
        assert seen.wait(lambda: set(seen.last()) >= {*configs, status, f"{NODE}/availability"}, 30)
        assert seen.last()[f"{NODE}/availability"] == b"online"
        assert json.loads(seen.last()[status])["lines"]["door"]["in"] == 1
        count = len(seen.on(status))
        seen.client.publish(f"{PREFIX}/status", "online")  # Home Assistant started: it says so on its birth topic
        assert seen.wait(lambda: len(seen.on(status)) > count and all(len(seen.on(t)) >= 2 for t in configs), 30)
        seen.close()
    finally:
        home.close()
        broker.stop()


def test_closing_with_the_broker_hung_costs_at_most_the_flush_timeout(tmp_path):
    broker = Mosquitto(tmp_path / "broker").start()
    home = HomeAssistant(home_config(broker.port, flush_timeout_s=1))
    seen = Broker(broker.port)
    try:
        home.start()
        home.camera_state("gate", CameraState.STREAMING, "")
        assert seen.wait(lambda: seen.on(f"{NODE}/availability") == [b"online"], 30)
        seen.close()
        broker.hang()
        home.frame(a_frame(1, people=1))
        t0 = time.monotonic()
        home.close()
        took = time.monotonic() - t0
    finally:
        broker.stop()
    assert took < 1 + 3.0


def test_a_template_reads_its_line_and_class_whatever_their_names_hold():
    from pipeline.events.ha_discovery import line_entity, zone_entity

    line, zone, cls = 'gate "A" }}{{', "zone\\é", "per'son"
    status = {"lines": {line: {"in": 1, "out": 2, "classes": {cls: {"in": 3, "out": 4}}}},
              "zones": {zone: {"occupancy": 5, "classes": {cls: 6}}}}
    got = [render(e.fields, status) for e in (line_entity(line, "in"), line_entity(line, "out", cls),
                                              zone_entity(zone), zone_entity(zone, cls))]
    assert got == ["1", "4", "5", "6"]


def test_a_class_present_reads_off_on_a_status_from_before_the_class_was_seen():
    """Home Assistant renders a retained or late status against the entity: a status sent
    before the class's first object holds no count for it and must read OFF, not fail."""
    from pipeline.events.ha_discovery import present_entity

    fields = present_entity("person").fields
    assert [render(fields, {"present": p}) for p in ({}, {"car": 1}, {"person": 0}, {"person": 2})] == \
        ["OFF", "OFF", "OFF", "ON"]


def test_a_reload_that_renames_a_line_and_removes_a_zone_removes_their_entities_and_state(tmp_path):
    """Frames before and after a reload (each frame carries every line and zone its camera
    has): the renamed line's and the removed zone's retained configs are cleared (an
    empty retained message removes the entity from Home Assistant), the status no longer
    holds their counts or the zone's last occupancy, and the new name is announced."""
    broker = Mosquitto(tmp_path / "broker").start()
    home = HomeAssistant(home_config(broker.port))
    status = camera_topic("pipeline/{camera}/events", "gate", "status")
    yard = ZoneCount("yard 2", np.zeros((4, 2), np.float32), 3, classes={"person": 2, "car": 1})
    try:
        home.start()
        home.camera_state("gate", CameraState.STREAMING, "")
        before = a_frame(1, people=1, crossing=True)
        before.zones = [yard, ZoneCount("lawn", np.zeros((4, 2), np.float32), 1, classes={"person": 1})]
        home.frame(before)
        seen = Broker(broker.port)
        assert seen.wait(lambda: b'"yard 2"' in (seen.last().get(status) or b""), 30)
        announced = {t for t, p in retained(broker.port).items() if t.startswith(f"{PREFIX}/") and p}
        after = a_frame(2, people=1)
        after.lines = [LineCount("front door", (0.0, 0.0), (1.0, 1.0), 0, 0)]  # "door" renamed
        after.zones = [before.zones[1]]  # "yard 2" taken away
        home.frame(after)
        assert seen.wait(lambda: b'"front door"' in (seen.last().get(status) or b""), 30)
        seen.close()
        now = retained(broker.port)
    finally:
        home.close()
        broker.stop()
    configs = {t: json.loads(p) for t, p in now.items() if t.startswith(f"{PREFIX}/")}
    names = {c["name"] for c in configs.values()}
    gone = announced - set(configs)
    assert gone and not {n for n in names if n.startswith(("door ", "yard 2"))}, names
    assert {"front door in", "front door out", "lawn occupancy", "lawn person"} <= names
    assert len(gone) == 2 + 2 + 3  # door in/out, door in/out person, yard's occupancy and its two classes
    state = json.loads(now[status])
    assert set(state["lines"]) == {"front door"} and set(state["zones"]) == {"lawn"}
    assert state["zones"]["lawn"]["occupancy"] == 1
