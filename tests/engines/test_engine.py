"""The engine: batching, splitting for fixed-batch models, padding, both dispatch modes."""
import threading

import numpy as np
import pytest

from onnx_models import make_fixed_batch, make_nms_inside
from pipeline.config import BatchingConfig, EngineConfig, ModelConfig
from pipeline.engines.engine import Engine, describe, open_engine as open_standalone
from pipeline.engines.binding import DeviceBinder, GraphIds
from pipeline.engines.plan import plan_engine
from pipeline.engines.profile import choose_batch
from pipeline.engines.session import ModelError
from pipeline.metrics.registry import EngineStats


def yolox(path: str, **engine) -> ModelConfig:
    return ModelConfig(name="det", path=path, layout="yolox", input_size=(416, 416),
                       batching=BatchingConfig(max_batch=4), engine=EngineConfig(**engine))


def open_engine(model: ModelConfig, stats: EngineStats | None = None, workers: int = 1) -> Engine:
    return open_standalone(model, stats, cores=2, workers=workers)


@pytest.fixture(scope="module")
def inputs():
    rng = np.random.default_rng(0)
    return [rng.uniform(0, 255, (3, 416, 416)).astype(np.float32) for _ in range(4)]


@pytest.fixture(scope="module")
def reference(model_path, inputs):
    engine = open_engine(yolox(model_path("yolox_nano.onnx"), io_binding=False))
    try:
        return [engine.infer([x])[0][1][0][0] for x in inputs]
    finally:
        engine.close()


def rows(chunks):
    return [out[0][i] for n, out in chunks for i in range(n)]


@pytest.mark.parametrize("mode,io_binding", [("thread", True), ("thread", False), ("async", False)])
def test_a_batch_of_four_equals_four_single_runs(model_path, inputs, reference, mode, io_binding):
    engine = open_engine(yolox(model_path("yolox_nano.onnx"), mode=mode, io_binding=io_binding), workers=2)
    assert engine.plan.mode == mode and engine.plan.intra_op_threads == (2 if mode == "async" else 1)
    try:
        got = rows(engine.infer(inputs))
    finally:
        engine.close()
    assert len(got) == 4
    for g, r in zip(got, reference):
        np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-3)



def test_a_result_kept_is_not_overwritten_by_later_runs(model_path, inputs, reference):
    """Outputs are handed over, not lent: runs that reuse the same input buffers leave
    the results already returned as they were."""
    engine = open_engine(yolox(model_path("yolox_nano.onnx"), io_binding=True, max_inflight=1))
    try:
        kept = [engine.infer([x]) for x in inputs]
    finally:
        engine.close()
    for chunks, r in zip(kept, reference):
        np.testing.assert_allclose(rows(chunks)[0], r, rtol=1e-4, atol=1e-3)

def test_a_fixed_batch_model_gets_its_batches_split(tmp_path, model_path, inputs, reference):
    path = make_fixed_batch(model_path("yolox_nano.onnx"), str(tmp_path / "b1.onnx"))
    stats = EngineStats()
    engine = open_engine(yolox(path), stats)
    try:
        assert engine.packer.fixed_batch == 1
        assert "fixed batch 1" in describe(engine)
        chunks = engine.infer(inputs[:3])
    finally:
        engine.close()
    assert [n for n, _ in chunks] == [1, 1, 1]
    for g, r in zip(rows(chunks), reference):
        np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-3)


def test_batches_are_padded_to_the_allowed_sizes(model_path, inputs, reference):
    m = yolox(model_path("yolox_nano.onnx"))
    m.batching.batch_sizes = [1, 4]
    engine = open_engine(m)
    try:
        assert engine.packer.padded_size(3) == 4 and engine.packer.padded_size(1) == 1
        chunks = engine.infer(inputs[:3])
    finally:
        engine.close()
    n, outputs = chunks[0]
    assert n == 3 and outputs[0].shape[0] == 4  # ran padded, reports 3 real items
    for g, r in zip(rows(chunks), reference):
        np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-3)


def test_no_more_than_max_inflight_batches_are_out(model_path, inputs):
    stats = EngineStats()
    engine = open_standalone(yolox(model_path("yolox_nano.onnx"), max_inflight=2, workers=2), stats)
    done = threading.Semaphore(0)
    consumer = threading.Thread(target=lambda: [done.acquire(timeout=30) and engine.consumed() for _ in range(6)])
    try:
        consumer.start()
        for _ in range(6):
            engine.submit(inputs[:1], lambda c, e, ctx: done.release())
        consumer.join(60)
    finally:
        engine.close()
    assert not consumer.is_alive()
    assert stats.batches == 6 and 1 <= stats.max_inflight_seen <= 2 and stats.inflight == 0


def test_wrong_tensor_shape_is_reported_not_run(model_path):
    engine = open_engine(yolox(model_path("yolox_nano.onnx")))
    try:
        with pytest.raises(ValueError, match=r"input tensor shape \[3, 320, 320\]"):
            engine.submit([np.zeros((3, 320, 320), np.float32)], lambda *a: None)
    finally:
        engine.close()


def test_model_input_size_mismatch_names_the_model(model_path):
    m = yolox(model_path("yolox_nano.onnx"))
    m.input_size = (320, 320)
    with pytest.raises(ModelError, match=r"models.det: model input 'images' is 416x416 .* input_size is 320x320"):
        open_engine(m)


