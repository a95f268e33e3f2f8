"""What the recording tests read back: a video's own packets, a camera's recording
segments, the frames in them by time, and a detector that costs nothing where the
model is not the point."""
from __future__ import annotations

import os
from fractions import Fraction

import av
import numpy as np

from onnx_models import make_slow_model


def packets(path: str, kind: str = "video") -> list[tuple[bytes, bool]]:
    """The stream's packets in file order: (bytes, keyframe)."""
    with av.open(path) as c:
        stream = getattr(c.streams, kind)[0]
        return [(bytes(p), bool(p.is_keyframe)) for p in c.demux(stream) if p.size]


def segments(out: str, camera: str) -> list[str]:
    """The camera's recording files, in time order."""
    from pipeline.recording.segments import segment_files

    return [path for _, path in segment_files(os.path.join(out, f"{camera}.rec.{{start}}.mp4"))]


def frames_by_time(path: str) -> dict[float, np.ndarray]:
    """Each decoded picture of a file by its time in the file (seconds, as a player shows it)."""
    with av.open(path) as c:
        return {round(float(f.pts * f.time_base), 6): f.to_ndarray(format="bgr24") for f in c.decode(video=0)}


def times(path: str) -> list[Fraction]:
    """The presentation times of a file's pictures, in display order."""
    with av.open(path) as c:
        return [f.pts * f.time_base for f in c.decode(video=0)]


def null_detector(folder) -> dict:
    """A detector that never detects anything and costs next to nothing."""
    return {"path": make_slow_model(os.path.join(str(folder), "null.onnx"), matmuls=0), "layout": "e2e",
            "input_size": 64, "batching": {"max_batch": 4, "max_wait_ms": 0}}
