"""What a video file holds after its writing stopped short (a full disk, a kill), and a
fragmented MP4 cut back to its last whole fragment.

A fragmented MP4 is a run of top-level boxes: `ftyp`, an empty `moov`, then one `moof`
(the fragment's index) and one `mdat` (its frames) per fragment. A write that stopped
mid-fragment leaves a torn last box, which players open with an error at the end;
truncated after the last whole `mdat`, the file plays to its last whole fragment.
"""
from __future__ import annotations

import os

import av


def video_frames(path: str) -> int:
    """Frames a (possibly cut-off) video file holds: its packets, read without decoding."""
    try:
        with av.open(path) as c:
            return sum(1 for p in c.demux(video=0) if p.size)
    except Exception:  # empty, or nothing playable was written
        return 0


def last_picture_s(path: str) -> float | None:
    """The time of the latest picture a (possibly cut-off) video file holds, in its own
    clock (None: it holds none), read without decoding."""
    try:
        with av.open(path) as c:
            shown = [p.pts * p.time_base for p in c.demux(video=0) if p.size and p.pts is not None]
    except Exception:  # empty, or nothing playable was written
        return None
    return float(max(shown)) if shown else None


def whole_fragments_end(path: str) -> int:
    """The byte offset after the last whole fragment (or the header, with none)."""
    return _whole_boxes(path)[0]


def playable_end(path: str) -> int:
    """How much of an MP4 a player can open now: up to its last whole fragment (all of a
    finished file); 0 while no frame is whole (a file still being written: its header only,
    or a plain MP4's open `mdat`)."""
    end, frames = _whole_boxes(path)
    return end if frames else 0


def _whole_boxes(path: str) -> tuple[int, bool]:
    """The offset after the last whole box that is not a fragment's index waiting for its
    frames, and whether a whole `mdat` (frames) lies before it."""
    good, frames = 0, False
    with open(path, "rb") as f:
        total = os.fstat(f.fileno()).st_size
        pos = 0
        while pos + 8 <= total:
            f.seek(pos)
            head = f.read(16)
            size, kind = int.from_bytes(head[:4], "big"), head[4:8]
            if size == 1 and len(head) == 16:
                size = int.from_bytes(head[8:16], "big")
            if size < 8 or pos + size > total:
                break  # torn (or not an MP4 box at all)
            pos += size
            if kind != b"moof":  # a fragment's index counts once its frames follow
                good = pos
                frames = frames or kind == b"mdat"
    return good, frames


def cut_to_whole_fragments(path: str) -> int:
    """Truncate a fragmented MP4 after its last whole fragment; the frames it then holds.
    A file left without a frame is removed (no empty outputs)."""
    try:
        end = whole_fragments_end(path)
        if end < os.path.getsize(path):
            os.truncate(path, end)
    except FileNotFoundError:
        return 0
    frames = video_frames(path)
    if frames == 0:
        os.remove(path)
    return frames


def mp4_options(fragmented: bool) -> dict[str, str]:
    # a later segment's timestamps go on from the previous one's: no edit list, the file starts at 0
    options = {"use_editlist": "0"}
    if fragmented:
        # Fragmented MP4, each fragment (~1 s) written out as it completes: a process that
        # is killed outright (power loss, OOM killer, kill -9) still leaves a playable file.
        options.update(movflags="frag_keyframe+empty_moov+default_base_moof", frag_duration="1000000",
                       flush_packets="1")
    return options
