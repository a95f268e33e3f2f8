"""The cameras' recordings for the page: a camera's segments on disk (`GET
/api/recordings/<camera>`), a segment's file (`GET /recordings/<path>`, in byte ranges for
a player that seeks) and the boxes the analysis saw in it (`GET /api/boxes?recording=
<path>&from=S&to=S`): the JSON lines rows that name the segment, by their time in it.

A file is served by the evidence's rules: with the token, only a recording (a name one of
the recordings' templates gives, `{camera}` an id and `{start}` a stamp), only from
inside `outputs.dir`, whatever the URL or a symlink says. Paths are as the JSON lines
name them, relative to `outputs.dir`.

A segment's rows are read from the camera's JSON lines files that can hold them: those
whose stretch (from their stamp to the next file's) meets the one from the segment's
predecessor's start to its successor's (a JSON lines file cut at a boundary holds, up to
the next keyframe, rows of the previous recording; an hourly one, or a file never cut,
holds the rows of many segments).
"""
from __future__ import annotations

import functools
import json
import os
import re
from typing import Callable, Iterable, Iterator

from pipeline.config.outputs import RecordConfig, stamped
from pipeline.config.sources import CAMERA_ID
from pipeline.redact import redact_data
from pipeline.recording.segments import STAMP_RE, segment_files
from pipeline.web.evidence import file_reply
from pipeline.web.request import Ask, Reply, as_json

TYPES = {".mp4": "video/mp4", ".mov": "video/quicktime", ".mkv": "video/x-matroska"}


@functools.lru_cache(maxsize=64)
def name_pattern(template: str) -> re.Pattern:
    """The names a recording template gives, with the camera and the stamp as groups."""
    parts = re.split(r"(\{camera\}|\{start\})", stamped(template))
    groups = {"{camera}": f"(?P<camera>{CAMERA_ID.pattern})", "{start}": f"(?P<start>{STAMP_RE})"}
    seen: set[str] = set()
    out = []
    for part in parts:
        if part in groups:
            out.append(groups[part] if part not in seen else f"(?P={part[1:-1]})")
            seen.add(part)
        else:
            out.append(re.escape(part))
    return re.compile("".join(out))


