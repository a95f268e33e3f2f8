"""Annotated video per camera with PyAV (H.264 in MP4 via libx264 by default).

Output timing follows the source: each frame keeps its presentation time (relative to
the camera's first frame) in the source's time base, so frame count and timing match the
source; frames without a pts get one from their sequence number and the frame rate.
A writer's files follow each other (`cut`: time segments, see `recording.segments`): each
file has its own encoder, so its first frame is an IDR keyframe (a new encoder always
starts with one) and the file plays on its own; the encoder flushes into the file it
closes, so no frame is lost or written twice at the cut. Timestamps continue across
files (the packets `on_packet` sees run on, as the JSON lines' `time` does); each MP4
starts at 0 in its container (no edit list), so every player shows it from its start.
A resolution change (a camera that comes back at another size) without time segments
continues in `<name>.partN.mp4`: an H.264 stream in MP4 cannot change size in place,
and players handle segments better than a rescaled picture. A file is never written
over: where its name is taken (an earlier run's video), the writer takes the next free
`.partN` name, said in one log line (a video cannot be appended to).
Conversion uses OpenCV's BGR->I420 (about 2x cheaper than PyAV's own conversion).
A hardware encoder (`codec: h264_nvenc`) that cannot open falls back to libx264 with its
own preset and crf: `options` belong to the configured encoder only (NVENC's `preset:
p4` or `rc` would stop libx264), so they are dropped then, said once per camera.
A video that event clips are cut from (`on_packet`) asks its encoder for a keyframe at
most every `KEYFRAME_S` of video time (a clip starts on one), unless `options` set `g`.
`fragmented` writes fragmented MP4 flushed about every second (the default for live
cameras, which may run for months): even a killed process leaves a playable file.
An MP4 is written through `VideoFile`, which checks the writer's lease (a camera that
may move between machines) before any byte reaches the disk, and sees every write fail.
A plain MP4 writes its index at close, so it needs room then: with less than
`low_space` bytes free on its disk (checked once a second) a writer finishes its plain
file while the index still fits and goes on in fragmented MP4 (the next part or
segment), which needs no room at the end. A write that fails (the disk full after all)
leaves the fragmented file cut back to its last whole fragment (`abandon`), and the
frames it does not hold are counted.
"""
from __future__ import annotations

import functools
import logging
import os
import tempfile
import time
from dataclasses import dataclass
from fractions import Fraction
from typing import Callable

import av
import cv2
import numpy as np
from av.video.frame import PictureType

from pipeline.config import VideoOutputConfig
from pipeline.errors import one_line
from pipeline.frames import Frame
from pipeline.recording.mp4 import cut_to_whole_fragments, mp4_options, video_frames
from pipeline.recording.segments import segment_path

log = logging.getLogger("pipeline.sink")

SOFTWARE_CODEC = "libx264"
KEYFRAME_S = 2.0  # a keyframe about this often in a video event clips are cut from
LOW_SPACE = 256 * 2**20  # free bytes under which plain MP4 makes way for fragmented
INDEX_BYTES_PER_FRAME = 32  # a plain MP4's index at close, per frame (sizes, offsets, times)
MP4 = (".mp4", ".mov", ".m4v")


def free_bytes(folder: str) -> int:
    """Bytes an unprivileged writer may still put on the disk of `folder`."""
    st = os.statvfs(folder)
    return st.f_bavail * st.f_frsize


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


class VideoFile:
    """The file FFmpeg writes an MP4 into, so that no write goes unchecked: each one (a
    fragment, the header, the index) checks the writer's lease first, if it has one; a
    write the lease or the disk refuses (full) stops every later one, and the reason waits
    in `refused` for the writer to raise (FFmpeg does not report a write that fails while
    it closes a file)."""

    def __init__(self, path: str, lease: Callable[[], None] | None = None):
        self.lease = lease
        self.refused: BaseException | None = None
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)

    def write(self, data: bytes) -> int:
        if self.refused is None:
            try:
                if self.lease is not None:
                    self.lease()
                view = memoryview(data)
                while view:  # short writes continue where they stopped
                    view = view[os.write(self._fd, view):]
            except Exception as e:
                self.refused = e
        return len(data)

    def seek(self, offset: int, whence: int = 0) -> int:
        return os.lseek(self._fd, offset, whence)

    def tell(self) -> int:
        return os.lseek(self._fd, 0, os.SEEK_CUR)

    def close(self) -> None:
        os.close(self._fd)


