"""The two ways events leave the process: an MQTT broker and an HTTP webhook.

A sender delivers a whole batch or raises; the outbox in front of it (`events.Outbox`)
retries the same batch with backoff, counts what it sent, and decides what is dropped.
Nothing here starts a thread or opens a connection before `start()`, and `close()` may
block on the outside world (a hung broker), so the publisher runs it on a thread it can
leave behind when its time is up.
"""
from __future__ import annotations

import json
import os
import threading
import urllib.request
from typing import TYPE_CHECKING, Protocol

from pipeline.config.outputs import EventsConfig, MqttConfig, WebhookConfig
from pipeline.redact import redact

if TYPE_CHECKING:
    import paho.mqtt.client as mqtt

ACK_WAIT_S = 5.0  # one wait for the broker's acknowledgement before the outbox backs off and asks again


class Sender(Protocol):
    name: str   # how the destination is shown in stats and logs, secrets masked
    batch: int  # the most events one `send` takes

    def start(self) -> None: ...

    def send(self, events: list[dict]) -> None: ...

    def close(self) -> None: ...


def mqtt_client(config: MqttConfig, suffix: str = "") -> "mqtt.Client":
    """A paho client for the configured broker (not connected): its client id (`client_id`,
    else pipeline-<pid>) with `suffix`, so that two connections of one process never
    take each other's session, the login, and reconnecting with backoff."""
    import paho.mqtt.client as mqtt

    client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2,
                         client_id=(config.client_id or f"pipeline-{os.getpid()}") + suffix)
    if config.username:
        client.username_pw_set(config.username, config.password)
    client.reconnect_delay_set(min_delay=1, max_delay=10)
    return client


def camera_topic(template: str, camera: str, leaf: str) -> str:
    """A topic of one camera beside its events (`pipeline/{camera}/events` gives
    `pipeline/<camera>/<leaf>`): the events topic's last level becomes `leaf` unless it
    names the camera, and a template without `{camera}` gets a level for it, so no two
    cameras ever share one."""
    levels = template.split("/")
    if "{camera}" not in levels[-1]:
        levels.pop()
    if not any("{camera}" in level for level in levels):
        levels.append("{camera}")
    return "/".join([*levels, leaf]).format(camera=camera)


class MqttSender:
    """paho-mqtt with its own network thread; it reconnects with backoff on its own.

    With QoS 1 or 2 paho keeps a published message until the broker acknowledges it and
    sends it again after a reconnect, so an event whose acknowledgement is late is waited
    for again (by its message id), never published a second time."""

    batch = 1

    def __init__(self, config: MqttConfig):
        self.config = config
        self.name = f"mqtt://{config.host}:{config.port}"
        self.client = mqtt_client(config)
        self.client.on_publish = self._on_publish
        self._acked: set[int] = set()
        self._ack = threading.Condition()
        self._pending: tuple[dict, int] | None = None  # the event handed to paho, not yet acknowledged, and its id
        self._started = False

    def start(self) -> None:
        self._started = True
        self.client.connect_async(self.config.host, self.config.port, keepalive=30)
        self.client.loop_start()

    def _on_publish(self, client, userdata, mid: int, reason, properties) -> None:
        if self.config.qos:
            with self._ack:
                self._acked.add(mid)
                self._ack.notify_all()

    def send(self, events: list[dict]) -> None:
        (event,) = events
        if self._pending is None or self._pending[0] is not event:
            if not self.client.is_connected():
                raise ConnectionError(f"not connected to {self.name}")
            info = self.client.publish(self.config.topic.format(camera=event["camera"]),
                                       json.dumps(event, separators=(",", ":")), qos=self.config.qos)
            if not self.config.qos:
                if info.rc:
                    raise ConnectionError(f"publish failed (code {info.rc})")
                return
            self._pending = (event, info.mid)
        mid = self._pending[1]
        with self._ack:
            if not self._ack.wait_for(lambda: mid in self._acked, ACK_WAIT_S):
                raise ConnectionError("no acknowledgement from the broker yet")
            self._acked.discard(mid)
        self._pending = None

    def picture(self, camera: str, jpeg: bytes) -> bool:
        """The event's snapshot on `pipeline/<camera>/snapshot` (`camera_topic`), retained
        (the newest one is what a dashboard shows): best effort, False when the broker is away."""
        if not self.client.is_connected():
            return False
        topic = camera_topic(self.config.topic, camera, "snapshot")
        return self.client.publish(topic, jpeg, qos=0, retain=True).rc == 0

    def close(self) -> None:
        """Disconnect first: paho's `loop_stop` alone waits for every unacknowledged message."""
        if self._started:
            self.client.disconnect()
            self.client.loop_stop()


class WebhookSender:
    """One POST per batch (`{"events": [...]}`); any answer but 2xx is a failure to retry."""

    batch = 100

    def __init__(self, config: WebhookConfig):
        self.config = config
        self.name = redact(config.url)

    def start(self) -> None:
        """Nothing to open: every batch is a request of its own."""

    def send(self, events: list[dict]) -> None:
        body = json.dumps({"events": events}, separators=(",", ":")).encode()
        request = urllib.request.Request(self.config.url, data=body, method="POST",
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=self.config.timeout_s) as r:
            r.read()

    def close(self) -> None:
        """Nothing stays open between batches."""


def senders_for(config: EventsConfig) -> list[tuple[Sender, int]]:
    """Each configured destination's sender and buffer size."""
    out: list[tuple[Sender, int]] = []
    if config.mqtt is not None:
        out.append((MqttSender(config.mqtt), config.mqtt.buffer))
    if config.webhook is not None:
        out.append((WebhookSender(config.webhook), config.webhook.buffer))
    return out
