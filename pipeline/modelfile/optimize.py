"""`pipeline models optimize`: fp16 and int8 variants of a model, written only when they agree.

- fp16 (for GPUs): weights and compute in float16, inputs and outputs stay float32
  (onnxconverter-common, `keep_io_types`), so the pipeline feeds it as before.
- int8: static QDQ quantisation by ONNX Runtime, per-channel weights, activations
  calibrated on frames sampled evenly across the given clips. Where plain int8 falls short
  of the agreement asked for, ever more of the layers nearest the input stay float32.

Every other sampled frame calibrates; the ones in between are held out and measure the
agreement (`agreement`), so the variant is never judged on the pictures it was tuned on.
"""
from __future__ import annotations

import os
import sys
import tempfile
import warnings
from dataclasses import dataclass, field, replace
from typing import Callable, Literal

import numpy as np

from pipeline.config import ModelConfig
from pipeline.engines.session import create_session
from pipeline.errors import PipelineError
from pipeline.modelfile.agreement import Agreement, Runner, Speed, agreement, ms_per_frame
from pipeline.preprocess import Preprocessor

Precision = Literal["fp16", "int8"]
# Where plain int8 falls short, these fractions of the graph nearest the input stay float32
# in turn: the first layers see the raw 0..255 picture and the widest activation ranges,
# and their error grows through everything after them.
FP32_FRACTIONS = (0.05, 0.1, 0.2, 0.3)


class OptimizeError(PipelineError):
    """Bad input to `optimize` (an unreadable clip, no frames); one line."""


@dataclass
class Outcome:
    precision: Precision
    agreement: Agreement
    speed: tuple[Speed, Speed] | None     # the original's and the variant's (None: not measured)
    kept_fp32: list[str] = field(default_factory=list)
    calibration_frames: int = 0
    held_out_frames: int = 0
    written: str | None = None