OnPacket = Callable[[av.Packet, object], None]  # a packet and the stream that encoded it


def with_fallback(path: str, codec: str, config: VideoOutputConfig, container_for: Callable[[], object],
                  open_stream: Callable[..., object]) -> tuple:
    """A container and its opened encoder stream: the configured codec, else (e.g. h264_nvenc
    without a GPU) the software one without the configured encoder's options, said once.
    Opening the encoder here (not at the first packet) is what lets a missing hardware
    encoder fall back before anything is written."""
    container = container_for()
    try:
        try:
            return container, open_stream(container, codec), codec
        except Exception as e:
            if codec == SOFTWARE_CODEC:
                raise
            dropped = f" without its options ({', '.join(sorted(config.options))})" if config.options else ""
            log.warning("%s: encoder %s unavailable (%s); using %s%s", path, codec, one_line(e), SOFTWARE_CODEC,
                        dropped)
            container.close()  # type: ignore[attr-defined]
            container = container_for()
            return container, open_stream(container, SOFTWARE_CODEC), SOFTWARE_CODEC
    except Exception:
        container.close()  # type: ignore[attr-defined]
        raise


class OutputClock:
    """A writer's timestamps: the source's presentation times from its first frame on, in
    one time base for all of a writer's files (they continue across cuts), strictly rising
    (a camera that resets or wraps its clock); a frame without one is placed by its number."""

    def __init__(self) -> None:
        self.time_base: Fraction | None = None
        self._first_pts: int | None = None
        self._last_pts = -1

    def pts(self, frame: Frame) -> int:
        if self.time_base is None:
            self.time_base = frame.time_base if frame.time_base else Fraction(1, 90000)
        if frame.pts is not None and frame.time_base == self.time_base:
            if self._first_pts is None:
                self._first_pts = frame.pts
            pts = frame.pts - self._first_pts
        else:
            pts = round(frame.seq / (frame.rate or Fraction(25)) / self.time_base)
        if pts <= self._last_pts:
            pts = self._last_pts + 1
        self._last_pts = pts
        return pts


def yuv_frame(image: np.ndarray) -> av.VideoFrame:
    """A picture as the encoder takes it: padded to even sides, I420."""
    h, w = image.shape[:2]
    ew, eh = padded_size(image)
    if (ew, eh) != (w, h):
        image = cv2.copyMakeBorder(image, 0, eh - h, 0, ew - w, cv2.BORDER_REPLICATE)
    yuv = cv2.cvtColor(image, cv2.COLOR_BGR2YUV_I420)
    return av.VideoFrame.from_numpy_buffer(yuv, format="yuv420p")  # no copy: yuv is ours alone


@dataclass
class KeyframePacing:
    """Keyframes at most `every_s` of video time apart (None: the encoder's own GOP), asked
    of the encoder by marking a frame I: event clips are cut from a video's packets and
    start on its keyframes, and libx264's default GOP (250 frames) is 75 s for a camera
    analysed at 3.3 frames a second. A GOP the configured encoder's `options` set (`g`) is kept."""

    every_s: float | None = None
    last_s: float | None = None  # the last keyframe asked for
    prev_s: float | None = None  # the frame before

    def frame(self, vf: av.VideoFrame, codec: str, config: VideoOutputConfig) -> None:
        """Mark `vf` a keyframe where the next frame (as far after it as it is after the
        one before) would come more than `every_s` after the last keyframe."""
        if self.every_s is None or (codec == config.codec and "g" in config.options):
            return
        t = float(vf.pts * vf.time_base)
        step, self.prev_s = t - (t if self.prev_s is None else self.prev_s), t
        if self.last_s is None or t + step - self.last_s > self.every_s + 1e-6:
            vf.pict_type = PictureType.I
            self.last_s = t


