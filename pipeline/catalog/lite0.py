"""EfficientNet-Lite0 as an ONNX graph, from its checkpoint's tensors (a state dict of
numpy arrays, as `torch_checkpoint` reads it): each batch norm folded into its
convolution, the graph built with `onnx.helper`.

Convolutions pad as TensorFlow's SAME does for a 224x224 input (the extra pixel of an
odd total at the bottom/right), as the model code's static padding does. Weights are
stored as float16 with a Cast back to float32 before use (half the file; compute stays
float32).
"""
from __future__ import annotations

import numpy as np

# EfficientNet-Lite0's stages (the published architecture, as the model code's
# `efficientnet_lite` builder lists them): repeats, kernel, stride, expansion, in, out.
# Lite models use ReLU6 and no squeeze-and-excitation; stem 32 and head 1280 channels.
LITE0_STAGES = ((1, 3, 1, 1, 32, 16), (2, 3, 2, 6, 16, 24), (2, 5, 2, 6, 24, 40), (3, 3, 2, 6, 40, 80),
                (3, 5, 1, 6, 80, 112), (4, 5, 2, 6, 112, 192), (1, 3, 1, 6, 192, 320))
LITE0_SIZE = 224
BN_EPS = 1e-3


class Lite0Graph:
    """The graph's nodes and initialisers as they are added, layer by layer."""

    def __init__(self, weights: dict[str, np.ndarray]):
        from onnx import numpy_helper

        self.weights = weights
        self.nodes: list = []
        self.inits: list = [numpy_helper.from_array(np.array(0, np.float32), "zero"),
                            numpy_helper.from_array(np.array(6, np.float32), "six")]

    def const(self, name: str, value: np.ndarray) -> str:
        """A float16 initialiser and its Cast to float32, named `name`."""
        from onnx import TensorProto, helper, numpy_helper

        half = numpy_helper.from_array(value.astype(np.float16), f"{name}_fp16")
        self.inits.append(half)
        self.nodes.append(helper.make_node("Cast", [half.name], [name], name=f"{name}_cast", to=TensorProto.FLOAT))
        return name

    def conv_bn(self, x: str, conv: str, bn: str, size: int, stride: int, relu6: bool) -> tuple[str, int]:
        """Convolution `conv` with batch norm `bn` folded in (and ReLU6): its output and size."""
        from onnx import helper

        w = self.weights[f"{conv}.weight"].astype(np.float64)
        gamma, beta, mean, var = (self.weights[f"{bn}.{k}"].astype(np.float64)
                                  for k in ("weight", "bias", "running_mean", "running_var"))
        scale = gamma / np.sqrt(var + BN_EPS)
        k = w.shape[-1]
        out_size = -(-size // stride)
        pad = max((out_size - 1) * stride + k - size, 0)
        y = f"{conv}/out"
        self.nodes.append(helper.make_node(
            "Conv", [x, self.const(f"{conv}.w", w * scale[:, None, None, None]),
                     self.const(f"{conv}.b", beta - mean * scale)],
            [y], name=conv, kernel_shape=[k, k], strides=[stride, stride],
            pads=[pad // 2, pad // 2, pad - pad // 2, pad - pad // 2],
            group=w.shape[0] if conv.endswith("_depthwise_conv") else 1))
        if relu6:
            self.nodes.append(helper.make_node("Clip", [y, "zero", "six"], [f"{conv}/relu6"], name=f"{conv}/relu6"))
            y = f"{conv}/relu6"
        return y, out_size

    def blocks(self, x: str, size: int) -> tuple[str, int]:
        """The inverted residual blocks of every stage: expand, depthwise, project, skip."""
        from onnx import helper

        block = 0
        for repeats, _, stride, expand, c_in, c_out in LITE0_STAGES:
            for r in range(repeats):
                p, skip, h = f"_blocks.{block}", x, x
                if expand != 1:
                    h, _ = self.conv_bn(h, f"{p}._expand_conv", f"{p}._bn0", size, 1, True)
                h, out_size = self.conv_bn(h, f"{p}._depthwise_conv", f"{p}._bn1", size, stride if r == 0 else 1, True)
                h, _ = self.conv_bn(h, f"{p}._project_conv", f"{p}._bn2", out_size, 1, False)
                if (stride if r == 0 else 1) == 1 and (c_in if r == 0 else c_out) == c_out:
                    self.nodes.append(helper.make_node("Add", [h, skip], [f"{p}/sum"], name=f"{p}/add"))
                    h = f"{p}/sum"
                x, size, block = h, out_size, block + 1
        return x, size


def lite0_model(weights: dict[str, np.ndarray]):
    """The whole model: stem, blocks, head, pooling and the classifier; input `input`
    (batch, 3, 224, 224), output `logits` (batch, 1000)."""
    from onnx import TensorProto, helper

    g = Lite0Graph(weights)
    x, size = g.conv_bn("input", "_conv_stem", "_bn0", LITE0_SIZE, 2, True)
    x, size = g.blocks(x, size)
    x, _ = g.conv_bn(x, "_conv_head", "_bn1", size, 1, True)
    g.nodes += [helper.make_node("GlobalAveragePool", [x], ["pooled"], name="pool"),
                helper.make_node("Flatten", ["pooled"], ["features"], name="flatten", axis=1),
                helper.make_node("Gemm", ["features", g.const("_fc.w", weights["_fc.weight"]),
                                          g.const("_fc.b", weights["_fc.bias"])], ["logits"], name="_fc", transB=1)]
    graph = helper.make_graph(
        g.nodes, "efficientnet_lite0",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", 3, LITE0_SIZE, LITE0_SIZE])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 1000])], g.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], producer_name="pipeline")
    model.ir_version = 7
    model.doc_string = ("EfficientNet-Lite0 (Google, Apache-2.0) ImageNet-1k; input RGB (pixel - 127) / 128, "
                        "224x224; output logits.")
    return model