class RecordingFiles:
    def __init__(self, root: str, templates: Callable[[], Iterable[str]], jsonl: str,
                 export_max_s: float = RecordConfig.export_max_s):
        """`templates`: the recordings' file name templates now (asked at each request: a
        camera added while running may name its own), `jsonl` the JSON lines' (both
        relative to `root`, `outputs.dir`); `export_max_s`: the longest range one export covers."""
        self.root = root
        self._templates = templates
        self.jsonl = jsonl
        self.export_max_s = export_max_s

    @property
    def templates(self) -> list[str]:
        return list(dict.fromkeys(self._templates()))

    def camera_of(self, path: str) -> str | None:
        """The camera whose recording `path` names (None: no recording's name)."""
        for template in self.templates:
            m = name_pattern(template).fullmatch(path)
            if m:
                return m.group("camera")
        return None

    def file(self, path: str) -> str | None:
        """The real file of the recording `path` names, or None: not a recording's name,
        outside `outputs.dir`, or no regular file."""
        parts = path.split("/")
        if (os.path.splitext(path)[1].lower() not in TYPES or any(p in ("", ".", "..") for p in parts)
                or "\0" in path or self.camera_of(path) is None):
            return None
        root = os.path.realpath(self.root)
        real = os.path.realpath(os.path.join(self.root, *parts))
        if not real.startswith(root + os.sep) or not os.path.isfile(real):
            return None
        return real

    def _files(self, camera: str) -> list[tuple[str, str]]:
        """(stamp, path relative to root) of the camera's recordings, oldest first."""
        found = []
        for template in self.templates:
            pattern = os.path.join(self.root, stamped(template).format(camera=camera, start="{start}"))
            found += [(s, os.path.relpath(p, self.root)) for s, p in segment_files(pattern)]
        return sorted(set(found))

    def segments(self, camera: str) -> list[dict]:
        """The camera's recording files: each one's path, start stamp and size."""
        out = []
        for stamp, rel in self._files(camera):
            try:
                size = os.path.getsize(os.path.join(self.root, rel))
            except OSError:
                continue  # removed meanwhile (retention)
            out.append({"file": rel, "start": stamp, "bytes": size})
        return out

    def _jsonl_files(self, camera: str, recording: str) -> list[str]:
        """The JSON lines files that can hold rows of `recording`: each file holds the rows
        from its stamp to the next file's, so those whose stretch meets the one from the
        segment's predecessor's start to its successor's (an hourly file shared by many
        segments is stamped before most of them)."""
        recordings = self._files(camera)
        mine = next((i for i, (_, rel) in enumerate(recordings) if rel == recording), None)
        low = recordings[mine - 1][0] if mine else None
        high = recordings[mine + 1][0] if mine is not None and mine + 1 < len(recordings) else None
        template = self.jsonl.format(camera=camera, start="{start}")
        spans = segment_files(os.path.join(self.root, stamped(template)))
        first = max((i for i, (s, _) in enumerate(spans) if low is not None and s <= low), default=0)
        files = [p for s, p in spans[first:] if high is None or s <= high]
        plain = os.path.join(self.root, template)
        if "{start}" not in template and os.path.isfile(plain):
            files.append(plain)
        return files

    def _rows(self, camera: str, recording: str) -> Iterator[dict]:
        needle = json.dumps(recording)
        for path in self._jsonl_files(camera, recording):
            try:
                with open(path, encoding="utf-8") as f:
                    for line in f:
                        if needle in line:  # most rows name another file: not parsed
                            row = json.loads(line)
                            if row.get("camera") == camera and row.get("recording") == recording:
                                yield row
            except (OSError, ValueError):
                continue  # removed meanwhile, or a line still being written

    def boxes(self, recording: str, start: float = 0.0, end: float = float("inf")) -> list[dict] | None:
        """The frames of `recording` between `start` and `end` (its own clock, seconds),
        each its time and detections, in time order (None: no such recording)."""
        camera = self.camera_of(recording)
        if camera is None or self.file(recording) is None:
            return None
        frames = [{"t": row["recording_time"], "seq": row["seq"], "detections": row["detections"]}
                  for row in self._rows(camera, recording)
                  if row.get("recording_time") is not None and start <= row["recording_time"] <= end]
        return sorted(frames, key=lambda f: f["t"])


def _float(values: list[str] | None, default: float) -> float:
    try:
        return float(values[0]) if values else default
    except ValueError:
        return default


def serve_file(ask: Ask) -> Reply:
    """`GET /recordings/<path>` (`ask.path`: as the JSON lines name it)."""
    files = ask.app.recordings
    real = files.file(ask.path) if files is not None else None
    return file_reply(real, TYPES.get(os.path.splitext(ask.path)[1].lower(), ""), b"no such recording\n")


def serve_segments(ask: Ask) -> Reply:
    """`GET /api/recordings/<camera>`."""
    files, camera = ask.app.recordings, ask.path
    if files is None:
        return Reply(404, b"this run keeps no recordings\n")
    if not CAMERA_ID.fullmatch(camera):
        return Reply(404, b"no such camera\n")
    return as_json(redact_data({"camera": camera, "segments": files.segments(camera)}))


def serve_boxes(ask: Ask) -> Reply:
    """`GET /api/boxes?recording=<path>&from=S&to=S`."""
    files = ask.app.recordings
    recording = (ask.query.get("recording") or [""])[0]
    frames = files.boxes(recording, _float(ask.query.get("from"), 0.0), _float(ask.query.get("to"), float("inf"))) \
        if files is not None else None
    if frames is None:
        return Reply(404, b"no such recording\n")
    return as_json(redact_data({"recording": recording, "frames": frames}))