class DiskRoom:
    """Whether a plain MP4 would still find room for its index at close on its disk: free
    space below `low_space` (plus the index of the frames so far) is too little. Looked
    at once every `check_s` at most while writing (a network disk answers slowly)."""

    def __init__(self, low_space: int = LOW_SPACE, check_s: float = 1.0):
        self.low_space = low_space
        self.check_s = check_s
        self._checked = 0.0

    def short(self, path: str, frames: int = 0, now: bool = False) -> bool:
        """Too little room for `path` with `frames` in its index (`now`: look whenever asked)."""
        t = time.monotonic()
        if not now and t < self._checked + self.check_s:
            return False
        self._checked = t
        return free_bytes(os.path.dirname(path) or ".") < self.low_space + frames * INDEX_BYTES_PER_FRAME


def free_file(path: str, base: str, segment: int) -> tuple[str, int]:
    """Where a writer's next file goes, and its part number: `path`, or where that is taken
    (an earlier run's file) the first free `.partN` after it, said once, so nothing there
    is overwritten. A writer's own parts (`base`'s, `segment` the current) go on counting."""
    if not os.path.lexists(path):
        return path, segment
    mine = path == segment_path(base, segment)
    base, n = (base, segment + 1) if mine else (path, 1)
    while os.path.lexists(segment_path(base, n)):
        n += 1
    log.warning("%s is already there: this video goes to %s instead (a video is never written over)", path,
                segment_path(base, n))
    return segment_path(base, n), n if mine else segment


