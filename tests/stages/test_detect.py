"""The detect stage without a model: batches that finish out of order still leave in
each camera's order, and every frame gets its own result."""
import random
import time

import numpy as np

from fake_engine import FakeEngine
from pipeline.config import BatchingConfig, ModelConfig
from pipeline.frames import EndOfStream, Frame
from pipeline.metrics.registry import Metrics
from pipeline.preprocess import Preprocessor
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


def run_stage(stage: DetectStage, items: list, cameras: list[str], timeout: float = 20) -> list:
    out: list = []
    stage.emit = out.append
    for cam in cameras:
        stage.add_camera(cam, 64, "block")
    stage.start()
    for item in items:
        stage.lanes.lane(item.camera).put(item)
    deadline = time.monotonic() + timeout
    while sum(isinstance(x, EndOfStream) for x in out) < len(cameras) and time.monotonic() < deadline:
        time.sleep(0.01)
    stage.control.abort.set()
    stage.close()
    return out


def test_out_of_order_completions_leave_in_camera_order_with_their_own_results():
    model = e2e_model(max_batch=3, max_wait_ms=1)
    rng = random.Random(4)
    engine = FakeEngine(echo_boxes, (3, SIZE, SIZE), max_inflight=4, delay=lambda i: rng.uniform(0, 0.03))
    stage = DetectStage("detect", model, engine, Metrics(), RunControl(), 4)  # type: ignore[arg-type]
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
