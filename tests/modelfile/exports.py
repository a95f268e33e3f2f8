"""Model files as users bring them, built from the catalog's models: an Ultralytics-style
export (the keys and formats Ultralytics writes into its metadata), one that says nothing
about itself, and one whose metadata is hostile."""
from __future__ import annotations

import numpy as np

COCO = ("person", "bicycle", "car", "motorcycle", "airplane", "bus", "train", "truck", "boat", "traffic light",
        "fire hydrant", "stop sign", "parking meter", "bench", "bird", "cat", "dog", "horse", "sheep", "cow",
        "elephant", "bear", "zebra", "giraffe", "backpack", "umbrella", "handbag", "tie", "suitcase", "frisbee",
        "skis", "snowboard", "sports ball", "kite", "baseball bat", "baseball glove", "skateboard", "surfboard",
        "tennis racket", "bottle", "wine glass", "cup", "fork", "knife", "spoon", "bowl", "banana", "apple",
        "sandwich", "orange", "broccoli", "carrot", "hot dog", "pizza", "donut", "cake", "chair", "couch",
        "potted plant", "bed", "dining table", "toilet", "tv", "laptop", "mouse", "remote", "keyboard", "cell phone",
        "microwave", "oven", "toaster", "sink", "refrigerator", "book", "clock", "vase", "scissors", "teddy bear",
        "hair drier", "toothbrush")


def ultralytics_metadata(**changes: str) -> dict[str, str]:
    """What an Ultralytics 8.x ONNX export writes, value for value in its formats."""
    meta = {"description": "Ultralytics YOLOv8n-style model trained on coco.yaml", "author": "Ultralytics",
            "date": "2026-01-01T00:00:00.000000", "version": "8.3.40",
            "license": "AGPL-3.0 License (https://ultralytics.com/license)", "docs": "https://docs.ultralytics.com",
            "stride": "32", "task": "detect", "batch": "1", "imgsz": "[416, 416]",
            "names": str(dict(enumerate(COCO))),
            "args": "{'batch': 1, 'half': False, 'dynamic': True, 'simplify': True, 'opset': 11, 'nms': False}"}
    meta.update(changes)
    return meta


def _set_metadata(model, metadata: dict[str, str]) -> None:
    del model.metadata_props[:]
    for key, value in metadata.items():
        entry = model.metadata_props.add()
        entry.key, entry.value = key, value


def _dynamic(value, names: dict[int, str]) -> None:
    dims = value.type.tensor_type.shape.dim
    for i, name in names.items():
        dims[i].ClearField("dim_value")
        dims[i].dim_param = name


def make_ultralytics_style(v8_src: str, dst: str, **metadata: str) -> str:
    """The catalog's YOLOv8-layout model made to behave like an Ultralytics export: it takes
    RGB 0..1 (a channel flip and x255 in front of the network), declares batch, height,
    width and anchors dynamic, and carries Ultralytics' metadata (`metadata` changes keys)."""
    import onnx
    from onnx import helper, numpy_helper

    m = onnx.load(v8_src)
    g = m.graph
    image = g.input[0].name
    for node in g.node:
        for i, name in enumerate(node.input):
            if name == image:
                node.input[i] = "bgr255"
    g.initializer.extend([numpy_helper.from_array(np.array([2, 1, 0], np.int64), "rgb_to_bgr"),
                          numpy_helper.from_array(np.array(255, np.float32), "to_255")])
    front = [helper.make_node("Gather", [image, "rgb_to_bgr"], ["bgr01"], axis=1, name="rgb_to_bgr_gather"),
             helper.make_node("Mul", ["bgr01", "to_255"], ["bgr255"], name="to_255_mul")]
    nodes = front + list(g.node)
    del g.node[:]
    g.node.extend(nodes)
    _dynamic(g.input[0], {0: "batch", 2: "height", 3: "width"})
    _dynamic(g.output[0], {0: "batch", 2: "anchors"})
    _set_metadata(m, ultralytics_metadata(**metadata))
    onnx.save(m, dst)
    return dst


def make_undescribed(src: str, dst: str) -> str:
    """`src` with no metadata and a dynamic input size: the file tells neither its size nor
    (for a [b, n, 5+C] output) its layout."""
    import onnx

    m = onnx.load(src)
    _dynamic(m.graph.input[0], {2: "height", 3: "width"})
    _set_metadata(m, {})
    onnx.save(m, dst)
    return dst


def make_fp16_breaker(dst: str) -> str:
    """A two-class 'classifier' whose weights (70,000 and 80,000) exceed float16's largest
    number: in float32 class 1 always wins on a bright picture; in float16 both weights
    become infinite and the answer changes."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    inits = [numpy_helper.from_array(np.array([[7e4, 8e4]] * 3, np.float32), "w")]
    nodes = [helper.make_node("ReduceMean", ["input"], ["mean"], axes=[2, 3], keepdims=0),
             helper.make_node("MatMul", ["mean", "w"], ["logits"])]
    graph = helper.make_graph(nodes, "fp16_breaker",
                              [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", 3, 8, 8])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 2])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, dst)
    return dst


def make_oversized(src: str, dst: str, side: int, imgsz: bool = False) -> str:
    """`src` asking for a `side` x `side` input: as its fixed input shape, or (`imgsz`) as
    the metadata of a file whose input size is dynamic."""
    import onnx

    m = onnx.load(src)
    dims = m.graph.input[0].type.tensor_type.shape.dim
    if imgsz:
        _dynamic(m.graph.input[0], {2: "height", 3: "width"})
        _set_metadata(m, {"imgsz": f"[{side}, {side}]"})
    else:
        dims[2].dim_value = dims[3].dim_value = side
    onnx.save(m, dst)
    return dst
