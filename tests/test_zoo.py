"""The model zoo: every builder makes a valid float ONNX model that ONNX
Runtime's quantize_static turns into an int8 model in both forms, and the
int8 model computes close to the float one."""

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from tpu.compiler import zoo

from conftest import base_seed


def _cnn():
    return zoo.conv_net((None, 1, 8, 8), [
        zoo.conv(8, k=3, pad=1), zoo.maxpool(2), zoo.conv(16, k=3, pad=1),
        zoo.global_avg_pool(), zoo.flatten(), zoo.dense(10, act=None)])


def _strided():
    # non-square image, non-square kernel, asymmetric padding, relu6, Reshape
    return zoo.conv_net((None, 3, 9, 7), [
        zoo.conv(5, k=(3, 2), stride=2, pad=(1, 0, 1, 1), act="relu6"),
        zoo.avgpool(3, stride=1, pad=1), zoo.flatten(reshape=True),
        zoo.dense(4, act="tanh", op="matmul")])


def _residual():
    return zoo.conv_net((2, 4, 6, 6), [
        zoo.conv(8, k=1), zoo.residual([zoo.conv(8, k=3, pad=1), zoo.conv(8, k=3, pad=1, act=None)]),
        zoo.maxpool(3, stride=2, pad=1), zoo.flatten(), zoo.dense(3, act="sigmoid")])


BUILDERS = {
    "mlp": (lambda: zoo.mlp([20, 16, 10]), (20,)),
    "mlp_matmul_sigmoid": (lambda: zoo.mlp([20, 12, 3], op="matmul", final_activation="sigmoid"), (20,)),
    "mlp_gemm_no_transb_tanh": (lambda: zoo.mlp([12, 9, 5], trans_b=False, activation="tanh"), (12,)),
    "cnn": (_cnn, (1, 8, 8)),
    "strided": (_strided, (3, 9, 7)),
    "residual": (_residual, (4, 6, 6)),
}

QOPERATOR_OPS = {"QGemm", "QLinearMatMul", "QLinearConv"}


def _calibration(shape, n, seed):
    return np.random.default_rng(seed).uniform(-1, 1, size=(n, *shape)).astype(np.float32)


@pytest.mark.parametrize("form", ["qdq", "qoperator"])
@pytest.mark.parametrize("builder", sorted(BUILDERS))
def test_builder_quantizes_and_runs(builder, form):
    seed = base_seed()
    print(f"seed {seed}")
    make, shape = BUILDERS[builder]
    model = make()
    onnx.checker.check_model(model, full_check=True)
    batch = 2 if builder == "residual" else 24
    x = _calibration(shape, batch, seed)
    reference = zoo.ort_run(model, x)[0]
    quantized = zoo.quantize(model, x, form=form)
    ops = {node.op_type for node in quantized.graph.node}
    if form == "qdq":
        assert {"QuantizeLinear", "DequantizeLinear"} <= ops and not ops & QOPERATOR_OPS
    else:
        assert ops & QOPERATOR_OPS
    y = zoo.ort_run(quantized, x)[0]
    assert y.shape == reference.shape and y.dtype == np.float32
    # int8 keeps the float result to a few percent of its range
    assert np.abs(y - reference).max() <= 0.08 * np.abs(reference).max() + 1e-3


@pytest.mark.parametrize("activation_type, dtype", [("int8", np.int8), ("uint8", np.uint8)])
@pytest.mark.parametrize("per_channel", [False, True])
def test_quantize_options(per_channel, activation_type, dtype):
    model = _cnn()
    x = _calibration((1, 8, 8), 16, 1)
    quantized = zoo.quantize(model, x, form="qoperator", per_channel=per_channel,
                             activation_type=activation_type)
    inits = {i.name: numpy_helper.to_array(i) for i in quantized.graph.initializer}
    convs = [n for n in quantized.graph.node if n.op_type == "QLinearConv"]
    assert len(convs) == 2
    for node in convs:
        x_zp, w, w_scale = inits[node.input[2]], inits[node.input[3]], inits[node.input[4]]
        assert x_zp.dtype == dtype and w.dtype == np.int8
        assert w_scale.size == (w.shape[0] if per_channel else 1)
        assert np.all(inits[node.input[5]] == 0), "weights are symmetric"


def test_mlp_takes_given_weights():
    rng = np.random.default_rng(3)
    weights = [(rng.normal(size=(4, 3)), rng.normal(size=3)), (rng.normal(size=(3, 2)), rng.normal(size=2))]
    x = rng.normal(size=(5, 4)).astype(np.float32)
    expected = np.maximum(x @ weights[0][0] + weights[0][1], 0) @ weights[1][0] + weights[1][1]
    for op, trans_b in (("gemm", True), ("gemm", False), ("matmul", True)):
        model = zoo.mlp([4, 3, 2], weights=weights, op=op, trans_b=trans_b)
        assert np.allclose(zoo.ort_run(model, {"x": x})[0], expected, atol=1e-5)


def test_conv_takes_given_weights():
    rng = np.random.default_rng(4)
    w = rng.normal(size=(2, 1, 3, 3)).astype(np.float32)
    b = np.array([0.5, -0.5], np.float32)
    x = rng.normal(size=(1, 1, 4, 5)).astype(np.float32)
    model = zoo.conv_net((1, 1, 4, 5), [zoo.conv(2, k=3, act=None, weight=w, bias=b)])
    y = zoo.ort_run(model, x)[0]
    expected = np.array([[[np.sum(x[0, 0, i:i + 3, j:j + 3] * w[c, 0]) + b[c] for j in range(3)]
                          for i in range(2)] for c in range(2)])
    assert np.allclose(y[0], expected, atol=1e-5)


@pytest.mark.parametrize("make, message", [
    (lambda: zoo.mlp([4]), "at least two"),
    (lambda: zoo.conv_net((1, 1, 2, 2), [zoo.conv(2, k=3)]), "leaves nothing"),
    (lambda: zoo.conv_net((1, 1, 4, 4), [zoo.dense(2)]), "flatten"),
    (lambda: zoo.conv_net((1, 1, 4, 4), [zoo.flatten(), zoo.conv(2)]), "needs an image"),
    (lambda: zoo.conv_net((1, 1, 4, 4), [zoo.residual([zoo.conv(2, k=3)])]), "keep the shape"),
    (lambda: zoo.dense(3, act="gelu"), "activation"),
    (lambda: zoo.quantize(zoo.mlp([2, 2]), np.zeros((1, 2)), form="int4"), "form"),
    (lambda: zoo.quantize(zoo.mlp([2, 2]), np.zeros((1, 2)), activation_type="int16"), "activation type"),
])
def test_bad_arguments(make, message):
    with pytest.raises(ValueError, match=message):
        make()
