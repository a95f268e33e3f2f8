"""One connection of a camera as its live stream sees it: its stream's parameters (kept
in a template of its own, so a viewer who comes after the connection closed still gets
its init segment), and the offset that puts its timestamps on the live timeline.

The live timeline counts 90 kHz ticks from the first keyframe's decode time (0) and
only rises: each later connection (a reconnect, a file's next loop) goes on one frame
after the newest picture and after the last decode time, whatever its own timestamps
say, as a recording's connections do (`recording.segment_plan.Link`). MSE in `segments`
mode plays such a stream through restarts.
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Protocol

import av

from pipeline.live.fmp4 import TICKS, codec_string
from pipeline.recording.keyframe_params import described, remade

DEFAULT_CODEC = "avc1.640028"  # where neither the stream nor its keyframe shows its parameter sets


class Beside(Protocol):
    """The recording's place of the same connection (`recording.segment_plan.Link`)."""

    offset: int | None
    seconds: float


@dataclass
class Ends:
    """Where the live timeline stands: the last decode time and one frame after the
    newest picture (ticks); None before the first packet."""

    last_dts: int | None = None
    end_pts: int | None = None


def refusal(video) -> str | None:
    """Why the page cannot play a connection's video (None: it can)."""
    if video.codec_context.name != "h264":
        return f"its video is {video.codec_context.name}: the live page plays H.264 only"
    if video.container.format.flags & av.format.Flags.no_timestamps.value:  # a raw .h264: nothing to place pictures by
        return "its video has no timestamps (a raw stream): the live page cannot place its pictures in time"
    return None


class LiveLink:
    """A connection on the live timeline (`offset`: ticks, set at its first keyframe)."""

    def __init__(self, video, rate: Fraction, beside: Beside | None = None):
        self.index = video.index
        self.codec = video.codec_context.name
        self.scale = Fraction(video.time_base or Fraction(1, TICKS)) * TICKS
        self.interval = max(1, round(TICKS / rate)) if rate else TICKS // 25
        self.extradata = bytes(video.codec_context.extradata or b"")
        self.width, self.height = video.codec_context.width, video.codec_context.height
        self.params = (self.codec, self.width, self.height, self.extradata)
        self.fps = float(rate) if rate else 0.0
        self.refused = refusal(video)
        self.template, self._holder = remade(video) if self.refused is None else (None, None)
        self.beside = beside
        self.offset: int | None = None
        self.codec_string = DEFAULT_CODEC
        self.first_pts: int | None = None  # its first and newest picture, on its own clock
        self.max_pts: int | None = None

    def ticks(self, pts: int) -> int:
        """A timestamp of the connection on the live timeline (it is anchored)."""
        assert self.offset is not None
        return round(pts * self.scale) + self.offset

    def anchor(self, pts: int, dts: int, keyframe: bytes, ends: Ends) -> None:
        """Put the connection on the timeline at its first keyframe: the very first at
        decode time 0, a later one after everything before it."""
        first_pts, first_dts = round(pts * self.scale), round(dts * self.scale)
        if ends.last_dts is None or ends.end_pts is None:
            self.offset = -first_dts
        else:
            self.offset = max(ends.end_pts - first_pts, ends.last_dts + 1 - first_dts)
        self.first_pts = self.max_pts = pts
        if not (self.width and self.height) and self.template is not None:  # an SDP that said no size
            found = described(self.template, self.codec, keyframe)
            if found is not None:
                self.template, self._holder = found
                self.width, self.height = self.template.codec_context.width, self.template.codec_context.height
        self.codec_string = codec_string(self.extradata, keyframe) or DEFAULT_CODEC

    def took(self, pts: int, ends: Ends) -> None:
        """A packet went on: the timeline's ends move."""
        if self.max_pts is None or pts > self.max_pts:
            self.max_pts = pts
        end = self.ticks(pts) + self.interval
        if ends.end_pts is None or end > ends.end_pts:
            ends.end_pts = end

    def recorded_at(self, record_time: float) -> float | None:
        """The media time of the picture at `record_time` on the camera's recording (the
        same connection's, `beside`), or None where it is not one of this connection's."""
        b = self.beside
        if b is None or b.offset is None or self.offset is None or self.first_pts is None or self.max_pts is None:
            return None
        pts = round(record_time / b.seconds) - b.offset
        return self.ticks(pts) / TICKS if self.first_pts <= pts <= self.max_pts else None
