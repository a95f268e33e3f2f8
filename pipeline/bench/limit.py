"""The machine's limit: the isolated per-frame CPU cost of each stage, added up.

No design can process more frames per second than `cores / sum(cost per frame)`: each
stage's work has to be done somewhere. Inference is measured at its best batch size
(single-threaded, per image); the classifier's cost is per crop times the crops a frame
has on these clips.
"""
from __future__ import annotations

import os
import tempfile
import time

import av
import numpy as np

from pipeline.config import ClassifySpec, Config, entry_stage
from pipeline.decoders.layouts import DetectionDecoder
from pipeline.engines.session import create_session
from pipeline.frames import ClassNames, Frame
from pipeline.preprocess import Preprocessor
from pipeline.sinks.encoder import VideoWriter
from pipeline.drawing import draw_detections
from pipeline.sources.motion_detector import MotionDetector
from pipeline.stages.crops import CropPolicy


def _timed(fn, items) -> float:
    """Mean time of one call, the slowest 5% left out (a shared machine's hiccups; the
    real cost of I-frames and busy frames stays in)."""
    times = []
    for item in items:
        t0 = time.perf_counter()
        fn(item)
        times.append(time.perf_counter() - t0)
    if not times:
        return 0.0
    kept = np.sort(times)[: max(1, int(len(times) * 0.95))]
    return float(kept.mean())


def _per_image(session, tensors: list[np.ndarray], batch_sizes=(1, 2, 4, 8), budget_s: float = 0.6
               ) -> tuple[float, int]:
    """Median seconds per image at the best batch size (each size run for `budget_s`)."""
    name = session.get_inputs()[0].name
    fixed = session.get_inputs()[0].shape[0]
    if isinstance(fixed, int) and fixed > 0:
        batch_sizes = (fixed,)
    best = (float("inf"), 1)
    for b in batch_sizes:
        batch = np.stack((tensors * b)[:b])
        session.run(None, {name: batch})
        runs: list[float] = []
        end = time.perf_counter() + budget_s
        while time.perf_counter() < end or len(runs) < 3:
            t0 = time.perf_counter()
            session.run(None, {name: batch})
            runs.append(time.perf_counter() - t0)
        best = min(best, (float(np.median(runs)) / b, b))
    return best


MOTION_PICTURES = 30  # decoded pictures of each clip kept to time motion on


def _decode(config: Config, frames: int) -> tuple[list, list, float, list]:
    """The first `frames` frames of each distinct clip: (image, pts, time base), the clips'
    rates, the mean decode time per frame, and the first decoded pictures of each clip."""
    images, rates, decode_times, pictures = [], [], [], []
    for uri in dict.fromkeys(s.uri for s in config.sources):
        with av.open(uri) as c:
            s = c.streams.video[0]
            s.codec_context.thread_count = 1
            t0 = time.perf_counter()
            for i, vf in enumerate(c.decode(s)):
                if i < MOTION_PICTURES:
                    pictures.append((uri, vf, float(vf.time or 0.0)))
                images.append((vf.to_ndarray(format="bgr24", threads=1), vf.pts, s.time_base))
                decode_times.append(time.perf_counter() - t0)
                if i + 1 >= frames:
                    break
                t0 = time.perf_counter()
            rates.append(s.average_rate)
    kept = np.sort(decode_times)[: max(1, int(len(decode_times) * 0.95))]
    return images, rates, float(kept.mean()), pictures


def _motion_cost(config: Config, pictures: list) -> dict:
    """Motion's cost per frame where the detector is gated by it (on the decoded pictures,
    each clip's with its own detector), else nothing."""
    entry = entry_stage(config.graph)
    gated = entry is not None and any(entry.rate(s.id).motion for s in config.sources)
    if not gated or not pictures:
        return {}
    motion = {s.uri: MotionDetector(s.motion) for s in config.sources}
    timed = []
    for uri, vf, t in pictures:
        if motion[uri].mask is None:
            motion[uri](vf, t)  # a clip's first picture only becomes the background
        else:
            timed.append((uri, vf, t))
    return {"motion": _timed(lambda p: motion[p[0]](p[1], p[2]), timed)}


