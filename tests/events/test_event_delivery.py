"""Every event is delivered or counted once as dropped, against real destinations: a
local HTTP endpoint that answers slowly, answers 500, hangs or is not there, and a real
Mosquitto broker that goes away or hangs. Shutdown waits for them at most
`flush_timeout_s`, and `abort()` ends that wait at once. Bounds on time are generous:
they catch a wait of the wrong kind (a fixed 5 s, a keepalive), not a slow machine."""
from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time

import pytest
import yaml

from brokers import Mosquitto, Subscriber, Webhook, available, free_port
from conftest import ROOT, detector_model
from pipeline.config import read_config
from pipeline.config.outputs import EventsConfig, MqttConfig, WebhookConfig
from pipeline.metrics.snapshot import DeliveryStats
from pipeline.events.publisher import EventPublisher

SECRET = "s3cr3t-hook-token"
SLACK_S = 3.0  # on top of flush_timeout_s: a loaded machine, never a wait for the destination

_MISSING = available()
if _MISSING and os.environ.get("CI", "").lower() in ("1", "true", "yes"):
    raise RuntimeError(f"CI: {_MISSING}")
needs_mosquitto = pytest.mark.skipif(_MISSING is not None, reason=_MISSING or "")


def numbered(n: int, start: int = 0) -> list[dict]:
    return [{"camera": "gate", "event": "cross", "line": "door", "n": i} for i in range(start, start + n)]


def timed_close(pub: EventPublisher) -> float:
    t0 = time.monotonic()
    pub.close()
    return time.monotonic() - t0


def figures(pub: EventPublisher) -> DeliveryStats:
    (only,) = pub.stats().values()
    return only


def wait_for_sent(pub: EventPublisher, count: int, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while figures(pub).sent < count and time.monotonic() < deadline:
        time.sleep(0.05)
    assert figures(pub).sent == count


def test_nothing_starts_before_start_and_a_close_before_it_returns_at_once():
    before = set(threading.enumerate())
    pub = EventPublisher(EventsConfig(mqtt=MqttConfig(host="127.0.0.1", port=free_port()),
                                      webhook=WebhookConfig(url=f"http://127.0.0.1:{free_port()}/hook"),
                                      flush_timeout_s=30))
    assert set(threading.enumerate()) == before  # no sending thread, no MQTT network thread yet
    assert timed_close(pub) < SLACK_S
    assert set(threading.enumerate()) == before


def test_a_slow_webhook_loses_only_the_oldest_unsent_event_and_counts_each_once():
    hook = Webhook("gated")  # answers only when the test opens the gate: a send as slow as we like
    pub = EventPublisher(EventsConfig(webhook=WebhookConfig(url=hook.url, buffer=3), flush_timeout_s=30))
    a, b, c, d, e = numbered(5)
    try:
        pub.start()
        pub.publish(a)
        assert hook.wait_until(lambda h: h.requests == 1)  # a is being sent
        for event in (b, c, d, e):
            pub.publish(event)
        # a is in flight, outside the buffer; b, the oldest unsent, made room for e
        assert pub.stats() == {hook.url: DeliveryStats(sent=0, waiting=4, dropped=1)}
        hook.open_gate()
        pub.close()
    finally:
        hook.close()
    assert hook.events == [a, c, d, e]
    assert pub.stats() == {hook.url: DeliveryStats(sent=4, waiting=0, dropped=1)}
    assert pub.lost() == 1


def test_a_failing_webhook_counts_each_event_once_and_gives_up_at_the_flush_timeout():
    hook = Webhook("fail")  # answers 500 to everything
    pub = EventPublisher(EventsConfig(webhook=WebhookConfig(url=f"{hook.url}?token={SECRET}", buffer=10),
                                      flush_timeout_s=1))
    try:
        pub.start()
        for event in numbered(25):
            pub.publish(event)
        assert hook.wait_until(lambda h: h.requests >= 2)  # refused, and tried again
        (name, held), = pub.stats().items()
        assert SECRET not in name and "token=***" in name
        assert held.sent == 0 and held.waiting + held.dropped == 25 and held.waiting >= 10
        took = timed_close(pub)
    finally:
        hook.close()
    assert pub.stats() == {name: DeliveryStats(sent=0, waiting=0, dropped=25)}
    assert pub.lost() == 25
    assert took < 1 + SLACK_S


def test_close_with_the_webhook_down_returns_after_the_flush_timeout_counting_the_rest():
    pub = EventPublisher(EventsConfig(webhook=WebhookConfig(url=f"http://127.0.0.1:{free_port()}/hook"),
                                      flush_timeout_s=1))
    pub.start()
    for event in numbered(5):
        pub.publish(event)
    took = timed_close(pub)
    assert figures(pub) == DeliveryStats(sent=0, waiting=0, dropped=5)
    assert took < 1 + SLACK_S


def test_abort_ends_a_close_in_progress_at_once_and_any_later_close_too():
    hook = Webhook("hang")  # takes the request, never answers
    pub = EventPublisher(EventsConfig(webhook=WebhookConfig(url=hook.url, timeout_s=60), flush_timeout_s=60))
    try:
        pub.start()
        for event in numbered(3):
            pub.publish(event)
        assert hook.wait_until(lambda h: h.requests == 1)
        closing = threading.Thread(target=pub.close)
        closing.start()
        closing.join(0.5)
        assert closing.is_alive()  # waiting for the hung endpoint, as it may for 60 s
        t0 = time.monotonic()
        pub.abort()
        closing.join(30)
        took = time.monotonic() - t0
        assert not closing.is_alive() and took < SLACK_S
        assert figures(pub) == DeliveryStats(sent=0, waiting=0, dropped=3)
        assert timed_close(pub) < SLACK_S
    finally:
        hook.close()


def test_a_second_signal_aborts_a_close_waiting_in_the_main_thread():
    """As the CLI does it: the main thread is in close(), the signal handler calls abort()."""
    hook = Webhook("hang")
    pub = EventPublisher(EventsConfig(webhook=WebhookConfig(url=hook.url, timeout_s=60), flush_timeout_s=60))
    previous = signal.signal(signal.SIGUSR1, lambda signum, frame: pub.abort())
    try:
        pub.start()
        pub.publish(numbered(1)[0])
        assert hook.wait_until(lambda h: h.requests == 1)
        threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGUSR1)).start()
        took = timed_close(pub)
    finally:
        signal.signal(signal.SIGUSR1, previous)
        hook.close()
    assert took < 0.5 + SLACK_S
    assert figures(pub) == DeliveryStats(sent=0, waiting=0, dropped=1)


