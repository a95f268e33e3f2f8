"""Home Assistant over MQTT (`outputs.events.mqtt.homeassistant`): each camera announced
as a device (`ha_discovery`), and its status kept current on its retained status topic.

The sink hands over every frame (`frame`) and the metrics every camera state change
(`camera_state`); what they show is gathered per camera (`CameraStatus`) and published
by a thread of its own at most every `interval_s`, only when it changed. Motion and
objects are latched between two messages: something seen for one frame still shows.
Entities appear as the run shows them: a line or zone with the first frame that carries
it, a class with its first object counted, motion once the camera's motion is measured.
A line or zone that a reload renamed or took away goes with the first frame without it:
its configs are cleared (an empty retained message removes the entity) and the status no
longer holds its counts or occupancy; a renamed one is announced under its new name.

A connection of its own carries it, with a last will (`offline`, retained, on the
availability topic) that the broker publishes if the process dies; `online` follows
every connect, with every config and status again (a broker restarted without its
retained messages, or Home Assistant saying `online` on its birth topic, gets all of it).
A clean shutdown publishes the last status and `offline`, waiting for the broker at most
`flush_timeout_s`.
"""
from __future__ import annotations

import json
import threading
import time
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from pipeline.config.outputs import EventsConfig
from pipeline.frames import Event, Frame
from pipeline.metrics.registry import CameraState
from pipeline.events.senders import mqtt_client
from pipeline.events.ha_discovery import (AVAILABLE, DIRECTIONS, NOT_AVAILABLE, OFF, ON, Discovery, Entity,
                                         last_event_entity, line_entity, motion_entity, objects_entity,
                                         present_entity, snapshot_entity, state_entity, zone_entity)


def summary(event: Event) -> str:
    """An event in a few words, as the last event sensor shows it: `cross path in (person)`."""
    words = [event.event, event.line or event.zone or "", event.direction or ""]
    return " ".join(w for w in words if w) + f" ({event.cls})"


def present_classes(frame: Frame) -> Counter:
    """Objects per class on the frame: its tracks where it is tracked, else its detections."""
    det = frame.detections
    if det is None or not len(det):
        return Counter()
    rows = np.flatnonzero(det.track_id >= 0) if det.track_id is not None else range(len(det))
    return Counter(det.names(int(det.class_id[i])) for i in rows)


