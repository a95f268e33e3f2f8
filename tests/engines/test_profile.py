"""Batch costs measured at start-up: once for each model setup, kept for later processes,
again for another setup; every size still runs once (ORT's buffers are made before any camera)."""
from dataclasses import replace

from pipeline.config import BatchingConfig, ModelConfig
from pipeline.engines import profile as profiling
from pipeline.engines.engine import open_engine


def test_a_model_setup_is_timed_once_per_process_and_each_size_still_runs(model_path, monkeypatch, tmp_path):
    timed, ran = [], []
    measure = profiling.time_batch
    monkeypatch.setattr(profiling, "time_batch", lambda engine, size: timed.append(size) or measure(engine, size))
    monkeypatch.setattr(profiling, "_MEASURED", {})
    monkeypatch.setenv("PIPELINE_BATCH_COSTS", str(tmp_path / "batch_costs.json"))
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


def test_a_later_process_takes_the_costs_from_the_file_and_a_changed_model_is_measured_again(
        model_path, monkeypatch, tmp_path):
    """The costs outlive the process (`~/.cache/pipeline/batch_costs.json`): a new process
    (the process's own table emptied) does not time the model again; the file touched, or
    the kept costs damaged, it does."""
    import os
    import shutil

    timed = []
    measure = profiling.time_batch
    monkeypatch.setattr(profiling, "time_batch", lambda engine, size: timed.append(size) or measure(engine, size))
    monkeypatch.setenv("PIPELINE_BATCH_COSTS", str(tmp_path / "cache" / "batch_costs.json"))
    path = str(tmp_path / "det.onnx")
    shutil.copy(model_path("yolox_nano.onnx"), path)
    model = ModelConfig(name="det", path=path, layout="yolox", input_size=(416, 416),
                        batching=BatchingConfig(max_batch=2))

    def start() -> int:
        monkeypatch.setattr(profiling, "_MEASURED", {})  # as a new process
        engine = open_engine(model, cores=2)
        try:
            before = len(timed)
            profiling.profile(engine)
            assert set(engine.batch_costs) == {1, 2}
            return len(timed) - before
        finally:
            engine.close()

    assert start() == 3 * 2 and start() == 0  # measured, then read
    os.utime(path, ns=(1, 1))
    assert start() == 3 * 2  # the file changed: measured again
    profiling.costs_file().write_text('{"x": {"1": "NaN"}, ')  # damaged: never an error, measured again
    assert start() == 3 * 2 and start() == 0
