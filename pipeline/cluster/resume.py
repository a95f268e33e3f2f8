"""Where a file camera picks up after its host died, read from what its outputs hold.

Both outputs are written per frame in the same order: the video (fragmented MP4, so a
killed process leaves it playable up to its last complete fragment) and the JSON lines
(one file per camera, flushed on the same cadence). The last frame that is in *both* is
the resume point: whichever output holds more is cut back to it (JSON lines truncated,
the video's last segment re-muxed without the extra packets), so re-processing those
frames writes each exactly once; the video continues in the camera's next segment
(`<camera>.partN.mp4`). A live camera simply resumes from now, in its next segment.
"""
from __future__ import annotations

import json
import os

import av

from pipeline.config import OutputsConfig
from pipeline.frames import Resume
from pipeline.sinks.video import segment_path


def video_frames(path: str) -> int:
    """Frames a (possibly cut-off) video file holds: its packets, read without decoding."""
    try:
        with av.open(path) as c:
            return sum(1 for p in c.demux(video=0) if p.size)
    except Exception:  # empty, or nothing playable was written
        return 0


def video_segments(outputs: OutputsConfig, camera: str) -> list[str]:
    """The camera's existing video segments, in order."""
    found = []
    base = outputs.video_path(camera)
    while os.path.exists(segment_path(base, len(found))):
        found.append(segment_path(base, len(found)))
    return found


def jsonl_lines(path: str) -> list[tuple[int, int]]:
    """(byte offset after the line, seq) of every complete JSON line of `path`; a line cut
    off by a kill is not complete."""
    out = []
    offset = 0
    try:
        with open(path, "rb") as f:
            for raw in f:
                if not raw.endswith(b"\n"):
                    break
                try:
                    seq = int(json.loads(raw)["seq"])
                except (ValueError, KeyError, TypeError):
                    break
                offset += len(raw)
                out.append((offset, seq))
    except FileNotFoundError:
        pass
    return out


def trim_video(path: str, frames: int) -> None:
    """Keep the first `frames` frames of a video file (packets copied, nothing re-encoded)."""
    tmp = path + ".trim.mp4"
    with av.open(path) as src, av.open(tmp, "w", options={"movflags": "frag_keyframe+empty_moov+default_base_moof"}) \
            as dst:
        stream = dst.add_stream_from_template(src.streams.video[0])
        kept = 0
        for packet in src.demux(video=0):
            if not packet.size:
                continue
            if kept >= frames:
                break
            packet.stream = stream
            dst.mux(packet)
            kept += 1
    os.replace(tmp, path)


def resume_point(outputs: OutputsConfig, camera: str, live: bool) -> tuple[Resume, int]:
    """Where `camera` continues, with its outputs made consistent with that, and how many
    of its frames they hold. File cameras need their own JSON lines file (`{camera}` in
    `outputs.jsonl.filename`)."""
    segments = video_segments(outputs, camera) if outputs.video.enabled else []
    if live:
        return Resume(start_at=0, segment=len(segments), append=True), len(jsonl_lines(outputs.jsonl_path(camera)))
    lines = jsonl_lines(outputs.jsonl_path(camera))
    counts = [video_frames(p) for p in segments]
    keep = min(len(lines), sum(counts)) if outputs.video.enabled else len(lines)
    with open(outputs.jsonl_path(camera), "ab") as f:  # created if absent, cut back to `keep` lines
        f.truncate(lines[keep - 1][0] if keep else 0)
    extra = sum(counts) - keep
    for path, count in reversed(list(zip(segments, counts))):  # the video got further than the JSON lines
        if extra <= 0:
            break
        cut = min(extra, count)
        if cut == count:
            os.remove(path)  # only trailing segments go whole: the numbering stays gap-free
        else:
            trim_video(path, count - cut)
        extra -= cut
    segments = video_segments(outputs, camera) if outputs.video.enabled else []
    return Resume(start_at=lines[keep - 1][1] + 1 if keep else 0, segment=len(segments), append=True), keep