@needs_mosquitto
def test_an_mqtt_broker_gone_at_shutdown_costs_at_most_the_flush_timeout(tmp_path):
    broker = Mosquitto(tmp_path / "broker").start()
    sub = Subscriber(broker.port)
    pub = EventPublisher(EventsConfig(mqtt=MqttConfig(host="127.0.0.1", port=broker.port), flush_timeout_s=1))
    events = numbered(10)
    try:
        pub.start()
        for event in events[:5]:
            pub.publish(event)
        wait_for_sent(pub, 5)
        assert sub.wait_for(5, 20) == events[:5]
    finally:
        sub.close()
        broker.stop()
    for event in events[5:]:
        pub.publish(event)
    took = timed_close(pub)
    assert figures(pub) == DeliveryStats(sent=5, waiting=0, dropped=5)
    assert took < 1 + SLACK_S


@needs_mosquitto
def test_an_mqtt_broker_hung_at_shutdown_costs_at_most_the_flush_timeout(tmp_path):
    broker = Mosquitto(tmp_path / "broker").start()
    pub = EventPublisher(EventsConfig(mqtt=MqttConfig(host="127.0.0.1", port=broker.port), flush_timeout_s=1))
    events = numbered(6)
    try:
        pub.start()
        for event in events[:3]:
            pub.publish(event)
        wait_for_sent(pub, 3)
        broker.hang()  # the connection stays up, nothing is acknowledged: paho's loop_stop alone would wait
        for event in events[3:]:
            pub.publish(event)
        took = timed_close(pub)
    finally:
        broker.stop()
    assert figures(pub) == DeliveryStats(sent=3, waiting=0, dropped=3)
    assert took < 1 + SLACK_S


@needs_mosquitto
def test_an_mqtt_event_acknowledged_late_is_published_once(tmp_path, caplog):
    broker = Mosquitto(tmp_path / "broker").start()
    sub = Subscriber(broker.port)
    pub = EventPublisher(EventsConfig(mqtt=MqttConfig(host="127.0.0.1", port=broker.port), flush_timeout_s=30))
    events = numbered(6)
    caplog.set_level(logging.WARNING, logger="pipeline.events")
    try:
        pub.start()
        for event in events[:5]:
            pub.publish(event)
        wait_for_sent(pub, 5)
        broker.hang()
        pub.publish(events[5])
        retries = lambda: sum("retrying" in r.getMessage() for r in caplog.records)  # noqa: E731
        deadline = time.monotonic() + 60  # until the outbox gave up waiting for the acknowledgement twice
        while retries() < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert retries() >= 2
        broker.resume()
        wait_for_sent(pub, 6)
        pub.close()
        got = sub.wait_for(7, 3)  # a second copy would arrive with the first
    finally:
        sub.close()
        broker.stop()
    assert got == events
    assert figures(pub) == DeliveryStats(sent=6, waiting=0, dropped=0)


def test_webhook_urls_are_checked_when_the_config_is_read(tmp_path, model_path, sample_path):
    def problems(url: str) -> list[str]:
        data = {"sources": [{"id": "a", "uri": sample_path("bikes.mp4")}],
                "models": {"det": detector_model(model_path)}, "graph": [{"detect": {"model": "det"}}],
                "outputs": {"dir": str(tmp_path / "out"), "events": {"webhook": {"url": url}}}}
        return read_config(data, tmp_path)[1]

    for bad in (f"ftp://example.org/hook?token={SECRET}", "http:///hook", f"example.org:8080/hook?token={SECRET}",
                "https://example.org:99999/hook", "http://[::1/hook"):
        (line,) = problems(bad)
        assert line.startswith("outputs.events.webhook.url: expected an http:// or https:// URL with a host")
        assert SECRET not in line
    assert problems(f"https://example.org/hook?token={SECRET}") == []
    # `validate` (and `run`, which reads the config the same way) exits 2 with that line
    data = {"sources": [{"id": "a", "uri": sample_path("bikes.mp4")}], "models": {"det": detector_model(model_path)},
            "graph": [{"detect": {"model": "det"}}],
            "outputs": {"dir": str(tmp_path / "out"), "events": {"webhook": {"url": "file:///etc/passwd"}}}}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    r = subprocess.run([sys.executable, "-m", "pipeline", "validate", "--config", str(tmp_path / "config.yaml")],
                       capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 2
    assert [l for l in r.stderr.splitlines() if "webhook" in l] == [
        "error: outputs.events.webhook.url: expected an http:// or https:// URL with a host, got 'file:///etc/passwd'"]
