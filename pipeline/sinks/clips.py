"""Short clips around events, cut from the camera's already encoded video (no second encode):
its recording where it has one (original quality), else its annotated video.

`PacketRing` keeps the last `pre_s` seconds of a camera's encoded packets, back to the
keyframe at or before that (a clip must start on a keyframe to be playable), bounded in
bytes too: packets, not pictures, so a minute of 1080p costs a few megabytes, not
gigabytes. `ClipRecorder` opens a clip when an event comes, writes the ring's packets and
then every new packet until `post_s` after the event; an event while a clip is open
extends it (events close together share one clip).

Packets are copied (their bytes and timing) before the camera's own muxer takes them: a
packet muxed once is consumed. A recording's packets run ahead of the analysis by the
pipeline's latency, and come from the recording's own thread: its clip recorder keeps
`lead_s` more in its ring, places an event by presentation time (from the keyframe at or
before `pre_s` earlier) and takes its packets under a lock.
"""
from __future__ import annotations

import logging
import os
import threading
from collections import deque
from dataclasses import dataclass
from fractions import Fraction

import av

log = logging.getLogger("pipeline.clips")


@dataclass
class Held:
    """One encoded packet, copied."""

    data: bytes
    pts: int | None
    dts: int | None
    time_base: Fraction
    keyframe: bool

    @classmethod
    def of(cls, packet: av.Packet) -> "Held":
        return cls(bytes(packet), packet.pts, packet.dts, packet.time_base, bool(packet.is_keyframe))

    @property
    def seconds(self) -> float:
        return float((self.pts if self.pts is not None else self.dts or 0) * self.time_base)

    def packet(self) -> av.Packet:
        p = av.Packet(self.data)
        p.pts, p.dts, p.time_base = self.pts, self.dts, self.time_base
        p.is_keyframe = self.keyframe
        return p


class PacketRing:
    def __init__(self, pre_s: float, max_bytes: int = 64 * 1024 * 1024, lead_s: float = 0.0):
        self.pre_s = pre_s
        self.lead_s = lead_s  # kept besides `pre_s`: how far the packets may run ahead of the events
        self.max_bytes = max_bytes
        self._held: deque[Held] = deque()
        self._bytes = 0

    def add(self, held: Held) -> None:
        self._held.append(held)
        self._bytes += len(held.data)
        self._trim(held.seconds - self.pre_s - self.lead_s)

    def _trim(self, keep_from: float) -> None:
        """Drop what lies before the last keyframe at or before `keep_from`, and (over the
        byte budget) whole GOPs from the front."""
        keys = [i for i, h in enumerate(self._held) if h.keyframe]
        start = max((i for i in keys if self._held[i].seconds <= keep_from), default=0)
        while self._bytes > self.max_bytes and any(i > start for i in keys):
            start = min(i for i in keys if i > start)
        for _ in range(start):
            self._bytes -= len(self._held.popleft().data)

    def from_keyframe(self, before: float | None = None) -> list[Held]:
        """The packets held from the first keyframe on (what a clip can start with), or
        from the last keyframe at or before `before` seconds where there is one."""
        held = list(self._held)
        keys = [i for i, h in enumerate(held) if h.keyframe]
        if not keys:
            return []
        earlier = [i for i in keys if before is not None and held[i].seconds <= before]
        return held[earlier[-1] if earlier else keys[0]:]

    @property
    def bytes(self) -> int:
        return self._bytes


class ClipRecorder:
    """One camera's clips. `stream` is the camera's encoder stream (its codec parameters
    make the clip's stream)."""

    def __init__(self, folder: str, pre_s: float, post_s: float, max_bytes: int = 64 * 1024 * 1024,
                 lead_s: float = 0.0):
        self.folder = folder
        self.post_s = post_s
        self.ring = PacketRing(pre_s, max_bytes, lead_s)
        self._lock = threading.Lock()
        self._stream = None
        self._clip: av.container.OutputContainer | None = None
        self._clip_stream = None
        self._clip_path = ""
        self._end_s = 0.0
        self._last_dts: int | None = None
        self._ends_after_next = False
        self.written: list[str] = []

    def packet(self, packet: av.Packet, stream) -> None:
        """Every packet the camera's encoder makes, before it is muxed."""
        self.add(Held.of(packet), stream)

    def add(self, held: Held, stream) -> None:
        """A packet copied, with the stream it came in (the clip's stream is made from it)."""
        with self._lock:
            self._stream = stream
            self.ring.add(held)
            if self._ends_after_next:  # the packet of the frame whose event was marked last
                self._end_s = max(self._end_s, held.seconds + self.post_s)
                self._ends_after_next = False
            if self._clip is not None:
                if held.seconds > self._end_s:
                    self._close()
                else:
                    self._write(held)

    def event(self, name: str, at_s: float | None = None) -> str | None:
        """An event at `at_s`, by default at the next packet's time (the sink marks a
        frame's events before it encodes the frame): the clip that will show it (None: no
        encoded video yet to cut from)."""
        with self._lock:
            if at_s is None:
                self._ends_after_next = True
            else:
                self._end_s = max(self._end_s, at_s + self.post_s)
            if self._clip is not None:
                return self._clip_path
            held = self.ring.from_keyframe(None if at_s is None else at_s - self.ring.pre_s)
            if self._stream is None or not held:
                return None
            os.makedirs(self.folder, exist_ok=True)
            path = self._clip_path = os.path.join(self.folder, f"{name}.mp4")
            self._clip = av.open(self._clip_path, "w")
            self._clip_stream = self._clip.add_stream_from_template(self._stream)
            self._last_dts = None
            for h in held:
                if at_s is not None and h.seconds > self._end_s:  # packets ahead of the event already reach its end
                    self._close()
                    break
                self._write(h)
            return path

    def _write(self, held: Held) -> None:
        assert self._clip is not None
        if held.dts is not None and self._last_dts is not None and held.dts <= self._last_dts:
            return  # already in the clip (the ring and the live packets overlap at the start)
        packet = held.packet()
        packet.stream = self._clip_stream
        self._clip.mux(packet)
        self._last_dts = held.dts

    @property
    def open_file(self) -> str | None:
        """The clip being written (retention must leave it)."""
        return self._clip_path if self._clip is not None else None

    def close(self) -> None:
        """Finish the clip under way (the camera ended)."""
        with self._lock:
            self._close()

    def _close(self) -> None:
        """Finish the clip under way (its post-event time is over, or the camera ended)."""
        self._end_s = 0.0
        if self._clip is None:
            return
        try:
            self._clip.close()
            self.written.append(self._clip_path)
        except Exception as e:  # a clip is evidence, not the video: the camera goes on
            log.warning("clip %s could not be finished: %s", self._clip_path, e)
        self._clip = None
