"""One thread per camera: PyAV demux + decode, then preprocessing for the detector.

Preprocessing runs here, in the camera's own thread, rather than in a shared stage: it
parallelises across cameras for free, and the frame then lands in the camera's own lane
of the detector's batcher, where a live camera's `drop_oldest` policy discards stale
frames without ever blocking decode.

Files are read once (`eof`). Live sources (RTSP, or any URL) treat a silent end of
stream as a disconnect and reconnect with exponential backoff and jitter until
`give_up_s` passes without a frame (0: never give up). Their output timeline is rebuilt
on a 1/90000 time base across reconnects, so a camera's pts reset does not rewind the
output video. A broken packet is counted and skipped; a source that cannot be opened or
keeps failing is closed and reported, and the other cameras go on.
"""
from __future__ import annotations

import logging
import random
import threading
import time
from fractions import Fraction
from typing import Callable, Iterator

import av

from pipeline.config import SourceConfig
from pipeline.frames import EndOfStream, Frame, Item
from pipeline.metrics.registry import Metrics
from pipeline.runtime.queues import QueueClosed
from pipeline.runtime.stage import RunControl, Threaded
from pipeline.stages.preprocess import Preprocessor

log = logging.getLogger("pipeline.source")

LIVE_TIME_BASE = Fraction(1, 90000)
MAX_CONSECUTIVE_DECODE_ERRORS = 25


def probe(uri: str) -> str | None:
    """Why a video file cannot be read (None when it can): opens it and decodes one frame."""
    try:
        with av.open(uri) as c:
            if not c.streams.video:
                return f"no video stream in {uri}"
            for _ in c.decode(video=0):
                return None
            return f"no decodable frame in {uri}"
    except Exception as e:
        return f"cannot read video {uri}: {_one_line(e)}"


class SourceError(Exception):
    """The camera cannot be read; the message says why in one line."""


def _one_line(e: BaseException) -> str:
    """FFmpeg errors carry errno, message and file name; keep the message only."""
    if isinstance(e, av.error.FFmpegError) and e.strerror:
        return str(e.strerror)
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0]}" if text else type(e).__name__


