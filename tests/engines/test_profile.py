"""Batch costs measured at start-up: once per process for each model setup, again for
another one; every size still runs once (ORT's buffers are made before any camera)."""
from dataclasses import replace

from pipeline.config import BatchingConfig, ModelConfig
from pipeline.engines import profile as profiling
from pipeline.engines.engine import open_engine


def test_a_model_setup_is_timed_once_per_process_and_each_size_still_runs(model_path, monkeypatch):
    timed, ran = [], []
    measure = profiling.time_batch
    monkeypatch.setattr(profiling, "time_batch", lambda engine, size: timed.append(size) or measure(engine, size))
    monkeypatch.setattr(profiling, "_MEASURED", {})
    model = ModelConfig(name="det", path=model_path("yolox_nano.onnx"), layout="yolox", input_size=(416, 416),
                        batching=BatchingConfig(max_batch=2))
    costs = []
    for m in (model, model, replace(model, batching=BatchingConfig(max_batch=4))):
        engine = open_engine(m, cores=2)
        infer = engine.infer
        engine.infer = lambda items, infer=infer: ran.append(len(items)) or infer(items)
        try:
            before = len(timed)
            profiling.profile(engine)
            costs.append((engine.batch_costs, len(timed) - before))
        finally:
            engine.close()
    assert costs[0][1] == 3 * 2 and costs[1] == (costs[0][0], 0)  # the same setup: its costs, not timed again
    assert costs[2][1] == 3 * 3 and set(costs[2][0]) == {1, 2, 4}  # another batch limit: measured
    assert ran == [1, 2, 1, 2, 1, 2, 4]  # every size ran once, also where the costs were known
