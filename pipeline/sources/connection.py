"""One connection to a video: open it (timeouts, protocol options), pick its decoder
(the configured hardware decoder, or its sibling for the stream's codec, falling back to
FFmpeg's default), and decode it frame by frame while skipping what cannot be decoded.

A broken packet costs that packet only: it is counted and skipped. A stream that
yields nothing decodable for `read_timeout_s` (a hung server, or a file that is garbage
from some point on) is broken as a whole: `SourceError`, which a live camera answers by
reconnecting and a file by ending there.
"""
from __future__ import annotations

import functools
import logging
import time
from dataclasses import dataclass
from fractions import Fraction
from typing import Callable, Iterator, Mapping, Protocol

import av

from pipeline.config import SourceConfig
from pipeline.config.schema import file_problem, local_path
from pipeline.errors import FAILED, PipelineError, one_line
from pipeline.frames import seconds
from pipeline.metrics.snapshot import RecordingStats
from pipeline.redact import redact

log = logging.getLogger("pipeline.source")


class SourceError(PipelineError):
    """The camera cannot be read; the message says why in one line. It names the camera's
    URL (or FFmpeg's error does), so it is redacted here, once for every place that
    shows it (logs, camera states, the summary, events). It fails that camera, never
    the run."""

    exit_status = FAILED

    def __init__(self, message: str):
        super().__init__(redact(message))


def local_file_problem(uri: str) -> str | None:
    """Why the local file `uri` names cannot be opened safely (None: it can, or `uri` is a
    network URL). Asked right before each open: a path checked when the config was read
    may have become a FIFO since, and FFmpeg's open of a FIFO waits in the kernel for a
    writer, beyond any timeout or stop."""
    path = local_path(uri)
    why = file_problem(path) if path is not None else None
    return f"{why}: {path}" if why else None


def probe(uri: str, timeout: tuple[float, float] = (5.0, 5.0)) -> str | None:
    """Why a video file cannot be read (None when it can): opens it and decodes one frame,
    each step within `timeout` (open, read: a file may be a URL with `live: false`, whose
    server may never answer). The reason is redacted: it names the file, which may be a URL."""
    special = local_file_problem(uri)
    if special:
        return redact(f"cannot read video {uri}: {special}")
    try:
        with av.open(uri, timeout=timeout) as c:
            if not c.streams.video:
                return redact(f"no video stream in {uri}")
            for _ in c.decode(video=0):
                return None
            return redact(f"no decodable frame in {uri}")
    except av.error.ExitError:  # the interrupt callback: a step took longer than its timeout
        return redact(f"cannot read video {uri}: no answer in time (open_timeout_s={timeout[0]:g}, "
                      f"read_timeout_s={timeout[1]:g})")
    except Exception as e:
        return redact(f"cannot read video {uri}: {one_line(e)}")


MAX_FPS = 1000
OVER_CODEC = 2  # a container rate more than this many times the codec's own is not measured


def _plausible(rate) -> Fraction | None:
    return Fraction(rate) if rate and 1 <= rate <= MAX_FPS else None


def frame_rate(stream) -> Fraction:
    """The stream's frame rate: the container's average, unless it is implausible, then
    the codec's own rate (from the bitstream), then FFmpeg's guess, then 25.

    The container's average is measured from timestamps, and broken ones break it: an
    MP4 whose timestamps are all 0 averages frames over its last frame's duration (120
    frames at 10 fps: 1200 fps), and a raw H.264 stream without timestamps gets the
    demuxer's default of 25. Either is far above the rate the codec declares, while a
    real camera delivers at most about what its encoder declares. A format without
    timestamps (a raw `.h264` or `.hevc`) has no average worth the name.
    """
    codec = _plausible(stream.codec_context.framerate)
    untimed = stream.container.format.flags & av.format.Flags.no_timestamps.value
    average = None if untimed else _plausible(stream.average_rate)
    if average is not None and (codec is None or average <= OVER_CODEC * codec):
        return average
    return codec or _plausible(stream.guessed_rate) or _plausible(stream.base_rate) or Fraction(25)


