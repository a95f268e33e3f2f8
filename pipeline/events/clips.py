"""Short clips around events, cut from the camera's already encoded video (no second encode).

`PacketRing` keeps the last `pre_s` seconds of a camera's encoded packets, back to the
keyframe at or before that (a clip must start on a keyframe to be playable), within a
byte budget: packets, not pictures. `ClipRecorder` opens a clip when an event comes,
writes the ring's packets and then every new packet until `post_s` after the event; an
event while a clip is open extends it (events close together share one clip) while the
clip is shorter than `max_s` (from its first packet): a busy camera's events would
otherwise extend one clip for as long as they keep coming. Past it, the event opens a new
clip with its own pre-roll, and the clip under way takes no more events: it goes on beside
the new one until `post_s` after its last event, then ends. A clip holds its every
event's `pre_s` and `post_s`. A clip starts on a keyframe: where a new one could start no later than the clip under way does (no keyframe
since: keyframes further apart than `max_s`) it would hold nothing the clip under way
does not, so the clip under way takes the event; as it does where no new clip can start
(no keyframe in the ring). For the same reason a clip past its `post_s` is not finished
while the ring still starts at its first keyframe: it waits, writing nothing, and an
event meanwhile carries it on (what came since, from the ring). A clip is thus at most
max(`max_s`, keyframe interval + `pre_s`) + `post_s` long; keyframes further apart than
`max_s` are said once in the log.

A clip is a fragmented MP4 written out a fragment about every second (as a live camera's
video is): one still being written plays up to its last whole fragment (what the page's
player gets, `web.evidence`), and a killed process leaves a playable clip. Each clip
starts at 0 in its own clock.

`clips.max_mb` bounds each clip, and the ring holds half of it, so a pre-roll never
crowds out what follows the event. Where the keyframe at `pre_s` lies beyond the ring's
half, the pre-roll starts at the first keyframe within it and the event says so
(`clip_pre_s`, `clip_note`); with no keyframe within it the event has no clip, said in
`clip_note` (a shorter GOP helps: `outputs.video.options: {g: ...}`). A clip that
reaches `max_mb` ends there.

A clip holds the packets of one encoder: when the video changes size (a camera back at
another resolution: its writer starts a new encoder) the clip under way ends, and goes
on in `<clip>.part1.mp4` (`.part2`, ...) while its events' `post_s` lasts; the ring
starts again at the new size, so a pre-roll never spans the change (it is shortened,
said in the event). A new encoder with the same parameters (a time segment) continues
the clip as it is. An outage (the video away for more than `OUTAGE_S` and a few frame
intervals: a camera reconnecting, a hole in the recording) breaks a clip the same way: a
pre-roll never reaches across it (it is shortened, said in the event with how long the
video was away) and a clip under way goes on in its next part after it.

Packets are copied (their bytes and timing) before the camera's own muxer takes them: a
packet muxed once is consumed. A camera's recording, where it has one, feeds its clips
instead (original quality): its packets come from the recording's own thread (taken
under a lock) and run ahead of the analysis by the pipeline's latency, so its ring keeps
`lead_s` more and an event is placed by presentation time, from the keyframe at or
before `pre_s` earlier up to `post_s` after it.
"""
from __future__ import annotations

import logging
import os
import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Callable

import av

from pipeline.recording.mp4 import mp4_options
from pipeline.recording.packets import Held
from pipeline.recording.segments import segment_path

log = logging.getLogger("pipeline.clips")

OUTAGE_S = 2.0  # a step between two packets' decode times longer than this, and than
OUTAGE_STEPS = 3  # this many frame intervals, is an outage (a low-rate stream's frames are seconds apart)


