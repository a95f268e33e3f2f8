"""What a video stream's keyframe says of it where its demuxer did not: the picture size
and the parameter sets (SPS, PPS, VPS) a container's header needs.

FFmpeg opens some live streams as 0x0 with no parameter sets (an RTSP stream whose SDP
carries none and whose first keyframe comes after the probe, a transport stream joined
mid-picture): it decodes them, learning both from the bitstream, but a container's
header written from what the demuxer said cannot hold them ("dimensions not set"). The
recording takes them from the connection's first keyframe instead: the parameter sets
from its Annex B NAL units, the size from decoding that one picture (once per
connection, only for such a stream).
"""
from __future__ import annotations

import io
import re

import av

# NAL unit types of the parameter sets, and where the type is in a NAL unit's first bytes
PARAMETER_SETS = {"h264": ({7, 8, 13}, lambda head: head[0] & 0x1F),
                  "hevc": ({32, 33, 34}, lambda head: (head[0] >> 1) & 0x3F)}
START = re.compile(b"\x00\x00\x01")


def parameter_sets(codec: str, data: bytes) -> bytes:
    """The parameter sets of an Annex B access unit, as Annex B extradata (b"": none, or a
    codec or framing this does not know)."""
    if codec not in PARAMETER_SETS or not data.startswith((b"\x00\x00\x01", b"\x00\x00\x00\x01")):
        return b""
    kinds, kind_of = PARAMETER_SETS[codec]
    starts = [m.end() for m in START.finditer(data)]
    units = [data[a:b - 3].rstrip(b"\x00") if b else data[a:] for a, b in zip(starts, starts[1:] + [0])]
    return b"".join(b"\x00\x00\x00\x01" + u for u in units if u and kind_of(u) in kinds)


def picture_size(codec: str, extradata: bytes, data: bytes) -> tuple[int, int] | None:
    """The size of the picture a keyframe decodes to (None: it does not decode alone)."""
    try:
        decoder = av.CodecContext.create(codec, "r")
        if extradata:
            decoder.extradata = extradata
        frames = [*decoder.decode(av.Packet(data)), *decoder.decode(None)]
    except Exception:  # not a picture that decodes on its own
        return None
    return (frames[0].width, frames[0].height) if frames else None


def described(video, codec: str, data: bytes) -> tuple[object, av.container.OutputContainer] | None:
    """A stream template like `video` with the size and parameter sets its keyframe `data`
    shows (and the container that holds it: keep it while the template is used); None
    where the keyframe does not show them."""
    extradata = bytes(video.codec_context.extradata or b"") or parameter_sets(codec, data)
    size = picture_size(codec, extradata, data)
    if size is None:
        return None
    return remade(video, size, extradata)


def remade(stream, size: tuple[int, int] | None = None, extradata: bytes = b"") -> tuple[object, av.container.OutputContainer]:
    """A stream template like `stream` with this picture size and these parameter sets
    (where given), and the container that holds it (keep it while the template is used)."""
    holder = av.open(io.BytesIO(), "w", format="null")
    template = holder.add_stream_from_template(stream)
    if size is not None:
        template.codec_context.width, template.codec_context.height = size
    if extradata:
        template.codec_context.extradata = extradata
    holder.start_encoding()  # the codec context's values into the stream's parameters
    return template, holder
