"""The thread plan: bounded by the visible cores, whatever the config asks for."""
from pathlib import Path

from conftest import detector_model
from pipeline.config import parse_config
from pipeline.engines.plan import plan_cores, plan_engine
from pipeline.config.limits import visible_cores


def config(model_path, sample_path, **runtime):
    return parse_config({"sources": [{"id": "a", "uri": sample_path("bikes.mp4")}],
                         "models": {"det": detector_model(model_path, engine={})}, "graph": [{"detect": {"model": "det"}}],
                         "runtime": runtime}, Path("."))


def test_threads_beyond_the_visible_cores_are_capped(model_path, sample_path, caplog):
    assert plan_cores(config(model_path, sample_path, threads=1000)) == visible_cores()
    assert "1000 asked for" in caplog.text
    assert plan_cores(config(model_path, sample_path, threads=1)) == 1


def test_an_engine_is_planned_once_from_its_config_and_provider(model_path, sample_path):
    model = config(model_path, sample_path).models["det"]
    cpu = plan_engine(model, cores=4, on_gpu=False)
    assert (cpu.mode, cpu.intra_op_threads, cpu.workers, cpu.max_inflight, cpu.shared) == ("thread", 1, 4, 5, True)
    gpu = plan_engine(model, cores=4, on_gpu=True)
    assert (gpu.workers, gpu.shared) == (1, False)
