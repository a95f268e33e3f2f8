"""The writer's files at a cut: the segment being written and, for a moment after a cut,
those before it, kept open for what still belongs in them.

- **Leading pictures** (open GOPs: x265's defaults, x264's `open-gop`): the pictures
  that follow a keyframe in decode order but show before it reference the GOP before as
  well as the keyframe. In the new file they could not be decoded, and their rows (by
  time, before the cut) name the previous file: they go into the previous file, after a
  copy of the keyframe they reference (the keyframe shows there as its last picture and
  starts the new file; the leading pictures are in the previous file only). At a
  connection's first keyframe there is no GOP before: its leading pictures decode
  nowhere and are left out.
- **Audio apart from its video**: audio the demuxer delivers after video of a later time
  (a file interleaved in long chunks, a stream whose audio comes over RTP behind its
  video) goes into the file of its time while that file is open: a file stays open after
  its cut until audio past its end has come, or for `LATE_S` of video after the cut.
  Audio delivered before the video of its time waits for it (up to `LATE_S`): the file
  of its time may not be open yet. Audio later
  than that is left out and counted (audio before the recording's first picture is not
  recorded either: there is no file of its time).
- **A file the disk could not take all of** (a full disk; the muxer may not say so) is
  cut back to its last whole fragment as it is closed, and its segment answers only for
  the pictures it still holds.
"""
from __future__ import annotations

import math
import os
from collections import deque
from dataclasses import dataclass
from typing import Callable

from pipeline.recording.file import SegmentFile
from pipeline.recording.mp4 import cut_to_whole_fragments, last_picture_s, whole_fragments_end
from pipeline.recording.segment_plan import Link, Segment

LATE_S = 10.0  # video seconds after a cut that the previous file waits for its audio, at most


@dataclass
class OpenSegment:
    """A segment's file being written, its packets rebased by the segment's first decode time."""

    segment: Segment
    file: SegmentFile
    audio_last: int | None = None

    def video(self, packet, link: Link, pts: int, dts: int, key: bool) -> None:
        base = self.segment.base
        self.file.write(packet, self.file.video, pts - base, dts - base, link.time_base, key)

    def audio_dts(self, packet, link: Link) -> int:
        """The audio packet's decode time in this file (its audio time base)."""
        return packet.dts + link.audio_offset - round(self.segment.base_s / link.audio.time_base)

    def close(self) -> str | None:
        """Finish the file; where its disk could not take all of it (a full disk: the
        muxer may not say so), cut it back to its last whole fragment (MP4, MOV) and
        answer only for the pictures it still holds: what it holds, said (None: whole)."""
        path = self.segment.path
        error: Exception | None = None
        try:
            self.file.close()
        except Exception as e:  # the disk took part of it: what it took is kept, whole
            error = e
        torn = os.path.splitext(path)[1].lower() in (".mp4", ".mov") and os.path.exists(path) \
            and whole_fragments_end(path) < os.path.getsize(path)
        if not torn:
            if error is not None:
                raise error
            return None
        cut_to_whole_fragments(path)  # (removes a file left without a picture)
        held = last_picture_s(path) if os.path.exists(path) else None
        self.segment.held_s = self.segment.base_s + held if held is not None else -math.inf
        return f"{self.segment.file} cut to its last whole fragment, " + \
            ("nothing left" if held is None else f"which holds up to {held:.3f} s")

    def audio(self, packet, link: Link) -> bool:
        """Write an audio packet that lies in this file after the last one (False: it does not)."""
        dts = self.audio_dts(packet, link)
        if self.file.audio is None or dts < 0 or (self.audio_last is not None and dts <= self.audio_last):
            return False
        self.audio_last = dts
        shift = dts - packet.dts
        self.file.write(packet, self.file.audio, packet.pts + shift, dts, link.audio.time_base, True)
        return True


@dataclass
class Closing:
    """The previous segment's file after a cut, open for its leading pictures and late audio."""

    open: OpenSegment
    link: Link
    key: tuple  # the keyframe that made the cut: (packet, pts, dts)
    leading: bool = True  # the pictures after the keyframe may still show before it
    keyframe_copied: bool = False
    heard: bool = False  # audio of the cut's time (or later) has come

    @property
    def done(self) -> bool:
        return not self.leading and (self.heard or self.open.file.audio is None)


