"""A camera's live stream ("sub": what the analysis decodes; "main": the main stream read
for the recording): the camera's packets as fragmented MP4 for its viewers, copied,
never re-encoded, and each analysed frame's record at its picture's media time.

It is a tap on the camera's connection (`sources.connection`): it sees each packet
before it is decoded (after the recording, which repairs timestamps a stream lacks)
and each decoded picture, whose media time it stashes on the picture (`media_time`).
With nobody watching it only keeps the newest GOP's packets (a bounded number): no
muxer runs. The first viewer starts a muxer fed from that GOP, so a viewer starts at
once from the newest keyframe; the last one to leave ends it. A stream whose codec,
size or parameter sets change at a reconnect gets a new muxer (a new init to its
viewers); the timeline keeps rising either way (`live.link`).
"""
from __future__ import annotations

import json
import threading
from collections import deque
from fractions import Fraction
from typing import Callable

import av

from pipeline.live.fmp4 import TICKS
from pipeline.live.link import Beside, Ends, LiveLink
from pipeline.live.subscriber import Subscriber
from pipeline.live.viewers import MAX_GOP_BYTES, MAX_GOP_PACKETS, Packet, Viewers

NOT_YET = "no video from the camera yet"


def text(message: dict) -> str:
    return json.dumps(message, separators=(",", ":"))


def media_time(frame: av.VideoFrame) -> float | None:
    """The media time `LiveStream.picture` gave a decoded picture (seconds; None: it has none)."""
    return frame.opaque if isinstance(frame.opaque, float) else None


class Lag:
    """How far behind a stream's live edge its records came (seconds), the newest
    `KEPT`: a file's main stream, read ahead of the analysis (`LEAD_S`), is played later."""

    KEPT = 150  # 10 s at 15 fps

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._kept: deque[float] = deque(maxlen=self.KEPT)

    def add(self, seconds: float) -> None:
        with self._lock:
            self._kept.append(max(0.0, seconds))

    def p95(self) -> float | None:
        """The P95 of those kept (None: none yet)."""
        with self._lock:
            kept = sorted(self._kept)
        return kept[int(0.95 * (len(kept) - 1))] if kept else None


