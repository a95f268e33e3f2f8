"""`pipeline models inspect PATH`: what an ONNX file says, what the pipeline makes of it, and why.

The layout comes from the output shape and metadata; where two layouts share a shape (a
raw YOLOX head and YOLOv5), each reading is run on a real picture through the start-up
check (`DetectionDecoder.implausible`): the wrong one gives degenerate or far-away boxes.
The answer ends in a model block to paste into a config.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from pipeline.config import ModelConfig
from pipeline.config.schema import Reader, file_problem
from pipeline.config.model_defaults import FILE_FIELDS, FileDefaults, file_defaults
from pipeline.config.model_file import ULTRALYTICS_KEYS, ModelFile, read_model_file


@dataclass
class Reading:
    """One layout tried on the picture: why it does not fit (None: it does) and what it found."""

    layout: str
    problem: str | None
    found: str = ""


@dataclass
class Inspection:
    file: ModelFile
    defaults: FileDefaults
    picture: str
    layout: str | None = None
    layout_why: str = ""
    readings: list[Reading] = field(default_factory=list)
    model: ModelConfig | None = None


def load_picture(path: str | None) -> tuple[np.ndarray, str]:
    """A BGR picture from an image or the first frame of a video; by default the first
    frame of the sample clip, else the built-in test card."""
    from pipeline.catalog import SAMPLES_DIR
    from pipeline.engines.model_check import test_card

    if path is None:
        sample = SAMPLES_DIR / "vtest.mp4"
        if not sample.is_file():
            return test_card(), "the built-in test card"
        path = str(sample)
    import av
    import cv2

    why = file_problem(path)
    if why is not None:  # a FIFO would hold the read for ever
        raise ValueError(f"--picture {path}: {why}")
    image = cv2.imread(path)
    if image is not None:
        return image, os.path.basename(path)
    try:
        with av.open(path) as c:
            return next(c.decode(video=0)).to_ndarray(format="bgr24"), f"the first frame of {os.path.basename(path)}"
    except Exception as e:  # PyAV raises many types for files that are not video
        raise ValueError(f"--picture {path}: neither an image nor a readable video ({type(e).__name__})") from None


def inspect_model(path: str, picture: np.ndarray, picture_name: str) -> Inspection:
    """Everything `inspect` shows; raises `ModelFileError` (one line) for an unreadable
    file or damaged metadata."""
    mf = read_model_file(path)
    found = file_defaults(mf, set(FILE_FIELDS))
    ins = Inspection(mf, found, picture_name)
    if "input_size" not in found.values:
        ins.layout = found.values["layout"].value if "layout" in found.values else None
        ins.layout_why = f"{_shape_reason(found)[1]}; not run: no input size"
        return ins
    for layout in found.layouts:
        model, reading = _try(path, layout, picture)
        ins.readings.append(reading)
        if reading.problem is None and ins.model is None:
            ins.model = model
    fitting = [r.layout for r in ins.readings if r.problem is None]
    _, shape_why = _shape_reason(found)
    if len(fitting) == 1:
        ins.layout = fitting[0]
        checked = "" if len(found.layouts) == 1 else f"; only {fitting[0]} gives plausible boxes on {picture_name}"
        ins.layout_why = shape_why + checked
    elif fitting:
        ins.layout_why = (f"{shape_why}; {' and '.join(fitting)} both give plausible boxes on {picture_name}: "
                          f"give `layout`")
    else:
        ins.layout_why = found.missing.get("layout", shape_why) if not ins.readings else \
            f"{shape_why}; no reading fits on {picture_name}"
    return ins


def _shape_reason(found: FileDefaults) -> tuple[str | None, str]:
    supplied = found.values.get("layout")
    if supplied is not None:
        return supplied.value, supplied.why
    why = found.missing.get("layout", "")
    return None, why.removeprefix("the file does not tell: ").split("; `pipeline models inspect")[0]


def _try(path: str, layout: str, picture: np.ndarray) -> tuple[ModelConfig, Reading]:
    """The model read with `layout` (everything else from the file), run on the picture
    through the start-up checks."""
    from pipeline.decoders.layouts import DetectionDecoder, classify
    from pipeline.engines.model_check import model_problems
    from pipeline.engines.session import ModelError, create_session
    from pipeline.preprocess import Preprocessor

    r = Reader(Path(path).parent)
    model = r.record(ModelConfig, {"path": os.path.abspath(path), "layout": layout}, "model", {"name": "inspected"})
    try:
        session = create_session(model, 1)
    except ModelError as e:
        return model, Reading(layout, str(e))
    problems = model_problems(model, session, picture)
    if problems:
        return model, Reading(layout, "; ".join(p.split(": ", 1)[-1] for p in problems))
    out = session.run(None, {session.get_inputs()[0].name: Preprocessor(model)(picture)[0].numpy()[None]})
    if model.is_classifier:
        top, prob = classify(out[0], model.softmax)
        name = model.labels[top[0]] if model.labels else str(top[0])
        return model, Reading(layout, None, f"top-1 {name} ({prob[0]:.2f})")
    det = DetectionDecoder(model).decode(out, 1)[0]
    counts: dict[str, int] = {}
    for c in det.class_id.tolist():
        counts[det.names(c)] = counts.get(det.names(c), 0) + 1
    shown = ", ".join(f"{n} {k}" for k, n in sorted(counts.items(), key=lambda kv: -kv[1])[:4])
    found = f"{len(det)} boxes above {model.score_threshold}" + (f": {shown}" if shown else "")
    return model, Reading(layout, None, found)


def report(ins: Inspection) -> str:
    """The inspection as text for a terminal, ending in the YAML block."""
    mf = ins.file
    lines = [f"file: {mf.path}" + (f" (made by {mf.producer})" if mf.producer else "")]
    for label, tensors in (("input", mf.inputs), ("output", mf.outputs)):
        for t in tensors:
            dynamic = [str(d) for d in t.shape if not isinstance(d, int)]
            lines.append(f"{label}: {t.name} {t.shows()}" + (f"  dynamic: {', '.join(dynamic)}" if dynamic else ""))
    lines += _metadata_lines(mf)
    lines.append(f"layout: {ins.layout or 'cannot tell'} ({ins.layout_why})")
    for r in ins.readings:
        lines.append(f"  read as {r.layout} on {ins.picture}: " + (r.found if r.problem is None else r.problem))
    for key in ("input_size", "labels", "color", "scale", "letterbox"):
        s = ins.defaults.values.get(key)
        if s is not None:
            value = (f"{len(s.value)} names" if key == "labels" else
                     f"{s.value[0]}x{s.value[1]}" if key == "input_size" else s.value)
            lines.append(f"{key}: {value} ({s.why})")
        elif key in ins.defaults.missing:
            lines.append(f"{key}: {ins.defaults.missing[key]}")
        elif key == "labels":
            lines.append("labels: the file names no classes")
    lines += ["", "# a model block for your config (only `path` is needed where the file tells the rest):",
              yaml_block(ins)]
    return "\n".join(lines)


def _metadata_lines(mf: ModelFile) -> list[str]:
    if not mf.metadata:
        return ["metadata: none"]
    known = []
    names = mf.names()
    if names is not None:
        known.append(f"names: {len(names)} ({', '.join(names[:4])}{', ...' if len(names) > 4 else ''})")
    imgsz = mf.imgsz()
    if imgsz is not None:
        known.append(f"imgsz: {imgsz[0]}x{imgsz[1]} (width x height)")
    for key in ("stride", "batch"):
        if mf.number(key) is not None:
            known.append(f"{key}: {mf.number(key)}")
    known += [f"{k}: {mf.metadata[k]}" for k in ("task", "author", "version") if k in mf.metadata]
    lines = [f"metadata ({mf.family or 'exporter not named'}): " + ("; ".join(known) or "nothing it understands")]
    for key, value in mf.metadata.items():
        if key not in ULTRALYTICS_KEYS:
            lines.append(f"  {key} = {value if len(value) <= 100 else value[:97] + '...'}")
    return lines


def yaml_block(ins: Inspection) -> str:
    """A `models:` block: every setting spelled out, commented with where it comes from."""
    name = re.sub(r"[^A-Za-z0-9_]", "_", Path(ins.file.path).stem) or "model"
    m = ins.model
    values = ins.defaults.values
    lines = ["models:", f"  {name}:", f"    path: {ins.file.path}"]
    if ins.layout:
        lines.append(f"    layout: {ins.layout}")
    else:
        lines.append(f"    layout: {' | '.join(ins.defaults.layouts) or 'yolox | yolov5 | yolov8 | e2e | classifier'}"
                     f"  # choose: the file does not tell")
    size = values.get("input_size")
    lines.append(f"    input_size: [{size.value[0]}, {size.value[1]}]" if size else
                 "    input_size: 640  # fill in: the file does not tell")
    for key in ("color", "scale", "letterbox"):
        if m is not None:
            source = values[key].why if key in values else "the default"
            lines.append(f"    {key}: {getattr(m, key)}  # {source}")
    labels = values.get("labels")
    if labels:
        lines.append(f"    # labels: from the file's names ({len(labels.value)})")
    else:
        lines.append("    # labels: the file names no classes: give a list or a file of names")
    return "\n".join(lines)
