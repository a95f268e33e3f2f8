"""ONNX models built for the tests from the real ones (or from scratch): a fixed-batch
export, a deliberately slow model for overload tests."""
from __future__ import annotations

import numpy as np


def make_fixed_batch(src: str, dst: str, batch: int = 1) -> str:
    """A copy of an ONNX model whose batch dimension is fixed (as many exports ship)."""
    import onnx

    m = onnx.load(src)
    for value in list(m.graph.input) + list(m.graph.output):
        dim = value.type.tensor_type.shape.dim[0]
        dim.ClearField("dim_param")
        dim.dim_value = batch
    onnx.save(m, dst)
    return dst



def make_slow_model(path: str, size: int = 64, matmuls: int = 6, shared: bool = False) -> str:
    """A deliberately slow 'detector' (end-to-end layout, never detects anything): a chain
    of 64x1024 @ 1024x1024 matrix products, for overload tests; `shared`: one matrix for
    every product (the same cost in a 4 MB file)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((64, 1024)).astype(np.float32) * 0.01, "seed")]
    nodes = [helper.make_node("ReduceMean", ["images"], ["level"], keepdims=0),  # depends on the input:
             helper.make_node("Mul", ["seed", "level"], ["a0"])]                 # nothing to constant-fold
    for i in range(matmuls):
        if i == 0 or not shared:
            inits.append(numpy_helper.from_array(rng.standard_normal((1024, 1024)).astype(np.float32) * 0.03, f"w{i}"))
        nodes.append(helper.make_node("MatMul", [f"a{i}", "w0" if shared else f"w{i}"], [f"a{i + 1}"]))
    inits += [numpy_helper.from_array(np.zeros((1, 1, 6), np.float32), "zeros"),
              numpy_helper.from_array(np.array([1, 2, 3], np.int64), "axes")]
    nodes += [helper.make_node("ReduceSum", ["images", "axes"], ["per_image"], keepdims=1),  # [b, 1, 1, 1]
              helper.make_node("ReduceSum", [f"a{matmuls}"], ["total"], keepdims=0),
              helper.make_node("Mul", ["per_image", "total"], ["mixed"]),
              helper.make_node("Squeeze", ["mixed", "axes3"], ["mixed3"]),
              helper.make_node("Mul", ["mixed3", "zeros"], ["output"])]
    inits.append(numpy_helper.from_array(np.array([3], np.int64), "axes3"))
    graph = helper.make_graph(
        nodes, "slow",
        [helper.make_tensor_value_info("images", TensorProto.FLOAT, ["batch", 3, size, size])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["batch", 1, 6])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return path


def make_nms_inside(src: str, dst: str, score_threshold: float = 0.3, iou: float = 0.45) -> str:
    """YOLOX-nano with its box decode and ONNX `NonMaxSuppression` inside: an end-to-end
    export whose output [n, 7] (batch, x1, y1, x2, y2, score, class) has one row per kept
    box, so its shape changes with every picture. Each box keeps its best class only, as
    the pipeline's own decoder does, so both give the same detections."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from pipeline.decoders.layouts import yolox_grid

    m = onnx.load(src)
    grid, stride = yolox_grid(416, 416)
    g = m.graph
    raw = g.output[0].name
    consts = {"grid": grid, "stride": stride, "half": np.array(0.5, np.float32),
              "s01": np.array([0], np.int64), "e01": np.array([2], np.int64), "e23": np.array([4], np.int64),
              "e4": np.array([5], np.int64), "e85": np.array([85], np.int64), "ax2": np.array([2], np.int64),
              "max_out": np.array([300], np.int64), "iou": np.array([iou], np.float32),
              "thr": np.array([score_threshold], np.float32), "idx02": np.array([0, 2], np.int64),
              "c1": np.array([1], np.int64), "c2": np.array([2], np.int64)}
    g.initializer.extend(numpy_helper.from_array(np.asarray(v), k) for k, v in consts.items())
    N = helper.make_node
    g.node.extend([
        N("Slice", [raw, "s01", "e01", "ax2"], ["dxy"]), N("Slice", [raw, "e01", "e23", "ax2"], ["lwh"]),
        N("Slice", [raw, "e23", "e4", "ax2"], ["obj"]), N("Slice", [raw, "e4", "e85", "ax2"], ["cls"]),
        N("Add", ["dxy", "grid"], ["gxy"]), N("Mul", ["gxy", "stride"], ["cxy"]),
        N("Exp", ["lwh"], ["ewh"]), N("Mul", ["ewh", "stride"], ["wh"]), N("Mul", ["wh", "half"], ["hwh"]),
        N("Sub", ["cxy", "hwh"], ["xy1"]), N("Add", ["cxy", "hwh"], ["xy2"]),
        N("Concat", ["xy1", "xy2"], ["boxes"], axis=2),
        N("ReduceMax", ["cls"], ["best"], axes=[2], keepdims=1), N("Equal", ["cls", "best"], ["is_best"]),
        N("Cast", ["is_best"], ["best_mask"], to=TensorProto.FLOAT), N("Mul", ["cls", "obj"], ["all_scores"]),
        N("Mul", ["all_scores", "best_mask"], ["scores_nc"]),
        N("Transpose", ["scores_nc"], ["scores"], perm=[0, 2, 1]),
        N("NonMaxSuppression", ["boxes", "scores", "max_out", "iou", "thr"], ["selected"]),
        N("Gather", ["selected", "idx02"], ["batch_box"], axis=1),
        N("GatherND", ["boxes", "batch_box"], ["kept_boxes"]),
        N("GatherND", ["scores", "selected"], ["kept_scores"]),
        N("Unsqueeze", ["kept_scores"], ["kept_scores1"], axes=[1]),
        N("Slice", ["selected", "s01", "c1", "c1"], ["sel_batch"]),
        N("Slice", ["selected", "c1", "c2", "c1"], ["sel_class"]),
        N("Cast", ["sel_batch"], ["batch_f"], to=TensorProto.FLOAT),
        N("Cast", ["sel_class"], ["class_f"], to=TensorProto.FLOAT),
        N("Concat", ["batch_f", "kept_boxes", "kept_scores1", "class_f"], ["detections"], axis=1),
    ])
    del g.output[:]
    g.output.append(helper.make_tensor_value_info("detections", TensorProto.FLOAT, ["n", 7]))
    onnx.checker.check_model(m)
    onnx.save(m, dst)
    return dst


