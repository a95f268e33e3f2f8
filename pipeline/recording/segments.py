"""Time segments: a camera that runs for months writes one video and one JSON lines file
per `outputs.video.segment_s`, named by when each begins, so that no file grows without
end (a plain MP4 holds every frame's index entry in memory until it is closed) and
retention can remove the oldest.

- **Where a segment ends**: at the first frame at or after a boundary, on the frame's own
  time: a live camera's capture time on the wall clock (boundaries on multiples of
  `segment_s` since the epoch, UTC: hourly segments start on the hour), a file's media
  time (the same file cuts at the same frames, whichever host or run processes it). A
  boundary is crossed only forwards: a clock that steps back never reopens a segment.
- **Names**: `{start}` is the segment's start, UTC, ISO-8601 basic (`20261201T120000Z`):
  the first frame's wall-clock time (a file: the wall clock at its first frame plus the
  media time since). A camera's video and JSON lines stamps only increase: a segment that
  would start in the second of the previous one (a resolution change) or before a segment
  already on disk (a camera resumed or rerun) is stamped one second after it, so name
  order is write order (the rebuild reads them in that order) and nothing is overwritten.
  A recording's file is named by its true start always (`TrueStampClock`: the store's
  row, an export by range and the file's name tell the same time, a wall clock set back
  included); where that name is taken (the same second, or a file of an earlier run) it
  gets the first free suffix, `20261201T120000Z-1`, which every reader of names parses.
- A resolution change starts a new segment too (H.264 in MP4 cannot change size in place).
- A JSON lines file shared by all cameras rotates on the wall clock at the moment of
  writing, on the same boundaries (no camera's media time can speak for all of them).
"""
from __future__ import annotations

import glob
import math
import os
import re
import time
from datetime import datetime, timezone
from typing import Callable

from pipeline.frames import Frame

STAMP = "%Y%m%dT%H%M%SZ"
STAMP_RE = r"\d{8}T\d{6}Z(?:-\d+)?"  # `-N`: a recording's name taken in its second
START = "{start}"


def stamp(seconds: float) -> str:
    """Whole seconds, UTC, ISO-8601 basic: sorts as it runs."""
    return datetime.fromtimestamp(int(seconds), timezone.utc).strftime(STAMP)


def stamp_seconds(text: str) -> float:
    """The second a stamp names (a suffix, `-N`, only tells names of one second apart)."""
    return datetime.strptime(text.partition("-")[0], STAMP).replace(tzinfo=timezone.utc).timestamp()


def stamp_order(text: str) -> tuple[str, int]:
    """How stamps sort: by their second, then their suffix (none first, `-2` before `-10`)."""
    second, _, n = text.partition("-")
    return second, int(n or 0)


def segment_files(pattern: str) -> list[tuple[str, str]]:
    """(stamp, path) of every file matching `pattern` (a path with `{start}` in it), in
    time order."""
    parts = pattern.split(START)
    if len(parts) < 2:
        return []
    first = f"({STAMP_RE})".join(re.escape(p) for p in parts[:2])
    matcher = re.compile(first + "".join(STAMP_RE + re.escape(p) for p in parts[2:]))
    found = []
    for path in glob.glob("*".join(glob.escape(p) for p in parts)):
        m = matcher.fullmatch(path)
        if m:
            found.append((m.group(1), path))
    return sorted(found, key=lambda f: (stamp_order(f[0]), f[1]))


class SegmentClock:
    """When the next segment begins and its stamp; `length_s` None: only when asked."""

    def __init__(self, length_s: float | None, after: str | None = None):
        self.length_s = length_s
        self.key: int | None = None  # the boundary interval the current segment is in
        self.current: str | None = None
        self._last = stamp_seconds(after) if after else -math.inf

    def advance(self, at_s: float, name_s: float) -> str | None:
        """The stamp of a segment that begins with a frame at `at_s` (None: it stays in
        the current one). The first frame always begins one."""
        key = None if self.length_s is None else math.floor(at_s / self.length_s)
        if self.current is not None and (key is None or self.key is None or key <= self.key):
            return None
        self.key = key
        return self.restart(name_s)

    def restart(self, name_s: float) -> str:
        """A new segment now, whatever the boundaries say (a resolution change)."""
        seconds = max(float(int(name_s)), self._last + 1)
        self._last = seconds
        self.current = stamp(seconds)
        return self.current


class TrueStampClock(SegmentClock):
    """A recording's segments: the same boundaries, each file named by its true start
    whatever names came before (a wall clock set back, a rerun), so that its name says
    when it was recorded; a name `taken` (on disk) or given already gets the first free
    suffix `-N`."""

    def __init__(self, length_s: float | None, taken: Callable[[str], bool]):
        super().__init__(length_s)
        self.taken = taken
        self._given: set[str] = set()

    def restart(self, name_s: float) -> str:
        second = name = stamp(name_s)
        n = 0
        while name in self._given or self.taken(name):
            n += 1
            name = f"{second}-{n}"
        self._given.add(name)
        self.current = name
        return name


class FrameTime:
    """A frame's time for segment boundaries and for its segment's name: a live camera's
    capture on the wall clock; a file's media time, named from the wall clock at its first frame."""

    def __init__(self, live: bool):
        self.live = live
        self._wall0 = time.time() - time.perf_counter()  # capture times are perf_counter readings
        self._media0: tuple[float, float] | None = None  # (wall, media) at the first frame

    def __call__(self, frame: Frame) -> tuple[float, float]:
        wall = self._wall0 + frame.t_capture
        media = frame.pts_seconds
        if self.live or media is None:
            return wall, wall
        if self._media0 is None:
            self._media0 = (wall, media)
        return media, self._media0[0] + media - self._media0[1]


def last_stamp(*patterns: str) -> str | None:
    """The newest stamp among the files of these patterns (paths with `{start}`)."""
    stamps = [s for p in patterns for s, _ in segment_files(p)]
    return max(stamps, key=stamp_order) if stamps else None


class CameraSegments:
    """Where one camera's files go next: a new stamp when a frame begins a segment."""

    def __init__(self, length_s: float | None, live: bool, after: str | None):
        self.time = FrameTime(live)
        self.clock = SegmentClock(length_s, after)

    def next(self, frame: Frame, resized: bool) -> str | None:
        """The stamp of the segment `frame` begins (None: it goes on in the current one)."""
        at_s, name_s = self.time(frame)
        if resized and self.clock.current is not None:
            return self.clock.restart(name_s)
        return self.clock.advance(at_s, name_s)


class WallSegments:
    """The rotation of a file shared by all cameras: on the wall clock when written."""

    def __init__(self, length_s: float | None, after: str | None):
        self.clock = SegmentClock(length_s, after)

    def next(self) -> str | None:
        now = time.time()
        return self.clock.advance(now, now)


def segment_path(path: str, segment: int) -> str:
    """The file of a camera's video segment: `cam.mp4`, then `cam.part1.mp4`, ..."""
    if segment == 0:
        return path
    stem, ext = os.path.splitext(path)
    return f"{stem}.part{segment}{ext}"
