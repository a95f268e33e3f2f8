"""A recording's timeline: where each connection's packets go on it, which segment file
holds which stretch of it, and where a frame of the analysis lies in those files.

- **One offset per connection** (a reconnect, a file's next pass), added to pts and dts
  alike, so a B-frame stream keeps its decode order and its delay. A file's first pass
  keeps the file's own timestamps; every later connection continues after what was
  written (one frame after the last picture, never a decode time that steps back), and
  a network camera's also keeps the wall clock: an outage is a gap in time, never a jump
  back. A file paced as a camera keeps its media time: its loops follow each other.
- **Timestamps the stream lacks or that step back** are made before the packet is decoded
  (`stamps`), so that the analysis and the recording agree.
- **Segments** start on a keyframe. Each file starts at 0: its packets are rebased by its
  first packet's dts, so a frame's time in its file is its time on the timeline minus that
  base, the B-frame delay included (what a player shows).
"""
from __future__ import annotations

import io
import math
import os
import time
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Callable

import av

from pipeline.recording.file import check_holds, check_room
from pipeline.recording.adts import audio_config
from pipeline.recording.keyframe_params import described, remade
from pipeline.recording.segments import TrueStampClock
from pipeline.recording.stamps import Stamps

KEEP_SEGMENTS = 64  # segments `spot` looks into: frames are seconds behind their packets, not hours


@dataclass(frozen=True)
class RecordingSpot:
    """Where a frame lies in the recording: the file (relative to `outputs.dir`), its
    time in that file's own clock (seconds) and the size of the file's pictures."""

    file: str
    time: float
    width: int
    height: int


@dataclass
class Segment:
    """One file of the recording and the stretch of the timeline it holds."""

    file: str          # relative to outputs.dir: what the JSON lines name
    path: str
    start_s: float     # the timeline time of its first keyframe
    base: int          # its first packet's dts on the timeline (its link's time base): 0 in the file
    time_base: Fraction
    width: int
    height: int
    params: tuple      # codec, size, extradata, time base: the stream it can hold
    holes: list[list[float]] = field(default_factory=list)  # [from, to) dropped (the writer was behind)
    held_s: float = math.inf  # its latest picture on the timeline the file holds, once a write error cut it short

    @property
    def base_s(self) -> float:
        return float(self.base * self.time_base)

    def spot(self, t: float) -> RecordingSpot | None:
        if t > self.held_s or any(a <= t < b for a, b in self.holes):
            return None
        return RecordingSpot(self.file, round(t - self.base_s, 6), self.width, self.height)


