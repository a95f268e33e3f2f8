"""The synchronous baseline: what everyone writes first.

One thread per camera loops decode -> preprocess -> `session.run` on one frame (one
shared session) -> decode + NMS -> classifier per crop -> annotate -> encode. It uses the
same building blocks as the pipeline (so both do the same work per frame); only the
structure differs. `tuned` sets `intra_op_num_threads=1`, the one fix people find.

In `live` mode each camera's frames "arrive" at their presentation time and wait in an
unbounded buffer (a socket, a decoder queue) until the loop takes them: latency is
measured from that arrival, as a real camera would see it.
"""
from __future__ import annotations

import os
import tempfile
import threading
import time

import av
import numpy as np
import onnxruntime as ort

from pipeline.config import ClassifySpec, Config, ModelConfig
from pipeline.decoders.layouts import DetectionDecoder, classify
from pipeline.frames import ClassNames, Frame
from pipeline.metrics.histogram import Histogram
from pipeline.metrics.registry import thread_count
from pipeline.preprocess import Preprocessor
from pipeline.sinks.video import VideoWriter
from pipeline.stages.annotate import draw_detections
from pipeline.stages.crops import CropPolicy


def _session(model: ModelConfig, tuned: bool) -> ort.InferenceSession:
    so = ort.SessionOptions()
    if tuned:
        so.intra_op_num_threads = 1
    return ort.InferenceSession(model.path, so, providers=["CPUExecutionProvider"])


def run_baseline(config: Config, frames: int, tuned: bool = False, live: bool = False,
                 timeline: list | None = None, seconds: float = 0.0) -> dict:
    """Run the baseline on every camera: `frames` each, or in `live` mode for `seconds`."""
    detect_model = config.detector
    classify_stage = next((s for s in config.graph if isinstance(s, ClassifySpec)), None)
    cls_model = config.models[classify_stage.model] if classify_stage else None
    det_session = _session(detect_model, tuned)
    cls_session = _session(cls_model, tuned) if cls_model else None
    cls_names = ClassNames(cls_model.labels if cls_model else None)
    out_dir = tempfile.mkdtemp(prefix="baseline-")
    latency = Histogram()
    processed = [0]
    lock = threading.Lock()
    peak = [thread_count()]
    crops = CropPolicy.from_spec(classify_stage, ClassNames(detect_model.labels)) if classify_stage else None

    def process(cam: str, seq: int, vf, time_base, rate, arrival: float, pre, cls_pre, decoder, writer) -> None:
        image = vf.to_ndarray(format="bgr24")
        tensor, box = pre(image)
        out = det_session.run(None, {det_session.get_inputs()[0].name: tensor.numpy()[None]})
        det = decoder.decode(out, 1)[0]
        det.xyxy = box.to_frame(det.xyxy)
        frame = Frame(cam, seq, None, time_base, image, arrival, rate=rate, detections=det)
        if cls_session is not None and cls_pre is not None and crops is not None and len(det):
            assert classify_stage is not None and cls_model is not None
            attr = det.attribute(classify_stage.stage_name, cls_names)
            for i in crops.rows(det):
                crop, _ = cls_pre(crops.crop(image, det.xyxy[i]))
                logits = cls_session.run(None, {cls_session.get_inputs()[0].name: crop.numpy()[None]})[0]
                ids, scores = classify(logits, cls_model.softmax)
                attr.class_id[i], attr.score[i] = ids[0], scores[0]
        draw_detections(image, det)
        writer.write(frame)
        done = time.perf_counter()
        latency.record(done - arrival)
        with lock:
            processed[0] += 1
            if timeline is not None:
                timeline.append((done, done - arrival))
            peak[0] = max(peak[0], thread_count())

    def camera(index: int) -> None:
        src = config.sources[index]
        pre = Preprocessor(detect_model)
        cls_pre = Preprocessor(cls_model) if cls_model else None
        decoder = DetectionDecoder(detect_model)
        writer = VideoWriter(os.path.join(out_dir, f"{src.id}.mp4"), config.outputs.video)
        start = time.perf_counter()
        seq = 0
        while True:  # live: loop the clip until `seconds` have passed
            with av.open(src.uri) as container:
                stream = container.streams.video[0]
                rate = stream.average_rate or 25
                for vf in container.decode(stream):
                    if (not live and seq >= frames) or (live and time.perf_counter() - start >= seconds):
                        break
                    arrival = time.perf_counter()
                    if live:  # the frame arrives at its time and waits in the socket until taken
                        arrival = start + src.phase_s + float(seq / rate)
                        wait = arrival - time.perf_counter()
                        if wait > 0:
                            time.sleep(wait)
                    process(src.id, seq, vf, stream.time_base, rate, arrival, pre, cls_pre, decoder, writer)
                    seq += 1
            if not live or time.perf_counter() - start >= seconds:
                break
        writer.close()

    threads = [threading.Thread(target=camera, args=(i,), name=f"baseline-{i}") for i in range(len(config.sources))]
    cpu0, t0 = os.times(), time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    cpu1 = os.times()
    used = (cpu1.user - cpu0.user) + (cpu1.system - cpu0.system)
    return {"processed": processed[0], "wall_s": round(wall, 3), "throughput_fps": round(processed[0] / wall, 2),
            "latency": latency.summary_ms(), "cpu_percent": round(100 * used / wall, 1), "max_threads": peak[0],
            "dropped": 0}


def percentile_series(timeline: list, t0: float, window_s: float = 2.0) -> list[tuple[float, float]]:
    """P99 latency per time window, to show whether latency is flat or growing."""
    if not timeline:
        return []
    arr = np.array(sorted(timeline))
    out = []
    edge = arr[0, 0]
    while edge <= arr[-1, 0]:
        sel = arr[(arr[:, 0] >= edge) & (arr[:, 0] < edge + window_s), 1]
        if len(sel):
            out.append((round(edge + window_s / 2 - t0, 2), round(float(np.percentile(sel, 99)) * 1000, 1)))
        edge += window_s
    return out
