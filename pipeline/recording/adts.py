"""AAC in ADTS (an MPEG-TS camera's sound, a raw `.aac`) recorded into any container:
MP4, MOV and Matroska hold raw AAC frames described once by an AudioSpecificConfig, and
FFmpeg's fragmented MP4 refuses ADTS ("Malformed AAC bitstream", failing the recording,
its video too). The config comes from the stream's parameters (what FFmpeg read from the
ADTS headers); each packet's ADTS header is cut off as it is written.
"""
from __future__ import annotations

RATES = (96000, 88200, 64000, 48000, 44100, 32000, 24000, 22050, 16000, 12000, 11025, 8000, 7350)
OBJECTS = {"Main": 1, "LC": 2, "SSR": 3, "LTP": 4}
CHANNELS = {1: 1, 2: 2, 3: 3, 4: 4, 5: 5, 6: 6, 8: 7}  # channels -> channel configuration


def audio_config(stream) -> bytes:
    """The AudioSpecificConfig of an AAC stream that came without one (ADTS), from its
    parameters; b"": not such a stream, or one this cannot describe."""
    ctx = stream.codec_context
    if ctx.name != "aac" or ctx.extradata:
        return b""
    kind, rate, channels = ctx.profile or "LC", ctx.sample_rate, ctx.channels
    if kind.startswith("HE-AAC"):  # SBR (and PS) signalled implicitly: the AAC core's rate and channels
        kind, rate, channels = "LC", rate // 2, 1 if kind == "HE-AACv2" else channels
    if kind not in OBJECTS or rate not in RATES or channels not in CHANNELS:
        return b""
    return (OBJECTS[kind] << 11 | RATES.index(rate) << 7 | CHANNELS[channels] << 3).to_bytes(2, "big")


def raw_frame(data: bytes) -> bytes | None:
    """An AAC packet's raw frame where it has an ADTS header (None: it has none; a raw
    frame never starts with the ADTS sync word: its first element would be the end)."""
    if len(data) > 9 and data[0] == 0xFF and data[1] & 0xF6 == 0xF0:
        return data[7 if data[1] & 1 else 9:]
    return None