class PacketRing:
    """Packets from a keyframe on, the last `pre_s` seconds and at most `max_bytes`."""

    def __init__(self, pre_s: float, max_bytes: int = 64 * 1024 * 1024):
        self.pre_s = pre_s
        self.max_bytes = max_bytes
        self._held: deque[Held] = deque()
        self._bytes = 0
        self.budget_cut_s: float | None = None  # the newest packet given up for the byte budget
        self._starved = False  # the budget emptied the ring: its packets up to the next keyframe are given up too

    def add(self, held: Held) -> None:
        if not self._held and not held.keyframe:
            if self._starved:
                self.budget_cut_s = held.seconds  # nothing to start a clip from until the next keyframe
            return
        self._starved = False
        self._held.append(held)
        self._bytes += len(held.data)
        self._trim(held.seconds - self.pre_s)

    def _trim(self, keep_from: float) -> None:
        """Drop what lies before the last keyframe at or before `keep_from`, then (over the
        byte budget) whole GOPs from the front, the last one too when it alone is over."""
        held = self._held
        keys = [i for i, h in enumerate(held) if h.keyframe]
        for _ in range(max((i for i in keys if held[i].seconds <= keep_from), default=0)):
            self._pop()
        while self._bytes > self.max_bytes:
            self.budget_cut_s = self._pop().seconds
            while held and not held[0].keyframe:
                self.budget_cut_s = self._pop().seconds
            self._starved = not held

    def _pop(self) -> Held:
        h = self._held.popleft()
        self._bytes -= len(h.data)
        return h

    def clear(self) -> None:
        self._held.clear()
        self._bytes = 0
        self.budget_cut_s = None
        self._starved = False

    def from_keyframe(self, before: float | None = None) -> list[Held]:
        """The packets held, from their first keyframe on (what a clip can start with), or
        from the last keyframe at or before `before` seconds where there is one."""
        held = list(self._held)
        starts = [i for i, h in enumerate(held) if h.keyframe and before is not None and h.seconds <= before]
        return held[starts[-1]:] if starts else held

    @property
    def bytes(self) -> int:
        return self._bytes

    @property
    def start_s(self) -> float | None:
        """The first packet held (a keyframe), where a clip could start at the earliest."""
        return self._held[0].seconds if self._held else None


@dataclass(frozen=True)
class ClipRef:
    """What an event gets: the clip that shows it (None: none), and where its pre-roll is
    shorter than `pre_s`, how long it is and why (`note` also says why there is no clip)."""

    path: str | None
    pre_s: float | None = None
    note: str = ""


def _next_packet_s(held: list[Held]) -> float:
    """When the packet after `held` is about due: one packet interval after the newest."""
    return held[-1].seconds + (held[-1].seconds - held[-2].seconds if len(held) > 1 else 0.0)


def _encoder(stream) -> tuple:
    """What a clip's packets must share: the codec, size and codec headers of their encoder."""
    ctx = stream.codec_context
    return ctx.name, ctx.width, ctx.height, bytes(ctx.extradata or b"")


class ClipFile:
    """The clip being written: one fragmented MP4 of one encoder's packets, at most
    `max_bytes`."""

    def __init__(self, max_bytes: int, on_file: Callable[[str], None] | None = None,
                 written: list[str] | None = None):
        self.max_bytes = max_bytes
        self.on_file = on_file  # each clip once it exists (the run's record of what it wrote)
        self.path = ""
        self.written: list[str] = [] if written is None else written  # the clips finished (shared by a camera's)
        self._container: av.container.OutputContainer | None = None
        self._stream = None
        self._bytes = 0
        self._last_dts: int | None = None

    @property
    def is_open(self) -> bool:
        return self._container is not None

    def open(self, path: str, template) -> None:
        """A new clip at `path` whose stream copies `template`'s parameters."""
        os.makedirs(os.path.dirname(path), exist_ok=True)
        self.path = path
        self._container = av.open(path, "w", options=mp4_options(fragmented=True))
        if self.on_file is not None:
            self.on_file(path)
        self._stream = self._container.add_stream_from_template(template)
        self._last_dts = None
        self._bytes = 0

    def write(self, held: Held) -> None:
        if self._container is None:  # ended at max_mb
            return
        if held.dts is not None and self._last_dts is not None and held.dts <= self._last_dts:
            return  # already in the clip (the ring and the live packets overlap at the start)
        if self._bytes + len(held.data) > self.max_bytes:
            log.info("clip %s reached clips.max_mb (%g MB): it ends there", self.path, self.max_bytes / 1e6)
            self.finish()
            return
        packet = held.packet()
        packet.stream = self._stream
        self._container.mux(packet)
        self._bytes += len(held.data)
        self._last_dts = held.dts

    def write_until(self, held: list[Held], until: float | None) -> None:
        """Write `held` (what the clip holds already is left out) up to `until`."""
        for h in held:
            if until is not None and h.seconds > until:
                return
            self.write(h)

    def finish(self) -> None:
        if self._container is None:
            return
        try:
            self._container.close()
            self.written.append(self.path)
        except Exception as e:  # a clip is evidence, not the video: the camera goes on
            log.warning("clip %s could not be finished: %s", self.path, e)
        self._container = None


@dataclass
class Pace:
    """The video's decode times as its packets come, to tell an outage from its frame rate."""

    last_s: float | None = None
    step_s: float = 0.0  # the video's frame interval, as its packets came

    def gap(self, held: Held) -> float | None:
        """How long the video was away before `held` (None: it follows on): a step in decode
        time of more than OUTAGE_S and OUTAGE_STEPS frame intervals (a reconnect, a hole)."""
        t = held.decode_seconds
        last, self.last_s = self.last_s, t
        if last is None or t <= last:
            return None
        if t - last > max(OUTAGE_S, OUTAGE_STEPS * self.step_s):
            return t - last - self.step_s  # the time missing: the step less the frame it stands for
        self.step_s = t - last
        return None


