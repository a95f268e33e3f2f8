"""A live stream's viewers and the muxer that runs for them, only while there are any:
started from the newest GOP (each viewer gets the init segment, then the GOP's
fragments), its fragments handed to each viewer's queue as they come, and the newest
GOP's fragments kept for a viewer who comes while it runs. The stream's lock guards it.
"""
from __future__ import annotations

import av

from pipeline.errors import one_line
from pipeline.live.fmp4 import Fmp4Muxer, Fragment
from pipeline.live.link import LiveLink
from pipeline.live.subscriber import Subscriber

Packet = tuple[bytes, int, int, bool]  # data, pts, dts (live ticks), keyframe
MAX_GOP_PACKETS = 900  # a GOP longer than this gives new viewers no start until the next keyframe
MAX_GOP_BYTES = 32 << 20


class Viewers:
    def __init__(self) -> None:
        self.subs: list[Subscriber] = []
        self.muxer: Fmp4Muxer | None = None
        self.muxed: LiveLink | None = None  # whose parameters the muxer's init holds
        self.fragments: list[Fragment] = []  # the muxer's newest GOP (bounded as the stream's packets are)
        self._kept_bytes = 0
        self.dropped = 0  # packets the muxer refused

    def send(self, message: str) -> None:
        for sub in self.subs:
            sub.control(message)

    def start(self, link: LiveLink, gop: list[Packet], init: str) -> str | None:
        """A muxer for `gop` on (its first packet a keyframe of `link`); why it cannot be."""
        self.close()
        try:
            self.muxer, self.muxed = Fmp4Muxer(link.template), link
        except (av.error.FFmpegError, ValueError) as e:
            return f"its video cannot be put in MP4: {one_line(e)}"
        for sub in self.subs:
            sub.control(init)
            sub.init(self.muxer.init)
        for item in gop:
            self.mux(item)
        return None

    def join(self, sub: Subscriber, init: str) -> None:
        """A viewer who comes while the muxer runs: its init, then the newest GOP's fragments."""
        assert self.muxer is not None
        self.subs.append(sub)
        sub.control(init)
        sub.init(self.muxer.init)
        for f in self.fragments:
            sub.fragment(f.data, f.keyframe)

    def mux(self, item: Packet) -> None:
        assert self.muxer is not None
        try:
            fragments = self.muxer.mux(*item)
        except (av.error.FFmpegError, ValueError):
            self.dropped += 1
            return
        for f in fragments:
            self._keep(f)
            for sub in self.subs:
                sub.fragment(f.data, f.keyframe)

    def _keep(self, f: Fragment) -> None:
        """The newest GOP's fragments, for a viewer who joins; past the bound none until the
        next keyframe (a camera whose keyframes are lost or minutes apart)."""
        if f.keyframe:
            self.fragments, self._kept_bytes = [], 0
        elif not self.fragments or len(self.fragments) >= MAX_GOP_PACKETS or self._kept_bytes > MAX_GOP_BYTES:
            self.fragments, self._kept_bytes = [], 0
            return
        self.fragments.append(f)
        self._kept_bytes += len(f.data)

    def leave(self, sub: Subscriber) -> None:
        if sub in self.subs:
            self.subs.remove(sub)
        if not self.subs:
            self.close()

    def close(self) -> None:
        if self.muxer is not None:
            self.muxer.close()
        self.muxer, self.muxed, self.fragments = None, None, []