@functools.cache
def ffmpeg_decoders() -> dict[str, str]:
    """FFmpeg's video decoders, each with the codec it decodes (`hevc_cuvid` -> `hevc`)."""
    decoders = {}
    for name in av.codecs_available:
        try:
            codec = av.codec.Codec(name, "r")
        except Exception:  # an encoder only
            continue
        if codec.type == "video":
            decoders[name] = codec.canonical_name
    return decoders


@dataclass(frozen=True)
class DecoderChoice:
    """The decoder to try (None: FFmpeg's default, software, one) and why it is not the
    configured one (None when it is, or when none is configured)."""

    decoder: str | None
    why: str | None = None


def choose_decoder(codec: str, configured: str | None, decoders: Mapping[str, str]) -> DecoderChoice:
    """The decoder for a stream of `codec`, given the configured one and FFmpeg's decoders
    (name -> codec it decodes).

    A hardware decoder decodes one codec: `h264_cuvid` opens on an HEVC stream and
    decodes nothing. Hardware decoders are named `<codec>_<kind>` (`hevc_cuvid`,
    `vp9_qsv`), so a configured decoder of another codec is swapped for the one of the
    same kind for the stream's codec when FFmpeg has it; otherwise software decodes.
    """
    if configured is None:
        return DecoderChoice(None)
    if configured not in decoders:
        return DecoderChoice(None, f"decoder {configured} is not one this FFmpeg has")
    if decoders[configured] == codec:
        return DecoderChoice(configured)
    mismatch = f"decoder {configured} decodes {decoders[configured]}, the stream is {codec}"
    kind = configured.rpartition("_")[2] if "_" in configured else None
    siblings = sorted(d for d, c in decoders.items() if c == codec and kind and d.endswith(f"_{kind}"))
    if siblings:
        return DecoderChoice(siblings[0], mismatch)
    return DecoderChoice(None, f"{mismatch} and FFmpeg has no {codec} decoder of its kind")


def open_container(cfg: SourceConfig) -> av.container.InputContainer:
    """The camera's video opened: protocol options and timeouts (`SourceError` when it cannot be)."""
    options: dict[str, str] = {}
    if cfg.network:
        # no demuxer-side buffering and a short probe: the first frame comes ~1 s sooner
        options.update(fflags="nobuffer", analyzeduration="500000")
    if cfg.uri.startswith(("rtsp://", "rtsps://")):
        options["rtsp_transport"] = cfg.transport
        options["timeout"] = str(int(cfg.read_timeout_s * 1e6))  # socket I/O timeout, microseconds
    options.update(cfg.options)
    special = local_file_problem(cfg.uri)
    if special:
        raise SourceError(f"cannot open {cfg.uri}: {special}")
    t0 = time.monotonic()
    try:
        container = av.open(cfg.uri, options=options, timeout=(cfg.open_timeout_s, cfg.read_timeout_s))
    except Exception as e:
        waited = time.monotonic() - t0
        if cfg.network and waited >= cfg.open_timeout_s * 0.9:
            raise SourceError(f"cannot open {cfg.uri}: no answer within open_timeout_s={cfg.open_timeout_s:g} "
                              f"({one_line(e)})") from None
        raise SourceError(f"cannot open {cfg.uri}: {one_line(e)}") from None
    if not container.streams.video:
        container.close()
        raise SourceError(f"{cfg.uri}: no video stream")
    return container


class TapLink(Protocol):
    """A connection's place on the camera's recording (`recording.segment_plan.Link`):
    its timestamps plus `offset` (set at its first keyframe) are the recording's timeline."""

    offset: int | None
    start_s: float | None  # its first recorded picture on the timeline (seconds)
    last_dts: int | None
    seconds: float  # one tick of its time base

    def decode_alone(self, video) -> None:
        """The connection only demuxes: where the link must see its pictures, it decodes them itself."""
        ...

    def end(self) -> tuple[Fraction, Fraction] | None:
        """One frame after its last picture, and its last decode time (timeline seconds)."""
        ...


