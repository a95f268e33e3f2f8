"""Export by copy: one camera's recordings over a time range as one MP4, its packets
copied from the segment files (never decoded or encoded).

- **Times** are the wall clock, epoch seconds: a segment file's packet lies at its file's
  stamp (the UTC second its first keyframe came, `recording.segments`; a suffix `-N`
  tells files of one second apart) plus its time in the file (every file starts at 0).
- **The start** is the keyframe at or before the asked start (the pictures after it
  need it), where the recording runs on from it to the start; else the first keyframe
  after the start. **The end**: every packet decoded before it.
- **Across files** the packets go on one timeline: a file that follows the one before
  within `GAP_S` continues it one frame after its last picture (the stamps count whole
  seconds); a later one keeps its distance, so a player's clock stays the wall clock.
- **A gap** (no picture for more than `GAP_S`: between files, inside one where a camera
  reconnected, before the first picture or after the last) stays a gap in time, and is
  said in the notes. A change of the stream (codec, size) ends the export there, said
  too: one MP4 track cannot change its picture size.
- The first file is entered by a seek to a keyframe just before the start; a file still
  being written is read up to its last whole fragment (`mp4.playable_end`).
  The export is a fragmented MP4 as the recordings are: each track starts where its
  first packet lies (a plain MP4 starts every track at 0 without an edit list).
"""
from __future__ import annotations

import io
import os
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from fractions import Fraction
from typing import Iterable, Iterator

import av

from pipeline.config.outputs import OutputsConfig
from pipeline.errors import FAILED, PipelineError, one_line
from pipeline.recording.file import FRAGMENTED, refusal
from pipeline.recording.mp4 import playable_end
from pipeline.recording.segments import segment_files, stamp_order, stamp_seconds

GAP_S = 2  # a step in decode times beyond this is a gap (stamps count whole seconds)


class ExportError(PipelineError):
    """An export that cannot be made: `status` is the HTTP answer (400: the request's
    range, 404: nothing recorded there, 422: what was recorded cannot go into an MP4)."""

    def __init__(self, status: int, problem: str):
        super().__init__(problem)
        self.status = status
        self.exit_status = FAILED if status == 404 else self.exit_status


@dataclass(frozen=True)
class Piece:
    """One segment file of the recording and the wall-clock second it starts (its stamp)."""

    path: str
    start: int


@dataclass
class Exported:
    """What an export holds: its first and last decode times (wall clock), its packets
    and what it says about the range (gaps, a change of stream, audio left out)."""

    path: str
    first: float = 0.0
    last: float = 0.0
    video: int = 0
    audio: int = 0
    notes: list[str] = field(default_factory=list)