class VideoSource(Threaded):
    def __init__(self, config: SourceConfig, preprocess: Preprocessor, put: Callable[[Item], None],
                 metrics: Metrics, control: RunControl, max_frames: int | None = None):
        self.config = config
        self.camera = config.id
        self.preprocess = preprocess
        self.put = put
        self.metrics = metrics
        self.control = control
        self.max_frames = max_frames
        self.stats = metrics.camera(self.camera)
        self._seq = 0
        self._threads = [threading.Thread(target=self._run, name=f"source-{self.camera}", daemon=True)]
        self._last_out_pts: int | None = None
        self._connection_pts_base: int | None = None
        self._file_pts0: int | None = None
        self._pass_pts_base: int | None = None
        self._started_wall = 0.0
        self._min_interval = 1.0 / config.max_fps if config.max_fps else 0.0
        self._last_emit = -1e9
        self.network = config.live and "://" in config.uri  # reconnects; its own live timeline
        self.realtime = config.realtime or (config.live and not self.network)

    def start(self) -> None:
        self._threads[0].start()

    def _state(self, state: str, detail: str = "") -> None:
        if self.stats.state != state or self.stats.detail != detail:
            self.stats.state, self.stats.detail = state, detail
            log_fn = {"failed": log.error, "reconnecting": log.warning}.get(state, log.info)
            log_fn("camera %s: %s%s", self.camera, state, f" ({detail})" if detail else "")

    # -- the thread ---------------------------------------------------------------------
    def _run(self) -> None:
        eos = EndOfStream(self.camera, "eof")
        self._started_wall = time.perf_counter()
        try:
            if self.network:
                self._run_live()
            else:
                self._state("connecting")
                self._read_file()
            if self.control.stop.is_set():
                eos.reason = "stopped"
        except SourceError as e:
            eos.reason, eos.error = "failed", str(e)
            self._state("failed", str(e))
        except QueueClosed:
            return
        except Exception as e:  # a bug or an unexpected library error: contain it to this camera
            eos.reason, eos.error = "failed", _one_line(e)
            self._state("failed", eos.error)
            log.exception("camera %s: source crashed", self.camera)
        if eos.reason != "failed":
            self._state("ended", eos.reason if eos.reason != "eof" else "")
        try:
            self.put(eos)
        except QueueClosed:
            pass

    def _read_file(self) -> None:
        """Read the file once, or over and over with `loop` (timestamps keep increasing)."""
        errors = 0
        while True:
            container = self._open()
            try:
                self._state("streaming")
                self._pass_pts_base = None
                errors += self._pump(container)
            finally:
                container.close()
            if not self.config.loop or self.control.stop.is_set() or self._done() or self._seq == 0:
                break
        if errors:
            self.stats.detail = f"{errors} unreadable packet(s) skipped"

    def _run_live(self) -> None:
        rc = self.config.reconnect
        backoff = rc.initial_s
        last_ok = time.monotonic()
        connected_once = False
        while not self.control.stop.is_set() and not self._done():
            self._state("reconnecting" if connected_once else "connecting")
            try:
                container = self._open()
            except SourceError as e:
                down = time.monotonic() - last_ok
                if rc.give_up_s and down >= rc.give_up_s:
                    raise SourceError(f"no stream for {down:.1f}s (give_up_s={rc.give_up_s:g}): {e}") from None
                self.stats.detail = str(e)
                delay = min(backoff, rc.max_s) * random.uniform(0.8, 1.2)
                if rc.give_up_s:
                    delay = min(delay, max(0.05, rc.give_up_s - down))
                self.control.stop.wait(delay)
                backoff = min(backoff * 2, rc.max_s)
                continue
            if connected_once:
                self.stats.reconnects += 1
                self.stats.downtime_s += time.monotonic() - last_ok
            connected_once = True
            backoff = rc.initial_s
            self._state("streaming")
            self._connection_pts_base = None
            seen = self._seq
            try:
                self._pump(container)
            except SourceError as e:
                log.warning("camera %s: stream broke: %s", self.camera, e)
            finally:
                container.close()
            if self._seq > seen:  # a server that accepts but never sends does not reset give-up
                last_ok = time.monotonic()

    # -- opening and decoding -----------------------------------------------------------
    def _open(self) -> av.container.InputContainer:
        cfg = self.config
        options: dict[str, str] = {}
        if self.network:
            # no demuxer-side buffering and a short probe: the first frame comes ~1 s sooner
            options.update(fflags="nobuffer", analyzeduration="500000")
        if cfg.uri.startswith(("rtsp://", "rtsps://")):
            options["rtsp_transport"] = cfg.transport
        options.update(cfg.options)
        try:
            container = av.open(cfg.uri, options=options, timeout=(cfg.open_timeout_s, cfg.read_timeout_s))
        except Exception as e:
            raise SourceError(f"cannot open {cfg.uri}: {_one_line(e)}") from None
        if not container.streams.video:
            container.close()
            raise SourceError(f"{cfg.uri}: no video stream")
        return container

    def _decoder(self, stream) -> Callable:
        """The configured decoder (e.g. h264_cuvid), falling back to FFmpeg's default one."""
        name = self.config.decoder
        if name:
            try:
                ctx = av.CodecContext.create(name, "r")
                if stream.codec_context.extradata:
                    ctx.extradata = stream.codec_context.extradata
                ctx.thread_count = self.config.thread_count
                ctx.open()
                log.info("camera %s: decoding with %s", self.camera, name)
                return ctx.decode
            except Exception as e:
                log.warning("camera %s: decoder %s unavailable (%s); using %s", self.camera, name, _one_line(e),
                            stream.codec_context.name)
        stream.codec_context.thread_count = self.config.thread_count
        if self.config.thread_count != 1:
            stream.thread_type = "AUTO"
        return stream.codec_context.decode

    def _pump(self, container: av.container.InputContainer) -> int:
        """Decode until the end, a stop, or too many broken packets; returns packets skipped."""
        stream = container.streams.video[0]
        decode = self._decoder(stream)
        rate = stream.average_rate or stream.guessed_rate or Fraction(25)
        time_base = stream.time_base
        errors = consecutive = 0
        for packet in self._packets(container, stream):
            if self.control.stop.is_set() or self._done():
                break
            try:
                frames = decode(packet)
                consecutive = 0
            except (av.error.InvalidDataError, av.error.ValueError, ValueError) as e:
                errors += 1
                consecutive += 1
                self.metrics.error(self.camera)
                log.warning("camera %s: skipped an unreadable packet: %s", self.camera, _one_line(e))
                if consecutive >= MAX_CONSECUTIVE_DECODE_ERRORS:
                    raise SourceError(f"{consecutive} unreadable packets in a row: stream is corrupt") from None
                continue
            for vf in frames:
                if self._done():
                    break
                self._emit(vf, rate, time_base)
        return errors

    def _packets(self, container, stream) -> Iterator:
        try:
            yield from container.demux(stream)
        except av.error.ExitError as e:  # read timeout of a hung live server
            raise SourceError(f"read timed out: {_one_line(e)}") from None
        except (av.error.InvalidDataError, av.error.EOFError, OSError) as e:
            if self.config.live:
                raise SourceError(f"stream error: {_one_line(e)}") from None
            self.metrics.error(self.camera)
            log.warning("camera %s: file ends early (truncated or corrupt): %s", self.camera, _one_line(e))

    def _done(self) -> bool:
        return self.max_frames is not None and self._seq >= self.max_frames

    def _emit(self, vf: av.VideoFrame, rate: Fraction, time_base: Fraction) -> None:
        now = time.perf_counter()
        seq = self._seq
        self._seq += 1
        self.metrics.frame_in(self.camera)
        if seq % self.config.stride:
            self.metrics.drop(self.camera, "stride")
            return
        if self.network:
            pts, tb = self._live_pts(vf, time_base), LIVE_TIME_BASE
        else:
            pts, tb = vf.pts, time_base
            if self.config.loop and pts is not None:
                pts = self._looped_pts(pts, rate, time_base)
        if self._min_interval:
            # on the camera's own timeline, so the choice of frames does not depend on load
            t = float(pts * tb) if pts is not None else time.perf_counter()
            if t - self._last_emit < self._min_interval * 0.98:
                self.metrics.drop(self.camera, "max_fps")
                return
            self._last_emit = t
        if self.realtime and not self.network and pts is not None:
            # a paced file plays a camera: its frame "arrives" at its time even when we
            # get to it late (a real camera's frames wait in the socket meanwhile)
            now = min(time.perf_counter(), self._pace(pts, tb))
        image = vf.to_ndarray(format="bgr24", threads=1)  # swscale would start its own pool per camera
        frame = Frame(camera=self.camera, seq=seq, pts=pts, time_base=tb, image=image, t_capture=now, rate=rate)
        frame.stamps["capture"] = now
        try:
            frame.tensor, frame.letterbox = self.preprocess(image)
        except Exception as e:
            self.metrics.error(self.camera)
            self.metrics.drop(self.camera, "preprocess_error")
            log.warning("camera %s frame %d: preprocess failed: %s", self.camera, seq, _one_line(e))
            return
        frame.stamp("preprocess")
        self.put(frame)

    def _looped_pts(self, pts: int, rate: Fraction, time_base: Fraction) -> int:
        """Each pass over a looped file continues one frame after the previous pass."""
        if self._pass_pts_base is None:
            start = 0 if self._last_out_pts is None else self._last_out_pts + max(1, round(1 / (rate * time_base)))
            self._pass_pts_base = start - pts
        pts += self._pass_pts_base
        self._last_out_pts = pts
        return pts

    def _pace(self, pts: int, time_base: Fraction) -> float:
        """Wait until the frame's presentation time, like a camera; returns that time."""
        if self._file_pts0 is None:
            self._file_pts0 = pts
        due = self._started_wall + float((pts - self._file_pts0) * time_base)
        delay = due - time.perf_counter()
        if delay > 0:
            self.control.stop.wait(delay)
        return due

    def _live_pts(self, vf: av.VideoFrame, time_base: Fraction) -> int:
        """A continuous 1/90000 timeline across reconnects and camera clock resets."""
        wall = round((time.perf_counter() - self._started_wall) / LIVE_TIME_BASE)
        if vf.pts is None:
            pts = wall
        else:
            raw = round(vf.pts * time_base / LIVE_TIME_BASE)
            if self._connection_pts_base is None:
                start = wall if self._last_out_pts is None else max(wall, self._last_out_pts + 1)
                self._connection_pts_base = start - raw
            pts = self._connection_pts_base + raw
        if self._last_out_pts is not None and pts <= self._last_out_pts:
            pts = self._last_out_pts + 1
        self._last_out_pts = pts
        return pts