class Handover:
    """Where each packet the writer takes goes: the current file, or one before it still
    closing (see the module's docstring). `late_audio` counts the audio packets that came
    after their file was closed (`on_late` is told of each); `on_audio(size)` hears of each
    audio packet written."""

    def __init__(self, on_audio: Callable[[int], None], on_late: Callable[[], None]):
        self.on_audio, self.on_late = on_audio, on_late
        self.current: OpenSegment | None = None
        self.closing: list[Closing] = []  # oldest first
        self.late_audio = 0
        self.largest_fragment = 0  # bytes from a keyframe to the next, the most so far
        self.torn: list[str] = []  # files the disk could not take all of, and what each holds
        self._fragment = 0
        self._link: Link | None = None  # the connection of the latest picture
        self._joined: int | None = None  # its first keyframe's pts, while pictures may still show before it
        self._closed: tuple[OpenSegment, Link] | None = None  # the connection's first file closed after a cut
        self._ahead: deque[tuple[float, Link, object]] = deque()  # audio come before the video of its time
        self._video_s = -math.inf  # the latest picture's decode time written (timeline seconds)

    @property
    def late_note(self) -> str:
        """What the recording's audio note adds while audio came too late for its file."""
        late = self.late_audio
        return f"; {late} packet(s) left out, delivered after their segment was closed" if late else ""

    @property
    def files(self) -> list[str]:
        return [c.open.segment.path for c in self.closing] + ([self.current.segment.path] if self.current else [])

    def cut(self, opened: OpenSegment, link: Link, key: tuple) -> None:
        """The keyframe `key` (packet, pts, dts) starts `opened`: the current file closes,
        now or, where the keyframe continues its connection, once what still belongs in
        it has come."""
        if self.current is not None and link is self._link:
            for earlier in self.closing:
                earlier.leading = False
            self.closing.append(Closing(self.current, link, key))
        elif self.current is not None:
            self.close_all_but_current()
            self._finish(self.current)
        self.current = opened
        self.video(link, *key, True)

    def video(self, link: Link, packet, pts: int, dts: int, key: bool) -> None:
        """A picture's packet, in decode order (a connection's first is a keyframe)."""
        assert self.current is not None
        if link is not self._link:
            self._link, self._joined, self._closed = link, pts, None
        elif self._joined is not None and pts < self._joined and not key:
            return  # shows before its connection's first keyframe: it decodes nowhere
        else:
            self._joined = None
        newest = self.closing[-1] if self.closing else None
        if newest is not None and newest.leading and packet is not newest.key[0]:
            if pts < newest.key[1] and not key:
                if not newest.keyframe_copied:
                    newest.open.video(newest.key[0], link, newest.key[1], newest.key[2], True)
                    newest.keyframe_copied = True
                newest.open.video(packet, link, pts, dts, key)
                return
            newest.leading = False
        self.current.video(packet, link, pts, dts, key)
        self._fragment = packet.size + (0 if key else self._fragment)
        self.largest_fragment = max(self.largest_fragment, self._fragment)
        self._video_s = max(self._video_s, dts * link.seconds)
        while self._ahead and self._ahead[0][0] <= self._video_s:  # the video has caught up with it
            self._place(*self._ahead.popleft()[1:])
        for closing in list(self.closing):
            if closing.done or (pts - closing.key[1]) * link.seconds > LATE_S:
                self._close(closing)

    def audio(self, link: Link, packet) -> None:
        """An audio packet, into the file of its time: held while it is ahead of the video
        (its file may not be open yet), up to `LATE_S`."""
        t = float((packet.dts + link.audio_offset) * link.audio.time_base)
        if self.current is not None and self._video_s < t <= self._video_s + LATE_S:
            self._ahead.append((t, link, packet))
        else:
            self._place(link, packet)

    def _place(self, link: Link, packet) -> None:
        opened = [c.open for c in self.closing] + ([self.current] if self.current else [])
        at = next((i for i in range(len(opened) - 1, -1, -1) if opened[i].audio_dts(packet, link) >= 0), None)
        if at is None:
            first = self._closed
            if first is not None and first[1] is link and first[0].audio_dts(packet, link) >= 0:
                self.late_audio += 1  # its file was closed already
                self.on_late()
            return
        if opened[at].audio(packet, link):
            self.on_audio(packet.size)
        for closing in self.closing[:at]:
            closing.heard = True  # the sound has gone past its end
            if closing.done:
                self._close(closing)

    def _close(self, closing: Closing) -> None:
        self.closing.remove(closing)
        if self._closed is None or self._closed[1] is not closing.link:
            self._closed = (closing.open, closing.link)
        self._finish(closing.open)

    def close_all_but_current(self) -> None:
        while self.closing:
            self._close(self.closing[0])

    def close(self) -> None:
        """Finish every file (the recording ended or failed), each as far as its disk took it."""
        try:
            while self._ahead:  # the sound after the last picture
                self._place(*self._ahead.popleft()[1:])
            self.close_all_but_current()
        finally:
            if self.current is not None:
                current, self.current = self.current, None
                self._finish(current)

    def _finish(self, opened: OpenSegment) -> None:
        torn = opened.close()
        if torn is not None:
            self.torn.append(torn)
