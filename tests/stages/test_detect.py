"""The detect stage without a model: batches that finish out of order still leave in
each camera's order, and every frame gets its own result."""
import random
import time

import numpy as np

from fake_engine import FakeEngine
from pipeline.config import BatchingConfig, ModelConfig
from pipeline.engines.batching import BatchPolicy
from pipeline.frames import DetectPlan, EndOfStream, Frame
from pipeline.metrics.registry import Metrics
from pipeline.preprocess import Preprocessor
from pipeline.runtime.ingress import Ingress
from pipeline.runtime.stage import RunControl
from pipeline.stages.detect import DetectStage

SIZE = 8


def e2e_model(**batching) -> ModelConfig:
    return ModelConfig(name="det", path="", layout="e2e", input_size=(SIZE, SIZE), letterbox="stretch",
                       labels=["thing"], score_threshold=0.5, batching=BatchingConfig(**batching))


def echo_boxes(batch: np.ndarray) -> list[np.ndarray]:
    """One box per picture whose x1 is its grey value / 32: results name their frame."""
    rows = [[b, v / 32, 0, 8, 8, 0.9, 0] for b, v in enumerate(batch[:, 0, 0, 0])]
    return [np.array(rows, np.float32).reshape(-1, 7)]


def frame(camera: str, seq: int, pre: Preprocessor) -> Frame:
    image = np.full((SIZE, SIZE, 3), seq % 200, np.uint8)
    f = Frame(camera, seq, seq, None, image, time.perf_counter())
    f.tensor, f.letterbox = pre(image)
    return f


def detect_stage(model: ModelConfig, engine: FakeEngine, preferred: int = 1) -> DetectStage:
    return DetectStage("detect", model, engine, BatchPolicy.of(model.batching, preferred), Metrics(), RunControl(),
                       Ingress("detect.lanes", read_budget=4))


def run_stage(stage: DetectStage, items: list, cameras: list[str], timeout: float = 20) -> list:
    out: list = []
    stage.emit = out.append
    for cam in cameras:
        stage.ingress.add_camera(cam, 64, "block")
    stage.start()
    for item in items:
        stage.accept(item)
    deadline = time.monotonic() + timeout
    while sum(isinstance(x, EndOfStream) for x in out) < len(cameras) and time.monotonic() < deadline:
        time.sleep(0.01)
    stage.control.abort.set()
    stage.close()
    return out


def test_out_of_order_completions_leave_in_camera_order_with_their_own_results():
    model = e2e_model(max_batch=3, max_wait_ms=1)
    rng = random.Random(4)
    engine = FakeEngine(echo_boxes, (3, SIZE, SIZE), max_inflight=4, workers=4, delay=lambda n: rng.uniform(0, 0.03))
    stage = detect_stage(model, engine)
    pre = Preprocessor(model)
    items = [frame(cam, i, pre) for i in range(60) for cam in ("a", "b")]
    items += [EndOfStream("a"), EndOfStream("b")]
    out = run_stage(stage, items, ["a", "b"])
    assert engine.max_seen > 1  # several batches really were in flight at once
    for cam in ("a", "b"):
        mine = [x for x in out if x.camera == cam]
        assert [x.seq for x in mine[:-1]] == list(range(60)) and isinstance(mine[-1], EndOfStream)
        for f in mine[:-1]:
            assert f.detections is not None and f.detections.xyxy[0, 0] == np.float32((f.seq % 200) / 32)
            assert f.tensor is None  # the model input is released once decoded


def test_batches_are_full_under_load_where_batching_pays():
    """A model whose batch of 8 costs little more than a batch of 1 (a GPU's shape): with
    frames waiting and the worker busy, the batcher fills batches to 8."""
    model = e2e_model(max_batch=8, max_wait_ms=200)
    engine = FakeEngine(echo_boxes, (3, SIZE, SIZE), max_inflight=2, workers=1, delay=lambda n: 0.02 + 0.002 * n)
    stage = detect_stage(model, engine, preferred=8)
    pre = Preprocessor(model)
    cams = [f"c{i}" for i in range(4)]
    items = [frame(cam, i, pre) for i in range(40) for cam in cams] + [EndOfStream(c) for c in cams]
    out = run_stage(stage, items, cams)
    assert sum(isinstance(x, Frame) for x in out) == 160
    full = sum(b == 8 for b in engine.batches)
    assert full >= 0.8 * len(engine.batches), engine.batches


