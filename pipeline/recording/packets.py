"""An encoded packet held in memory: what the recording's queue and an event clip's
pre-roll keep of a camera's packets (a copy: PyAV reuses a packet's buffer)."""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import av


@dataclass
class Held:
    """One encoded packet, copied."""

    data: bytes
    pts: int | None
    dts: int | None
    time_base: Fraction
    keyframe: bool

    @classmethod
    def of(cls, packet: av.Packet) -> "Held":
        return cls(bytes(packet), packet.pts, packet.dts, packet.time_base, bool(packet.is_keyframe))

    @property
    def seconds(self) -> float:
        return float((self.pts if self.pts is not None else self.dts or 0) * self.time_base)

    @property
    def decode_seconds(self) -> float:
        """Its decode time: one frame interval after the packet before it, in a stream that flows."""
        return float((self.dts if self.dts is not None else self.pts or 0) * self.time_base)

    def packet(self) -> av.Packet:
        p = av.Packet(self.data)
        p.pts, p.dts, p.time_base = self.pts, self.dts, self.time_base
        p.is_keyframe = self.keyframe
        return p
