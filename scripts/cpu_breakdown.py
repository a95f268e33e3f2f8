"""Where the CPU goes, per frame: the tuned synchronous loop against the pipeline.

Each step's thread CPU time (`time.thread_time`) is summed over every frame, on files
as fast as they decode, detector only; "the rest" is the process's CPU time minus the
steps (demuxing and decoding, hand-overs between threads, bookkeeping). It wraps the
shared building blocks both designs call, so both are measured the same way.

    python scripts/cpu_breakdown.py configs/bench.yaml --cameras 4 --frames 300 --runs 2
"""
from __future__ import annotations

import argparse
import collections
import functools
import os
import threading
import time

import onnxruntime as ort

import pipeline.bench.baseline as baseline
import pipeline.decoders.layouts as layouts
import pipeline.drawing as drawing
import pipeline.engines.engine as engine
import pipeline.preprocess as preprocess
import pipeline.sinks.encoder as encoder
from pipeline.bench.runner import run_pipeline, with_cameras, without_classifier
from pipeline.config import load_config

STEPS = ("inference", "model input", "letterbox", "decode + NMS", "drawing", "encode")
spent: collections.Counter = collections.Counter()
lock = threading.Lock()


def timed(step: str, fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        t0 = time.thread_time()
        try:
            return fn(*args, **kwargs)
        finally:
            with lock:
                spent[step] += time.thread_time() - t0
    return wrapper


def timed_session(open_session):
    """The loop's sessions, whose `run` is the loop's inference."""
    @functools.wraps(open_session)
    def wrapper(*args, **kwargs) -> ort.InferenceSession:
        session = open_session(*args, **kwargs)
        session.run = timed("inference", session.run)
        return session
    return wrapper


def instrument() -> None:
    preprocess.Preprocessor.__call__ = timed("letterbox", preprocess.Preprocessor.__call__)
    preprocess.ModelInput.write = timed("model input", preprocess.ModelInput.write)  # the pipeline's
    preprocess.ModelInput.numpy = timed("model input", preprocess.ModelInput.numpy)  # the loop's
    layouts.DetectionDecoder.decode = timed("decode + NMS", layouts.DetectionDecoder.decode)
    encoder.VideoWriter.write = timed("encode", encoder.VideoWriter.write)
    baseline.draw_detections = timed("drawing", drawing.draw_detections)  # the loop's
    drawing.draw_detections = baseline.draw_detections                    # the annotate stage's
    engine.Engine.run_piece = timed("inference", engine.Engine.run_piece)
    baseline._session = timed_session(baseline._session)


def measure(config, design: str, frames: int) -> dict[str, float]:
    spent.clear()
    t0 = os.times()
    result = (baseline.run_baseline(config, frames, tuned=True) if design == "tuned loop"
              else run_pipeline(config, frames))
    t1 = os.times()
    n = result["processed"]
    total = (t1.user - t0.user) + (t1.system - t0.system)
    row = {step: 1000 * spent[step] / n for step in STEPS}
    row["the rest"] = 1000 * (total - sum(spent.values())) / n
    row["total"] = 1000 * total / n
    row["fps"] = result["throughput_fps"]
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("config")
    ap.add_argument("--camera-count", type=int, default=4)
    ap.add_argument("--frames", type=int, default=300)
    ap.add_argument("--runs", type=int, default=2)
    args = ap.parse_args()
    config = without_classifier(with_cameras(load_config(args.config), args.camera_count))
    instrument()
    rows: dict[str, list[dict[str, float]]] = {"tuned loop": [], "pipeline": []}
    for _ in range(args.runs):  # interleaved: a slow spell of the machine hits both designs
        for design in rows:
            rows[design].append(measure(config, design, args.frames))
    print("| ms per frame | " + " | ".join(rows) + " |")
    print("|---|" + "---:|" * len(rows))
    for key in (*STEPS, "the rest", "total", "fps"):
        cells = []
        for runs in rows.values():
            lo, hi = min(r[key] for r in runs), max(r[key] for r in runs)
            cells.append(f"{lo:.2f}" if round(lo, 2) == round(hi, 2) else f"{lo:.2f}-{hi:.2f}")
        print(f"| {key} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