class PacketTap(Protocol):
    """What sees a connection's packets before they are decoded: the camera's recording
    (`recording.recorder.Recording`). `connect` gives the connection's place on it, handed
    back with each packet."""

    origin: float | None  # the clock reading its live timeline counts from (None: the media time)
    stats: RecordingStats  # its health: `state` is "failed" once nothing more is recorded

    def connect(self, video, audio, rate: Fraction) -> TapLink: ...

    def packet(self, packet, link) -> None: ...

    def picture(self, frame, link) -> None:
        """A picture decoded from the connection, before the analysis sees it (its pts may
        be set: a stream without timestamps is timed in display order)."""
        ...

    def disconnect(self) -> None: ...

    def failed(self, error: BaseException) -> None:
        """Its stream cannot be read any more (a main stream that gave up)."""
        ...


class StreamTap(Protocol):
    """What else sees a connection's video packets and pictures: the camera's live stream
    (`live.stream.LiveStream`). It sees them after the recording, with the timestamps the
    recording made where the stream lacked them; `beside` is the recording's place of the
    same connection (None: not recorded)."""

    def connect(self, video, rate: Fraction, beside: TapLink | None = None) -> object: ...

    def packet(self, packet, link) -> None: ...

    def picture(self, frame, link) -> None: ...

    def disconnect(self) -> None: ...


@dataclass
class DecodeStats:
    """What one connection decoded and skipped."""

    frames: int = 0
    bad_packets: int = 0


