"""Events as they happen — line crossings, zone entries and exits, camera state changes —
to MQTT (`pipeline/<camera>/events`, QoS 1) and/or an HTTP webhook.

A broker or endpoint that is down never stalls the pipeline: the sink only appends to a
bounded buffer per destination (the oldest event drops when it is full, counted), and a
thread of each destination sends from it in order, reconnecting with backoff. With QoS 1
an event leaves the buffer once the broker acknowledged it, so events wait out a broker
restart and arrive afterwards, in order.
"""
from __future__ import annotations

import json
import logging
import os
import threading
import time
import urllib.request
from collections import deque
from typing import Callable

from pipeline.config.outputs import EventsConfig, MqttConfig, WebhookConfig

log = logging.getLogger("pipeline.events")


class Outbox:
    """A bounded, ordered buffer with one sending thread."""

    def __init__(self, name: str, size: int, send: Callable[[list[dict]], int], batch: int = 1):
        self.name = name
        self._items: deque[dict] = deque()
        self.size = size
        self._send = send
        self._batch = batch
        self._cond = threading.Condition()
        self._closed = False
        self.sent = 0
        self.dropped = 0
        self._thread = threading.Thread(target=self._loop, name=f"events-{name}", daemon=True)
        self._thread.start()

    def put(self, event: dict) -> None:
        with self._cond:
            if len(self._items) >= self.size:
                self._items.popleft()
                self.dropped += 1
            self._items.append(event)
            self._cond.notify_all()

    def pending(self) -> int:
        return len(self._items)

    def _loop(self) -> None:
        backoff = 0.5
        while True:
            with self._cond:
                while not self._items and not self._closed:
                    self._cond.wait(0.5)
                if self._closed and not self._items:
                    return
                batch = [self._items[i] for i in range(min(self._batch, len(self._items)))]
            try:
                done = self._send(batch)
            except Exception as e:  # down: keep the events, wait, try again
                done = 0
                log.warning("events to %s: %s; retrying in %.1fs (%d waiting)", self.name, e, backoff,
                            len(self._items))
            if done:
                backoff = 0.5
                with self._cond:
                    for _ in range(min(done, len(self._items))):
                        self._items.popleft()
                    self.sent += done
                continue
            if self._closed:
                return  # closing and the destination is away: what is left is counted as dropped
            time.sleep(backoff)
            backoff = min(backoff * 2, 10.0)

    def close(self, timeout: float = 5.0) -> None:
        """Send what is buffered (for up to `timeout`), then stop."""
        deadline = time.monotonic() + timeout
        while self._items and time.monotonic() < deadline:
            time.sleep(0.05)
        with self._cond:
            self._closed = True
            self.dropped += len(self._items)
            self._cond.notify_all()
        self._thread.join(timeout)


class MqttSender:
    """paho-mqtt with its own network thread; reconnects with backoff on its own."""

    def __init__(self, config: MqttConfig):
        import paho.mqtt.client as mqtt

        self.config = config
        self.client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=config.client_id or f"pipeline-{os.getpid()}")
        if config.username:
            self.client.username_pw_set(config.username, config.password)
        self.client.reconnect_delay_set(min_delay=1, max_delay=10)
        self.client.connect_async(config.host, config.port, keepalive=30)
        self.client.loop_start()

    def send(self, batch: list[dict]) -> int:
        if not self.client.is_connected():
            raise ConnectionError(f"not connected to {self.config.host}:{self.config.port}")
        event = batch[0]
        info = self.client.publish(self.config.topic.format(camera=event["camera"]),
                                   json.dumps(event, separators=(",", ":")), qos=self.config.qos)
        if self.config.qos:
            info.wait_for_publish(timeout=5)
            if not info.is_published():
                raise ConnectionError("no acknowledgement from the broker")
        return 1

    def close(self) -> None:
        self.client.loop_stop()
        self.client.disconnect()


class WebhookSender:
    def __init__(self, config: WebhookConfig):
        self.config = config

    def send(self, batch: list[dict]) -> int:
        body = json.dumps({"events": batch}, separators=(",", ":")).encode()
        request = urllib.request.Request(self.config.url, data=body, method="POST",
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=self.config.timeout_s) as r:
            r.read()
        return len(batch)


class EventPublisher:
    """Fans each event out to the configured destinations."""

    def __init__(self, config: EventsConfig):
        self.outboxes: list[Outbox] = []
        self._senders: list = []
        if config.mqtt is not None:
            mqtt = MqttSender(config.mqtt)
            self._senders.append(mqtt)
            self.outboxes.append(Outbox(f"mqtt://{config.mqtt.host}:{config.mqtt.port}", config.mqtt.buffer, mqtt.send))
        if config.webhook is not None:
            hook = WebhookSender(config.webhook)
            self.outboxes.append(Outbox(config.webhook.url, config.webhook.buffer, hook.send, batch=100))

    def __bool__(self) -> bool:
        return bool(self.outboxes)

    def publish(self, event: dict) -> None:
        for box in self.outboxes:
            box.put(event)

    def camera_state(self, camera: str, state: str, detail: str) -> None:
        self.publish({"camera": camera, "event": "state", "state": state, "detail": detail, "time": time.time()})

    def stats(self) -> dict:
        return {box.name: {"sent": box.sent, "waiting": box.pending(), "dropped": box.dropped} for box in self.outboxes}

    def close(self) -> None:
        for box in self.outboxes:
            box.close()
        for sender in self._senders:
            sender.close()
