"""Annotated video per camera with PyAV (H.264 in MP4 via libx264 by default).

Output timing follows the source: each frame keeps its presentation time (relative to
the camera's first frame) in the source's time base, so frame count and timing match the
source; frames without a pts get one from their sequence number and the frame rate.
A writer's files follow each other (`cut`: time segments, see `sinks.segments`): each
file has its own encoder, so its first frame is an IDR keyframe (a new encoder always
starts with one) and the file plays on its own; the encoder flushes into the file it
closes, so no frame is lost or written twice at the cut. Timestamps continue across
files (the packets `on_packet` sees run on, as the JSON lines' `time` does); each MP4
starts at 0 in its container (no edit list), so every player shows it from its start.
A resolution change (a camera that comes back at another size) without time segments
continues in `<name>.partN.mp4`: an H.264 stream in MP4 cannot change size in place,
and players handle segments better than a rescaled picture.
Conversion uses OpenCV's BGR->I420 (about 2x cheaper than PyAV's own conversion).
A hardware encoder (`codec: h264_nvenc`) that cannot open falls back to libx264 with its
own preset and crf: `options` belong to the configured encoder only (NVENC's `preset:
p4` or `rc` would stop libx264), so they are dropped then, said once per camera.
`fragmented` writes fragmented MP4 flushed about every second (the default for live
cameras, which may run for months): even a killed process leaves a playable file.
A writer under a lease (a camera that may move between machines) writes through
`LeasedFile`, which checks the lease before any byte reaches the disk.
"""
from __future__ import annotations

import logging
import os
import tempfile
from fractions import Fraction
from typing import Callable

import av
import cv2
import numpy as np

from pipeline.config import VideoOutputConfig
from pipeline.errors import one_line
from pipeline.frames import Frame

log = logging.getLogger("pipeline.sink")

SOFTWARE_CODEC = "libx264"


def open_encoder(container, codec: str, config: VideoOutputConfig, rate: Fraction, time_base: Fraction, width: int,
                 height: int, threads: int = 1):
    stream = container.add_stream(codec, rate=Fraction(rate).limit_denominator(1001 * 1000))
    stream.width, stream.height = width, height
    stream.pix_fmt = "yuv420p"
    stream.time_base = time_base
    # The encoder counts in the same fine time base: with its default 1/fps, two frames
    # closer than one nominal frame (jittery live cameras) would collide.
    stream.codec_context.time_base = time_base
    stream.codec_context.thread_count = threads
    options = {"threads": str(threads)}
    if codec in ("libx264", "libx265"):
        options.update(preset=config.preset, crf=str(config.crf))
    if codec == config.codec:  # options name the configured encoder's own settings
        options.update(config.options)
    stream.codec_context.options = options
    stream.codec_context.open()
    return stream


def encoder_problem(config: VideoOutputConfig) -> str | None:
    """Why the configured video output cannot be written (None when it can): the container
    its file name asks for, and the encoder with its options, opened once in a scratch
    folder. A hardware encoder that cannot open is fine if its software fallback opens."""
    ext = os.path.splitext(config.filename)[1]
    errors = []
    for codec in dict.fromkeys((config.codec, SOFTWARE_CODEC)):
        with tempfile.TemporaryDirectory(prefix="pipeline-encoder-check-") as tmp:
            try:
                container = av.open(os.path.join(tmp, "check" + ext), "w")
            except Exception as e:
                return f"cannot write {ext or 'files without an extension'}: {one_line(e)}"
            try:
                open_encoder(container, codec, config, Fraction(25), Fraction(1, 90000), 64, 48)
                return None
            except Exception as e:
                errors.append(f"{codec}: {one_line(e)}")
            finally:
                container.close()
        if config.codec == SOFTWARE_CODEC:
            break
    return "cannot open the encoder with the configured options (" + "; ".join(errors) + ")"


def padded_size(image: np.ndarray) -> tuple[int, int]:
    """The size the encoder gets: 4:2:0 needs even sizes, so an odd one gains a pixel."""
    h, w = image.shape[:2]
    return w + (w & 1), h + (h & 1)


def segment_path(path: str, segment: int) -> str:
    """The file of a camera's video segment: `cam.mp4`, then `cam.part1.mp4`, ..."""
    if segment == 0:
        return path
    stem, ext = os.path.splitext(path)
    return f"{stem}.part{segment}{ext}"


class LeasedFile:
    """The file FFmpeg writes into, for a writer under a lease: each write (a fragment,
    the header, the index) checks the lease first; once refused, nothing more is written
    and the reason waits in `refused` for the writer to raise."""

    def __init__(self, path: str, lease: Callable[[], None]):
        self.lease = lease
        self.refused: BaseException | None = None
        self._file = open(path, "wb")

    def write(self, data: bytes) -> int:
        if self.refused is None:
            try:
                self.lease()
            except Exception as e:
                self.refused = e
        if self.refused is None:
            self._file.write(data)
            self._file.flush()
        return len(data)

    def seek(self, offset: int, whence: int = 0) -> int:
        return self._file.seek(offset, whence)

    def tell(self) -> int:
        return self._file.tell()

    def close(self) -> None:
        self._file.close()


OnPacket = Callable[[av.Packet, object], None]  # a packet and the stream that encoded it