class Connection:
    """An open video: iterate `frames()` (or `demux()` without decoding); `close()` when
    done. `said` is the camera's set of decoder warnings already logged: the caller keeps
    it across the connections of a camera (loop passes, reconnects) so that each is said
    once. `tap` sees every packet (its audio too) before it is decoded, `also` every video
    packet and picture after it (the taps fan out: the recording, then the live stream)."""

    def __init__(self, config: SourceConfig, on_bad_packet: Callable[[str], None], said: set[str] | None = None,
                 tap: PacketTap | None = None, decode: bool = True, also: StreamTap | None = None):
        self.config = config
        self.on_bad_packet = on_bad_packet
        self._said = set() if said is None else said
        self.container = open_container(config)
        try:
            self.stream = self.container.streams.video[0]
            self.audio = self.container.streams.audio[0] if tap is not None and self.container.streams.audio else None
            self.rate = frame_rate(self.stream)
            self.time_base: Fraction = self.stream.time_base or Fraction(1, 90000)
            self._decode = self._decoder() if decode else None
            self.tap = tap
            self.link = tap.connect(self.stream, self.audio, self.rate) if tap is not None else None
            if self.link is not None and not decode:
                self.link.decode_alone(self.stream)
            self.also = also
            self.also_link = also.connect(self.stream, self.rate, self.link) if also is not None else None
        except BaseException:
            self.container.close()
            raise
        self.stats = DecodeStats()
        self.ended_early: str | None = None  # a file that ends before its index says (truncated, corrupt)

    def _decoder(self) -> Callable:
        """The configured decoder (e.g. h264_cuvid) or its sibling for the stream's codec,
        falling back to FFmpeg's default one; a fallback is said in one warning line."""
        cfg, stream = self.config, self.stream
        codec = stream.codec_context.codec.canonical_name
        choice = choose_decoder(codec, cfg.decoder, ffmpeg_decoders() if cfg.decoder else {})
        reasons = [choice.why] if choice.why else []
        if choice.decoder:
            try:
                ctx = av.CodecContext.create(choice.decoder, "r")
                if stream.codec_context.extradata:
                    ctx.extradata = stream.codec_context.extradata
                ctx.thread_count = cfg.thread_count
                ctx.open()
                log.info("camera %s: decoding with %s%s", cfg.id, choice.decoder,
                         f" ({choice.why})" if choice.why else "")
                return ctx.decode
            except Exception as e:
                reasons.append(f"decoder {choice.decoder} unavailable ({one_line(e)})")
        warning = f"{'; '.join(reasons)}; decoding {codec} in software ({stream.codec_context.name})"
        if reasons and warning not in self._said:
            self._said.add(warning)
            log.warning("camera %s: %s", cfg.id, warning)
        stream.codec_context.thread_count = cfg.thread_count
        if cfg.thread_count != 1:
            stream.thread_type = "AUTO"
        return stream.codec_context.decode

    def _clock(self, packet, last: float) -> float:
        """Seconds on the clock that `read_timeout_s` counts in: the wall clock for a
        network stream, the file's own timeline for a file (it reads faster than real time)."""
        if self.config.network:
            return time.monotonic()
        return seconds(packet.pts, self.time_base) if packet.pts is not None else last

    def frames(self, stop: Callable[[], bool]) -> Iterator[av.VideoFrame]:
        """Decoded frames until the end, `stop()`, or a broken stream (`SourceError`).
        A packet that fails to decode is reported and skipped; nothing decodable for
        `read_timeout_s` breaks the stream."""
        assert self._decode is not None, "a connection opened with decode=False only demuxes"
        good_at: float | None = None
        now = 0.0
        for packet in self._packets():
            if stop():
                return
            now = self._clock(packet, now)
            try:
                decoded = self._decode(packet)
            except (av.error.FFmpegError, ValueError) as e:
                self.stats.bad_packets += 1
                self.on_bad_packet(redact(one_line(e)))
                decoded = []
            if decoded or good_at is None:
                good_at = now
            elif now - good_at > self.config.read_timeout_s:
                raise SourceError(f"nothing decodable for {self.config.read_timeout_s:g}s "
                                  f"(read_timeout_s): the stream is broken from here")
            for vf in decoded:
                self.stats.frames += 1
                self._picture(vf)
                yield vf
        if not stop():
            yield from self._flush()
            listed = self.stream.frames
            read = self.stats.frames + self.stats.bad_packets
            if not self.config.network and listed and read < listed - 1 and not self.ended_early:
                self.ended_early = f"{self.stats.frames} of the {listed} frames its index lists"

    def _picture(self, vf: av.VideoFrame) -> None:
        if self.tap is not None:
            self.tap.picture(vf, self.link)
        if self.also is not None:
            self.also.picture(vf, self.also_link)

    def _flush(self) -> Iterator[av.VideoFrame]:
        """The frames the decoder still holds at the end of the stream."""
        assert self._decode is not None
        try:
            for vf in self._decode(None):
                self.stats.frames += 1
                self._picture(vf)
                yield vf
        except (av.error.FFmpegError, ValueError):
            pass

    def demux(self, stop: Callable[[], bool]) -> None:
        """Read to the end (or `stop()`) without decoding: every packet goes to the tap."""
        for _ in self._packets():
            if stop():
                return

    def _packets(self) -> Iterator:
        tap, link, video = self.tap, self.link, self.stream.index
        also, also_link = self.also, self.also_link
        streams = (self.stream, self.audio) if self.audio is not None else (self.stream,)
        try:
            for packet in self.container.demux(*streams):
                if not packet.size:  # the demuxer's final empty packet is the decoder flush: done in `_flush`
                    continue
                if tap is not None:
                    tap.packet(packet, link)
                    if packet.stream_index != video:
                        continue
                if also is not None:
                    also.packet(packet, also_link)
                yield packet
        except av.error.ExitError as e:  # read timeout of a hung live server
            raise SourceError(f"no data for {self.config.read_timeout_s:g}s (read_timeout_s): {one_line(e)}") from None
        except (av.error.FFmpegError, OSError) as e:
            if self.config.network:
                raise SourceError(f"stream error: {one_line(e)}") from None
            self.ended_early = redact(one_line(e))

    def close(self) -> None:
        if self.tap is not None:
            self.tap.disconnect()
        if self.also is not None:
            self.also.disconnect()
        self.container.close()