def make_v5_layout(src: str, dst: str) -> str:
    """YOLOX-nano with its box decode inside, emitting the YOLOv5 layout [b, n, 85]:
    cx, cy, w, h in input pixels, objectness, 80 class scores (same shape as the raw head)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from pipeline.decoders.layouts import yolox_grid

    m = onnx.load(src)
    g = m.graph
    raw = g.output[0].name
    grid, stride = yolox_grid(416, 416)
    consts = {"v5_grid": grid, "v5_stride": stride, "v5_0": np.array([0], np.int64), "v5_2": np.array([2], np.int64),
              "v5_4": np.array([4], np.int64), "v5_85": np.array([85], np.int64), "v5_ax": np.array([2], np.int64)}
    g.initializer.extend(numpy_helper.from_array(np.asarray(v), k) for k, v in consts.items())
    N = helper.make_node
    g.node.extend([
        N("Slice", [raw, "v5_0", "v5_2", "v5_ax"], ["v5_dxy"]), N("Slice", [raw, "v5_2", "v5_4", "v5_ax"], ["v5_lwh"]),
        N("Slice", [raw, "v5_4", "v5_85", "v5_ax"], ["v5_rest"]),
        N("Add", ["v5_dxy", "v5_grid"], ["v5_gxy"]), N("Mul", ["v5_gxy", "v5_stride"], ["v5_cxy"]),
        N("Exp", ["v5_lwh"], ["v5_ewh"]), N("Mul", ["v5_ewh", "v5_stride"], ["v5_wh"]),
        N("Concat", ["v5_cxy", "v5_wh", "v5_rest"], ["v5_output"], axis=2),
    ])
    del g.output[:]
    g.output.append(helper.make_tensor_value_info("v5_output", TensorProto.FLOAT, ["batch", 3549, 85]))
    onnx.checker.check_model(m)
    onnx.save(m, dst)
    return dst
