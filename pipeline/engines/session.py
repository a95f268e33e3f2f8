"""Creating one ONNX Runtime session from a model config, and checking it fits the config.

The CPU and GPU wheels of onnxruntime overwrite each other and `get_available_providers()`
lists CUDA even where no GPU exists, so the providers reported are the ones the session
really got (`session.get_providers()`).
"""
from __future__ import annotations

import logging
import os

import onnxruntime as ort

from pipeline.config import ModelConfig
from pipeline.errors import PipelineError, one_line

# ORT's own log lines (provider loading, kernel errors) go to stderr with colour codes;
# every error that matters is raised as an exception and reported in one line instead.
ort.set_default_logger_severity(4)

_OPT_LEVELS = {
    "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
    "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
}
GPU_PROVIDERS = ("CUDAExecutionProvider", "TensorrtExecutionProvider")
_PROVIDER_NAMES = {"cpu": "CPUExecutionProvider", "cuda": "CUDAExecutionProvider",
                   "tensorrt": "TensorrtExecutionProvider"}


def preload_cuda_libraries() -> None:
    """Where the GPU wheel is installed, load cuDNN, cuBLAS and the CUDA runtime from their
    pip packages first (as ORT documents): without it the CUDA provider may silently not
    load and the model runs on the CPU."""
    global _preloaded
    if _preloaded or "CUDAExecutionProvider" not in ort.get_available_providers():
        return
    _preloaded = True
    if hasattr(ort, "preload_dlls"):
        try:
            ort.preload_dlls()
        except Exception as e:  # the session then says which provider it really got
            logging.getLogger("pipeline.engine").warning("onnxruntime.preload_dlls failed: %s", one_line(e))


_preloaded = False


class ModelError(PipelineError):
    """A model file that cannot be used as configured; the message names the model."""


def provider_list(model: ModelConfig) -> list:
    """ORT provider entries with their options, in the configured order, CPU always last."""
    e = model.engine
    entries: list = []
    for p in e.providers:
        if p == "cuda":
            entries.append(("CUDAExecutionProvider", {
                "device_id": str(e.device_id),
                "enable_cuda_graph": "1" if e.cuda_graph else "0",
                "cudnn_conv_algo_search": e.cudnn_conv_algo_search.upper(),
            }))
        elif p == "tensorrt":
            opts = {"device_id": str(e.device_id), "trt_fp16_enable": "1" if e.trt_fp16 else "0"}
            if e.trt_cache_dir:
                os.makedirs(e.trt_cache_dir, exist_ok=True)
                opts.update(trt_engine_cache_enable="1", trt_engine_cache_path=e.trt_cache_dir)
            entries.append(("TensorrtExecutionProvider", opts))
    entries.append("CPUExecutionProvider")
    return entries


def create_session(model: ModelConfig, intra_op_threads: int, inter_op_threads: int = 1,
                   spinning: bool = False) -> ort.InferenceSession:
    """A session for `model`. Its intra-op threads sleep between operators unless
    `spinning` (faster on a free core, but the spin burns that core for a while after each
    run): one thread budget for the whole process means no idle spinning by default."""
    if not os.path.isfile(model.path):
        raise ModelError(f"models.{model.name}: model file not found: {model.path}")
    so = ort.SessionOptions()
    so.log_severity_level = 4
    so.intra_op_num_threads = intra_op_threads
    so.inter_op_num_threads = inter_op_threads
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = _OPT_LEVELS[model.engine.graph_optimization]
    so.add_session_config_entry("session.intra_op.allow_spinning", "1" if spinning else "0")
    so.add_session_config_entry("session.inter_op.allow_spinning", "0")
    if any(p in ("cuda", "tensorrt") for p in model.engine.providers):
        preload_cuda_libraries()
    available = set(ort.get_available_providers())
    providers = [p for p in provider_list(model) if (p if isinstance(p, str) else p[0]) in available]
    try:
        session = ort.InferenceSession(model.path, so, providers=providers)
    except Exception as e:  # ORT raises several unrelated types for unreadable models
        raise ModelError(f"models.{model.name}: cannot load {model.path}: {one_line(e)}") from None
    if model.reshape and not fits(model, session):
        try:
            session = ort.InferenceSession(reshaped(model.path, model.input_size), so, providers=providers)
        except Exception as e:  # a graph with its size built in (anchors, reshapes) fails here or at its first run
            w, h = model.input_size
            raise ModelError(f"models.{model.name}: reshape: the graph of {model.path} does not run at input_size "
                             f"{w}x{h}: {one_line(e)}") from None
    check_io(model, session)
    return session


