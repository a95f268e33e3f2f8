"""The inputs, outputs and metadata of an ONNX file, read without running it.

Metadata values are text. Ultralytics writes Python literals into them (`names` is
"{0: 'person', 1: 'bicycle', ...}", `imgsz` "[640, 640]"); they are parsed with
`ast.literal_eval`, which builds literals and never calls anything, and only when a value
is used, so a damaged or hostile value is a `MetadataError` naming the key, never code run.
"""
from __future__ import annotations

import ast
import importlib.util
import os
import sys
from dataclasses import dataclass, field
from typing import Any, Union

from pipeline.config.schema import describe_value
from pipeline.errors import PipelineError, one_line

Dim = Union[int, str]  # a fixed size, or the name of a dynamic axis
MAX_LITERAL_CHARS = 1 << 20  # a class list of 100,000 names still fits; a parser bomb does not
# The largest model input side the pipeline will try: a frame letterboxed to it takes
# 200 MB as float32; a file declaring 10^9 would ask for exabytes.
MAX_INPUT_SIDE = 4096
ULTRALYTICS_KEYS = ("names", "imgsz", "stride", "task", "batch", "author", "description", "version", "date",
                    "license", "docs")


class ModelFileError(PipelineError):
    """An ONNX file that cannot be read; the message is one line naming it."""


class MetadataError(ModelFileError):
    """A metadata value that is not the plain literal its key needs (damaged or hostile)."""


@dataclass(frozen=True)
class Tensor:
    name: str
    shape: tuple[Dim, ...]

    def shows(self) -> str:
        return "[" + ", ".join(str(d) for d in self.shape) + "]"


@dataclass
class ModelFile:
    path: str
    inputs: list[Tensor]
    outputs: list[Tensor]
    metadata: dict[str, str] = field(default_factory=dict)
    producer: str = ""

    @property
    def family(self) -> str | None:
        """The exporter whose preprocessing conventions the file follows (None: unknown)."""
        said = f"{self.metadata.get('author', '')} {self.metadata.get('description', '')}"
        return "ultralytics" if "ultralytics" in said.lower() else None

    @property
    def task(self) -> str | None:
        return self.metadata.get("task") or None

    def literal(self, key: str) -> Any:
        """The metadata value of `key` as a Python literal (None when absent)."""
        text = self.metadata.get(key)
        if text is None:
            return None
        excerpt = text if len(text) <= 50 else text[:47] + "..."
        if len(text) > MAX_LITERAL_CHARS:
            raise MetadataError(f"{os.path.basename(self.path)}: metadata {key!r} is {len(text)} characters long: "
                                f"refused")
        try:
            return ast.literal_eval(text.strip())
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError) as e:
            raise MetadataError(f"{os.path.basename(self.path)}: metadata {key} = {excerpt!r} is not a plain Python "
                                f"literal ({type(e).__name__}): refused, nothing in it was run") from None

    def names(self) -> list[str] | None:
        """Class names from `names`: an {id: name} mapping with ids 0..n-1, or a list."""
        value = self.literal("names")
        if value is None:
            return None
        if isinstance(value, dict) and all(isinstance(k, int) and not isinstance(k, bool) for k in value):
            if sorted(value) == list(range(len(value))):
                return [str(value[i]) for i in range(len(value))]
        elif isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
            return list(value)
        raise MetadataError(f"{os.path.basename(self.path)}: metadata names: expected {{id: name}} with ids 0..n-1 "
                            f"or a list of names, got {type(value).__name__}")

    def imgsz(self) -> tuple[int, int] | None:
        """(width, height) from `imgsz`, which Ultralytics writes as [height, width] or one number."""
        value = self.literal("imgsz")
        if value is None:
            return None
        if isinstance(value, (list, tuple)) and len(value) == 1:
            value = value[0]
        if _positive_int(value):
            return (value, value)
        if isinstance(value, (list, tuple)) and len(value) == 2 and all(_positive_int(v) for v in value):
            return (value[1], value[0])
        raise MetadataError(f"{os.path.basename(self.path)}: metadata imgsz: expected [height, width] or a number, "
                            f"got {describe_value(value)}")

    def number(self, key: str) -> int | None:
        """A positive integer value (`stride`, `batch`)."""
        value = self.literal(key)
        if value is None or _positive_int(value):
            return value
        raise MetadataError(f"{os.path.basename(self.path)}: metadata {key}: expected a positive integer, "
                            f"got {describe_value(value)}")

    def fixed_size(self) -> tuple[int, int] | None:
        """(width, height) of an NCHW image input whose height and width are fixed."""
        if len(self.inputs) != 1 or len(self.inputs[0].shape) != 4:
            return None
        h, w = self.inputs[0].shape[2:]
        return (w, h) if _positive_int(h) and _positive_int(w) else None

    def output(self, which: str | int | None) -> Tensor | None:
        """The output a model config decodes: by name or index, else the first."""
        if isinstance(which, int):
            return self.outputs[which] if 0 <= which < len(self.outputs) else None
        if isinstance(which, str):
            return next((o for o in self.outputs if o.name == which), None)
        return self.outputs[0] if self.outputs else None


def _positive_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v > 0


def _tensor(value) -> Tensor:
    dims = value.type.tensor_type.shape.dim
    return Tensor(value.name, tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in dims))


def _model_proto() -> type:
    """onnx's `ModelProto`, without the onnx package's own start-up: it imports ml_dtypes,
    over a second of CPU for each `pipeline validate` or `run` that only reads a file's
    inputs and metadata. The generated module needs only protobuf; it is registered under
    its own name, so the onnx package, imported later, uses it as it is."""
    name = "onnx.onnx_ml_pb2"
    if name not in sys.modules:
        package = importlib.util.find_spec("onnx")
        assert package is not None and package.submodule_search_locations, "the onnx package is missing"
        spec = importlib.util.spec_from_file_location(
            name, os.path.join(list(package.submodule_search_locations)[0], "onnx_ml_pb2.py"))
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name].ModelProto


def read_model_file(path: str) -> ModelFile:
    """The file's graph inputs and outputs and its metadata (weights are read, never run)."""
    try:
        with open(path, "rb") as f:
            model = _model_proto().FromString(f.read())  # as onnx.load(path, load_external_data=False)
    except Exception as e:  # protobuf and onnx raise several unrelated types for damaged files
        raise ModelFileError(f"{os.path.basename(path)}: not a readable ONNX file ({one_line(e)})") from None
    g = model.graph
    weights = {i.name for i in g.initializer}
    inputs = [_tensor(v) for v in g.input if v.name not in weights]
    if not model.ir_version or not model.HasField("graph") or not inputs or not g.output:
        # protobuf reads any few bytes, an empty file included, as a message with nothing set
        what = "an empty file" if os.path.getsize(path) == 0 else "no graph with inputs and outputs"
        raise ModelFileError(f"{os.path.basename(path)}: not a readable ONNX file ({what})")
    return ModelFile(path=path, inputs=inputs, outputs=[_tensor(v) for v in g.output],
                     metadata={p.key: p.value for p in model.metadata_props}, producer=model.producer_name)