class VideoWriter:
    def __init__(self, path: str, config: VideoOutputConfig, encoder_threads: int = 1, fragmented: bool = False,
                 segment: int = 0, lease: Callable[[], None] | None = None, on_packet: OnPacket | None = None):
        self.path = path
        self.fragmented = fragmented
        self.config = config
        self.codec = config.codec
        self.encoder_threads = encoder_threads
        self.segment = segment  # a camera resumed elsewhere continues in its next segment
        self.file = segment_path(path, segment)  # the file being written (or written next)
        self.lease = lease  # raises once another writer owns the camera's outputs
        self.on_packet = on_packet  # every encoded packet, before it is muxed (event clips)
        self._file: LeasedFile | None = None
        self._container: av.container.OutputContainer | None = None
        self._stream = None
        self._size: tuple[int, int] | None = None
        self._first_pts: int | None = None
        self._last_pts = -1
        self._time_base: Fraction | None = None

    @property
    def open_file(self) -> str | None:
        return self.file if self._container is not None else None

    def _open(self, frame: Frame, width: int, height: int) -> None:
        path = self.file
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        if self._time_base is None:  # one time base for all of a writer's files: timestamps continue
            self._time_base = frame.time_base if frame.time_base else Fraction(1, 90000)
        container = self._container_for(path)
        try:
            try:
                stream = self._add_stream(container, self.codec, frame, width, height)
            except Exception as e:  # e.g. h264_nvenc without a GPU: fall back to software
                if self.codec == SOFTWARE_CODEC:
                    raise
                dropped = f" without its options ({', '.join(sorted(self.config.options))})" \
                    if self.config.options else ""
                log.warning("%s: encoder %s unavailable (%s); using %s%s", path, self.codec, one_line(e),
                            SOFTWARE_CODEC, dropped)
                self.codec = SOFTWARE_CODEC
                container.close()
                container = self._container_for(path)
                stream = self._add_stream(container, self.codec, frame, width, height)
        except Exception:
            container.close()
            raise
        self._container, self._stream = container, stream
        self._size = (width, height)

    def _container_for(self, path: str):
        mp4 = path.endswith((".mp4", ".mov", ".m4v"))
        if not self.fragmented or not mp4:
            # a later segment's timestamps go on from the previous one's: no edit list, the file starts at 0
            return av.open(path, "w", options={"use_editlist": "0"} if mp4 else {})
        # Fragmented MP4, each fragment (~1 s) written out as it completes: a process that
        # is killed outright (power loss, OOM killer, kill -9) still leaves a playable file.
        options = {"movflags": "frag_keyframe+empty_moov+default_base_moof", "frag_duration": "1000000",
                   "flush_packets": "1", "use_editlist": "0"}
        if self.lease is None:
            return av.open(path, "w", options=options)
        if self._file is not None:  # a second try (the encoder's fallback) starts the file over
            self._file.close()
        self._file = LeasedFile(path, self.lease)
        return av.open(self._file, "w", format="mov" if path.endswith(".mov") else "mp4", options=options)

    def _add_stream(self, container, codec: str, frame: Frame, width: int, height: int):
        """An opened encoder stream: opening here (not at the first packet) is what lets a
        missing hardware encoder fall back before anything is written."""
        assert self._time_base is not None
        rate = frame.rate or Fraction(25)
        if self.config.fps is not None:
            rate = min(rate, Fraction(self.config.fps).limit_denominator(1001))
        return open_encoder(container, codec, self.config, rate, self._time_base, width, height, self.encoder_threads)

    def resized(self, image: np.ndarray) -> bool:
        """Whether `image` cannot go into the open file (another size)."""
        return self._container is not None and self._size != padded_size(image)

    def cut(self, path: str) -> None:
        """Finish the current file; the next frame starts `path`."""
        self.close()
        self.file = path

    def write(self, frame: Frame, image: np.ndarray | None = None) -> None:
        """Encode `image` (default: the frame's picture) at the frame's time."""
        if image is None:
            image = frame.image
        h, w = image.shape[:2]
        ew, eh = padded_size(image)
        if (ew, eh) != (w, h):
            image = cv2.copyMakeBorder(image, 0, eh - h, 0, ew - w, cv2.BORDER_REPLICATE)
        if self.resized(image):
            log.info("%s: frame size changed %s -> %dx%d, starting a new segment", self.path, self._size, ew, eh)
            self.segment += 1
            self.cut(segment_path(self.path, self.segment))
        if self._container is None:
            self._open(frame, ew, eh)
        yuv = cv2.cvtColor(image, cv2.COLOR_BGR2YUV_I420)
        vf = av.VideoFrame.from_numpy_buffer(yuv, format="yuv420p")  # no copy: yuv is ours alone
        vf.pts = self._pts(frame)
        vf.time_base = self._time_base
        self._mux(self._stream.encode(vf))
        if self._file is not None and self._file.refused is not None:
            raise self._file.refused

    def _mux(self, packets) -> None:
        assert self._container is not None and self._stream is not None
        for packet in packets:
            if self.on_packet is not None:
                self.on_packet(packet, self._stream)
            self._container.mux(packet)

    def _pts(self, frame: Frame) -> int:
        assert self._time_base is not None
        if frame.pts is not None and frame.time_base == self._time_base:
            if self._first_pts is None:
                self._first_pts = frame.pts
            pts = frame.pts - self._first_pts
        else:
            rate = frame.rate or Fraction(25)
            pts = round(frame.seq / rate / self._time_base)
        if pts <= self._last_pts:  # timestamps must increase strictly (camera resets, wraps)
            pts = self._last_pts + 1
        self._last_pts = pts
        return pts

    def close(self) -> None:
        """Flush the encoder and write the container's index: the file is playable after this."""
        if self._container is None:
            return
        try:
            assert self._stream is not None
            self._mux(self._stream.encode(None))
        finally:
            self._container.close()
            self._container, self._stream = None, None
            if self._file is not None:
                self._file.close()
                refused, self._file = self._file.refused, None
                if refused is not None:
                    raise refused

