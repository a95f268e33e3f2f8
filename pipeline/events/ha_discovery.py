"""Home Assistant's MQTT discovery: which entities a camera has, and the retained config
message that announces each (`<prefix>/<component>/<node_id>/<object_id>/config`).

A camera is one device. All its entities read one retained JSON message, the camera's
status (`pipeline/<camera>/status`, beside its events), each through a `value_template`
(Jinja, rendered by Home Assistant); the snapshot is a `camera` entity on the retained
snapshot topic. Every entity is unavailable while the process is away: they share the
process's availability topic, whose `offline` the broker publishes as the connection's
last will. Keys are written out in full (`state_topic`, never `stat_t`) and names inside
templates are JSON strings, which Jinja reads as the same string whatever it holds.
"""
from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field

from pipeline import __version__
from pipeline.config.outputs import HomeAssistantConfig
from pipeline.metrics.registry import CameraState
from pipeline.events.senders import camera_topic

AVAILABLE, NOT_AVAILABLE = "online", "offline"
ON, OFF = "ON", "OFF"
DIRECTIONS = ("in", "out")


@dataclass(frozen=True)
class Entity:
    """One Home Assistant entity of a camera: `key` is unique within the camera (it ends
    the discovery topic and the unique id); `fields` are its component's own keys."""

    component: str  # sensor, binary_sensor, camera
    key: str
    name: str
    fields: dict = field(default_factory=dict, hash=False, compare=False)


def slug(text: str) -> str:
    """`text` as discovery topics and unique ids allow it (letters, digits, `_`, `-`);
    where characters had to be replaced, a digest of the original keeps two names apart."""
    clean = re.sub(r"[^A-Za-z0-9_-]", "_", text)
    return clean if clean == text else f"{clean}_{_digest(text)}"


def _digest(*parts: str) -> str:
    return hashlib.sha1("\0".join(parts).encode()).hexdigest()[:8]


def _named(kind: str, *parts: str) -> str:
    """The key of an entity named by free text (a line, a zone, a class): readable, and
    unique whatever the names hold (a digest of all of them)."""
    return f"{kind}_{slug('_'.join(parts))[:40]}_{_digest(kind, *parts)}"


def _q(name: str) -> str:
    """A name as a Jinja string literal."""
    return json.dumps(name)


def state_entity() -> Entity:
    return Entity("sensor", "state", "State", {
        "device_class": "enum", "options": [s.value for s in CameraState], "icon": "mdi:cctv",
        "value_template": "{{ value_json.state }}",
        "json_attributes_template": "{{ {'detail': value_json.detail} | tojson }}"})


def objects_entity() -> Entity:
    return Entity("binary_sensor", "objects", "Objects", {
        "device_class": "occupancy", "payload_on": ON, "payload_off": OFF,
        "value_template": "{{ value_json.objects }}"})


def motion_entity() -> Entity:
    return Entity("binary_sensor", "motion", "Motion", {
        "device_class": "motion", "payload_on": ON, "payload_off": OFF, "value_template": "{{ value_json.motion }}"})


def last_event_entity() -> Entity:
    return Entity("sensor", "last_event", "Last event", {
        "icon": "mdi:bell-ring", "value_template": "{{ value_json.event }}",
        "json_attributes_template": "{{ (value_json.last_event or {}) | tojson }}"})


def snapshot_entity() -> Entity:
    return Entity("camera", "snapshot", "Snapshot", {})


def present_entity(cls: str) -> Entity:
    return Entity("binary_sensor", _named("present", cls), f"{cls} present", {
        "device_class": "occupancy", "payload_on": ON, "payload_off": OFF,
        "value_template": f"{{{{ 'ON' if value_json.present.get({_q(cls)}, 0) > 0 else 'OFF' }}}}"})


def line_entity(line: str, direction: str, cls: str | None = None) -> Entity:
    """A line's count one way: all classes, or one (`cls`)."""
    if cls is None:
        return Entity("sensor", _named("line", line, direction), f"{line} {direction}", {
            "state_class": "total_increasing", "icon": "mdi:counter",
            "value_template": f"{{{{ value_json.lines[{_q(line)}][{_q(direction)}] }}}}"})
    return Entity("sensor", _named("line", line, direction, cls), f"{line} {direction} {cls}", {
        "state_class": "total_increasing", "icon": "mdi:counter",
        "value_template": f"{{{{ value_json.lines[{_q(line)}].classes[{_q(cls)}][{_q(direction)}] }}}}"})


def zone_entity(zone: str, cls: str | None = None) -> Entity:
    """Objects inside a zone now: all classes, or one (`cls`)."""
    if cls is None:
        return Entity("sensor", _named("zone", zone), f"{zone} occupancy", {
            "state_class": "measurement", "icon": "mdi:account-group",
            "value_template": f"{{{{ value_json.zones[{_q(zone)}].occupancy }}}}"})
    return Entity("sensor", _named("zone", zone, cls), f"{zone} {cls}", {
        "state_class": "measurement", "icon": "mdi:account-group",
        "value_template": f"{{{{ value_json.zones[{_q(zone)}].classes[{_q(cls)}] }}}}"})


@dataclass(frozen=True)
class Discovery:
    """Where a camera's entities are announced and what they read."""

    config: HomeAssistantConfig
    events_topic: str  # `outputs.events.mqtt.topic`: the status and snapshot topics go beside it

    @property
    def availability_topic(self) -> str:
        return f"{self.config.node_id}/availability"

    @property
    def birth_topic(self) -> str:
        """Home Assistant says `online` here when it starts."""
        return f"{self.config.discovery_prefix}/status"

    def status_topic(self, camera: str) -> str:
        return camera_topic(self.events_topic, camera, "status")

    def message(self, camera: str, entity: Entity) -> tuple[str, dict]:
        """The entity's discovery topic and config payload."""
        node, cam = self.config.node_id, slug(camera)
        payload = {"name": entity.name, "unique_id": f"{node}_{cam}_{entity.key}", **entity.fields,
                   "availability_topic": self.availability_topic, "payload_available": AVAILABLE,
                   "payload_not_available": NOT_AVAILABLE,
                   "device": {"identifiers": [f"{node}_{cam}"], "name": camera, "model": "camera analytics",
                              "manufacturer": "pipeline", "sw_version": __version__},
                   "origin": {"name": "pipeline", "sw_version": __version__}}
        if entity.component == "camera":
            payload["topic"] = camera_topic(self.events_topic, camera, "snapshot")
        else:
            payload["state_topic"] = self.status_topic(camera)
            if "json_attributes_template" in entity.fields:
                payload["json_attributes_topic"] = self.status_topic(camera)
        topic = f"{self.config.discovery_prefix}/{entity.component}/{node}/{cam}_{entity.key}/config"
        return topic, payload
