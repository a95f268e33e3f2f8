"""A connection's timestamps as its recording needs them: its own where they are sound,
and made where they are not (docs/outputs.md, "Recordings"), written into each packet
before it is decoded, so that the analysis and the recording agree.

- **A pts and no dts yet** (an RTSP B-frame stream's first packets): held until the first
  dts shows, then counted back from it.
- **A clock that steps back** (a camera's clock set back) **or decode times that go
  back**: bridged, the camera's own timestamps going on from there, shifted
  (`clock_step`).
- **No timestamps at all** (a raw `.h264`) **or ones that do not move** (an MP4 whose
  timestamps are all 0): timed by the frame rate in the decoder's display order
  (`display_order`).
"""
from __future__ import annotations

from pipeline.recording.clock_step import SteppedClock
from pipeline.recording.display_order import DisplayOrder

NO_TIMESTAMPS = "no timestamps (or none that move): the recording is timed by the frame rate, in display order"
REORDER = 8  # frames a B-frame may lie before the pictures decoded ahead of it, at most (further: a clock step)
HOLD = 16  # packets of a connection held back at most while they have a pts but no dts yet


class Stamps:
    """The timestamps of one connection's video packets, `step` ticks a frame as declared."""

    def __init__(self, step: int, seconds: float, untimed: bool = False):
        self.step = step
        self.seconds = seconds  # per tick
        self.last_dts: int | None = None
        self.max_pts: int | None = None
        self.first_dts: int | None = None
        self.packets = 0  # gone on
        self.pictures = 0  # shown by the connection's decoder
        self.shift = 0  # added to the camera's timestamps since its clock stepped back
        self.clock: SteppedClock | None = None  # its timestamps since then
        self.alone = None  # its stream, where its connection only demuxes
        self.reorder = 0  # the most a picture lay before one decoded earlier (its B-frames), up to REORDER frames
        self.news = NO_TIMESTAMPS if untimed else ""  # what the log should say once (where timestamps were made)
        self.held: list = []  # packets with a pts and no dts yet
        # the stream has no timestamps (its format has none: a raw `.h264`): timed in display order
        self.order: DisplayOrder | None = DisplayOrder(step, 0, 0, 0, None, []) if untimed else None

    def arrived(self, packet) -> list[tuple[object, int, int]]:
        """The (packet, pts, dts) ready to go on: this packet with its own timestamps where
        they are sound (the common case, kept cheap), else as `repair` makes them."""
        pts, dts = packet.pts, packet.dts
        if pts is None or dts is None or self.held or self.order is not None or self.clock is not None or (
                pts < dts or (self.last_dts is not None and dts <= self.last_dts)):
            return self.repair(packet)
        self.took(pts, dts)
        return [(packet, pts, dts)]

    def repair(self, packet) -> list[tuple[object, int, int]]:
        """The (packet, pts, dts) ready to go on, for a packet whose timestamps are
        missing, do not increase or step back (those held before it included, in order)."""
        if self.order is not None:
            return self._went(self.order.add(packet))
        pts, dts = packet.pts, packet.dts
        if (dts is None and pts is None and (self.held or self.packets)) or (
                self.clock is None and dts is not None and dts == self.last_dts == self.max_pts and pts in (None, dts)):
            return self._order(packet)  # no timestamps at all, or ones that do not move (all 0)
        if dts is not None and self.last_dts is not None and not self.held and (
                self.clock is not None or dts <= self.last_dts or (pts is not None and pts < dts)):
            return [self._stepped(packet, dts if pts is None else pts)]
        if not self.held and dts is not None:
            return [self._take(packet, dts if pts is None else pts, dts)]  # a decode time only: shown then
        if dts is None and len(self.held) < HOLD:
            self.held.append(packet)  # an RTSP stream's first packets: a pts, the dts comes later
            return []
        if dts is None:
            return self._order(packet)  # a pts and never a dts
        return self._count_back(packet, dts if pts is None else pts, dts)

    def took(self, pts: int, dts: int) -> None:
        """A packet goes on with these times (on the connection's own clock, shifted)."""
        if self.first_dts is None:
            self.first_dts = dts
        self.packets += 1
        self.last_dts = dts
        if self.max_pts is None or pts > self.max_pts:
            self.max_pts = pts
        elif self.reorder < self.max_pts - pts <= REORDER * self.step:
            self.reorder = self.max_pts - pts

    @property
    def interval(self) -> int:
        """The stream's frame interval as measured over the connection (its declared one
        until two packets came; the frame rate's where it is timed in display order)."""
        if self.order is not None:
            return self.order.step
        if self.packets < 2 or self.first_dts is None or self.last_dts is None or self.last_dts <= self.first_dts:
            return self.step
        return max(1, round((self.last_dts - self.first_dts) / (self.packets - 1)))

    def _take(self, packet, pts: int, dts: int) -> tuple[object, int, int]:
        """The packet goes on with these times; they are written into it too, before it is
        decoded, so that its frame gets the same time. Decode times only increase and a
        picture is never shown before its own."""
        if self.max_pts is not None and self.reorder < self.max_pts - pts <= REORDER * self.step:
            self.reorder = self.max_pts - pts  # learnt before the times are made to hold
        if self.last_dts is not None and dts <= self.last_dts:
            dts = self.last_dts + 1
        pts = max(pts, dts)
        packet.pts, packet.dts = pts, dts
        self.took(pts, dts)
        return packet, pts, dts

    def _stepped(self, packet, raw: int) -> tuple[object, int, int]:
        """A packet from the camera's clock stepping back on (`clock_step`): a picture
        further back than the stream's reorder reaches starts a shift."""
        assert self.last_dts is not None and self.max_pts is not None
        step, stepped = self.interval, False
        if self.clock is None:
            delay = round(self.reorder / step)
            back = raw + self.shift < self.max_pts - ((delay + 1) * step + step // 2)
            shift = self.max_pts + (delay + 1) * step - raw if back else self.shift
            self.clock = SteppedClock(raw, shift, (self.shift, self.max_pts - self.shift), delay, step, self.last_dts)
            stepped = back
        pts, dts, again = self.clock.times(raw)
        if stepped or again:
            self.news = (f"the camera's clock stepped back: bridged by one frame interval "
                         f"({1 / (step * self.seconds):.3g} fps as measured), its own timestamps from there")
        self.shift = self.clock.shift
        return self._take(packet, pts, dts)

    def _order(self, packet) -> list[tuple[object, int, int]]:
        """From here the stream is timed by the frame rate, in the decoder's display order."""
        origin = 0 if self.max_pts is None else self.max_pts - (self.packets - 1) * self.interval
        self.order = DisplayOrder(self.interval, origin, self.packets, self.pictures, self.last_dts, self.held)
        self.news = NO_TIMESTAMPS
        self.held = []
        if self.alone is not None:
            self.order.decode_alone(self.alone)
        return self._went(self.order.add(packet))

    def decode_alone(self, video) -> None:
        """Its connection only demuxes: a stream without timestamps is put in display order
        by a decoder of the recording's own (`video`: its stream)."""
        self.alone = video
        if self.order is not None:
            self.order.decode_alone(video)

    def picture(self, frame) -> list[tuple[object, int, int]]:
        """A picture the connection's decoder shows: timed in display order where the
        stream has no timestamps of its own (its `pts` set); the packets that go on now."""
        self.pictures += 1
        if self.order is None:
            return []
        frame.pts, ready = self.order.picture(frame.pts)
        return self._went(ready)

    def end_order(self) -> list[tuple[object, int, int]]:
        """The connection ended: the packets still waiting for their pictures go on."""
        return self._went(self.order.end()) if self.order is not None else []

    def _went(self, ready: list[tuple[object, int, int]]) -> list[tuple[object, int, int]]:
        for _, pts, dts in ready:
            self.took(pts, dts)
        return ready

    def _count_back(self, packet, pts: int, dts: int) -> list[tuple[object, int, int]]:
        """The held packets get the decode times before this one's, one frame each; a
        keyframe held without a pts is shown one frame before the earliest picture after it."""
        held, self.held = self.held, []
        out = []
        for i, p in enumerate(held):
            d = dts - (len(held) - i) * self.step
            later = [q.pts for q in held[i + 1:] if q.pts is not None] + [pts]
            shown = max(d, p.pts if p.pts is not None else min(later) - self.step)
            out.append(self._take(p, shown, d))
        return out + [self._take(packet, pts, dts)]
