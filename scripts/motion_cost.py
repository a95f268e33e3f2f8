"""What motion costs per 1080p frame, beside what a frame the detector does not see saves
(its BGR conversion and letterbox), on one thread, the steps taken in turns.

The sample clip's pictures are scaled to 1080p once (8-bit 4:2:0, and 10-bit for the
formats HEVC Main10 cameras send); each round times every step on every picture; the
figure is the median of the rounds' means.

    python scripts/motion_cost.py samples/vtest.mp4 --frames 60 --rounds 3
"""
from __future__ import annotations

import argparse
import statistics
import time

import av
import cv2

from pipeline.config import MotionConfig
from pipeline.config.models import ModelConfig
from pipeline.preprocess import Preprocessor
from pipeline.sources.motion_detector import MotionDetector


def pictures(path: str, frames: int, fmt: str) -> list[av.VideoFrame]:
    out = []
    with av.open(path) as c:
        s = c.streams.video[0]
        for vf in c.decode(s):
            out.append(vf.reformat(width=1920, height=1080, format=fmt))
            if len(out) >= frames:
                break
    return out


def mean_ms(step, items) -> float:
    t0 = time.perf_counter()
    for item in items:
        step(item)
    return 1000 * (time.perf_counter() - t0) / len(items)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("clip")
    ap.add_argument("--frames", type=int, default=60)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    cv2.setNumThreads(1)
    eight, ten = pictures(args.clip, args.frames, "yuv420p"), pictures(args.clip, args.frames, "yuv420p10le")
    pre = Preprocessor(ModelConfig(name="det", path="", layout="yolox", input_size=(416, 416), letterbox="top_left"))
    bgr = [vf.to_ndarray(format="bgr24", threads=1) for vf in eight]
    steps = {
        "motion (8-bit)": (lambda md: lambda i: md(eight[i], i / 15))(MotionDetector(MotionConfig())),
        "motion (10-bit)": (lambda md: lambda i: md(ten[i], i / 15))(MotionDetector(MotionConfig())),
        "BGR conversion": lambda i: eight[i].to_ndarray(format="bgr24", threads=1),
        "letterbox + model input": lambda i: pre(bgr[i]),
    }
    rounds: dict[str, list[float]] = {k: [] for k in steps}
    for _ in range(args.rounds):
        for name, step in steps.items():
            rounds[name].append(mean_ms(step, range(len(eight))))
    for name, values in rounds.items():
        print(f"{name:<26} {statistics.median(values):6.3f} ms per 1080p frame  (rounds: "
              + ", ".join(f"{v:.3f}" for v in values) + ")")


if __name__ == "__main__":
    main()