def fits(model: ModelConfig, session: ort.InferenceSession) -> bool:
    """Whether the session's image input takes `input_size` as it is (its height and width
    free or equal)."""
    shape = session.get_inputs()[0].shape
    if len(shape) != 4 or model.input_size is None:
        return True  # nothing to reshape: `check_io` says what is wrong
    want_w, want_h = model.input_size
    return all(not isinstance(d, int) or d == want for d, want in ((shape[2], want_h), (shape[3], want_w)))


def reshaped(path: str, size: tuple[int, int]) -> bytes:
    """The model with its image input fixed at `size` (width, height) instead of the size
    its file fixes, and the shapes the file declares for its outputs and intermediate
    values left for ONNX Runtime to infer again (they follow the input). Whether the graph
    really runs at that size is for the test inference to find (`model_check`)."""
    import onnx

    model = onnx.load(path)
    weights = {i.name for i in model.graph.initializer}
    image = next(i for i in model.graph.input if i.name not in weights)
    dims = image.type.tensor_type.shape.dim
    dims[2].dim_value, dims[3].dim_value = size[1], size[0]
    for output in model.graph.output:
        for k, d in enumerate(output.type.tensor_type.shape.dim):
            if k:
                d.dim_param = f"{output.name}_{k}"  # a dim is a value or a name: this drops the value
    del model.graph.value_info[:]
    return model.SerializeToString()


def check_io(model: ModelConfig, session: ort.InferenceSession) -> None:
    """Fail early, naming the model, when its input does not match the configured size."""
    inputs = session.get_inputs()
    if len(inputs) != 1:
        raise ModelError(f"models.{model.name}: expected one image input, model has {len(inputs)}")
    shape = inputs[0].shape
    if len(shape) != 4:
        raise ModelError(f"models.{model.name}: expected an NCHW image input, model input "
                         f"{inputs[0].name!r} has shape {shape}")
    c, h, w = shape[1], shape[2], shape[3]
    want_w, want_h = model.input_size
    if isinstance(c, int) and c != 3:
        raise ModelError(f"models.{model.name}: model input {inputs[0].name!r} has {c} channels, expected 3")
    if (isinstance(h, int) and h != want_h) or (isinstance(w, int) and w != want_w):
        raise ModelError(f"models.{model.name}: model input {inputs[0].name!r} is {w}x{h} (shape {shape}) "
                         f"but input_size is {want_w}x{want_h} (`reshape: true` runs the graph at input_size, where "
                         f"it can)")
    if inputs[0].type != "tensor(float)":
        raise ModelError(f"models.{model.name}: model input type {inputs[0].type} is not supported "
                         f"(float32 expected)")


def output_names(model: ModelConfig, session: ort.InferenceSession) -> list[str]:
    """The outputs to fetch: all, or only the configured one (ORT then skips the rest)."""
    names = [o.name for o in session.get_outputs()]
    if model.output is None:
        return names
    if isinstance(model.output, int):
        if not 0 <= model.output < len(names):
            raise ModelError(f"models.{model.name}.output: index {model.output} out of range; outputs: {names}")
        return [names[model.output]]
    if model.output not in names:
        raise ModelError(f"models.{model.name}.output: no output {model.output!r}; outputs: {names}")
    return [model.output]


def requested_providers(model: ModelConfig) -> list[str]:
    return [_PROVIDER_NAMES[p] for p in model.engine.providers]