@dataclass
class KeyframeGap:
    """How far apart the video's keyframes come: said once where it is more than `max_s`,
    for then its clips are as long as the keyframe interval (a clip starts on a keyframe)."""

    camera: str
    max_s: float
    last_s: float | None = None  # the last keyframe since the video (re)started
    said: bool = False

    def see(self, held: Held) -> None:
        if not held.keyframe:
            return
        if self.last_s is not None and not self.said and held.seconds - self.last_s > self.max_s:
            log.warning("camera %s: its video's keyframes are %.1f s apart, more than clips.max_s (%g s): its event "
                        "clips are as long as that needs", self.camera, held.seconds - self.last_s, self.max_s)
            self.said = True
        self.last_s = held.seconds


@dataclass
class Cuts:
    """Where the video last broke, to say why a pre-roll is shorter than `pre_s`."""

    size_changed_s: float | None = None
    interrupted: tuple[float, float] | None = None  # (when the video came back, after how long away)

    def why(self, wanted_from: float, ring: PacketRing) -> str:
        """The latest of what cut a pre-roll meant to start at `wanted_from`."""
        cuts = [(self.size_changed_s, "pre_s shortened: the video changed size"),
                (ring.budget_cut_s, f"pre_s shortened to the first keyframe within the "
                                    f"{ring.max_bytes / 1e6:g} MB of clips.max_mb kept for it")]
        if self.interrupted is not None:
            back_s, away_s = self.interrupted
            cuts.append((back_s, f"pre_s shortened: the video was interrupted for {away_s:.1f} s before"))
        cut = [(t, why) for t, why in cuts if t is not None and t > wanted_from]
        return max(cut, key=lambda c: c[0])[1] if cut else "pre_s shortened: the video starts there"


@dataclass
class Tails:
    """Clips past `max_s` that take no more events: each goes on beside the newer clip until
    `post_s` after its last event (`end_s`)."""

    clips: list[tuple[ClipFile, float]] = field(default_factory=list)

    def write(self, held: Held) -> None:
        for clip, end_s in self.clips:
            if held.seconds > end_s:
                clip.finish()
            else:
                clip.write(held)
        self.clips = [(clip, end_s) for clip, end_s in self.clips if clip.is_open]

    def finish(self) -> None:
        """The video breaks, or the camera ends: they end here (a newer clip goes on past a break)."""
        for clip, _ in self.clips:
            clip.finish()
        self.clips = []