def test_at_light_load_a_frame_reaching_an_idle_engine_is_submitted_at_once():
    """One camera, frames far apart: each goes alone, immediately, although `max_wait_ms`
    would allow holding it for half a second."""
    model = e2e_model(max_batch=8, max_wait_ms=500)
    engine = FakeEngine(echo_boxes, (3, SIZE, SIZE), max_inflight=2, workers=1, delay=0.01)
    stage = detect_stage(model, engine, preferred=8)
    pre = Preprocessor(model)
    out: list = []
    stage.emit = out.append
    stage.ingress.add_camera("a", 4, "block")
    stage.start()
    put_at = []
    for i in range(6):
        put_at.append(time.perf_counter())
        stage.accept(frame("a", i, pre))
        time.sleep(0.08)
    stage.accept(EndOfStream("a"))
    deadline = time.monotonic() + 10
    while not (out and isinstance(out[-1], EndOfStream)) and time.monotonic() < deadline:
        time.sleep(0.01)
    stage.control.abort.set()
    stage.close()
    assert engine.batches == [1] * 6
    waits = [s - p for s, p in zip(engine.submitted_at, put_at)]
    assert max(waits) < 0.45, waits  # not held for the 0.5 s max_wait


def test_frames_the_detector_does_not_see_pass_at_once_in_their_cameras_order_and_are_counted():
    """Camera a's frame holds the only credit for a second; camera b's frames for no
    detector, and a's own after its frame, need none: b's leave at once, a's wait for
    their camera's order; every frame says whether the detector saw it."""
    model = e2e_model(max_batch=1, max_wait_ms=1)
    engine = FakeEngine(echo_boxes, (3, SIZE, SIZE), max_inflight=1, workers=1, delay=1.0)
    stage = detect_stage(model, engine)
    pre = Preprocessor(model)
    out: list = []
    left_at: dict = {}

    def emit(item):
        out.append(item)
        left_at[(item.camera, getattr(item, "seq", "end"))] = time.perf_counter()

    stage.emit = emit
    for cam in ("a", "b"):
        stage.ingress.add_camera(cam, 8, "block")
    stage.start()
    t0 = time.perf_counter()
    stage.accept(frame("a", 0, pre))
    for i in range(1, 4):
        f = frame("a", i, pre)
        f.plan, f.tensor = DetectPlan(False, "rate"), None
        stage.accept(f)
    for i in range(4):
        f = frame("b", i, pre)
        f.plan, f.tensor = DetectPlan(False, "still" if i % 2 else "rate"), None
        stage.accept(f)
    stage.accept(EndOfStream("a"))
    stage.accept(EndOfStream("b"))
    deadline = time.monotonic() + 10
    while sum(isinstance(x, EndOfStream) for x in out) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    stage.control.abort.set()
    stage.close()
    assert engine.batches == [1]
    assert max(left_at[("b", i)] for i in range(4)) - t0 < 0.5  # not behind a's detection
    mine = [x for x in out if isinstance(x, Frame) and x.camera == "a"]
    assert [f.seq for f in mine] == [0, 1, 2, 3] and left_at[("a", 1)] - t0 >= 0.9
    assert [f.detected for f in mine] == [True, False, False, False]
    assert all(f.detections is None for f in mine[1:])
    counts = {cam: stage.metrics.camera(cam).detector for cam in ("a", "b")}
    assert (counts["a"].runs, counts["a"].predicted, counts["a"].gated) == (1, 3, 0)
    assert (counts["b"].runs, counts["b"].predicted, counts["b"].gated) == (0, 4, 2)


def test_a_frame_seen_in_regions_is_one_batch_of_its_regions_mapped_back_by_each_regions_place():
    model = e2e_model(max_batch=4, max_wait_ms=1)
    engine = FakeEngine(echo_boxes, (3, SIZE, SIZE), max_inflight=2, workers=1)
    stage = detect_stage(model, engine)
    pre = Preprocessor(model)
    image = np.zeros((64, 64, 3), np.uint8)
    image[:8, :8], image[40:48, 40:48] = 64, 128
    f = Frame("a", 0, 0, None, image, time.perf_counter())
    regions = np.array([[0, 0, 8, 8], [40, 40, 48, 48]], np.float32)
    f.plan = DetectPlan(True, "motion", regions=regions)
    f.region_inputs = []
    for x1, y1, x2, y2 in regions.astype(int):
        tensor, box = pre(image[y1:y2, x1:x2])
        box.offset_x, box.offset_y = float(x1), float(y1)
        f.region_inputs.append((tensor, box))
    out = run_stage(stage, [f, EndOfStream("a")], ["a"])
    assert engine.batches == [2]  # both regions in one batch
    det = out[0].detections
    assert out[0].detected and out[0].region_inputs is None
    assert sorted(det.xyxy.tolist()) == [[2.0, 0.0, 8.0, 8.0], [44.0, 40.0, 48.0, 48.0]]
