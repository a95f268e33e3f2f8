"""One file of a recording: the camera's own packets, copied into a container (never
decoded or encoded).

MP4 and MOV files are fragmented, a fragment per keyframe written out as it completes:
a killed process or a full disk leaves a file that plays up to its last keyframe. Every
file starts at 0 (no edit list): its packets come rebased by the file's first decode time
(`segment_plan`). A container that cannot hold the camera's video codec refuses
the recording (`RecordingError`); audio it cannot hold is left out (the caller says so once).
"""
from __future__ import annotations

import io
import os

import av

from pipeline.errors import PipelineError, one_line
from pipeline.recording.adts import raw_frame

FRAGMENTED = {"movflags": "frag_keyframe+empty_moov+default_base_moof", "flush_packets": "1", "use_editlist": "0"}
FORMATS = {".mp4": "mp4", ".mov": "mov", ".mkv": "matroska"}


ROOM_FLOOR = 256 * 2**10  # bytes a recording leaves free beyond two of its largest fragments


class RecordingError(PipelineError):
    """The recording cannot go on (the message says why in one line)."""


def check_room(folder: str, fragment: int) -> None:
    """At a keyframe: a disk without room for two more of the recording's largest
    fragments (and `ROOM_FLOOR`) stops it there (`RecordingError`), so that its file ends
    with a whole fragment and no row names a picture the disk could not take."""
    while not os.path.isdir(folder) and os.path.dirname(folder) != folder:
        folder = os.path.dirname(folder) or "."  # not made yet: the disk it will be on
    st = os.statvfs(folder)
    free = st.f_bavail * st.f_frsize
    if free < 2 * fragment + ROOM_FLOOR:
        raise RecordingError(f"its disk is nearly full ({free / 2**20:.2f} MiB free in {folder}, its fragments take "
                             f"up to {fragment / 2**20:.2f} MiB): stopped at a keyframe, its files whole")


def options_for(ext: str) -> dict[str, str]:
    return FRAGMENTED if ext in (".mp4", ".mov") else {}


_REFUSALS: dict[tuple, str | None] = {}


def shape(stream) -> tuple:
    """What of a stream a container may refuse besides its codec: its picture size or
    sound, its parameter sets."""
    ctx = stream.codec_context
    sound = (ctx.sample_rate, ctx.channels) if stream.type == "audio" else (ctx.width, ctx.height)
    return (*sound, bytes(ctx.extradata or b""))


def refusal(ext: str, stream, codec: str) -> str | None:
    """Why a file of this extension cannot hold `stream` (of `codec`; None: it can), found
    once per kind of stream (its codec and `shape`: one camera's odd stream never answers
    for another's) on an empty file in memory: some refusals come only when the header is
    written (PCM audio in MP4)."""
    key = (ext, stream.type, codec, shape(stream))
    if key not in _REFUSALS:
        try:
            with av.open(io.BytesIO(), "w", format=FORMATS[ext], options=options_for(ext)) as probe:
                probe.add_stream_from_template(stream)
                probe.start_encoding()
            _REFUSALS[key] = None
        except Exception as e:
            _REFUSALS[key] = one_line(e)
    return _REFUSALS[key]


def elsewhere(stream, codec: str) -> str:
    """Where such a stream can be recorded instead (a hint for the message)."""
    holders = [ext for ext in FORMATS if refusal(ext, stream, codec) is None]
    return f"record to {' or '.join(holders)} to keep it" if holders else "no container recorded here holds it"


def check_holds(path: str, video, codec: str) -> str:
    """The file's extension, once it is known to hold the camera's video (else `RecordingError`)."""
    ext = os.path.splitext(path)[1].lower()
    why = refusal(ext, video, codec)
    if why is not None:
        raise RecordingError(f"the {ext} container cannot hold {codec} video ({why}); "
                             f"{elsewhere(video, codec)} (outputs.record.filename)")
    return ext


class SegmentFile:
    """A segment being written: its streams made from `video` (of `codec`) and `audio`
    (None: none)."""

    def __init__(self, path: str, video, codec: str, audio=None):
        self.path = path
        ext = check_holds(path, video, codec)
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        self.container = av.open(path, "w", format=FORMATS[ext], options=options_for(ext))
        try:
            self.video = self.container.add_stream_from_template(video)
            self.audio = self.container.add_stream_from_template(audio) if audio is not None else None
            self.aac = audio is not None and audio.codec_context.name == "aac"  # ADTS headers cut off (`adts`)
        except BaseException:
            self.container.close()
            raise

    def write(self, packet, stream, pts: int, dts: int, time_base, keyframe: bool) -> None:
        """Mux a copy of `packet` (its data shared, not copied) with these timestamps: the
        camera's thread may still be decoding the packet itself."""
        raw = raw_frame(bytes(memoryview(packet)[:10])) if stream is self.audio and self.aac else None
        copy = av.Packet(packet) if raw is None else av.Packet(raw_frame(bytes(packet)))
        copy.pts, copy.dts, copy.time_base = pts, dts, time_base
        copy.is_keyframe = keyframe
        copy.stream = stream
        self.container.mux(copy)

    def close(self) -> None:
        self.container.close()