class Link(Stamps):
    """One connection as the recording sees it: its streams (the templates of a segment's
    streams), the offset that puts its timestamps on the recording's timeline, and the
    repair of timestamps it lacks (see the module's docstring)."""

    def __init__(self, video, audio, rate: Fraction):
        self.index = video.index
        self.audio_index = audio.index if audio is not None else -1
        self.time_base: Fraction = video.time_base or Fraction(1, 90000)
        untimed = bool(video.container.format.flags & av.format.Flags.no_timestamps.value)
        super().__init__(max(1, round(1 / (rate * self.time_base))), float(self.time_base), untimed)
        self.codec = video.codec_context.name
        self.audio_codec = audio.codec_context.name if audio is not None else ""
        # the streams' parameters, kept in a container of their own: the writer and the
        # clips make their streams from them after the connection has closed
        self._holders = [av.open(io.BytesIO(), "w", format="null")]  # takes any codec
        self.video = self._holders[0].add_stream_from_template(video)
        self._describe(self.video)
        self.audio = self._holders[0].add_stream_from_template(audio) if audio is not None else None
        if self.audio is not None and audio_config(self.audio):  # ADTS: described for the containers
            self.audio, holder = remade(self.audio, extradata=audio_config(self.audio))
            self._holders.append(holder)
        self.offset: int | None = None  # set at its first keyframe
        self.start_s: float | None = None  # that keyframe's picture on the timeline (seconds): its first one recorded
        self.audio_offset = 0
        self.audio_waiting: list = []  # audio packets before its first keyframe

    def _describe(self, video) -> None:
        self.video = video
        self.width, self.height = video.width, video.height
        self.params = (self.codec, self.width, self.height, bytes(video.codec_context.extradata or b""),
                       self.time_base)

    @property
    def described(self) -> bool:
        """Whether the stream's parameters say its picture size."""
        return self.width > 0 and self.height > 0

    def describe(self, keyframe: bytes) -> bool:
        """A stream opened without its picture size (`keyframe_params`) takes it, and its
        parameter sets, from a keyframe; whether it has them now."""
        if not self.described:
            found = described(self.video, self.codec, keyframe)
            if found is not None:
                self._holders.append(found[1])
                self._describe(found[0])
            elif not self.news:  # said once
                self.news = "its stream says no picture size and a keyframe did not show one: waiting for one that does"
        return self.described

    def anchor(self, pts: int, dts: int, after_pts_s: Fraction | None, after_dts_s: Fraction | None,
               wall_s: float | None) -> None:
        """Put this connection on the timeline at its first keyframe: after what was
        written (`after_*`: one frame past the last picture, the last decode time) and,
        live, at the wall clock."""
        tb = self.time_base
        if after_pts_s is None and wall_s is None:
            offset = 0  # a file's first pass keeps its own timestamps
        else:
            candidates = [] if wall_s is None else [round(Fraction(wall_s) / tb) - pts]
            if after_pts_s is not None:
                candidates.append(-(-after_pts_s // tb) - pts)
            if after_dts_s is not None:
                candidates.append(int(after_dts_s // tb) + 1 - dts)
            offset = int(max(candidates))
        self.offset = offset
        self.start_s = float((pts + offset) * tb)
        if self.audio is not None:
            self.audio_offset = round(offset * tb / self.audio.time_base)

    def end(self) -> tuple[Fraction, Fraction] | None:
        """Where the next connection goes on: one frame after the last picture, and the
        last decode time (seconds on the timeline)."""
        if self.offset is None or self.max_pts is None or self.last_dts is None:
            return None
        tb = self.time_base
        return (self.max_pts + self.offset + self.interval) * tb, (self.last_dts + self.offset) * tb


class SegmentPlan:
    """Which keyframe starts a segment and what it is named (`recording.segments`' boundaries:
    a live camera's on the wall clock, a file's on its media time, named from the wall
    clock at its first keyframe: its true start, whatever names are on disk, with a `-N`
    suffix where that name is taken, `TrueStampClock`), and where a frame lies in the
    segments."""

    def __init__(self, root: str, path: Callable[[str], str], segment_s: float | None, live: bool):
        self.root = root
        self.path = path  # a segment's stamp -> its file
        self.live = live
        self.clock = TrueStampClock(segment_s, lambda name: os.path.lexists(path(name)))
        self.segments: list[Segment] = []  # replaced, never changed in place: `spot` reads it from other threads
        self.fragment_bytes = 0  # the largest fragment written so far (the writer keeps it)
        self.last_link: Link | None = None  # the connection of the latest keyframe
        self._after: tuple | None = None  # where the next connection continues
        self._media0: tuple[float, float] | None = None  # a file's (wall clock, media time) at its first keyframe

    def anchored(self, link: Link, pts: int, dts: int, wall_s: float | None) -> Segment | None:
        """The segment a keyframe starts (None: it goes on in the current one); at its
        connection's first, the connection put on the timeline (`Link.anchor`; `wall_s`:
        a live camera's time on its timeline now)."""
        if link.offset is None:
            if self.last_link is not None:
                self._after = self.last_link.end() or self._after
            link.anchor(pts, dts, *(self._after or (None, None)), wall_s=wall_s)
            self.last_link = link
        return self.keyframe(link, (pts + link.offset) * link.seconds, dts + link.offset)

    def keyframe(self, link: Link, t: float, base: int) -> Segment | None:
        """The segment a keyframe at `t` (timeline seconds; `base`: its dts on the timeline)
        starts, or None: it goes on in the current one."""
        current = self.segments[-1] if self.segments else None
        check_room(os.path.dirname(current.path) if current else self.root, self.fragment_bytes)
        wall = time.time()
        if self.live:
            at_s = name_s = wall
        else:
            if self._media0 is None:
                self._media0 = (wall, t)
            at_s, name_s = t, self._media0[0] + t - self._media0[1]
        if current is not None and current.params != link.params:
            stamp: str | None = self.clock.restart(name_s)  # another codec or size: a file of its own
        else:
            stamp = self.clock.advance(at_s, name_s)
        if stamp is None:
            return None
        path = self.path(stamp)
        check_holds(path, link.video, link.codec)  # (RecordingError)
        segment = Segment(os.path.relpath(path, self.root), path, t, base, link.time_base, link.width, link.height,
                          link.params)
        self.segments = self.segments[-KEEP_SEGMENTS + 1:] + [segment]
        return segment

    @property
    def size(self) -> tuple[int, int] | None:
        """Its latest file's picture size (None: no file yet): the pixels of the rows of
        frames that lie in no file (a main stream away), so a camera's rows keep one size."""
        segments = self.segments
        return (segments[-1].width, segments[-1].height) if segments else None

    def spot(self, t: float) -> RecordingSpot | None:
        for segment in reversed(self.segments):
            if segment.start_s <= t:
                return segment.spot(t)
        return None
