"""Export by copy over HTTP: `GET /api/export?camera=C&start=T&end=T` answers one MP4 of
the camera's recordings over [start, end) (`recording.export`: packets copied, cut at the
keyframe at or before start), as an attachment.

Times are ISO 8601 (UTC where no zone is given) or epoch seconds, as the store's API
takes them. The answer's headers say what the file holds: `X-Export-Start` and
`X-Export-End` (epoch seconds of its first and last decode times) and, where the range
crossed a gap or the stream changed, `X-Export-Note`. Mistakes are 400 with one line
naming the parameter (a range longer than `outputs.record.export_max_s` names the
limit), a range no recording covers 404. The file is made in a folder of its own under
`outputs.dir` (the recordings' disk, sized for video) and removed once sent (or once the
client went); at most `AT_ONCE` exports run together (more: 503), so downloads never take
the disk from the cameras' writers.
"""
from __future__ import annotations

import os
import shutil
import tempfile
import threading
from typing import Collection, Mapping, Sequence

from pipeline.config.sources import CAMERA_ID
from pipeline.recording.export import ExportError, Exported, export, pieces_of
from pipeline.recording.segments import stamp
from pipeline.store.filters import BadParameter, clip, one, parse_time
from pipeline.web.request import Ask, Recordings, Reply

PATH = "/api/export"
ACCEPTED = {"camera", "start", "end", "token"}
AT_ONCE = 2
_running = threading.BoundedSemaphore(AT_ONCE)


def parameters(query: Mapping[str, Sequence[str]], cameras: Collection[str],
               files: Recordings) -> tuple[str, float, float]:
    """The camera (one of the run's, or one with recordings) and the range; BadParameter."""
    unknown = sorted(set(query) - ACCEPTED)
    if unknown:
        raise BadParameter(f"{clip(unknown[0])}: not a parameter of export (known: camera, end, start)")
    given = {name: one(query, name) for name in ("camera", "start", "end")}
    missing = [name for name, value in given.items() if value is None]
    if missing:
        raise BadParameter(f"{missing[0]}: required (e.g. ?camera=door&start=2026-12-01T14:00:00Z"
                           "&end=2026-12-01T14:05:00Z)")
    camera = str(given["camera"])
    if not CAMERA_ID.fullmatch(camera):
        raise BadParameter(f"camera: {clip(camera)} is not a camera id")
    if camera not in cameras and not files.segments(camera):
        raise BadParameter(f"camera: no camera {clip(camera)} here, nor recordings of one")
    return camera, parse_time("start", str(given["start"])), parse_time("end", str(given["end"]))


def serve(ask: Ask) -> Reply:
    files = ask.app.recordings
    if files is None:
        return Reply(404, b"this run keeps no recordings\n")
    try:
        camera, start, end = parameters(ask.query, ask.app.cameras(), files)
    except BadParameter as e:
        return Reply(400, f"{e}\n".encode())
    if not _running.acquire(blocking=False):
        return Reply(503, f"{AT_ONCE} exports are being made; try again in a few seconds\n".encode(),
                     headers={"Retry-After": "5"})
    root = files.root if os.path.isdir(files.root) else None  # (none yet: nothing recorded either)
    folder = tempfile.mkdtemp(prefix=".export-", dir=root)

    def done() -> None:
        shutil.rmtree(folder, ignore_errors=True)
        _running.release()

    try:
        name = f"{camera}.{stamp(start)}-{stamp(end)}.mp4"
        pieces = pieces_of((s["start"], real) for s in files.segments(camera)
                           if (real := files.file(s["file"])) is not None)
        made = export(camera, pieces, start, end, os.path.join(folder, name), files.export_max_s)
    except ExportError as e:
        done()
        return Reply(e.status, f"{e}\n".encode())
    except BaseException:
        done()
        raise
    return Reply(200, content_type="video/mp4", headers=headers(made, name), file=made.path, after=done)


def headers(made: Exported, name: str) -> dict[str, str]:
    """What the file holds, said in its answer's headers."""
    said = {"Content-Disposition": f'attachment; filename="{name}"', "X-Export-Start": f"{made.first:.3f}",
            "X-Export-End": f"{made.last:.3f}"}
    if made.notes:  # a header's value: one line of ASCII
        said["X-Export-Note"] = " ".join("; ".join(made.notes).encode("ascii", "replace").decode().split())
    return said
