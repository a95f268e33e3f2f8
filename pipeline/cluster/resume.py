"""Where a file camera picks up after its host died, read from what its outputs hold.

Both outputs are written per frame in the same order: the video (fragmented MP4, so a
killed process leaves it playable up to its last complete fragment) and the JSON lines
(one file per camera, flushed on the same cadence). The last frame that is in *both* is
the resume point: whichever output holds more is cut back to it (JSON lines truncated,
the video's last segment re-muxed without the extra packets), so re-processing those
frames writes each exactly once; the video continues in the camera's next segment
(`<camera>.partN.mp4`). A live camera resumes from now, in its next segment, its `seq`
and time continuing where its outputs end; so does an id that returns with a new source.

Time-named segments (`{start}`, see `recording.segments`) are read in name order, which is
their write order: a segment's video and JSON lines share a name, and only the newest
pair can disagree (the older ones were closed together), so only it is cut back (both
removed when nothing of it is in both). The camera continues in a new segment named
after it; frames already written are counted across every segment still on disk.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass

import av

from pipeline.config import OutputsConfig
from pipeline.frames import Resume
from pipeline.recording.mp4 import video_frames
from pipeline.recording.segments import START, segment_files, segment_path


def video_segments(outputs: OutputsConfig, camera: str) -> list[str]:
    """The camera's existing video segments, in order."""
    found = []
    base = outputs.video_path(camera)
    while os.path.exists(segment_path(base, len(found))):
        found.append(segment_path(base, len(found)))
    return found


@dataclass(frozen=True)
class Line:
    end: int                 # byte offset after the line
    seq: int
    time: float | None


def jsonl_lines(path: str) -> list[Line]:
    """Every complete JSON line of `path`; a line cut off by a kill is not complete."""
    out = []
    offset = 0
    try:
        with open(path, "rb") as f:
            for raw in f:
                if not raw.endswith(b"\n"):
                    break
                try:
                    record = json.loads(raw)
                    line = Line(offset + len(raw), int(record["seq"]), record.get("time"))
                except (ValueError, KeyError, TypeError):
                    break
                offset = line.end
                out.append(line)
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


def timed_segments(outputs: OutputsConfig, camera: str) -> list[tuple[str | None, str | None]]:
    """(video, JSON lines) of each of the camera's time-named segments, oldest first."""
    found: dict[str, list[str | None]] = {}
    for i, (enabled, pattern) in enumerate(((outputs.video.enabled, outputs.video_path(camera, START)),
                                            (True, outputs.jsonl_path(camera, START)))):
        for stamp, path in segment_files(pattern) if enabled else []:
            found.setdefault(stamp, [None, None])[i] = path
    return [(video, jsonl) for _, (video, jsonl) in sorted(found.items())]


def count_lines(path: str) -> int:
    with open(path, "rb") as f:
        return sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 20), b""))


def cut_back_timed(outputs: OutputsConfig, segments: list[tuple[str | None, str | None]]) -> tuple[list[Line], int]:
    """Make the newest segment's video and JSON lines agree (cut back to the shorter);
    the last lines kept (of the newest segment that has any), and how many lines all hold."""
    video, jsonl = segments[-1]
    lines = jsonl_lines(jsonl) if jsonl else []
    keep = min(len(lines), video_frames(video) if video else 0) if outputs.video.enabled else len(lines)
    if keep == 0:
        for path in (video, jsonl):
            if path:
                os.remove(path)  # nothing of it is in both outputs: the segment goes whole
        segments = segments[:-1]
    else:
        with open(jsonl, "ab") as f:  # type: ignore[arg-type]
            f.truncate(lines[keep - 1].end)
        if video and video_frames(video) > keep:
            trim_video(video, keep)
    tail = next((ls[-10:] for _, j in reversed(segments) if j and (ls := jsonl_lines(j))), [])
    return tail, sum(count_lines(j) for _, j in segments if j)


def cut_back(outputs: OutputsConfig, camera: str) -> list[Line]:
    """Make the camera's outputs agree: whichever of the JSON lines and the video holds
    more frames is cut back to the other; the lines kept."""
    segments = video_segments(outputs, camera) if outputs.video.enabled else []
    lines = jsonl_lines(outputs.jsonl_path(camera))
    counts = [video_frames(p) for p in segments]
    keep = min(len(lines), sum(counts)) if outputs.video.enabled else len(lines)
    with open(outputs.jsonl_path(camera), "ab") as f:  # created if absent, cut back to `keep` lines
        f.truncate(lines[keep - 1].end if keep else 0)
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
    return lines[:keep]


def resume_point(outputs: OutputsConfig, camera: str, same_file: bool, epoch: int = 0) -> tuple[Resume, int]:
    """Where `camera` continues, with its outputs made consistent with that, and how many
    of its frames they hold. The same file (a file camera that moved) skips the frames
    done; anything else (a live camera, an id that returns with a new source) continues
    their numbering and timeline. Needs a JSON lines file per camera (`{camera}`)."""
    timed = timed_segments(outputs, camera)
    if timed:
        lines, held = cut_back_timed(outputs, timed)
        segment = len(timed)  # > 0: the camera goes on in fragmented MP4, as a moved camera does
    else:
        lines = cut_back(outputs, camera)
        held = len(lines)
        segment = len(video_segments(outputs, camera)) if outputs.video.enabled else 0
    if not lines:
        return Resume(segment=segment, append=True, epoch=epoch), 0
    last = lines[-1]
    if same_file:
        return Resume(start_at=last.seq + 1, segment=segment, append=True, epoch=epoch), held
    times = [ln.time for ln in lines[-10:] if ln.time is not None]
    step = (times[-1] - times[0]) / (len(times) - 1) if len(times) > 1 else 0.04
    time_s = (last.time or 0.0) + max(step, 1e-3)
    return Resume(seq=last.seq + 1, time_s=time_s, segment=segment, append=True, epoch=epoch), held