class LiveStream:
    """`describe()` gives the hub's part of the init message (`boxes`, `delay_s`)."""

    def __init__(self, camera: str, kind: str, describe: Callable[[], dict] = dict):
        self.camera = camera
        self.kind = kind
        self.describe = describe
        self.why: str | None = None  # why it cannot be streamed (its codec, a muxer that failed)
        self.dropped = 0  # packets left out: no timestamps, or a decode time that does not rise
        self.ends = Ends()
        self._lock = threading.Lock()
        self._viewers = Viewers()
        self._link: LiveLink | None = None  # the newest connection
        self._links: deque[LiveLink] = deque(maxlen=4)  # the recent ones (a record's time is on one of them)
        self._gop: list[Packet] = []
        self._gop_link: LiveLink | None = None
        self._gop_bytes = 0
        self.lag = Lag()

    # -- the camera's side ---------------------------------------------------------------
    def connect(self, video, rate: Fraction, beside: Beside | None = None) -> LiveLink:
        link = LiveLink(video, rate, beside)
        with self._lock:
            if self._link is not None and self._link.offset is not None:
                self._viewers.send(text({"type": "gap"}))
            self._link = link
            self._links.append(link)
            self.why = link.refused
            if self.why is not None:
                self._viewers.close()
                self._viewers.send(text({"type": "unavailable", "why": self.why}))
        return link

    def packet(self, packet, link: LiveLink) -> None:
        """A video packet of the connection, before it is decoded."""
        if link.refused is not None:
            return
        pts, dts, key = packet.pts, packet.dts, bool(packet.is_keyframe)
        if pts is None or dts is None:
            self.dropped += 1
            return
        with self._lock:
            if link.offset is None:
                if not key:
                    return
                link.anchor(pts, dts, bytes(packet), self.ends)
            live_pts, live_dts = link.ticks(pts), link.ticks(dts)
            if self.ends.last_dts is not None and live_dts <= self.ends.last_dts:
                self.dropped += 1
                return
            self.ends.last_dts = live_dts
            link.took(pts, self.ends)
            item = (bytes(packet), live_pts, live_dts, key)
            self._keep(item, link)
            viewers = self._viewers
            if viewers.subs and (viewers.muxed is None or viewers.muxed.params != link.params):
                self._start(link)  # the first keyframe a waiting viewer gets, or a stream that changed
            elif viewers.muxer is not None:
                viewers.mux(item)

    def _keep(self, item: Packet, link: LiveLink) -> None:
        """The newest GOP's packets, bounded (past the bound: none until the next keyframe)."""
        if item[3]:
            self._gop, self._gop_bytes, self._gop_link = [], 0, link
        elif not self._gop or len(self._gop) >= MAX_GOP_PACKETS or self._gop_bytes > MAX_GOP_BYTES:
            self._gop, self._gop_bytes = [], 0
            return
        self._gop.append(item)
        self._gop_bytes += len(item[0])

    def picture(self, frame, link: LiveLink) -> None:
        """A decoded picture: its media time goes with it (`media_time`)."""
        if link.offset is not None and frame.pts is not None and link.refused is None:
            frame.opaque = link.ticks(frame.pts) / TICKS

    def disconnect(self) -> None:
        """The connection ended (its viewers stay: the next one goes on)."""

    media_time = staticmethod(media_time)

    def recorded_at(self, record_time: float | None) -> float | None:
        """The media time of the picture at `record_time` on the camera's recording (a
        main stream's frames are analysed on the sub-stream, placed on the recording)."""
        if record_time is None:
            return None
        for link in reversed(list(self._links)):
            t = link.recorded_at(record_time)
            if t is not None:
                return t
        return None

    def _start(self, link: LiveLink) -> None:
        """A muxer for the newest GOP on, where it is this connection's (the caller holds the lock)."""
        self._viewers.close()
        if link is not self._gop_link or not self._gop:
            return  # no keyframe of this connection kept: the next one starts it
        self.why = self._viewers.start(link, self._gop, text(self._init_message(link)))
        if self.why is not None:
            self._viewers.send(text({"type": "unavailable", "why": self.why}))

    def _init_message(self, link: LiveLink) -> dict:
        described = self.describe()
        return {"type": "init", "camera": self.camera, "stream": self.kind, "codec": link.codec_string,
                "mime": f'video/mp4; codecs="{link.codec_string}"', "width": link.width, "height": link.height,
                "boxes": described.get("boxes") or [link.width, link.height], "fps": round(link.fps, 3),
                "delay_s": described.get("delay_s")}

    # -- the viewers' side -----------------------------------------------------------------
    def subscribe(self, sub: Subscriber) -> str | None:
        """A viewer from now on (None), or why the stream cannot be watched."""
        with self._lock:
            if self.why is not None:
                return self.why
            if self._link is None:
                return NOT_YET
            if self._viewers.muxed is not None:
                self._viewers.join(sub, text(self._init_message(self._viewers.muxed)))
            else:
                self._viewers.subs.append(sub)
                if self._gop_link is not None:
                    self._start(self._gop_link)
        return None

    def unsubscribe(self, sub: Subscriber) -> None:
        with self._lock:
            self._viewers.leave(sub)

    @property
    def watched(self) -> bool:
        return bool(self._viewers.subs)

    @property
    def viewers(self) -> int:
        return len(self._viewers.subs)

    def control(self, message: dict) -> None:
        """A message for every viewer (the hub's new delay)."""
        with self._lock:
            self._viewers.send(text(message))

    def record(self, t: float, record: dict) -> None:
        """A frame's record, at its picture's media time `t`, to every viewer."""
        line = text({"type": "frame", "t": t, **record})
        with self._lock:
            if self.ends.end_pts is not None:
                self.lag.add(self.ends.end_pts / TICKS - t)
            subs = list(self._viewers.subs)
        for sub in subs:
            sub.record(line)
