"""One viewer of a live stream: what waits to be sent on its socket, bounded.

The camera's thread hands every fragment and frame record to each viewer and never
waits: a viewer whose socket cannot keep up fills its queue, which is then emptied of
video and records, and the viewer resumes at the next keyframe (and the records that
come with it). It only ever delays itself, never the camera or the other viewers.
Messages that say what the stream is (init, gap, delay, unavailable) are never dropped.
"""
from __future__ import annotations

import threading
from collections import deque
from typing import Callable

MAX_FRAGMENTS = 60  # about 2 s at 30 fps: more waiting means the socket is behind
MAX_BYTES = 8 << 20
MAX_RECORDS = 240  # records outpacing their fragments (a stalled stream's analysed frames)

CONTROL, INIT, FRAGMENT, RECORD = "control", "init", "fragment", "record"
Message = tuple[str, bytes | str]  # (kind, a binary payload or a JSON text)


class Subscriber:
    """`wake` is called (from the camera's thread) when something is queued to an empty
    queue: the socket's loop then `take`s what waits. Once per batch, not per message: each
    wake costs the loop a self-pipe write and read, and a camera sends a fragment and a
    record per picture to every viewer."""

    def __init__(self, wake: Callable[[], None] = lambda: None):
        self.wake = wake
        self.skipped = 0  # fragments dropped while the viewer was behind
        self.skipping = True  # until a keyframe: its start, or after its queue was emptied
        self._queue: deque[Message] = deque()
        self._fragments = 0
        self._records = 0
        self._bytes = 0
        self._lock = threading.Lock()

    def control(self, text: str) -> None:
        self._put((CONTROL, text))

    def init(self, data: bytes) -> None:
        """A new init segment: video after it starts at a keyframe."""
        with self._lock:
            self._drop_media()
            self.skipping = True
        self._put((INIT, data))

    def fragment(self, data: bytes, keyframe: bool) -> None:
        with self._lock:
            if self.skipping and not keyframe:
                self.skipped += 1
                return
            if self._fragments >= MAX_FRAGMENTS or self._bytes + len(data) > MAX_BYTES:
                self.skipped += self._fragments
                self._drop_media()
                self.skipping = not keyframe  # a keyframe that finds the queue full starts it anew
                if self.skipping:
                    self.skipped += 1
                    return
            self.skipping = False
            self._fragments += 1
            self._bytes += len(data)
            woken = self._append((FRAGMENT, data))
        if not woken:
            self.wake()

    def record(self, text: str) -> None:
        """A frame's record; dropped while the viewer's video is skipped."""
        with self._lock:
            if self.skipping or self._records >= MAX_RECORDS:
                return
            self._records += 1
            woken = self._append((RECORD, text))
        if not woken:
            self.wake()

    def _put(self, message: Message) -> None:
        with self._lock:
            woken = self._append(message)
        if not woken:
            self.wake()

    def _append(self, message: Message) -> bool:
        """Queues `message` (the caller holds the lock); whether the loop was already woken
        for what waits (a queue that holds something was woken for its first message)."""
        woken = bool(self._queue)
        self._queue.append(message)
        return woken

    def _drop_media(self) -> None:
        """The caller holds the lock."""
        self._queue = deque(m for m in self._queue if m[0] in (CONTROL, INIT))
        self._fragments = self._records = self._bytes = 0

    def take(self) -> list[Message]:
        """Everything that waits, in order."""
        with self._lock:
            out, self._queue = list(self._queue), deque()
            self._fragments = self._records = self._bytes = 0
        return out