def sample_frames(clips: list[str], model: ModelConfig, count: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """`count` model inputs spread evenly across the clips, split alternately into
    calibration and held-out frames."""
    import av

    pre = Preprocessor(model)
    tensors: list[np.ndarray] = []
    per_clip = max(2, count // max(len(clips), 1))
    for clip in clips:
        try:
            with av.open(clip) as c:
                total = c.streams.video[0].frames or _count_frames(clip)
                wanted = set(np.linspace(0, max(total - 1, 0), min(per_clip, total)).round().astype(int).tolist())
                for i, frame in enumerate(c.decode(video=0)):
                    if i in wanted:
                        tensors.append(pre(frame.to_ndarray(format="bgr24"))[0].numpy())
        except (OSError, av.FFmpegError, IndexError) as e:
            raise OptimizeError(f"--calibrate {clip}: cannot read frames ({type(e).__name__}: {e})") from None
    if len(tensors) < 2:
        raise OptimizeError(f"--calibrate: {len(tensors)} frame(s) in {', '.join(clips)}; need at least 2")
    return tensors[0::2], tensors[1::2]


def _count_frames(clip: str) -> int:
    import av

    with av.open(clip) as c:
        return sum(1 for _ in c.decode(video=0))


def to_fp16(src: str, dst: str) -> None:
    import onnx
    from onnxconverter_common import float16

    model = onnx.load(src)
    _unfold_half_weights(model)
    with warnings.catch_warnings():  # one line per tiny weight rounded to float16's smallest step
        warnings.simplefilter("ignore", UserWarning)
        model = float16.convert_float_to_float16(model, keep_io_types=True)
    onnx.save(model, dst)


def _unfold_half_weights(model) -> None:
    """Weights stored as float16 and cast up to float32 by a `Cast` node (how the catalog
    halves EfficientNet's file) become float32 weights again: the converter halves every
    weight itself, and would leave such a `Cast` producing the wrong type."""
    import onnx
    from onnx import numpy_helper

    g = model.graph
    half = {i.name: i for i in g.initializer if i.data_type == onnx.TensorProto.FLOAT16}
    kept, unfolded = [], set()
    for node in g.node:
        to = next((a.i for a in node.attribute if a.name == "to"), None)
        if node.op_type == "Cast" and node.input[0] in half and to == onnx.TensorProto.FLOAT:
            weight = numpy_helper.to_array(half[node.input[0]]).astype(np.float32)
            g.initializer.append(numpy_helper.from_array(weight, node.output[0]))
            unfolded.add(node.input[0])
        else:
            kept.append(node)
    del g.node[:]
    g.node.extend(kept)
    used = {i for n in kept for i in n.input}
    remaining = [i for i in g.initializer if i.name not in unfolded or i.name in used]
    del g.initializer[:]
    g.initializer.extend(remaining)


class _Frames:
    """Calibration frames for ONNX Runtime's calibrator, with a progress bar on stderr."""

    def __init__(self, input_name: str, tensors: list[np.ndarray], show: bool):
        self.input_name, self.tensors, self.show, self.next = input_name, tensors, show, 0

    def get_next(self) -> dict[str, np.ndarray] | None:
        if self.next >= len(self.tensors):
            if self.show and sys.stderr.isatty():
                print(file=sys.stderr)
            return None
        self.next += 1
        tty, n = sys.stderr.isatty(), len(self.tensors)
        if self.show and (tty or self.next in {n * k // 4 for k in range(1, 5)}):  # a log: four lines
            done = self.next * 30 // n
            print(f"\rcalibrating [{'#' * done}{'.' * (30 - done)}] {self.next}/{n} frames",
                  end="" if tty else "\n", file=sys.stderr, flush=True)
        return {self.input_name: self.tensors[self.next - 1][None]}

    def rewind(self) -> None:
        self.next = 0


def to_int8(src: str, dst: str, tensors: list[np.ndarray], keep_fp32: list[str], show: bool = True) -> None:
    """`src` is the model as `prepare` left it (`keep_fp32` names its nodes)."""
    from onnxruntime.quantization import (CalibrationDataReader, CalibrationMethod, QuantFormat, QuantType,
                                          quantize_static)

    import onnxruntime as ort

    frames = _Frames(ort.InferenceSession(src, providers=["CPUExecutionProvider"]).get_inputs()[0].name, tensors, show)
    reader = type("FrameReader", (CalibrationDataReader,), {"get_next": lambda self: frames.get_next(),
                                                             "rewind": lambda self: frames.rewind()})()
    quantize_static(src, dst, reader, quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
                    calibrate_method=CalibrationMethod.MinMax, nodes_to_exclude=keep_fp32 or None,
                    extra_options={"ActivationSymmetric": False, "WeightSymmetric": True})


def prepare(src: str, dst: str) -> None:
    """The model as quantisation wants it: opset >= 13 (per-channel `DequantizeLinear`
    needs its `axis`), shapes inferred and the graph optimised (batch norms folded)."""
    import onnx
    from onnx import version_converter
    from onnxruntime.quantization.shape_inference import quant_pre_process

    model = onnx.load(src)
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 13)
    if opset < 13:
        onnx.save(version_converter.convert_version(model, 13), dst)
        src = dst
    quant_pre_process(src, dst, skip_symbolic_shape=True)


def fp32_steps(path: str, fractions: tuple[float, ...] = FP32_FRACTIONS) -> list[list[str]]:
    """Ever more of the nodes nearest the input to keep float32 (graph order is
    topological): none first, then each fraction of them."""
    import onnx

    names = [n.name for n in onnx.load(path, load_external_data=False).graph.node]
    return [[]] + [names[:max(1, round(len(names) * f))] for f in fractions]


def optimize(path: str, model: ModelConfig, precision: Precision, clips: list[str], out: str,
             min_agreement: float, frames: int = 128, threads: int | None = None, show: bool = True,
             log: Callable[[str], None] = lambda line: print(line, file=sys.stderr), timed: bool = True) -> Outcome:
    """Make the variant, measure it on held-out frames, and write it to `out` only when it
    agrees at least `min_agreement` (the outcome says either way). `frames` are sampled
    across the clips; each attempt's agreement goes to `log`. `timed`: both models' speed
    is measured too (three rounds of the held-out frames each: most of the time taken)."""
    threads = threads or os.cpu_count() or 1
    calibration, held_out = sample_frames(clips, model, frames)
    if precision == "fp16":  # nothing is calibrated: every frame measures agreement
        calibration, held_out = [], calibration + held_out
    reference = Runner(model, create_session(model, threads))
    folder = os.path.dirname(os.path.abspath(out))
    with tempfile.TemporaryDirectory(dir=folder, prefix=".optimize-") as tmp:
        candidate, prepared = os.path.join(tmp, "variant.onnx"), os.path.join(tmp, "prepared.onnx")
        if precision == "int8":
            prepare(path, prepared)
        for keep in (fp32_steps(prepared) if precision == "int8" else [[]]):
            if precision == "fp16":
                to_fp16(path, candidate)
            else:
                to_int8(prepared, candidate, calibration, keep, show=show)
            variant = Runner(model, create_session(replace(model, path=candidate), threads))
            agreed = agreement(reference, variant, held_out)
            log(precision + (f" with {len(keep)} node(s) kept float32" if keep else "") + f": {agreed.shows()}")
            if agreed.score >= min_agreement:
                break
        speed = ms_per_frame([reference, variant], held_out) if timed else None
        outcome = Outcome(precision, agreed, (speed[0], speed[1]) if speed else None, keep, len(calibration), len(held_out))
        if agreed.score >= min_agreement:
            _copy_metadata(path, candidate, precision)
            os.replace(candidate, out)
            outcome.written = out
    return outcome


def _copy_metadata(src: str, dst: str, precision: Precision) -> None:
    """The variant describes itself as its source did (names, imgsz, ...), and says what it is."""
    import onnx

    source = {p.key: p.value for p in onnx.load(src, load_external_data=False).metadata_props}
    model = onnx.load(dst)
    props = {p.key: p.value for p in model.metadata_props}
    props.update(source)
    props["precision"] = precision
    del model.metadata_props[:]
    for key, value in props.items():
        entry = model.metadata_props.add()
        entry.key, entry.value = key, value
    onnx.save(model, dst)