class ClipRecorder:
    """One camera's clips. `stream` is the camera's encoder stream (its codec parameters
    make the clip's stream)."""

    def __init__(self, folder: str, pre_s: float, post_s: float, max_bytes: int = 64 * 1024 * 1024,
                 lead_s: float = 0.0, on_file: Callable[[str], None] | None = None, max_s: float = 60.0):
        self.folder = folder
        self.pre_s = pre_s
        self.post_s = post_s
        self.max_s = max_s  # events share a clip while it is shorter than this
        self.clip = ClipFile(max_bytes, on_file)
        self.tails = Tails()
        self.ring = PacketRing(pre_s + lead_s, max_bytes // 2)
        self._lock = threading.RLock()
        self._stream = None
        self._encoder: tuple | None = None
        self._stream_packets = 0  # of the current encoder; its codec headers are complete once one was muxed
        self._cuts = Cuts()
        self._pace = Pace()
        self._keys = KeyframeGap(os.path.basename(folder), max_s)  # the folder is named after the camera
        self._first_part = ""  # the clip's first file; a size change continues it in its .partN files
        self._part = 0
        self._continues = False  # the clip goes on in its next part at the next packet
        self._end_s = 0.0
        self._ends_after_next = False
        self._started_s = 0.0  # the clip's first packet (of its first part)
        self._file_start_s = 0.0  # the first packet of the file being written (a keyframe)
        self._newest_s = 0.0  # the newest packet's time

    def packet(self, packet: av.Packet, stream) -> None:
        """Every packet the camera's encoder makes, before it is muxed."""
        self.add(Held.of(packet), stream)

    def add(self, held: Held, stream) -> None:
        """A packet copied, and the stream it came in (its parameters make the clip's stream)."""
        with self._lock:
            if stream is not self._stream:
                self._new_encoder(stream, held.seconds)
            self._stream_packets += 1
            self._newest_s = held.seconds
            away = self._pace.gap(held)
            if away is not None:  # an outage: no clip splices the video before it to the video after
                self._break()
                self._cuts.interrupted = (held.seconds, away)
            self._keys.see(held)
            self.ring.add(held)
            if self._ends_after_next:  # the packet of the frame whose event was marked last
                self._end_s = max(self._end_s, held.seconds + self.post_s)
                self._ends_after_next = False
            # the next part, once the new encoder's first packet is muxed, from a keyframe
            if self._continues and self._stream_packets > 1 and (held.seconds > self._end_s
                                                                  or self.ring.from_keyframe()):
                self._continues = False
                if held.seconds <= self._end_s:
                    self._part += 1
                    self._open(segment_path(self._first_part, self._part), self.ring.from_keyframe())
            self.tails.write(held)
            if self.clip.is_open and held.seconds <= self._end_s:
                self.clip.write(held)
            elif self.clip.is_open and not self._resumable:
                self.close()

    @property
    def _resumable(self) -> bool:
        """Whether a clip past its `post_s` waits (writing nothing) for a next event: while
        the ring holds its first keyframe, a new clip would start there too, a copy of it."""
        return self.ring.start_s is not None and self.ring.start_s <= self._file_start_s

    def _new_encoder(self, stream, at_s: float) -> None:
        encoder = _encoder(stream)
        if self._encoder is not None and encoder != self._encoder:
            self._break()  # its packets cannot go into a clip of the new encoder
            self._cuts.size_changed_s = at_s
        self._stream, self._encoder, self._stream_packets = stream, encoder, 0

    def _break(self) -> None:
        """The video breaks here: the ring starts again, a clip under way goes on in its next part."""
        self.ring.clear()
        self._keys.last_s = None
        self.tails.finish()
        if self.clip.is_open:
            self.clip.finish()
            self._continues = True

    def event(self, name: str, at_s: float | None = None) -> ClipRef:
        """An event at `at_s`, by default at the next packet's time (the sink marks a
        frame's events before it encodes the frame): the clip that will show it, the one
        under way while it is shorter than `max_s`, else a new one (`_shares`)."""
        with self._lock:
            at = self._newest_s if at_s is None else at_s
            held = self.ring.from_keyframe(None if at_s is None else at_s - self.pre_s)
            waited = self.clip.is_open and self._newest_s > self._end_s  # past its post_s, written up to there
            if self.clip.is_open and not self._shares(at, held):  # it takes no more events, the new clip does
                self.tails.clips.append((self.clip, self._end_s))
                self.clip, self._end_s = ClipFile(self.clip.max_bytes, self.clip.on_file, self.clip.written), 0.0
            if at_s is None:
                self._ends_after_next = True
            else:
                self._end_s = max(self._end_s, at_s + self.post_s)
            if self.clip.is_open:
                if waited:  # what came since its end, from the ring
                    self.clip.write_until(self.ring.from_keyframe(), self._newest_s if at_s is None else self._end_s)
                return ClipRef(self.clip.path)
            if self._stream is None or not held:
                why = "nothing encoded yet" if self._stream is None else \
                    f"no keyframe within the {self.ring.max_bytes / 1e6:g} MB of clips.max_mb kept for the pre-roll"
                return ClipRef(None, note=f"no clip: {why}")
            self._continues, self._part, self._started_s = False, 0, held[0].seconds
            self._first_part = os.path.join(self.folder, f"{name}.mp4")
            self._open(self._first_part, held, until=None if at_s is None else self._end_s)
            at = _next_packet_s(held) if at_s is None else at_s
            pre = at - held[0].seconds
            if pre >= self.pre_s - 1e-6:
                return ClipRef(self.clip.path)
            return ClipRef(self.clip.path, round(pre, 3), self._cuts.why(at - self.pre_s, self.ring))

    def _shares(self, at: float, held: list[Held]) -> bool:
        """Whether an event at `at` goes into the clip under way, a new clip being `held` on:
        while the clip is shorter than `max_s`, and past it where no new clip can start (no
        keyframe) or one would start no later than the file under way (a clip starts on a
        keyframe: it would hold the same packets again)."""
        return at - self._started_s < self.max_s or not held or held[0].seconds <= self._file_start_s

    def _open(self, path: str, held: list[Held], until: float | None = None) -> None:
        """A clip from `held`, up to `until` (a recording's packets may reach past the clip's end already)."""
        self.clip.open(path, self._stream)
        self._file_start_s = held[0].seconds
        self.clip.write_until(held, until)

    @property
    def open_files(self) -> list[str]:
        """Every clip still being written: the one taking events and those past `max_s`."""
        return [c.path for c, _ in self.tails.clips] + ([self.clip.path] if self.clip.is_open else [])

    @property
    def written(self) -> list[str]:
        return self.clip.written

    def close(self) -> None:
        """Finish the clip under way (the camera ended, or its post-event time is over)."""
        with self._lock:
            self._end_s = 0.0
            self._continues = False
            self.tails.finish()
            self.clip.finish()
