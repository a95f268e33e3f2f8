"""`models`: each ONNX model with its input recipe, output layout, batching and engine."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pipeline.config.model_file import MAX_INPUT_SIDE
from pipeline.config.limits import MAX_BATCH, at_most, machine
from pipeline.config.schema import (INVALID, Reader, internal, non_negative, option, positive, read_file, read_path,
                                    within)

Layout = Literal["yolox", "yolov5", "yolov8", "e2e", "classifier"]
ENGINE_THREADS = (lambda: machine().decode_threads,
                  lambda: f"threads of one engine: the {machine().cores} visible cores, at least 16")
LAYOUTS: tuple[str, ...] = ("yolox", "yolov5", "yolov8", "e2e", "classifier")


def _side(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and 0 < v <= MAX_INPUT_SIDE


def read_size(r: Reader, raw: Any, where: str) -> tuple[int, int] | Any:
    if _side(raw):
        return (raw, raw)
    if isinstance(raw, list) and len(raw) == 2 and all(_side(v) for v in raw):
        return (raw[0], raw[1])
    r.problem(where, f"expected a positive integer or [width, height], at most {MAX_INPUT_SIDE} a side, "
                     f"got {raw!r}")
    return INVALID


def read_triple(r: Reader, raw: Any, where: str) -> tuple[float, float, float] | Any:
    if isinstance(raw, (int, float)) and not isinstance(raw, bool):
        return (float(raw),) * 3
    if (isinstance(raw, list) and len(raw) == 3
            and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in raw)):
        return tuple(float(v) for v in raw)
    r.problem(where, f"expected a number or a list of 3 numbers, got {raw!r}")
    return INVALID


def read_labels(r: Reader, raw: Any, where: str) -> list[str] | Any:
    """Class names: a YAML list, or a file (one per line, or a JSON list / {id: name})."""
    if isinstance(raw, list):
        return [str(v) for v in raw]
    resolved = read_file(r, raw, where)
    if resolved is INVALID:
        return INVALID
    try:
        text = Path(resolved).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        r.problem(where, f"cannot read {raw}: {e}")
        return INVALID
    if resolved.endswith(".json"):
        try:
            data = json.loads(text)
            if isinstance(data, dict):
                return [str(data[k]) for k in sorted(data, key=lambda k: int(k))]
            if isinstance(data, list):
                return [str(v) for v in data]
        except (ValueError, TypeError):
            pass
        r.problem(where, f"{raw}: expected a JSON list of names or an {{id: name}} mapping")
        return INVALID
    return [line.strip() for line in text.splitlines() if line.strip()]


@dataclass(kw_only=True)
class BatchingConfig:
    max_batch: int = option(4, check=at_most(MAX_BATCH, "items in one batch", positive), doc="most items in one batch")
    max_wait_ms: float = option(10.0, check=non_negative,
                                doc="longest a waiting item is held back for a larger batch, where batching pays")
    batch_sizes: list[int] | None = option(None, doc="pad batches to these sizes (fixed shapes: CUDA graphs, TensorRT)")
    preferred: int | None = option(None, check=positive, shown="measured",
                                   doc="the batch worth holding items back for while every worker is busy (default: "
                                       "measured at start-up: the smallest batch about as cheap per item as any)")

    def finish(self, r: Reader, path: str) -> None:
        if self.batch_sizes is None:
            return
        where = f"{path}.batch_sizes"
        if not self.batch_sizes or any(s <= 0 for s in self.batch_sizes):
            r.problem(where, "expected a list of positive integers")
            self.batch_sizes = None
        elif max(self.batch_sizes) < self.max_batch:
            r.problem(where, f"largest size {max(self.batch_sizes)} is below max_batch {self.max_batch}")
            self.batch_sizes = None
        else:
            self.batch_sizes = sorted(set(self.batch_sizes))


@dataclass(kw_only=True)
class EngineConfig:
    providers: list[Literal["cpu", "cuda", "tensorrt"]] = option(
        factory=lambda: ["cpu"], doc="execution providers in order of preference (CPU is always the last resort)")
    mode: Literal["auto", "thread", "async"] = option(
        "auto", doc="`thread`: dispatcher workers; `async`: `run_async` (needs >= 2 intra-op threads)")
    max_inflight: int | None = option(None, check=at_most(MAX_BATCH, "batches in flight", positive), shown="planned",
                                      doc="batches submitted and not yet consumed")
    workers: int | None = option(None, check=at_most(*ENGINE_THREADS, positive), shown="planned",
                                 doc="dispatcher threads (default: the shared CPU pool; 1 per GPU session)")
    intra_op_threads: int | None = option(None, check=at_most(*ENGINE_THREADS, positive), shown="planned",
                                          doc="ORT intra-op threads per run")
    idle_intra_op_threads: int | None = option(
        None, check=at_most(*ENGINE_THREADS, positive), shown="off",
        doc="CPU: a lone batch submitted while nothing else runs uses this many intra-op threads (a second, "
            "spinning session); measured in `pipeline bench --load-sweep`")
    inter_op_threads: int = option(1, check=at_most(*ENGINE_THREADS, positive), doc="ORT inter-op threads")
    graph_optimization: Literal["disable", "basic", "extended", "all"] = option("all", doc="ORT graph optimisation")
    io_binding: bool = option(True, doc="run on buffers bound once (no per-run allocation or copies)")
    cuda_graph: bool = option(False, doc="CUDA only: capture and replay CUDA graphs (use with `batch_sizes`)")
    device_id: int = option(0, check=non_negative, doc="GPU index")
    cudnn_conv_algo_search: Literal["heuristic", "exhaustive", "default"] = option(
        "heuristic", doc="CUDA: how cuDNN picks convolution algorithms (`exhaustive` times every candidate on a "
                         "shape's first run: mid-stream, where a batch size is first seen)")
    trt_fp16: bool = option(True, doc="TensorRT: allow FP16")
    trt_cache_dir: str | None = option(None, read=read_path, doc="TensorRT engine cache folder")

    def finish(self, r: Reader, path: str) -> None:
        """A captured CUDA graph replays fixed buffer addresses on the thread that captured
        it. What contradicts that in the config itself is refused on every machine (the
        YAML that a laptop validates is the one a GPU server runs); the planned worker
        count, known only on the device, is checked there (`engines.plan`)."""
        if not self.cuda_graph:
            return
        wrong = [("io_binding", "needs io_binding: true")] if not self.io_binding else []
        if self.mode == "async":
            wrong.append(("mode", "needs mode: thread (or auto), not async"))
        if self.workers is not None and self.workers != 1:
            wrong.append(("workers", f"needs workers: 1 (one capturing thread per session), got {self.workers}"))
        for key, why in wrong:
            r.problem(f"{path}.{key}", f"cuda_graph: true {why}")


@dataclass(kw_only=True)
class ModelConfig:
    name: str = internal("")
    path: str = option(read=read_file, doc="the ONNX file (relative to the config)")
    layout: Layout | None = option(None, shown="from the file",
                                   doc="output layout: `yolox` raw head, `yolov5`, `yolov8` (also v11), `e2e` (NMS "
                                       "inside), `classifier` (default: what the output shape and metadata tell)")
    input_size: tuple[int, int] | None = option(None, read=read_size, shown="from the file",
                                                doc="model input: an integer or [width, height] (default: the "
                                                    "file's fixed input shape, else its `imgsz` metadata)")
    reshape: bool = option(False, doc="run the graph at `input_size` where the file fixes another size (a fully "
                                      "convolutional detector such as YOLOX runs at any multiple of its stride: "
                                      "a 16:9 camera at [416, 256] instead of the square 416, 0.6x the work)")
    color: Literal["bgr", "rgb"] | None = option(None, shown="`bgr`; Ultralytics export: `rgb`",
                                                 doc="channel order the model wants")
    scale: float | None = option(None, shown="`1.0`; Ultralytics export: 1/255",
                                 doc="input value = (pixel * scale - mean) / std")
    mean: tuple[float, float, float] = option((0.0, 0.0, 0.0), read=read_triple,
                                              doc="a number or 3 numbers in the model's colour order")
    std: tuple[float, float, float] = option((1.0, 1.0, 1.0), read=read_triple, doc="a number or 3 numbers")
    letterbox: Literal["top_left", "center", "stretch", "center_crop"] | None = option(
        None, shown="`top_left`; classifier: `stretch`; Ultralytics export: `center` (classifier: `center_crop`)",
        doc="how a picture is fitted into the input")
    pad_value: int = option(114, check=within(0, 255), doc="letterbox padding grey level")
    labels: list[str] = option(factory=list, read=read_labels, shown="the file's `names`, else none",
                               doc="class names: a text file (one per line), a JSON list, or a YAML list")
    score_threshold: float = option(0.3, check=within(0, 1), doc="detections below this score are dropped")
    nms_iou: float = option(0.45, check=lambda v: None if 0 < v <= 1 else f"must be within 0..1, got {v}",
                            doc="class-aware NMS overlap threshold")
    classes: list[str] | None = option(None, shown="all", doc="keep only these detector classes")
    max_detections: int = option(300, check=positive, doc="most detections per picture")
    softmax: bool = option(True, doc="classifiers: apply softmax (false when the model has one inside)")
    output: str | int | None = option(None, shown="the first",
                                      doc="the output to decode, by name or index (only it is fetched)")
    batching: BatchingConfig = option(factory=BatchingConfig, doc="dynamic batching")
    engine: EngineConfig = option(factory=EngineConfig, doc="the ONNX Runtime session and its dispatch")

    unset: frozenset[str] = internal(frozenset())
    from_file: dict[str, str] | None = internal(None)

    def __post_init__(self) -> None:
        """Settings left out keep plain defaults until `finish` asks the file for better ones
        (a record built in code, without `finish`, is complete as it is)."""
        self.unset = frozenset(k for k in ("color", "scale", "letterbox") if getattr(self, k) is None)
        self.color = self.color or "bgr"
        self.scale = 1.0 if self.scale is None else self.scale
        if self.letterbox is None and self.layout is not None:
            self.letterbox = "stretch" if self.layout == "classifier" else "top_left"

    def finish(self, r: Reader, path: str) -> None:
        self._from_file(r, path)
        if self.letterbox is None:
            self.letterbox = "stretch" if self.layout == "classifier" else "top_left"
        if any(s == 0 for s in self.std):
            r.problem(f"{path}.std", "must not contain 0")
        if self.classes is not None and self.labels:
            for i, c in enumerate(self.classes):
                if c not in self.labels:
                    r.problem(f"{path}.classes[{i}]", f"unknown class {c!r} (not in labels)")

    def _from_file(self, r: Reader, path: str) -> None:
        """Fill what the config leaves out from what the ONNX file says (`from_file` keeps
        why, for the start-up line); `layout` and `input_size` are required only where
        the file cannot tell."""
        from pipeline.config.model_defaults import file_defaults
        from pipeline.config.model_file import MetadataError, ModelFileError, read_model_file

        reported = {p.split(":", 1)[0] for p in r.problems}
        required = {k for k in ("layout", "input_size") if getattr(self, k) is None and f"{path}.{k}" not in reported}
        wanted = set(self.unset) | required | (set() if self.labels else {"labels"})
        if not self.path:
            for k in sorted(required):
                r.problem(f"{path}.{k}", "required")
            return
        try:
            found = file_defaults(read_model_file(self.path), wanted, self.output, self.layout)
        except ModelFileError as e:
            if required or isinstance(e, MetadataError):
                r.problem(f"{path}.path", str(e))
            return
        self.from_file = {}
        for key, supplied in found.values.items():
            setattr(self, key, supplied.value)
            self.from_file[key] = supplied.why
        for key in sorted(required - set(found.values)):
            r.problem(f"{path}.{key}", f"required: {found.missing.get(key, 'the file does not tell')}")

    def from_file_line(self) -> str | None:
        """The start-up line naming the settings that came from the ONNX file (None: none did)."""
        if not self.from_file:
            return None
        more = ", ..." if len(self.labels) > 3 else ""
        shown = {"labels": f"{len(self.labels)} names ({', '.join(self.labels[:3])}{more})",
                 "input_size": f"{self.input_size[0]}x{self.input_size[1]}" if self.input_size else "",
                 "scale": f"{self.scale:.6g}"}
        parts = [f"{k} {shown.get(k, getattr(self, k))} ({why})" for k, why in self.from_file.items()]
        return f"models.{self.name}: from the file {Path(self.path).name}: {'; '.join(parts)}"

    @property
    def is_classifier(self) -> bool:
        return self.layout == "classifier"