class VideoWriter:
    def __init__(self, path: str, config: VideoOutputConfig, encoder_threads: int = 1, fragmented: bool = False,
                 segment: int = 0, lease: Callable[[], None] | None = None, on_packet: OnPacket | None = None,
                 on_file: Callable[[str], None] | None = None, low_space: int = LOW_SPACE):
        self.path = path
        self.fragmented = fragmented
        self.config = config
        self.codec = config.codec
        self.encoder_threads = encoder_threads
        self.segment = segment  # a camera resumed elsewhere continues in its next segment
        self.file = segment_path(path, segment)  # the file being written (or written next)
        self.lease = lease  # raises once another writer owns the camera's outputs
        self.on_packet = on_packet  # every encoded packet, before it is muxed (event clips)
        self.keyframes = KeyframePacing(KEYFRAME_S if on_packet is not None else None)  # clips start on them
        self.on_file = on_file  # each file once it exists (the run's record of what it wrote)
        self.room = DiskRoom(low_space)
        self._frames = 0  # frames given to the open file
        self._given = 0  # frames given to the writer
        self._kept = 0  # frames in its finished files
        self._file: VideoFile | None = None
        self._container: av.container.OutputContainer | None = None
        self._stream = None
        self._size: tuple[int, int] | None = None
        self.clock = OutputClock()

    @property
    def open_file(self) -> str | None:
        return self.file if self._container is not None else None

    def _open(self, frame: Frame, width: int, height: int) -> None:
        path, self.segment = free_file(self.file, self.path, self.segment)
        self.file = path
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        if not self.fragmented and path.endswith(MP4) and self.room.short(path, now=True):
            self._go_fragmented()
        assert self.clock.time_base is not None
        rate = frame.rate or Fraction(25)
        if self.config.fps is not None:  # the video keeps at most this many (`sinks.views`)
            rate = min(rate, Fraction(self.config.fps).limit_denominator(1001))
        open_stream = functools.partial(open_encoder, config=self.config, rate=rate,
                                        time_base=self.clock.time_base, width=width, height=height,
                                        threads=self.encoder_threads)
        self._container, self._stream, self.codec = with_fallback(path, self.codec, self.config,
                                                                  lambda: self._container_for(path), open_stream)
        self._size = (width, height)
        self._frames = 0
        if self.on_file is not None:
            self.on_file(path)

    def _container_for(self, path: str):
        if not path.endswith(MP4):
            return av.open(path, "w")
        if self._file is not None:  # a second try (the encoder's fallback) starts the file over
            self._file.close()
        self._file = VideoFile(path, self.lease)
        return av.open(self._file, "w", format="mov" if path.endswith(".mov") else "mp4",
                       options=mp4_options(self.fragmented))

    def resized(self, image: np.ndarray) -> bool:
        """Whether `image` cannot go into the open file (another size)."""
        return self._container is not None and self._size != padded_size(image)

    def needs_new_file(self, image: np.ndarray | None) -> bool:
        """Whether `image` must start the next file: another size, or a plain MP4 whose
        index would soon not fit on the disk (from then on the files are fragmented).
        None: no picture of this frame goes into the video."""
        return image is not None and (self.resized(image) or self._low_on_space())

    def _low_on_space(self) -> bool:
        if self.fragmented or self._container is None or not self.file.endswith(MP4) \
                or not self.room.short(self.file, self._frames):
            return False
        self._go_fragmented()
        return True

    def _go_fragmented(self) -> None:
        log.warning("%s: less than %d MiB free on its disk: the video goes on in fragmented MP4 (it needs no room "
                    "at the end)", self.file, self.room.low_space // 2**20)
        self.fragmented = True

    def cut(self, path: str) -> None:
        """Finish the current file; the next frame starts `path`."""
        self.close()
        self.file = path

    def write(self, frame: Frame, image: np.ndarray | None = None) -> None:
        """Encode `image` (default: the frame's picture) at the frame's time."""
        image = frame.image if image is None else image
        self._given += 1
        ew, eh = padded_size(image)
        if self.needs_new_file(image):
            if self.resized(image):
                log.info("%s: frame size changed %s -> %dx%d, starting a new segment", self.path, self._size, ew, eh)
            self.segment += 1
            self.cut(segment_path(self.path, self.segment))
        vf = yuv_frame(image)
        vf.pts = self.clock.pts(frame)
        vf.time_base = self.clock.time_base
        if self._container is None:
            self._open(frame, ew, eh)
        self._frames += 1
        self.keyframes.frame(vf, self.codec, self.config)
        self._mux(self._stream.encode(vf))
        if self._file is not None and self._file.refused is not None:
            raise self._file.refused

    def _mux(self, packets) -> None:
        assert self._container is not None and self._stream is not None
        for packet in packets:
            if self.on_packet is not None:
                self.on_packet(packet, self._stream)
            self._container.mux(packet)

    def close(self) -> None:
        """Flush the encoder and write the container's index: the file is playable after this."""
        if self._container is None:
            return
        try:
            assert self._stream is not None
            self._mux(self._stream.encode(None))
        finally:
            container, self._container, self._stream = self._container, None, None
            try:
                container.close()  # closes the file even when its trailer cannot be written
            finally:
                if self._file is not None:
                    self._file.close()
                    refused, self._file = self._file.refused, None
                    if refused is not None:
                        raise refused
        self._kept += self._frames  # all of them are in the file
        self._frames = 0

    def abandon(self) -> int:
        """After a write failed (a full disk): close without flushing the encoder, cut a
        fragmented file back to its last whole fragment; the frames given to the file
        that it does not hold (a plain MP4 without its index holds none)."""
        if self._container is not None:
            try:
                self._container.close()
            except Exception:
                pass  # the trailer cannot be written either: what is on disk is what counts
            self._container, self._stream = None, None
        if self._file is not None:
            self._file.close()
            self._file = None
        self._frames = 0
        self._kept += cut_to_whole_fragments(self.file) if self.fragmented else video_frames(self.file)
        return self._given - self._kept

