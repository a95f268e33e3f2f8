"""Events as they happen — line crossings, zone entries and exits, camera state changes —
to MQTT (`pipeline/<camera>/events`, QoS 1) and/or an HTTP webhook.

A broker or endpoint that is down never stalls the pipeline: the sink only appends to a
bounded buffer per destination, and a thread of each destination sends from it in order,
retrying with backoff. Every event ends up counted once: sent, or dropped. The batch
being sent is taken out of the buffer, so when the buffer is full the oldest event
*nobody is sending* drops (counted); a failed batch is retried as it is. With QoS 1 an
event counts as sent once the broker acknowledged it, so events wait out a broker
restart and arrive afterwards, in order.

Shutdown waits at most `flush_timeout_s` for the destinations, and `abort()` (a second
Ctrl-C) ends that wait at once; whatever is still unsent then counts as dropped.
"""
from __future__ import annotations

import logging
import threading
import time

from pipeline.config.outputs import EventsConfig
from pipeline.errors import one_line
from pipeline.metrics.snapshot import DeliveryStats
from pipeline.redact import redact
from pipeline.runtime.queues import BoundedQueue, QueueClosed
from pipeline.events.senders import Sender, senders_for

log = logging.getLogger("pipeline.events")


class Outbox:
    """One destination: a drop-oldest buffer of unsent events (`BoundedQueue`), the batch
    being sent (outside the buffer, out of the drop policy's reach) and the thread that
    sends it. One condition guards all three, so the figures always add up."""

    def __init__(self, sender: Sender, size: int):
        self.sender = sender
        self._cond = threading.Condition()  # reentrant: abort() may run in a signal handler of a thread holding it
        self._queue: BoundedQueue[dict] = BoundedQueue(f"events {sender.name}", size, "drop_oldest",
                                                       on_drop=self._on_drop)
        self._sending: list[dict] = []
        self._thread: threading.Thread | None = None
        self._closed = False  # sending is over: what was left has been counted as dropped
        self._late = 0        # dropped outside the buffer's policy: unsent at close, or published after it
        self.sent = 0

    def start(self) -> None:
        with self._cond:
            if self._thread is not None or self._closed:
                return
            self.sender.start()
            self._thread = threading.Thread(target=self._loop, name=f"events-{self.sender.name}", daemon=True)
            self._thread.start()

    def put(self, event: dict) -> None:
        with self._cond:
            try:
                self._queue.put(event)
            except QueueClosed:
                self._late += 1
                return
            self._cond.notify_all()

    @property
    def started(self) -> bool:
        return self._thread is not None

    def _on_drop(self, event: object, reason: str) -> None:
        if self._queue.dropped == 1:
            log.warning("events to %s: the buffer is full, the oldest unsent events drop (counted)", self.sender.name)

    def stats(self) -> DeliveryStats:
        with self._cond:
            return DeliveryStats(self.sent, len(self._queue) + len(self._sending), self._queue.dropped + self._late)

    def _next(self) -> list[dict] | None:
        """The batch to send: the one that failed last, else the oldest waiting events;
        None once the outbox is closed."""
        with self._cond:
            while not self._sending and not self._closed:
                self._sending = self._queue.take(self.sender.batch)
                if not self._sending:
                    self._cond.wait()
            return None if self._closed else list(self._sending)

    def _loop(self) -> None:
        backoff = 0.5
        while (batch := self._next()) is not None:
            try:
                self.sender.send(batch)
            except Exception as e:  # down or refusing: keep the batch, wait, try it again
                if self._closed:
                    return  # given up on at close: counted as dropped
                log.warning("events to %s: %s; retrying in %.1fs (%d waiting)", self.sender.name,
                            redact(one_line(e)), backoff, self.stats().waiting)
                with self._cond:
                    self._cond.wait_for(lambda: self._closed, backoff)
                backoff = min(backoff * 2, 10.0)
                continue
            backoff = 0.5
            with self._cond:
                if self._closed:
                    return  # the deadline came first: this batch is already counted as dropped
                self.sent += len(self._sending)
                self._sending = []
                self._cond.notify_all()  # a flush may be waiting for the buffer to empty

    def flush(self, deadline: float) -> None:
        """Wait until every event was sent, `deadline` (time.monotonic) passed, or the
        outbox was closed (by an abort)."""
        with self._cond:
            while self._thread is not None and not self._closed and (len(self._queue) or self._sending):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return
                self._cond.wait(remaining)

    def close(self) -> None:
        """Stop sending; what is unsent counts as dropped. A batch cut off mid-send counts
        as dropped too (it may still arrive: the count errs on the side of a loss)."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            left = len(self._sending) + len(self._queue.take(len(self._queue)))
            self._late += left
            self._sending = []
            self._queue.close()
            self._cond.notify_all()
        if left:
            log.warning("events to %s: %d not sent by the end, counted as dropped", self.sender.name, left)


class EventPublisher:
    """Fans each event out to the configured destinations."""

    def __init__(self, config: EventsConfig):
        self.flush_timeout_s = config.flush_timeout_s
        self.outboxes = [Outbox(sender, size) for sender, size in senders_for(config)]
        self._aborted = False
        self._closed = False
        self.pictures_skipped = 0  # snapshots not published while a broker was away (best effort)

    def __bool__(self) -> bool:
        return bool(self.outboxes)

    def start(self) -> None:
        """Connect and start sending (the graph calls this when the run starts)."""
        for box in self.outboxes:
            box.start()

    def publish(self, event: dict) -> None:
        for box in self.outboxes:
            box.put(event)

    def picture(self, camera: str, jpeg: bytes) -> None:
        """An event's snapshot to the destinations that take pictures (MQTT)."""
        for box in self.outboxes:
            send = getattr(box.sender, "picture", None)
            if send is not None and box.started and not send(camera, jpeg):
                self.pictures_skipped += 1

    def camera_state(self, camera: str, state: str, detail: str) -> None:
        self.publish({"camera": camera, "event": "state", "state": state, "detail": redact(detail),
                      "time": time.time()})

    def stats(self) -> dict[str, DeliveryStats]:
        """Per destination (shown with secrets masked)."""
        return {box.sender.name: box.stats() for box in self.outboxes}

    def lost(self) -> int:
        """Events dropped so far, all destinations together (the run failed to deliver them)."""
        return sum(box.stats().dropped for box in self.outboxes)

    def close(self) -> None:
        """Send what is left for at most `flush_timeout_s` (all destinations at once), then
        stop; unsent events count as dropped. Returns at once after `abort()`."""
        deadline = time.monotonic() + self.flush_timeout_s
        for box in self.outboxes:
            box.flush(deadline)
        for box in self.outboxes:
            box.close()
        if not self._closed:
            self._closed = True
            self._close_senders(deadline)

    def abort(self) -> None:
        """End a close in progress (and make any later one) at once: nothing more is sent,
        what is left counts as dropped. Safe to call from a signal handler."""
        self._aborted = True
        for box in self.outboxes:
            box.close()

    def _close_senders(self, deadline: float) -> None:
        """Disconnecting may block on a hung destination: each sender closes on a thread
        of its own that is left behind (a daemon) at the deadline or an abort."""
        closing = [threading.Thread(target=box.sender.close, name=f"events-close-{box.sender.name}", daemon=True)
                   for box in self.outboxes if box.started]
        for thread in closing:
            thread.start()
        for thread in closing:
            while thread.is_alive() and not self._aborted and time.monotonic() < deadline:
                thread.join(0.05)
