"""The model settings an ONNX file supplies, each with the reason it was chosen.

A model config may leave out what the file tells: `labels` (metadata `names`),
`input_size` (a fixed input shape, else metadata `imgsz`), `layout` (the output shape,
with the metadata `task`), and `color`, `scale`, `letterbox` (the conventions of the
exporter the metadata names). Two layouts can share an output shape (a raw YOLOX head
and YOLOv5 are both [b, n, 5+C]): such a file is ambiguous here, without running it;
`pipeline models inspect` runs both readings on a picture to tell them apart.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from pipeline.config.model_file import MAX_INPUT_SIDE, ModelFile, ModelFileError

# Preprocessing by exporter family and layout kind (Ultralytics: RGB 0..1, letterbox centred
# on grey 114 for detection, resize and centre crop for classification).
FAMILY_PREPROCESS: dict[str, dict[str, dict[str, Any]]] = {
    "ultralytics": {"detect": {"color": "rgb", "scale": 1 / 255, "letterbox": "center"},
                    "classify": {"color": "rgb", "scale": 1 / 255, "letterbox": "center_crop"}},
}
FAMILY_NAMES = {"ultralytics": "an Ultralytics export"}
FILE_FIELDS = ("layout", "input_size", "labels", "color", "scale", "letterbox")


@dataclass
class Supplied:
    value: Any
    why: str


@dataclass
class FileDefaults:
    """What the file supplies (field -> value and why), and why it cannot supply the rest."""

    values: dict[str, Supplied] = field(default_factory=dict)
    missing: dict[str, str] = field(default_factory=dict)
    layouts: tuple[str, ...] = ()  # the layouts the output shape allows (several: ambiguous)


def layout_candidates(mf: ModelFile, output: str | int | None = None) -> tuple[tuple[str, ...], str]:
    """The layouts the chosen output's shape (and the metadata `task`) allow, and why."""
    out = mf.output(output)
    if out is None:
        return (), f"it has no output {output!r}" if output is not None else "it has no outputs"
    shape, shows, task = out.shape, out.shows(), mf.task
    if task in ("segment", "pose", "obb"):
        return (), f"metadata task {task!r}: the pipeline decodes detection and classification only"
    batch = mf.inputs[0].shape[0] if mf.inputs and mf.inputs[0].shape else None
    if len(shape) == 2 and shape[1] == 7 and (task == "detect" or shape[0] != batch):
        return ("e2e",), f"output {shows} has one row (batch, x1, y1, x2, y2, score, class) per kept box"
    if task == "classify" or len(shape) == 2 or (len(shape) == 4 and shape[2:] == (1, 1)):
        return ("classifier",), f"output {shows} is [batch, classes]"
    if len(shape) == 3:
        a, c = shape[1], shape[2]
        if c == 6:
            return ("e2e",), f"output {shows} holds final boxes (x1, y1, x2, y2, score, class)"
        if isinstance(a, int) and a > 4 and (not isinstance(c, int) or a < c):
            return ("yolov8",), f"output {shows} is [batch, 4+{a - 4}, anchors]: box and class rows, anchors last"
        if isinstance(c, int) and c > 5 and (not isinstance(a, int) or a > c):
            return ("yolox", "yolov5"), (f"output {shows} is [batch, anchors, 5+{c - 5}], which a raw YOLOX head and "
                                         f"YOLOv5 share")
    return (), f"output {shows} fits none of the known layouts"


def file_defaults(mf: ModelFile, wanted: set[str], output: str | int | None = None,
                  layout: str | None = None) -> FileDefaults:
    """The `wanted` settings the file supplies; `layout` is the configured one, if any
    (it picks the preprocessing convention). Only the metadata values used are parsed."""
    found = FileDefaults()
    choices, why = layout_candidates(mf, output)
    found.layouts = choices
    if layout is None and "layout" in wanted:
        if len(choices) == 1:
            layout = choices[0]
            found.values["layout"] = Supplied(layout, why)
        elif choices:
            found.missing["layout"] = (f"the file does not tell: {why}; `pipeline models inspect {mf.path}` tries "
                                       f"both on a picture")
        else:
            found.missing["layout"] = f"the file does not tell: {why}"
    if "input_size" in wanted:
        _input_size(mf, found)
    if "labels" in wanted:
        names = mf.names()
        if names:
            found.values["labels"] = Supplied(names, f"{len(names)} names in the metadata")
    family = mf.family
    if family in FAMILY_PREPROCESS and layout is not None:
        kind = "classify" if layout == "classifier" else "detect"
        for key, value in FAMILY_PREPROCESS[family][kind].items():
            if key in wanted:
                found.values[key] = Supplied(value, FAMILY_NAMES[family])
    return found


def _input_size(mf: ModelFile, found: FileDefaults) -> None:
    fixed = mf.fixed_size()
    said = (fixed, f"input shape {mf.inputs[0].shows()}") if fixed else None
    imgsz = None if fixed else mf.imgsz()
    if imgsz:
        said = (imgsz, f"metadata imgsz {mf.metadata['imgsz']}")
    if said is not None:
        size, why = said
        if max(size) > MAX_INPUT_SIDE:
            raise ModelFileError(f"{os.path.basename(mf.path)}: {why} asks for an input of {size[0]}x{size[1]}, "
                                 f"beyond the {MAX_INPUT_SIDE} pixels a side the pipeline will try")
        found.values["input_size"] = Supplied(size, why)
        return
    shown = mf.inputs[0].shows() if mf.inputs else "none"
    found.missing["input_size"] = f"the file does not tell: its input {shown} has no fixed size and no imgsz metadata"