def _classifier_cost(config: Config, images: list, dets: list) -> tuple[dict, float]:
    """The classifier's cost per frame (per crop times crops per frame) and the crops per frame."""
    stage = next((s for s in config.graph if isinstance(s, ClassifySpec)), None)
    if stage is None:
        return {}, 0.0
    cls_model = config.models[stage.model]
    policy = CropPolicy.from_spec(stage, ClassNames(config.detector.labels))
    cls_pre = Preprocessor(cls_model)
    crops = [policy.crop(img, d.xyxy[i]) for (img, _, _), d in zip(images, dets) for i in policy.rows(d)]
    crops_per_frame = len(crops) / len(images)
    if not crops:
        return {}, crops_per_frame
    tensors = [cls_pre(c)[0].numpy() for c in crops[:16]]
    per_crop, _ = _per_image(create_session(cls_model, 1), tensors, (1, 4, 8, 16))
    return {"classifier": per_crop * crops_per_frame,
            "classifier_preprocess": _timed(lambda c: cls_pre(c)[0].numpy(), crops) * crops_per_frame}, crops_per_frame


def _encode_cost(config: Config, frames: list[Frame]) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        writers: dict = {}

        def encode(f: Frame) -> None:
            key = f.image.shape
            if key not in writers:
                writers[key] = VideoWriter(os.path.join(tmp, f"{len(writers)}.mp4"), config.outputs.video)
            writers[key].write(f)

        cost = _timed(encode, frames)
        for w in writers.values():
            w.close()
    return cost


def measure_costs(config: Config, frames: int = 100) -> dict:
    """Per-frame cost in ms of every stage of `config`'s graph, on the first `frames`
    frames of each distinct clip of its cameras (the frames a benchmark run processes,
    so crops per frame are those of the run)."""
    detect_model = config.detector
    images, rates, decode, pictures = _decode(config, frames)
    pre = Preprocessor(detect_model)
    prepared = [(t.numpy(), box) for t, box in (pre(img) for img, _, _ in images)]
    cost = {"decode": decode, **_motion_cost(config, pictures),
            "preprocess": _timed(lambda x: pre(x[0])[0].numpy(), images)}
    det_session = create_session(detect_model, 1)
    cost["detector"], best_batch = _per_image(det_session, [t for t, _ in prepared[:8]])
    decoder = DetectionDecoder(detect_model)
    name = det_session.get_inputs()[0].name
    outputs = [det_session.run(None, {name: t[None]}) for t, _ in prepared]
    dets = []

    def post(i: int) -> None:
        d = decoder.decode(outputs[i], 1)[0]
        d.xyxy = prepared[i][1].to_frame(d.xyxy)
        dets.append(d)

    cost["postprocess"] = _timed(post, list(range(len(images))))
    classifier, crops_per_frame = _classifier_cost(config, images, dets)
    cost.update(classifier)
    frames_ = [Frame("c", i, pts, tb, img.copy(), 0.0, rate=rates[0], detections=d)
               for i, ((img, pts, tb), d) in enumerate(zip(images, dets))]
    cost["annotate"] = _timed(lambda f: draw_detections(f.image, f.detections), frames_)
    if config.outputs.video.enabled:
        cost["encode"] = _encode_cost(config, frames_)
    ms = {k: round(v * 1000, 3) for k, v in cost.items()}
    total = sum(cost.values())
    cores = config.runtime.threads or len(os.sched_getaffinity(0))
    return {"cost_ms": ms, "total_ms": round(total * 1000, 3), "cores": cores, "best_batch": best_batch,
            "crops_per_frame": round(crops_per_frame, 2), "limit_fps": round(cores / total, 2)}