@dataclass
class CameraStatus:
    """What one camera's status message says, and the entities announced for it."""

    entities: dict[str, Entity] = field(default_factory=dict)
    state: CameraState = CameraState.STARTING
    detail: str = ""
    motion: bool | None = None  # None: not measured
    motion_seen: bool = False   # since the last message
    present: dict[str, int] = field(default_factory=dict)  # class -> objects now
    peak: dict[str, int] = field(default_factory=dict)     # class -> most at once since the last message
    lines: dict[str, dict[str, dict[str, int]]] = field(default_factory=dict)  # line -> class -> direction -> n
    zones: dict[str, dict] = field(default_factory=dict)   # zone -> {"occupancy": n, "classes": {class: n}}
    last_event: Event | None = None
    retired: dict[str, Entity] = field(default_factory=dict)  # announced, then gone (a reload): configs to clear

    def add(self, *entities: Entity) -> list[Entity]:
        """The entities not announced yet, now held as announced."""
        new = [e for e in entities if e.key not in self.entities]
        self.entities.update((e.key, e) for e in new)
        for e in new:
            self.retired.pop(e.key, None)
        return new

    def retire(self, frame: Frame) -> list[Entity]:
        """The lines and zones the camera no longer has (a reload renamed or removed them:
        each frame carries all it has): taken out of the status, their entities returned
        to be removed from Home Assistant."""
        gone: list[Entity] = []
        for line in set(self.lines) - {ln.name for ln in frame.lines}:
            classes = [None, *self.lines.pop(line)]
            gone += [line_entity(line, d, c) for c in classes for d in DIRECTIONS]
        for zone in set(self.zones) - {z.name for z in frame.zones}:
            gone += [zone_entity(zone, c) for c in [None, *self.zones.pop(zone)["classes"]]]
        gone = [self.entities.pop(e.key) for e in gone if e.key in self.entities]
        self.retired.update((e.key, e) for e in gone)
        return gone

    def observe(self, frame: Frame) -> list[Entity]:
        """Take in a frame; returns the entities it shows for the first time."""
        new: list[Entity] = []
        motion = frame.plan.motion if frame.plan is not None else None
        if motion is not None:
            self.motion = motion.moving
            self.motion_seen |= motion.moving
            new += self.add(motion_entity())
        now = present_classes(frame)
        new += self.add(*(present_entity(c) for c in now if c not in self.present))
        self.present = {c: now.get(c, 0) for c in {*self.present, *now}}
        self.peak = {c: max(n, self.peak.get(c, 0)) for c, n in self.present.items()}
        for line in frame.lines:
            if line.name not in self.lines:
                self.lines[line.name] = {}
                new += self.add(*(line_entity(line.name, d) for d in DIRECTIONS))
        for event in frame.events:
            if event.event == "cross" and event.line is not None and event.direction in DIRECTIONS:
                by_class = self.lines.setdefault(event.line, {})
                if event.cls not in by_class:
                    by_class[event.cls] = dict.fromkeys(DIRECTIONS, 0)
                    new += self.add(*(line_entity(event.line, d) for d in DIRECTIONS),
                                    *(line_entity(event.line, d, event.cls) for d in DIRECTIONS))
                by_class[event.cls][event.direction] += 1
            self.last_event = event
        for zone in frame.zones:
            if zone.name not in self.zones:
                self.zones[zone.name] = {"occupancy": 0, "classes": {}}
                new += self.add(zone_entity(zone.name))
            known = self.zones[zone.name]["classes"]
            new += self.add(*(zone_entity(zone.name, c) for c in zone.classes if c not in known))
            self.zones[zone.name] = {"occupancy": zone.inside,
                                     "classes": {c: zone.classes.get(c, 0) for c in {*known, *zone.classes}}}
        return new

    def message(self) -> dict:
        """The status as published; the latches start again from what is there now."""
        lines = {name: {**{d: sum(c[d] for c in by_class.values()) for d in DIRECTIONS},
                        "classes": {cls: dict(c) for cls, c in sorted(by_class.items())}}
                 for name, by_class in sorted(self.lines.items())}
        if self.state.done:  # frames still on their way at the end left nothing in sight
            self.present = self.peak = dict.fromkeys(self.present, 0)
            self.motion_seen = False
        out = {"state": self.state.value, "detail": self.detail,
               "objects": ON if any(self.peak.values()) else OFF, "present": dict(sorted(self.peak.items())),
               "lines": lines, "zones": dict(sorted(self.zones.items())),
               "event": summary(self.last_event) if self.last_event is not None else None,
               "last_event": self.last_event.to_dict() if self.last_event is not None else None}
        if self.motion is not None:
            out["motion"] = ON if self.motion_seen else OFF
            self.motion_seen = bool(self.motion) and not self.state.done
        self.peak = dict(self.present)
        return out


