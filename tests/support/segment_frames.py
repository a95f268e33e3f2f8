"""Frames, an outputs config and a file's packets for the tests of a camera's time segments
(recording, annotated video, JSON lines, resume)."""
from __future__ import annotations

import time
from fractions import Fraction

import av
import numpy as np

from pipeline.config import parse_config
from pipeline.frames import Frame


def outputs_config(tmp_path, **video):
    data = {"sources": [{"id": "cam", "uri": "rtsp://127.0.0.1:1/x"}],
            "models": {"det": {"path": __file__, "layout": "yolox", "input_size": 416}},
            "graph": [{"detect": {"model": "det"}}],
            "outputs": {"dir": str(tmp_path / "out"), "jsonl": {"filename": "{camera}.jsonl", "flush_s": 0},
                        "video": video}}
    return parse_config(data, tmp_path).outputs


def frame(seq: int, size: tuple[int, int] = (48, 64), camera: str = "cam") -> Frame:
    image = np.full((*size, 3), seq % 255, np.uint8)
    return Frame(camera, seq, seq * 3600, Fraction(1, 90000), image, time.perf_counter(), Fraction(25))


def packets(path: str) -> list[av.Packet]:
    with av.open(path) as c:
        return [p for p in c.demux(video=0) if p.size]
