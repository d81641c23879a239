"""Requantization rounding of a QDQ convolution against ONNX Runtime.

ONNX Runtime's QLinearConv requantizes in float32: ``float(acc) * scale``
rounded to float32, then rounded half to even. The chip's one rounding
multiplies exactly by the same float32 multiplier and rounds once (ties
toward +infinity), so where the float32 product rounds onto a half the two
differ by one step; one such step early in a deep network grows into many
differing outputs (MobileNetV2's QDQ form in tests/test_imagenet_models.py
with ``TPU_SEED`` 1, 5, 6 or 7). ACT's ``mlas_round`` rounds as ONNX
Runtime does, and the ONNX front end sets it for the layers ONNX Runtime
fuses into QLinearConv or QLinearMatMul. (ONNX Runtime leaves 15 of
MobileNetV2's 52 convolutions unfused, float32 Conv on dequantized values
then QuantizeLinear: their float32 sums round differently from the chip's
exact int32 ones.)"""

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from tpu import TPUConfig
from tpu.compiler import zoo
from tpu.compiler.session import InferenceSession

# From MobileNetV2's conv_33 (seed 1): acc = 11258, multiplier
# float32(0.04445459 * 0.00547721) / 0.02352941 = 0.010348197: the exact
# product 116.5000049 is 116.5 in float32, which ONNX Runtime rounds to 116.
IN_SCALE, IN_ZERO = 0.04445459321141243, 4
W_SCALE = 0.005477206781506538
OUT_SCALE, OUT_ZERO = 0.0235294122248888, -128


def _conv_model(weight, bias):
    def c(name, value):
        return numpy_helper.from_array(value, name)

    inits = [
        c("sx", np.float32(IN_SCALE)), c("zx", np.int8(IN_ZERO)),
        c("w", np.array(weight, np.int8).reshape(1, 1, 1, 1)), c("sw", np.float32(W_SCALE)),
        c("zw", np.int8(0)),
        c("b", np.array([bias], np.int32)),
        c("sb", np.float32(np.float32(IN_SCALE) * np.float32(W_SCALE))), c("zb", np.int32(0)),
        c("sy", np.float32(OUT_SCALE)), c("zy", np.int8(OUT_ZERO))]
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "sx", "zx"], ["xq"]),
        helper.make_node("DequantizeLinear", ["xq", "sx", "zx"], ["xd"]),
        helper.make_node("DequantizeLinear", ["w", "sw", "zw"], ["wd"]),
        helper.make_node("DequantizeLinear", ["b", "sb", "zb"], ["bd"]),
        helper.make_node("Conv", ["xd", "wd", "bd"], ["yf"], kernel_shape=[1, 1]),
        helper.make_node("QuantizeLinear", ["yf", "sy", "zy"], ["yq"]),
        helper.make_node("DequantizeLinear", ["yq", "sy", "zy"], ["y"])]
    graph = helper.make_graph(
        nodes, "float32_tie",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 1, 1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, 1, 1])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", zoo.OPSET)])
    model.ir_version = zoo.IR_VERSION
    onnx.checker.check_model(model, full_check=True)
    return model


def test_float32_product_tie_matches_onnxruntime():
    # ONNX Runtime fuses the node group into a QLinearConv, so the compiler
    # gives the layer the "mlas" rounding (ACT's mlas_round); with the
    # chip's one rounding (ties up) it gave 117.
    # (92 - 4) * 127 + 82 = 11258
    model = _conv_model(127, 82)
    x = np.full((1, 1, 1, 1), (92 - IN_ZERO) * IN_SCALE, np.float32)   # quantizes to 92
    # ONNX Runtime's integer kernel, not a float32 Conv
    assert "QLinearConv" in [n.op_type for n in zoo.ort_optimized(model).graph.node]
    (theirs,) = zoo.ort_run(model, x)
    assert round(float(theirs.reshape(-1)[0]) / OUT_SCALE) == 116
    session = InferenceSession(model, backend="golden", config=TPUConfig(rows=4, cols=4))
    (ours,) = session.run(None, {"x": x})
    assert np.array_equal(ours, theirs), \
        f"ours {ours.reshape(-1)}, ONNX Runtime's {theirs.reshape(-1)}"