class HomeAssistant:
    """The cameras' devices, entities and status on the broker, over a connection of its own."""

    def __init__(self, config: EventsConfig):
        assert config.mqtt is not None and config.mqtt.homeassistant is not None
        self.discovery = Discovery(config.mqtt.homeassistant, config.mqtt.topic)
        self.interval_s = config.mqtt.homeassistant.interval_s
        self.flush_timeout_s = config.flush_timeout_s
        self.snapshots = config.snapshots
        self.mqtt = config.mqtt
        self.client = mqtt_client(config.mqtt, "-ha")
        self.client.will_set(self.discovery.availability_topic, NOT_AVAILABLE, qos=1, retain=True)
        self.client.on_connect = self._on_connect
        self.client.on_message = self._on_birth
        self.cameras: dict[str, CameraStatus] = {}
        self._sent: dict[str, str] = {}  # camera -> its last status message: an unchanged one is not sent again
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._aborted = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="homeassistant", daemon=True)
        self._thread.start()
        self.client.connect_async(self.mqtt.host, self.mqtt.port, keepalive=30)
        self.client.loop_start()

    def camera_state(self, camera: str, state: CameraState, detail: str) -> None:
        """A metrics state listener: the camera's health as its state sensor shows it."""
        with self._lock:
            status = self._camera(camera)
            status.state, status.detail = CameraState(state), detail

    def frame(self, frame: Frame) -> None:
        """Called by the sink for every frame it writes."""
        with self._lock:
            status = self._camera(frame.camera)
            self._remove(frame.camera, status.retire(frame))
            self._announce(frame.camera, status.observe(frame))

    def _camera(self, camera: str) -> CameraStatus:
        status = self.cameras.get(camera)
        if status is None:
            status = self.cameras[camera] = CameraStatus()
            base = [state_entity(), objects_entity(), last_event_entity()]
            self._announce(camera, status.add(*base, *([snapshot_entity()] if self.snapshots else [])))
        return status

    def _announce(self, camera: str, entities: list[Entity]) -> None:
        for entity in entities:
            topic, payload = self.discovery.message(camera, entity)
            self.client.publish(topic, json.dumps(payload), qos=0, retain=True)  # none while away: all on connect

    def _remove(self, camera: str, entities: list[Entity]) -> None:
        """An empty retained config is how Home Assistant is told an entity is gone (and the
        broker forgets the config); the camera's next status no longer holds its value."""
        for entity in entities:
            topic, _ = self.discovery.message(camera, entity)
            self.client.publish(topic, b"", qos=0, retain=True)  # none while away: all on connect

    def _publish(self, camera: str, again: bool = False) -> None:
        """The camera's status, where it changed since the last one sent (or `again`)."""
        text = json.dumps(self.cameras[camera].message(), separators=(",", ":"))
        if again or text != self._sent.get(camera):
            if self.client.publish(self.discovery.status_topic(camera), text, qos=0, retain=True).rc == 0:
                self._sent[camera] = text

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            with self._lock:
                for camera in list(self.cameras):
                    self._publish(camera)

    def _on_connect(self, client, userdata, flags, reason, properties) -> None:
        if reason.is_failure:
            return
        client.publish(self.discovery.availability_topic, AVAILABLE, qos=1, retain=True)
        client.subscribe(self.discovery.birth_topic)
        self._everything()

    def _on_birth(self, client, userdata, message) -> None:
        if message.topic == self.discovery.birth_topic and message.payload == AVAILABLE.encode():
            self._everything()

    def _everything(self) -> None:
        """Every config and status again."""
        with self._lock:
            for camera, status in self.cameras.items():
                self._remove(camera, list(status.retired.values()))
                self._announce(camera, list(status.entities.values()))
                self._publish(camera, again=True)

    def abort(self) -> None:
        """A close under way (or to come) waits no more for the broker."""
        self._aborted.set()

    def close(self) -> None:
        """The last status of each camera, then `offline`; the broker gets `flush_timeout_s`."""
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join()
        with self._lock:
            for camera in list(self.cameras):
                self._publish(camera)
        info = self.client.publish(self.discovery.availability_topic, NOT_AVAILABLE, qos=1, retain=True)
        deadline = time.monotonic() + self.flush_timeout_s
        while (self.client.is_connected() and not info.is_published() and not self._aborted.is_set()
               and time.monotonic() < deadline):
            time.sleep(0.02)
        self.client.disconnect()
        self.client.loop_stop()
        self._thread = None
