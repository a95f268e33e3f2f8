"""The events' evidence files (`GET /evidence/<path>`, the path as an event names it,
relative to `outputs.dir`): only JPEG snapshots and MP4 clips, only from inside
`<outputs.dir>/events/`, whatever the URL or a symlink says.

A clip is served with byte ranges, so a browser's player can seek in it. A clip (or a
recording) still being written is a fragmented MP4 that grows fragment by fragment: it is
served up to its last whole fragment, what plays now (its torn tail would end playback in
an error), and while it holds no whole fragment yet the answer is 503 "still recording".
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pipeline.recording.mp4 import playable_end

if TYPE_CHECKING:
    from pipeline.web.request import Request

TYPES = {".jpg": "image/jpeg", ".mp4": "video/mp4"}
MP4_TYPES = ("video/mp4", "video/quicktime")  # ISO boxes: served up to the last whole fragment
STILL_RECORDING = b"still recording: nothing of it plays yet, try again in a second\n"
CHUNK = 1 << 16


def evidence_file(evidence_dir: str, path: str) -> str | None:
    """The real file `path` names under `<evidence_dir>/events/`, or None when it names
    anything else: another folder (`..`, an absolute path, a symlink that leads out),
    another kind of file, or nothing."""
    parts = path.split("/")
    if (os.path.splitext(path)[1] not in TYPES or parts[0] != "events"
            or any(p in ("", ".", "..") for p in parts) or "\0" in path):
        return None
    root = os.path.realpath(os.path.join(evidence_dir, "events"))
    real = os.path.realpath(os.path.join(evidence_dir, *parts))
    if not real.startswith(root + os.sep) or os.path.splitext(real)[1] not in TYPES or not os.path.isfile(real):
        return None
    return real


@dataclass(frozen=True)
class Span:
    start: int
    end: int  # inclusive, as Content-Range counts

    @property
    def length(self) -> int:
        return self.end - self.start + 1


def byte_range(header: str | None, size: int) -> Span | None:
    """The one range a `Range: bytes=...` header asks for; None for the whole file (no
    header, several ranges, or a header that is no valid byte range, which RFC 9110 lets
    a server ignore); ValueError when the range lies beyond the file (416)."""
    m = re.fullmatch(r"\s*bytes\s*=\s*(\d*)-(\d*)\s*", header or "")
    if not m or not (m.group(1) or m.group(2)):
        return None
    if not m.group(1):  # the last N bytes
        n = int(m.group(2))
        if not n or not size:
            raise ValueError("an empty range")
        return Span(max(0, size - n), size - 1)
    start = int(m.group(1))
    if m.group(2) and int(m.group(2)) < start:
        return None  # its last byte before its first: not a valid range
    end = min(int(m.group(2)), size - 1) if m.group(2) else size - 1
    if start > end:
        raise ValueError("the range begins beyond the file")
    return Span(start, end)


def serve(handler: Request, path: str) -> None:
    """An event's snapshot or clip (one byte range of it when asked, for a player that seeks)."""
    evidence_dir = handler.app.evidence_dir
    real = evidence_file(evidence_dir, path) if evidence_dir else None
    send_file(handler, real, TYPES.get(os.path.splitext(real or "")[1], ""), b"no such evidence file\n")


def send_file(handler: Request, real: str | None, content_type: str, missing: bytes) -> None:
    """A file found by the rules of its route (None: 404), in one byte range when asked;
    an MP4 up to what plays now."""
    try:
        f = open(real, "rb") if real else None  # noqa: SIM115  (closed below)
    except OSError:
        f = None
    if real is None or f is None:
        handler.send(404, missing)
        return
    with f:
        size = playable_end(real) if content_type in MP4_TYPES else os.fstat(f.fileno()).st_size
        if not size and content_type in MP4_TYPES:
            handler.send(503, STILL_RECORDING, headers={"Retry-After": "1"})
            return
        try:
            span = byte_range(handler.headers.get("Range"), size)
        except ValueError:
            handler.send(416, b"range not satisfiable\n", headers={"Content-Range": f"bytes */{size}"})
            return
        start, length = (span.start, span.length) if span else (0, size)
        ranged = {"Content-Range": f"bytes {start}-{start + length - 1}/{size}"} if span else {}
        handler.send_head(206 if span else 200, content_type, length, {"Accept-Ranges": "bytes", **ranged})
        f.seek(start)
        while length > 0 and (chunk := f.read(min(CHUNK, length))):
            handler.wfile.write(chunk)
            length -= len(chunk)