def when(t: float | Fraction) -> str:
    return datetime.fromtimestamp(float(t), timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def pieces_of(files: Iterable[tuple[str, str]]) -> list[Piece]:
    """The pieces of (stamp, path) pairs, oldest first."""
    ordered = sorted(files, key=lambda f: (stamp_order(f[0]), f[1]))
    return [Piece(path, int(stamp_seconds(stamp))) for stamp, path in ordered]


def recorded(outputs: OutputsConfig, filenames: Iterable[str], camera: str) -> list[Piece]:
    """The camera's segment files under these recording file name templates (`record.filename`)."""
    patterns = {outputs.record_path(camera, name) for name in filenames}
    return pieces_of(found for pattern in sorted(patterns) for found in segment_files(pattern))


def covering(pieces: list[Piece], start: float, end: float) -> list[Piece]:
    """The files that can hold [start, end): from the last one begun by `start` (the first
    one when none had) to the last one begun before `end`."""
    first = max((i for i, p in enumerate(pieces) if p.start <= start), default=0)
    return [p for p in pieces[first:] if p.start < end]


def check_range(start: float, end: float, max_s: float) -> None:
    if end <= start:
        raise ExportError(400, f"end: {when(end)} is not after start {when(start)}")
    if end - start > max_s:
        raise ExportError(400, f"end: the range is {end - start:g} s; an export covers at most {max_s:g} s "
                               "(outputs.record.export_max_s)")


def export(camera: str, pieces: list[Piece], start: float, end: float, path: str, max_s: float) -> Exported:
    """Write `camera`'s recording over [start, end) to `path` (an MP4; written beside it
    first, so a failed export leaves nothing there)."""
    check_range(start, end, max_s)
    partial = f"{path}.part"
    timeline = Timeline(Fraction(start), Fraction(end), partial)
    try:
        for piece in covering(pieces, start, end):
            if not timeline.add(piece):
                break
        result = timeline.finish()
        if result is None:
            raise ExportError(404, f"camera {camera}: no recording covers {when(start)} to {when(end)}")
    except BaseException:
        timeline.close()
        if os.path.exists(partial):
            os.remove(partial)
        raise
    os.replace(partial, path)
    result.path = path
    return result


class Upto(io.RawIOBase):
    """A file read only up to `end` (a fragmented MP4's last whole fragment)."""

    def __init__(self, f, end: int):
        self.f, self.end = f, end

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:  # type: ignore[override]
        data = self.f.read(max(0, min(len(buffer), self.end - self.f.tell())))
        buffer[:len(data)] = data
        return len(data)

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        if whence == io.SEEK_END:
            return self.f.seek(self.end + offset)
        return self.f.seek(offset, whence)

    def tell(self) -> int:
        return self.f.tell()


@contextmanager
def opened(path: str) -> Iterator:
    """The segment file as a container (None: nothing of it plays yet): an MP4 or MOV up
    to its last whole fragment."""
    if os.path.splitext(path)[1].lower() not in (".mp4", ".mov"):
        with av.open(path) as container:
            yield container
        return
    with open(path, "rb") as f:
        end = playable_end(path)
        if not end:
            yield None
            return
        with av.open(io.BufferedReader(Upto(f, end), 1 << 16)) as container:
            yield container


def signature(stream) -> tuple | None:
    """What a track must share with a stream for the stream's packets to go on in it."""
    if stream is None:
        return None
    c = stream.codec_context
    shape = (c.width, c.height) if stream.type == "video" else (c.sample_rate, c.channels)
    return stream.type, c.name, bytes(c.extradata or b""), stream.time_base, shape


class ExportFile:
    """The MP4 being written: its tracks, made from one segment file's streams, and the
    packets put in them (audio before the first picture, or out of order, left out as
    the recording leaves it out)."""

    def __init__(self, result: Exported):
        self.result = result
        self.out: av.container.OutputContainer | None = None
        self.video = self.audio = None
        self.kinds: tuple[tuple | None, tuple | None] = (None, None)  # the signatures of their streams
        self.audio_last: int | None = None

    def holds(self, video) -> bool:
        return self.out is not None and signature(video) == self.kinds[0]

    def takes(self, audio) -> bool:
        return self.audio is not None and audio is not None and signature(audio) == self.kinds[1]

    def make(self, video, audio, name: str) -> None:
        """Tracks for these streams (what was made before is dropped)."""
        self.close()
        if refusal(".mp4", video, video.codec_context.name) is not None:
            raise ExportError(422, f"{name}: an MP4 cannot hold its {video.codec_context.name} video")
        self.out = av.open(self.result.path, "w", format="mp4", options=FRAGMENTED)
        self.video, self.audio = self.out.add_stream_from_template(video), None
        if audio is not None and refusal(".mp4", audio, audio.codec_context.name) is None:
            self.audio = self.out.add_stream_from_template(audio)
        elif audio is not None:
            self.result.notes.append(f"audio left out: an MP4 cannot hold {audio.codec_context.name}")
        self.kinds = (signature(video), signature(audio) if self.audio is not None else None)

    def write(self, packet, shift: int, video: bool) -> None:
        """The packet, its timestamps moved by `shift` (in its time base)."""
        assert self.out is not None
        dts = packet.dts + shift
        if not video:
            if dts < 0 or (self.audio_last is not None and dts <= self.audio_last):
                return
            self.audio_last = dts
        packet.pts = (packet.pts if packet.pts is not None else packet.dts) + shift
        packet.dts = dts
        packet.stream = self.video if video else self.audio
        self.out.mux(packet)
        if video:
            self.result.video += 1
        else:
            self.result.audio += 1

    def close(self) -> None:
        if self.out is not None:
            out, self.out = self.out, None
            out.close()


class Timeline:
    """The export being written: the packets of each file read in turn, put on one
    timeline (see the module's docstring). Audio goes where it lies in time: the packets
    of one stretch of a fragmented file come video first, then audio, so the audio on
    either side of a cut is looked for past the video's."""

    def __init__(self, start: Fraction, end: Fraction, path: str):
        self.start, self.end = start, end
        self.result = Exported(path)
        self.file = ExportFile(self.result)
        self.origin: Fraction | None = None  # the wall time of the export's first decode time (its 0)
        self.pending: list[tuple] = []  # (packet, base, video?, wall) from the keyframe at or before start
        self.last: Fraction | None = None  # the wall time of the last video packet read
        self.step = Fraction(0)  # the last interval between decode times
        self.done = False  # the video reached the end (or a change of stream)

    def add(self, piece: Piece) -> bool:
        """The packets of one file; False when the export ends in it."""
        with opened(piece.path) as container:
            if container is None or not container.streams.video:
                return True
            video = container.streams.video[0]
            audio = container.streams.audio[0] if container.streams.audio else None
            if not self.file.holds(video):
                if self.origin is not None or self.pending:
                    c = video.codec_context
                    self.result.notes.append(f"the stream changes at {when(piece.start)} (to {c.name} "
                                             f"{c.width}x{c.height}): the export ends there")
                    self.done = True
                    return False
                self.file.make(video, audio, os.path.basename(piece.path))
            try:
                self._seek(container, video, piece)
                self._copy(container, piece, video, audio if self.file.takes(audio) else None)
            except av.FFmpegError as e:
                self.result.notes.append(f"{os.path.basename(piece.path)}: unreadable from "
                                         f"{when(self.last or piece.start)} on ({one_line(e)})")
        return not self.done

    def _seek(self, container, video, piece: Piece) -> None:
        """Straight to a keyframe a little before the start when the export begins deep in
        its first file (an hour-long segment is not read from its beginning); back to the
        beginning where the seek landed past the start."""
        ahead = self.start - piece.start - GAP_S
        if self.last is not None or ahead <= GAP_S:
            return
        container.seek(int(ahead / video.time_base), stream=video, backward=True)
        landed = next((p for p in container.demux(video) if p.size and p.pts is not None), None)
        past = landed is None or piece.start + landed.pts * landed.time_base > self.start
        container.seek(0 if past else int(ahead / video.time_base), stream=video, backward=True)

    def _copy(self, container, piece: Piece, video, audio) -> None:
        base: Fraction | None = None  # the wall time of the file's time 0
        for packet in container.demux(*[s for s in (video, audio) if s is not None]):
            if not packet.size or packet.dts is None:
                continue
            if packet.stream_index == video.index:
                base = self._base(piece, packet) if base is None else base
                if not self.done:
                    self._video(packet, base, base + packet.dts * packet.time_base)
            elif base is not None:
                self._audio(packet, base, base + packet.dts * packet.time_base)
            if self.done and base + packet.dts * packet.time_base >= self.end + GAP_S:
                return

    def _base(self, piece: Piece, packet) -> Fraction:
        """Where the file's time 0 lies on the wall clock: at its stamp, or one frame after
        the last picture read where that is within `GAP_S` of the stamp (or later)."""
        first = packet.dts * packet.time_base
        if self.last is not None and piece.start + first - (self.last + self.step) <= GAP_S:
            return self.last + self.step - first
        return Fraction(piece.start)

    def _video(self, packet, base: Fraction, wall: Fraction) -> None:
        if self.last is not None and wall > self.last:
            self.step = wall - self.last
        if self.origin is None:
            self._before_start(packet, base, wall)
        elif wall >= self.end:
            self.done = True
            return
        else:
            if self.last is not None and wall - self.last > GAP_S:
                self._gap(self.last, wall)
            self._write(packet, base, True)
        self.last = wall

    def _before_start(self, packet, base: Fraction, wall: Fraction) -> None:
        """Packets from the latest keyframe shown by the start wait; the first one decoded
        after it begins the export there (or, after a gap, at the next keyframe)."""
        shown = base + (packet.pts if packet.pts is not None else packet.dts) * packet.time_base
        if wall <= self.start:
            if packet.is_keyframe and shown <= self.start:  # audio read before it but lying after it stays
                self.pending = [w for w in self.pending if not w[2] and w[3] >= wall]
            if packet.is_keyframe or any(w[2] for w in self.pending):
                self.pending.append((packet, base, True, wall))
            return
        if self.pending and self.last is not None and wall - self.last > GAP_S:
            self.pending = []  # the recording before start ended before it
        if wall >= self.end or not (any(w[2] for w in self.pending) or packet.is_keyframe):
            self.done = wall >= self.end
            return
        self.origin = next((w[3] for w in self.pending if w[2]), wall)
        if self.origin - self.start > GAP_S:
            self._gap(self.start, self.origin)
        for waiting in [*self.pending, (packet, base, True, wall)]:
            self._write(*waiting[:3])
        self.pending = []

    def _audio(self, packet, base: Fraction, wall: Fraction) -> None:
        shown = base + (packet.pts if packet.pts is not None else packet.dts) * packet.time_base
        if self.origin is None:
            self.pending.append((packet, base, False, wall))
        elif shown < self.end:
            self._write(packet, base, False)

    def _write(self, packet, base: Fraction, video: bool) -> None:
        assert self.origin is not None
        self.file.write(packet, round((base - self.origin) / packet.time_base), video)

    def _gap(self, start: Fraction, end: Fraction) -> None:
        at = max(Fraction(0), start - self.origin) if self.origin is not None else Fraction(0)
        self.result.notes.append(f"gap: no recording from {when(start)} to {when(end)} ({float(end - start):.1f} s, "
                                 f"at {float(at):.1f} s into the export)")

    def finish(self) -> Exported | None:
        """The export, closed (None: no packet of the range was recorded)."""
        if self.origin is None or self.last is None:
            return None
        if not self.done and self.end - self.last > GAP_S + self.step:
            self._gap(self.last, self.end)
        self.file.close()
        self.result.first, self.result.last = float(self.origin), float(self.last)
        return self.result

    def close(self) -> None:
        self.file.close()
