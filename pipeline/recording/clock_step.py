"""A connection's timestamps after the camera's clock stepped back (set back 3 s, say).

The picture after the step continues one frame interval (as measured on the connection;
with B-frames, plus the stream's reorder delay, as it may be shown after the ones coded
next) after the latest picture, and the camera's own timestamps go on from there, shifted
by as much (`shift`): a recording without a blank stretch or pictures squeezed together,
its pts-dts gap the stream's reorder delay.

With B-frames the step is not clean in decode order: pictures filmed before it can come
after the first one filmed after it (a B-frame coded after its P), and FFmpeg's RTSP
demuxer, which derives decode times from the pictures' times, gives garbage for a while
(dts = pts, going back every mini-GOP). So, from a step on:

- a packet just after the step (within the stream's reorder reach) whose time is nearer
  the old clock than the new one is a straggler of the old clock and keeps the old shift;
- decode times are derived from the pictures' times as FFmpeg does where a stream has
  none (the smallest of the latest `delay + 1`), made to increase and never after the
  picture. A decode time going back without a step (garbage) starts this too, shift
  unchanged.
"""
from __future__ import annotations


class SteppedClock:
    """`raw`: the first packet's pts after the step (the camera's clock); `shift`: what
    puts it on the connection's timeline; `old`: (the shift before, the latest time of
    the old clock); `delay`: the reorder depth in frames; `interval`: ticks a frame;
    `last_dts`: the latest decode time on the timeline."""

    def __init__(self, raw: int, shift: int, old: tuple[int, int], delay: int, interval: int, last_dts: int):
        self.shift = shift
        self.old_shift, self.old_max = old
        self.first = raw
        self.delay = delay
        self.interval = interval
        # the latest pictures' times, sorted: as if the stream had gone on at its pace
        self.recent = [max(last_dts, raw + shift - (delay + 1) * interval)] * (delay + 1)
        self.last_dts = last_dts
        self.seen = 0  # packets since the step
        self.max_raw = raw

    def reach(self) -> int:
        """How far back a picture's time may lie behind the latest without a step: the reorder."""
        return (self.delay + 1) * self.interval + self.interval // 2

    def times(self, raw: int) -> tuple[int, int, bool]:
        """This packet's (pts, dts) on the connection's timeline, and whether its clock
        stepped back once more (`shift` changed)."""
        self.seen += 1
        straggler = self.seen <= self.delay + 2 and \
            abs(raw - self.old_max) < abs(raw - (self.first + self.seen * self.interval))
        stepped = False
        if straggler:
            pts = raw + self.old_shift
        else:
            if raw < self.max_raw - self.reach():  # stepped back again
                self.old_shift, self.old_max = self.shift, self.max_raw
                self.shift = self.max_raw + self.shift + (self.delay + 1) * self.interval - raw
                self.first, self.seen, self.max_raw = raw, 0, raw
                stepped = True
            self.max_raw = max(self.max_raw, raw)
            pts = raw + self.shift
        return (*self.decode_time(pts), stepped)

    def decode_time(self, pts: int) -> tuple[int, int]:
        """The smallest of the latest `delay + 1` pictures' times, after the last decode
        time; the picture is never shown before it."""
        self.recent[0] = pts
        self.recent.sort()
        dts = max(self.recent[0], self.last_dts + 1)
        self.last_dts = dts
        return max(pts, dts), dts
