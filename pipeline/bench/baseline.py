"""The synchronous baseline: what everyone writes first.

One thread per camera loops decode -> preprocess -> `session.run` on one frame (one
shared session) -> decode + NMS -> classifier per crop -> annotate -> encode. It uses the
same building blocks as the pipeline (so both do the same work per frame); only the
structure differs. `tuned` sets `intra_op_num_threads=1`, the one fix people find. It
runs on the providers the model config asks for (CUDA on a GPU machine).

In `live` mode each camera's frames "arrive" at their presentation time and wait in an
unbounded buffer (a socket, a decoder queue) until the loop takes them: latency is
measured from that arrival, as a real camera would see it.
"""
from __future__ import annotations

import os
import tempfile
import threading
import time
from dataclasses import asdict

import av
import numpy as np
import onnxruntime as ort

from pipeline.config import ClassifySpec, Config, ModelConfig
from pipeline.decoders.layouts import DetectionDecoder, classify
from pipeline.engines.session import provider_list
from pipeline.frames import ClassNames, Frame
from pipeline.metrics.histogram import Histogram
from pipeline.metrics.snapshot import Latency
from pipeline.metrics.registry import thread_count
from pipeline.preprocess import Preprocessor
from pipeline.sinks.encoder import VideoWriter
from pipeline.drawing import draw_detections
from pipeline.stages.crops import CropPolicy


def _session(model: ModelConfig, tuned: bool) -> ort.InferenceSession:
    """Default session options (or the one-thread fix), on the providers the model asks for
    that this machine has: the loop on CUDA where the pipeline runs on CUDA."""
    so = ort.SessionOptions()
    if tuned:
        so.intra_op_num_threads = 1
    available = set(ort.get_available_providers())
    providers = [p for p in provider_list(model) if (p if isinstance(p, str) else p[0]) in available]
    return ort.InferenceSession(model.path, so, providers=providers)


class _Loop:
    """The loop of every camera, sharing one detector (and classifier) session."""

    def __init__(self, config: Config, frames: int, tuned: bool, live: bool, timeline: list | None, seconds: float):
        self.config, self.frames, self.live, self.timeline, self.seconds = config, frames, live, timeline, seconds
        self.detect_model = config.detector
        self.classify_stage = next((s for s in config.graph if isinstance(s, ClassifySpec)), None)
        self.cls_model = config.models[self.classify_stage.model] if self.classify_stage else None
        self.det_session = _session(self.detect_model, tuned)
        self.cls_session = _session(self.cls_model, tuned) if self.cls_model else None
        self.cls_names = ClassNames(self.cls_model.labels if self.cls_model else None)
        self.crops = CropPolicy.from_spec(self.classify_stage, ClassNames(self.detect_model.labels)) \
            if self.classify_stage else None
        self.out_dir = tempfile.mkdtemp(prefix="baseline-")
        self.latency = Histogram()
        self.processed = 0
        self.lock = threading.Lock()
        self.peak = thread_count()

    def classify(self, image: np.ndarray, det, cls_pre: Preprocessor) -> None:
        assert self.classify_stage is not None and self.cls_model is not None and self.cls_session is not None
        assert self.crops is not None
        attr = det.attribute(self.classify_stage.stage_name, self.cls_names)
        for i in self.crops.rows(det):
            crop, _ = cls_pre(self.crops.crop(image, det.xyxy[i]))
            logits = self.cls_session.run(None, {self.cls_session.get_inputs()[0].name: crop.numpy()[None]})[0]
            ids, scores = classify(logits, self.cls_model.softmax)
            attr.class_id[i], attr.score[i] = ids[0], scores[0]

    def process(self, cam: str, seq: int, vf, time_base, rate, arrival: float, pre, cls_pre, decoder, writer) -> None:
        image = vf.to_ndarray(format="bgr24")
        tensor, box = pre(image)
        out = self.det_session.run(None, {self.det_session.get_inputs()[0].name: tensor.numpy()[None]})
        det = decoder.decode(out, 1)[0]
        det.xyxy = box.to_frame(det.xyxy)
        frame = Frame(cam, seq, None, time_base, image, arrival, rate=rate, detections=det)
        if cls_pre is not None and len(det):
            self.classify(image, det, cls_pre)
        draw_detections(image, det)
        writer.write(frame)
        done = time.perf_counter()
        self.latency.record(done - arrival)
        with self.lock:
            self.processed += 1
            if self.timeline is not None:
                self.timeline.append((done, done - arrival))
            self.peak = max(self.peak, thread_count())

    def camera(self, index: int) -> None:
        src = self.config.sources[index]
        pre = Preprocessor(self.detect_model)
        cls_pre = Preprocessor(self.cls_model) if self.cls_model else None
        decoder = DetectionDecoder(self.detect_model)
        writer = VideoWriter(os.path.join(self.out_dir, f"{src.id}.mp4"), self.config.outputs.video)
        start = time.perf_counter()
        seq = 0
        while True:  # live: loop the clip until `seconds` have passed
            with av.open(src.uri) as container:
                stream = container.streams.video[0]
                rate = stream.average_rate or 25
                for vf in container.decode(stream):
                    if (not self.live and seq >= self.frames) or (self.live and time.perf_counter() - start >= self.seconds):
                        break
                    arrival = time.perf_counter()
                    if self.live:  # the frame arrives at its time and waits in the socket until taken
                        arrival = start + src.phase_s + float(seq / rate)
                        wait = arrival - time.perf_counter()
                        if wait > 0:
                            time.sleep(wait)
                    self.process(src.id, seq, vf, stream.time_base, rate, arrival, pre, cls_pre, decoder, writer)
                    seq += 1
            if not self.live or time.perf_counter() - start >= self.seconds:
                break
        writer.close()

    def run(self) -> dict:
        threads = [threading.Thread(target=self.camera, args=(i,), name=f"baseline-{i}")
                   for i in range(len(self.config.sources))]
        cpu0, t0 = os.times(), time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.perf_counter() - t0
        cpu1 = os.times()
        used = (cpu1.user - cpu0.user) + (cpu1.system - cpu0.system)
        return {"processed": self.processed, "wall_s": round(wall, 3),
                "throughput_fps": round(self.processed / wall, 2), "latency": asdict(Latency.of(self.latency)),
                "cpu_percent": round(100 * used / wall, 1), "max_threads": self.peak, "dropped": 0}


def run_baseline(config: Config, frames: int, tuned: bool = False, live: bool = False,
                 timeline: list | None = None, seconds: float = 0.0) -> dict:
    """Run the baseline on every camera: `frames` each, or in `live` mode for `seconds`."""
    return _Loop(config, frames, tuned, live, timeline, seconds).run()


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
