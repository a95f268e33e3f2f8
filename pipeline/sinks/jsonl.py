"""Machine-readable metadata: one JSON line per frame.

`{"camera", "seq", "pts", "time", "detections": [{"box": [x1, y1, x2, y2], "score",
"class_id", "class", "track"?, "label"?, "label_score"?}], "events"?, "errors"?}` with boxes
in frame pixels. With `{camera}` in the file name each camera gets its own file; without
it all cameras share one file (lines of one camera stay in order).
"""
from __future__ import annotations

import json
import os
import threading
from typing import IO

from pipeline.frames import Frame
from pipeline.stages.annotate import Labels


def frame_record(frame: Frame, labels: Labels) -> dict:
    det = frame.detections
    items = []
    if det is not None:
        for i in range(len(det)):
            cid = int(det.class_id[i])
            entry: dict = {"box": [round(float(v), 2) for v in det.xyxy[i]], "score": round(float(det.score[i]), 4),
                           "class_id": cid, "class": labels.name(cid)}
            if det.track_id is not None and det.track_id[i] >= 0:
                entry["track"] = int(det.track_id[i])
            if det.sub_class_id is not None and det.sub_class_id[i] >= 0:
                assert det.sub_score is not None
                entry["label"] = labels.sub_name(int(det.sub_class_id[i]))
                entry["label_id"] = int(det.sub_class_id[i])
                entry["label_score"] = round(float(det.sub_score[i]), 4)
            items.append(entry)
    record: dict = {"camera": frame.camera, "seq": frame.seq, "pts": frame.pts,
                    "time": None if frame.pts_seconds is None else round(frame.pts_seconds, 6),
                    "detections": items}
    if frame.events:
        record["events"] = frame.events
    if frame.errors:
        record["errors"] = frame.errors
    return record


class JsonlWriter:
    """Thread-safe appender; one instance per output file."""

    def __init__(self, path: str):
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        self.path = path
        self._file: IO[str] | None = open(path, "w", encoding="utf-8")
        self._lock = threading.Lock()

    def write(self, record: dict) -> None:
        line = json.dumps(record, separators=(",", ":")) + "\n"
        with self._lock:
            if self._file is not None:
                self._file.write(line)

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None
