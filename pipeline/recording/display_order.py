"""Timestamps for a stream that has none (a raw `.h264`, an MP4 whose timestamps are all
0), made in display order from the decoder's.

A B-frame stream's packets come in decode order (pictures 0, 3, 1, 2, 6, 4, 5, ...) and
nothing in them says where each picture shows. So each packet gets a placeholder before it
is decoded (a negative number, its own), the decoder hands out its pictures in display
order carrying those placeholders, and the k-th picture shown gets k frame steps after
the first. A packet goes on to the recording once its picture and those of every packet
before it were shown (a few packets: the decoder's delay), with decode times `delay`
frames behind (how many packets the decoder took in before its first picture: at least
its reorder depth), so every picture shows at or after its decode time and the file plays
in the order the camera filmed it.

A connection that is only demuxed (a main stream recorded beside an analysed
sub-stream) has no decoder to ask: the recording decodes such a stream itself
(`decoder`), only where it has no timestamps. A packet whose picture never comes (it
failed to decode) goes on, in decode order, once `WAIT` packets are behind it, or when
the connection ends.
"""
from __future__ import annotations

from dataclasses import dataclass

import av

WAIT = 64  # packets held at most for their pictures (a decoder's delay is a few: reorder depth and threads)


@dataclass
class Waiting:
    packet: object
    placeholder: int | None  # None: decoded before its stream was found to lack timestamps (it had none)
    number: int              # its place in decode order on the connection
    pts: int | None = None   # set when its picture is shown


class DisplayOrder:
    """Packets held until the decoder shows their pictures. `origin`: the first picture's
    time; `seen`: packets of the connection already gone on (`held`: those waiting without
    a placeholder); `shown`: pictures the decoder showed so far; `last_dts`: the latest
    decode time gone on (None: none)."""

    def __init__(self, step: int, origin: int, seen: int, shown: int, last_dts: int | None, held: list):
        self.step = step
        self.origin = origin
        self.last_dts = last_dts
        self.fed = seen + len(held)  # packets handed to the decoder
        self.shown = shown
        self.delay: int | None = None
        self.max_pts: int | None = None
        self.waiting = [Waiting(p, None, seen + i) for i, p in enumerate(held)]
        for i, entry in enumerate(self.waiting[:max(0, shown - seen)]):  # their pictures were shown already
            entry.pts = origin + (seen + i) * step
        self._by_placeholder: dict[int, Waiting] = {}
        self.decoder = None  # a decoder of its own (its connection only demuxes)

    def decode_alone(self, video) -> None:
        """Its connection decodes nothing: pictures come from a decoder of its own for `video`."""
        self.decoder = av.CodecContext.create(video.codec_context.name, "r")
        if video.codec_context.extradata:
            self.decoder.extradata = video.codec_context.extradata

    def add(self, packet) -> list[tuple[object, int, int]]:
        """A packet before it is decoded: it gets its placeholder and waits."""
        entry = Waiting(packet, -1 - self.fed, self.fed)
        packet.pts, packet.dts = entry.placeholder, None
        self._by_placeholder[entry.placeholder] = entry
        self.waiting.append(entry)
        self.fed += 1
        return self._own(packet) + self._release(force=len(self.waiting) > WAIT)

    def _own(self, packet) -> list[tuple[object, int, int]]:
        """The pictures its own decoder shows for `packet` (None: at the end), each timed."""
        if self.decoder is None:
            return []
        try:
            frames = self.decoder.decode(packet)
        except (av.error.FFmpegError, ValueError):
            return []  # its packets go on once WAIT more came
        return [ready for frame in frames for ready in self.picture(frame.pts)[1]]

    def picture(self, placeholder: int | None) -> tuple[int, list[tuple[object, int, int]]]:
        """A picture the decoder shows: its time, and the packets that can go on now."""
        if self.delay is None:
            self.delay = max(0, self.fed - 1 - self.shown)
        pts = self.origin + self.shown * self.step
        self.shown += 1
        entry = self._by_placeholder.pop(placeholder, None) if placeholder is not None else \
            next((w for w in self.waiting if w.placeholder is None and w.pts is None), None)
        if entry is not None:
            entry.pts = pts
        return pts, self._release()

    def end(self) -> list[tuple[object, int, int]]:
        """The connection ended: every packet still waiting goes on."""
        out = self._own(None)
        while self.waiting:
            out += self._release(force=True)
        return out

    def _release(self, force: bool = False) -> list[tuple[object, int, int]]:
        out = []
        while self.waiting and (self.waiting[0].pts is not None or force):
            entry = self.waiting.pop(0)
            if entry.pts is None:  # its picture never came: after every picture so far
                entry.pts = max(self.origin + self.shown * self.step, (self.max_pts or 0) + self.step)
                self._by_placeholder.pop(entry.placeholder, None)
            force = False
            out.append(self._times(entry))
        return out

    def _times(self, entry: Waiting) -> tuple[object, int, int]:
        pts = entry.pts
        assert pts is not None
        dts = min(pts, self.origin + (entry.number - (self.delay or 0)) * self.step)
        if self.last_dts is not None and dts <= self.last_dts:
            dts = self.last_dts + 1
        entry.packet.pts, entry.packet.dts = pts, dts
        self.last_dts = dts
        self.max_pts = pts if self.max_pts is None else max(self.max_pts, pts)
        return entry.packet, pts, dts
