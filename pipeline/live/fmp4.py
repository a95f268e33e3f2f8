"""A camera's packets as fragmented MP4 for Media Source Extensions, copied, never
re-encoded: FFmpeg's mp4 muxer writing into memory, its bytes split into the init
segment (ftyp+moov) and one fragment (moof+mdat) per packet.

The muxer writes a packet's fragment when the next packet arrives (`frag_every_frame`:
it needs the next decode time for the duration), so a fragment leaves one frame
interval after its packet. `frag_discont` without an edit list keeps the timestamps
given (FFmpeg otherwise moves a muxer's first decode time to 0): a muxer started for a
new viewer mid-stream writes the stream's own timeline, so every viewer and every
frame record share one media time, and a stream that restarts keeps rising.
"""
from __future__ import annotations

import io
from dataclasses import dataclass
from fractions import Fraction

import av

TICKS = 90000  # the live timeline's clock: 90 kHz, as RTP video
TIME_BASE = Fraction(1, TICKS)
OPTIONS = {"movflags": "empty_moov+default_base_moof+frag_every_frame+frag_discont", "use_editlist": "0",
           "avoid_negative_ts": "disabled", "flush_packets": "1"}
H264_SPS = 7


def _sps_profile(extradata: bytes) -> bytes | None:
    """The profile, constraint and level bytes of H.264 parameter sets: avcC (ISO
    14496-15: they follow its version byte) or Annex B (they follow the SPS's NAL header)."""
    if len(extradata) >= 4 and extradata[0] == 1:
        return extradata[1:4]
    for unit in extradata.replace(b"\x00\x00\x00\x01", b"\x00\x00\x01").split(b"\x00\x00\x01"):
        if len(unit) >= 4 and unit[0] & 0x1F == H264_SPS:
            return unit[1:4]
    return None


def codec_string(extradata: bytes, keyframe: bytes = b"") -> str | None:
    """The RFC 6381 codec string (`avc1.64001F`) of an H.264 stream, from its parameter
    sets (the extradata, else an Annex B keyframe's); None where neither holds an SPS."""
    found = _sps_profile(extradata) or _sps_profile(keyframe)
    return f"avc1.{found.hex().upper()}" if found else None


class MemorySink(io.RawIOBase):
    """Where the muxer writes: the bytes wait here until taken."""

    def __init__(self) -> None:
        super().__init__()
        self.data = bytearray()

    def writable(self) -> bool:
        return True

    def write(self, b) -> int:  # type: ignore[override]
        self.data += b
        return len(b)


@dataclass
class Fragment:
    """One moof+mdat: the packet it holds, and whether that packet is a keyframe."""

    data: bytes
    keyframe: bool


def boxes(buffer: bytearray) -> list[tuple[bytes, bytes]]:
    """The whole top-level boxes at the start of `buffer` (type, bytes), taken out of it."""
    out = []
    while len(buffer) >= 8:
        size, kind = int.from_bytes(buffer[:4], "big"), bytes(buffer[4:8])
        if size == 1 and len(buffer) >= 16:
            size = int.from_bytes(buffer[8:16], "big")
        if size < 8 or len(buffer) < size:
            break
        out.append((kind, bytes(buffer[:size])))
        del buffer[:size]
    return out


class Fmp4Muxer:
    """One muxer session: `init` (ftyp+moov) once made, then `mux` a packet on the live
    timeline (90 kHz ticks) and get the fragments that it completed."""

    def __init__(self, template) -> None:
        self.sink = MemorySink()
        self.out = av.open(self.sink, "w", format="mp4", options=OPTIONS)
        try:
            self.stream = self.out.add_stream_from_template(template)
            self.stream.time_base = TIME_BASE
            self.out.start_encoding()
        except BaseException:
            self.out.close()
            raise
        self.init = b"".join(data for _, data in boxes(self.sink.data))
        self._moof = b""
        self._pending: list[bool] = []  # the keyframe flags of the packets whose fragments are not out yet

    def mux(self, data: bytes, pts: int, dts: int, keyframe: bool) -> list[Fragment]:
        packet = av.Packet(data)
        packet.pts, packet.dts, packet.time_base = pts, dts, TIME_BASE
        packet.is_keyframe = keyframe
        packet.stream = self.stream
        self._pending.append(keyframe)
        self.out.mux(packet)
        return self._fragments()

    def _fragments(self) -> list[Fragment]:
        out = []
        for kind, data in boxes(self.sink.data):
            if kind == b"moof":
                self._moof = data
            elif kind == b"mdat" and self._moof:
                key = self._pending.pop(0) if self._pending else False
                out.append(Fragment(self._moof + data, key))
                self._moof = b""
        return out

    def close(self) -> None:
        """Ends the session; what it still holds is not sent (its viewers are gone)."""
        try:
            self.out.close()
        except (av.error.FFmpegError, ValueError):
            pass