def test_unreadable_model_file_names_the_model(tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not a model")
    with pytest.raises(ModelError, match=r"models.det: cannot load .*bad.onnx"):
        open_engine(yolox(str(bad)))


def test_providers_reported_are_the_sessions_own(model_path):
    engine = open_engine(yolox(model_path("yolox_nano.onnx"), providers=["cuda", "cpu"]))
    try:
        assert engine.providers == engine.session.get_providers()
        if engine.providers[0] == "CPUExecutionProvider":
            assert "CUDAExecutionProvider asked for but not available" in describe(engine)
    finally:
        engine.close()


def test_device_buffer_path_updates_inputs_in_place(model_path, inputs, reference):
    """The GPU path (input copied into a device buffer bound once, outputs preallocated and
    bound once) run with host memory standing in for the GPU this machine lacks: every
    batch must see its own input, never the previous one's."""
    engine = open_engine(yolox(model_path("yolox_nano.onnx")))
    engine.binder = binder = DeviceBinder("det", engine.input_name, engine.output_names, 0, graphs=False, device="cpu")
    try:
        for i in (0, 1, 0, 2):
            got = rows(engine.infer([inputs[i]]))[0]
            np.testing.assert_allclose(got, reference[i], rtol=1e-4, atol=1e-3)
        assert all(binder._kept.values())  # static output shapes were preallocated and bound
    finally:
        engine.close()


def test_cuda_graphs_are_numbered_from_one_per_bound_buffer_set():
    """Graph 0 is ORT's default: a plain run on the session would have captured it on
    ORT's own buffers, so a bound buffer set replaying it would run a stale graph."""
    ids = GraphIds()
    assert [ids.of(k) for k in [(0, 0, 1), (1, 0, 1), (0, 0, 1), (0, 0, 4)]] == [1, 2, 1, 3]


def test_cuda_graphs_refuse_outputs_whose_shape_follows_the_data(tmp_path, model_path):
    """A replayed graph writes to the addresses it captured: an output allocated afresh by
    each run (NMS inside) would be written after it was freed."""
    path = make_nms_inside(model_path("yolox_nano.onnx"), str(tmp_path / "e2e.onnx"))
    engine = open_engine(ModelConfig(name="det", path=path, layout="e2e", input_size=(416, 416)))
    engine.binder = DeviceBinder("det", engine.input_name, engine.output_names, 0, graphs=True, device="cpu")
    try:
        with pytest.raises(ModelError, match=r"models.det.engine.cuda_graph: output\(s\) .* change shape"):
            engine.infer([np.zeros((3, 416, 416), np.float32)])
    finally:
        engine.close()


@pytest.mark.parametrize("engine_options,wrong", [
    ({"io_binding": False}, "io_binding: true"),
    ({"mode": "async"}, "mode: thread"),
    ({"workers": 2}, "workers: 1"),
])
def test_cuda_graphs_are_refused_without_bound_buffers_one_thread_and_one_worker(model_path, engine_options, wrong):
    model = yolox(model_path("yolox_nano.onnx"), cuda_graph=True, **engine_options)
    with pytest.raises(ModelError, match=f"models.det.engine.cuda_graph: needs .*{wrong}"):
        plan_engine(model, cores=4, on_gpu=True)
    plan_engine(model, cores=4, on_gpu=False)  # the same config on a CPU: graphs do not apply


def test_the_decoded_output_can_be_chosen_by_name_or_index(tmp_path, model_path, inputs, reference):
    """Models with several outputs: only the configured one is fetched (and decoded)."""
    import onnx
    from onnx import helper

    m = onnx.load(model_path("yolox_nano.onnx"))
    m.graph.node.append(helper.make_node("Identity", ["output"], ["copy"]))
    m.graph.output.insert(0, helper.make_tensor_value_info("copy", onnx.TensorProto.FLOAT, None))
    path = str(tmp_path / "two_outputs.onnx")
    onnx.save(m, path)
    for choice in ("output", 1):
        model = yolox(path)
        model.output = choice
        engine = open_engine(model)
        try:
            assert engine.output_names == ["output"]
            np.testing.assert_allclose(rows(engine.infer(inputs[:1]))[0], reference[0], rtol=1e-4, atol=1e-3)
        finally:
            engine.close()
    model = yolox(path)
    model.output = "nope"
    with pytest.raises(ModelError, match=r"models.det.output: no output 'nope'; outputs: \['copy', 'output'\]"):
        open_engine(model)


@pytest.mark.parametrize("costs,preferred", [
    ({1: 0.0125, 2: 0.0240}, 1),                       # CPU: a batch costs the sum of its items
    ({1: 0.0178, 2: 0.0322}, 2),                       # ... unless the second item really is 10% cheaper
    ({1: 0.0020, 2: 0.0021, 4: 0.0023, 8: 0.0030, 16: 0.0058}, 8),  # GPU: 8 is within 10% of 16's cost per item
])
def test_the_preferred_batch_is_the_smallest_within_ten_percent_of_the_cheapest(costs, preferred):
    assert choose_batch(costs) == preferred


def test_cudnn_picks_algorithms_by_heuristic_unless_told_otherwise(model_path):
    """EXHAUSTIVE (ORT's default) times every algorithm on a shape's first run: with
    batch sizes first seen while cameras run, that is a stall mid-stream."""
    from pipeline.engines.session import provider_list

    cuda = dict(provider_list(yolox(model_path("yolox_nano.onnx"), providers=["cuda"]))[0][1])
    assert cuda["cudnn_conv_algo_search"] == "HEURISTIC"
    chosen = provider_list(yolox(model_path("yolox_nano.onnx"), providers=["cuda"], cudnn_conv_algo_search="exhaustive"))
    assert chosen[0][1]["cudnn_conv_algo_search"] == "EXHAUSTIVE"
