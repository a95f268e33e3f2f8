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

from pipeline.recording.mp4 import playable_end
from pipeline.web.request import Ask, Reply

TYPES = {".jpg": "image/jpeg", ".mp4": "video/mp4"}
MP4_TYPES = ("video/mp4", "video/quicktime")  # ISO boxes: served up to the last whole fragment
STILL_RECORDING = b"still recording: nothing of it plays yet, try again in a second\n"


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


def serve(ask: Ask) -> Reply:
    """An event's snapshot or clip (`ask.path`: as the event names it)."""
    evidence_dir = ask.app.evidence_dir
    real = evidence_file(evidence_dir, ask.path) if evidence_dir else None
    return file_reply(real, TYPES.get(os.path.splitext(real or "")[1], ""), b"no such evidence file\n")


def file_reply(real: str | None, content_type: str, missing: bytes) -> Reply:
    """A file found by the rules of its route (None: 404), sent by the server in byte
    ranges as asked; an MP4 up to what plays now."""
    if real is None:
        return Reply(404, missing)
    try:
        size = playable_end(real) if content_type in MP4_TYPES else os.path.getsize(real)
    except OSError:
        return Reply(404, missing)  # removed meanwhile (retention)
    if not size and content_type in MP4_TYPES:
        return Reply(503, STILL_RECORDING, headers={"Retry-After": "1"})
    return Reply(200, content_type=content_type, file=real, size=size)
