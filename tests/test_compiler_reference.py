"""The IR's reference interpreter against plain loops written from the
semantics in tpu/compiler/reference.py, and against the activation unit's
golden model."""

import math

import numpy as np
import pytest

from tpu.compiler import ir, reference
from tpu.compiler.ir import Activation, QuantType
from tpu.models.activation_model import (ActivationSettings, Function, quantize_multiplier,
                                      run_operation, sigmoid_table, tanh_table)

from conftest import base_seed


# Independent scalar implementations ------------------------------------------------------

def gemmlowp_mbqm(x, multiplier, shift):
    """TFLite's MultiplyByQuantizedMultiplier on Python ints (C semantics)."""
    left, right = max(shift, 0), max(-shift, 0)
    x = ((x << left) + 2 ** 31) % 2 ** 32 - 2 ** 31
    if x == multiplier == -2 ** 31:
        high = 2 ** 31 - 1
    else:
        ab = x * multiplier
        nudge = 2 ** 30 if ab >= 0 else 1 - 2 ** 30
        high = int((ab + nudge) / 2 ** 31) if abs(ab + nudge) < 2 ** 52 else \
            (abs(ab + nudge) >> 31) * (1 if ab + nudge >= 0 else -1)
    mask = (1 << right) - 1
    remainder = high & mask
    threshold = (mask >> 1) + (1 if high < 0 else 0)
    return (high >> right) + (1 if remainder > threshold else 0)


def real_multiplier(in_scale, w_scale, out_scale):
    f = lambda v: float(np.float32(v))
    return f(in_scale) * f(w_scale) / f(out_scale)


def table_value(kind, v, pre, out):
    """The table entry for pre-domain value v, straight from the float32 formula."""
    f32 = np.float32
    real = f32(pre.scale) * f32(v - pre.zero_point)
    with np.errstate(over="ignore"):
        y = f32(1) / (f32(1) + f32(math.exp(-float(real)) if -float(real) < 700 else np.inf)) \
            if kind == "sigmoid" else f32(math.tanh(float(real)))
    scaled = float(f32(y * (f32(1) / f32(out.scale))))
    rounded = math.copysign(math.floor(abs(scaled) + 0.5), scaled)
    low, high = out.range
    return int(min(max(rounded + out.zero_point, low), high))


def finish(v, out, act):
    """Zero point already added: clamp and function, one value."""
    low, high = out.range
    kind = act.kind.value
    if kind == "relu":
        low = max(low, out.zero_point)
    if kind == "clamp":
        low, high = max(low, act.clamp_min), min(high, act.clamp_max)
    v = min(max(v, low), high)
    if kind in ("sigmoid", "tanh"):
        v = table_value(kind, v, act.pre, out)
    return v


def loop_matrix_out(acc, in_q, w_scale, out_q, act):
    target = act.pre if act.kind.value in ("sigmoid", "tanh") else out_q
    m, s = quantize_multiplier(real_multiplier(in_q.scale, w_scale, target.scale))
    acc = (acc + 2 ** 31) % 2 ** 32 - 2 ** 31
    return finish(gemmlowp_mbqm(acc, m, s) + target.zero_point, out_q, act)


def loop_rescale(v, in_q, out_q):
    if in_q == out_q:
        return v
    m, s = quantize_multiplier(real_multiplier(in_q.scale, 1.0, out_q.scale))
    low, high = out_q.range
    return min(max(gemmlowp_mbqm(v - in_q.zero_point, m, s) + out_q.zero_point, low), high)


def tflite_avg(total, count):
    if total > 0:
        return (total + count // 2) // count
    return -((count // 2 - total) // count)


# Random cases ----------------------------------------------------------------------------

def rand_quant(rng, unsigned=None):
    unsigned = bool(rng.integers(2)) if unsigned is None else unsigned
    low, high = (0, 255) if unsigned else (-128, 127)
    return QuantType(float(np.float32(rng.uniform(0.005, 0.2))), int(rng.integers(low, high + 1)),
                     unsigned)


def rand_activation(rng, out_q):
    kind = rng.choice(["none", "relu", "clamp", "sigmoid", "tanh"])
    if kind == "clamp":
        low, high = out_q.range
        a, b = sorted(rng.integers(low, high + 1, 2))
        return Activation("clamp", clamp_min=int(a), clamp_max=int(b))
    if kind in ("sigmoid", "tanh"):
        return Activation(kind, pre=rand_quant(rng, out_q.unsigned))
    return Activation(kind)


def rand_values(rng, shape, quant):
    low, high = quant.range
    return rng.integers(low, high + 1, shape).astype(quant.dtype)


@pytest.fixture
def rng():
    seed = base_seed()
    print(f"seed {seed}")
    return np.random.default_rng(seed)


def test_dense_against_loops(rng):
    for _ in range(20):
        b, k, n = rng.integers(1, 5), rng.integers(1, 20), rng.integers(1, 9)
        in_q, out_q = rand_quant(rng), rand_quant(rng)
        layer = ir.Dense("fc", "x", "y", rng.integers(-128, 128, (k, n)).astype(np.int8),
                         rng.uniform(0.001, 0.05, n), rng.integers(-5000, 5000, n),
                         rand_activation(rng, out_q))
        x = rand_values(rng, (b, k), in_q)
        got = reference.dense(layer, x, in_q, out_q)
        assert got.dtype == out_q.dtype and got.shape == (b, n)
        for i in range(b):
            for j in range(n):
                acc = sum((int(x[i, t]) - in_q.zero_point) * int(layer.weight[t, j])
                          for t in range(k)) + int(layer.bias[j])
                assert got[i, j] == loop_matrix_out(acc, in_q, layer.weight_scale[j], out_q,
                                                    layer.activation), (i, j, layer.activation)


def test_conv2d_against_loops(rng):
    for _ in range(12):
        b = int(rng.integers(1, 3))
        h, w = rng.integers(2, 7, 2)
        kh, kw = rng.integers(1, 4, 2)
        cin, cout = rng.integers(1, 4, 2)
        pad = tuple(int(p) for p in rng.integers(0, 3, 4))
        stride = tuple(int(s) for s in rng.integers(1, 3, 2))
        if h + pad[0] + pad[2] < kh or w + pad[1] + pad[3] < kw:
            continue
        in_q, out_q = rand_quant(rng), rand_quant(rng)
        layer = ir.Conv2D("conv", "x", "y",
                          rng.integers(-128, 128, (kh, kw, cin, cout)).astype(np.int8),
                          rng.uniform(0.001, 0.05, cout), rng.integers(-3000, 3000, cout),
                          stride, pad, rand_activation(rng, out_q))
        x = rand_values(rng, (b, h, w, cin), in_q)
        got = reference.conv2d(layer, x, in_q, out_q)
        oh = (h + pad[0] + pad[2] - kh) // stride[0] + 1
        ow = (w + pad[1] + pad[3] - kw) // stride[1] + 1
        assert got.shape == (b, oh, ow, cout)
        for i in range(b):
            for oy in range(oh):
                for ox in range(ow):
                    for n in range(cout):
                        acc = int(layer.bias[n])
                        for dy in range(kh):
                            for dx in range(kw):
                                y, xx = oy * stride[0] + dy - pad[0], ox * stride[1] + dx - pad[1]
                                if 0 <= y < h and 0 <= xx < w:
                                    for c in range(cin):
                                        acc += (int(x[i, y, xx, c]) - in_q.zero_point) * \
                                            int(layer.weight[dy, dx, c, n])
                        assert got[i, oy, ox, n] == loop_matrix_out(
                            acc, in_q, layer.weight_scale[n], out_q, layer.activation)


@pytest.mark.parametrize("kind", ["max", "avg"])
def test_pool2d_against_loops(rng, kind):
    for _ in range(15):
        b, h, w, c = 2, int(rng.integers(2, 8)), int(rng.integers(2, 8)), int(rng.integers(1, 4))
        k = tuple(int(v) for v in rng.integers(1, 4, 2))
        s = tuple(int(v) for v in rng.integers(1, 4, 2))
        pad = tuple(int(min(p, k[i % 2] - 1)) for i, p in enumerate(rng.integers(0, 2, 4)))
        if h + pad[0] + pad[2] < k[0] or w + pad[1] + pad[3] < k[1]:
            continue
        in_q = rand_quant(rng)
        out_q = in_q if rng.integers(2) else rand_quant(rng)
        layer = ir.Pool2D("pool", "x", "y", kind, k, s, pad)
        x = rand_values(rng, (b, h, w, c), in_q)
        got = reference.pool2d(layer, x, in_q, out_q)
        oh = (h + pad[0] + pad[2] - k[0]) // s[0] + 1
        ow = (w + pad[1] + pad[3] - k[1]) // s[1] + 1
        assert got.shape == (b, oh, ow, c) and got.dtype == out_q.dtype
        for i in range(b):
            for oy in range(oh):
                for ox in range(ow):
                    for ch in range(c):
                        window = [loop_rescale(int(x[i, y, xx, ch]), in_q, out_q)
                                  for y in range(oy * s[0] - pad[0], oy * s[0] - pad[0] + k[0])
                                  for xx in range(ox * s[1] - pad[1], ox * s[1] - pad[1] + k[1])
                                  if 0 <= y < h and 0 <= xx < w]
                        want = max(window) if kind == "max" else tflite_avg(sum(window),
                                                                            len(window))
                        assert got[i, oy, ox, ch] == want


def test_global_avg_pool_against_loops(rng):
    for _ in range(10):
        h, w, c = (int(v) for v in rng.integers(1, 7, 3))
        in_q = rand_quant(rng)
        out_q = in_q if rng.integers(2) else rand_quant(rng)
        x = rand_values(rng, (3, h, w, c), in_q)
        got = reference.global_avg_pool(ir.GlobalAvgPool("gap", "x", "y"), x, in_q, out_q)
        assert got.shape == (3, 1, 1, c)
        for i in range(3):
            for ch in range(c):
                total = sum(loop_rescale(int(v), in_q, out_q) for v in x[i, :, :, ch].reshape(-1))
                assert got[i, 0, 0, ch] == tflite_avg(total, h * w)


def test_add_against_loops(rng):
    for _ in range(10):
        a_q, b_q, out_q = rand_quant(rng), rand_quant(rng), rand_quant(rng)
        act = rand_activation(rng, out_q)
        layer = ir.Add("add", "a", "b", "y", act)
        a, b = rand_values(rng, (2, 3, 3, 2), a_q), rand_values(rng, (2, 3, 3, 2), b_q)
        got = reference.add(layer, a, b, a_q, b_q, out_q)
        f32 = np.float32
        target = act.pre if act.kind.value in ("sigmoid", "tanh") else out_q
        for idx in np.ndindex(a.shape):
            real = f32(f32(a_q.scale) * f32(int(a[idx]) - a_q.zero_point)) + \
                f32(f32(b_q.scale) * f32(int(b[idx]) - b_q.zero_point))
            v = int(np.rint(f32(real / f32(target.scale)))) + target.zero_point
            assert got[idx] == finish(v, out_q, act)


def test_elementwise_against_loops(rng):
    for _ in range(20):
        in_q, out_q = rand_quant(rng), rand_quant(rng)
        act = rand_activation(rng, out_q)
        x = rand_values(rng, (2, 40), in_q)
        got = reference.elementwise(ir.Elementwise("e", "x", "y", act), x, in_q, out_q)
        target = act.pre if act.kind.value in ("sigmoid", "tanh") else out_q
        for idx in np.ndindex(x.shape):
            v = int(x[idx])
            if in_q != target:
                m, s = quantize_multiplier(real_multiplier(in_q.scale, 1.0, target.scale))
                v = gemmlowp_mbqm(v - in_q.zero_point, m, s) + target.zero_point
            assert got[idx] == finish(v, out_q, act)


def test_reshape_orders():
    x = np.arange(2 * 2 * 3 * 4).reshape(2, 2, 3, 4).astype(np.int8)
    hwc = reference.reshape(ir.Reshape("r", "x", "y", "hwc"), x, (24,))
    assert (hwc == x.reshape(2, 24)).all()
    chw = reference.reshape(ir.Reshape("r", "x", "y", "chw"), x, (24,))
    # Element (c, h, w) of the channel-major flattening is pixel (h, w)'s channel c.
    for c in range(4):
        for h in range(2):
            for w in range(3):
                assert (chw[:, c * 6 + h * 3 + w] == x[:, h, w, c]).all()
    q1, q2 = QuantType(0.1, 0), QuantType(0.2, 0)
    with pytest.raises(ir.IRError, match="quantization"):
        reference.reshape(ir.Reshape("r", "x", "y"), x, (24,), q1, q2)


def test_softmax_host_op(rng):
    in_q, out_q = QuantType(0.1, 3), QuantType(1 / 256, 0, unsigned=True)
    x = rand_values(rng, (4, 10), in_q)
    (got,) = reference.host_op(ir.HostOp("sm", "softmax", ["x"], ["y"]), [x], [in_q], [out_q])
    real = 0.1 * (x.astype(np.float64) - 3)
    e = np.exp(real - real.max(axis=1, keepdims=True))
    want = e / e.sum(axis=1, keepdims=True)
    assert got.dtype == np.uint8
    assert np.abs(got.astype(np.int64) - np.clip(np.rint(want * 256), 0, 255)).max() <= 1
    with pytest.raises(ir.IRError, match="no host operator"):
        reference.host_op(ir.HostOp("h", "gelu", ["x"], ["y"]), [x], [in_q], [out_q])


def test_quantize_is_onnx_quantize_linear():
    q = QuantType(0.5, -3)
    # 0.25 / 0.5 = 0.5 rounds to even (0), 0.75 / 0.5 = 1.5 to 2; saturation both ways.
    got = reference.quantize([0.25, 0.75, -0.25, -0.75, 1000.0, -1000.0], q)
    assert got.dtype == np.int8
    assert got.tolist() == [-3, -1, -3, -5, 127, -128]
    u = QuantType(0.1, 10, unsigned=True)
    assert reference.quantize([-5.0, 30.0], u).tolist() == [0, 255]
    assert np.allclose(reference.dequantize(np.array([10, 20]), u), [0.0, 1.0])
    with pytest.raises(ValueError, match="NaN"):
        reference.quantize([np.nan], q)


def test_requantization_matches_activation_unit(rng):
    """A Dense layer equals the activation unit's golden model with the
    settings a compiler derives from it."""
    for kind in ["none", "relu", "clamp", "sigmoid", "tanh"]:
        for _ in range(4):
            k, n = int(rng.integers(1, 30)), int(rng.integers(1, 9))
            in_q, out_q = rand_quant(rng), rand_quant(rng)
            act = Activation(kind) if kind in ("none", "relu") else \
                Activation(kind, clamp_min=out_q.range[0] + 20, clamp_max=out_q.range[1] - 30) \
                if kind == "clamp" else Activation(kind, pre=rand_quant(rng, out_q.unsigned))
            layer = ir.Dense("fc", "x", "y", rng.integers(-128, 128, (k, n)).astype(np.int8),
                             rng.uniform(0.001, 0.05, n), rng.integers(-9000, 9000, n), act)
            x = rand_values(rng, (5, k), in_q)
            target = act.pre if act.pre is not None else out_q
            m, s = ir.requant_multipliers(in_q, layer.weight_scale, target)
            lut = None
            if kind in ("sigmoid", "tanh"):
                build = sigmoid_table if kind == "sigmoid" else tanh_table
                lut = build(target.scale, target.zero_point, out_q.scale, out_q.zero_point,
                            out_q.unsigned)
            settings = ActivationSettings(
                cols=n, bias=layer.bias, multiplier=m, shift=s,
                function=Function[kind.upper()], unsigned=out_q.unsigned,
                zero_point=target.zero_point, clamp_min=act.clamp_min or -256,
                clamp_max=act.clamp_max or 255, lut=lut)
            acc = (x.astype(np.int64) - in_q.zero_point) @ layer.weight.astype(np.int64)
            chip = run_operation(settings, acc).view(out_q.dtype)
            assert (reference.dense(layer, x, in_q, out_q) == chip).all(), kind


def small_graph():
    q_in, q_c, q_p, q_v, q_o = (QuantType(0.05, -10), QuantType(0.08, -128),
                                QuantType(0.08, -128), QuantType(0.08, -128),
                                QuantType(0.1, 5))
    rng = np.random.default_rng(7)
    tensors = {n: ir.Tensor(n, s, q) for n, s, q in [
        ("x", (6, 6, 2), q_in), ("c", (6, 6, 3), q_c), ("p", (3, 3, 3), q_p),
        ("v", (27,), q_v), ("y", (4,), q_o), ("s", (4,), QuantType(1 / 256, -128))]}
    layers = [
        ir.Conv2D("conv", "x", "c", rng.integers(-100, 100, (3, 3, 2, 3)).astype(np.int8),
                  [0.01, 0.02, 0.015], [10, -20, 30], padding=(1, 1, 1, 1),
                  activation=Activation("relu")),
        ir.Pool2D("pool", "c", "p", "max", (2, 2), (2, 2)),
        ir.Reshape("flat", "p", "v", "chw"),
        ir.Dense("fc", "v", "y", rng.integers(-100, 100, (27, 4)).astype(np.int8), 0.01),
        ir.HostOp("sm", "softmax", ["y"], ["s"]),
    ]
    graph = ir.Graph(tensors, layers,
                     [ir.GraphInput("x", "input", (None, 2, 6, 6), np.dtype(np.float32), "nchw")],
                     [ir.GraphOutput("s", "prob", (None, 4), np.dtype(np.float32), "nc")],
                     "small")
    return graph.validate()


def test_run_chains_layers():
    graph = small_graph()
    x = np.random.default_rng(3).integers(-128, 128, (3, 6, 6, 2)).astype(np.int8)
    values = reference.run(graph, {"x": x})
    assert set(values) == set(graph.tensors)
    q = lambda n: graph.tensor(n).quant
    c = reference.conv2d(graph.layers[0], x, q("x"), q("c"))
    assert (values["c"] == c).all()
    assert (values["p"] == c.reshape(3, 3, 2, 3, 2, 3).max(axis=(2, 4))).all()
    assert values["v"].shape == (3, 27)
    outs = reference.run(graph, {"x": x}, outputs_only=True)
    assert list(outs) == ["s"] and (outs["s"] == values["s"]).all()
    assert outs["s"].dtype == np.int8


def test_run_rejects_bad_inputs():
    graph = small_graph()
    with pytest.raises(ValueError, match="do not match"):
        reference.run(graph, {"z": np.zeros((1, 6, 6, 2), np.int8)})
    with pytest.raises(ValueError, match="shape"):
        reference.run(graph, {"x": np.zeros((1, 6, 6, 3), np.int8)})
    with pytest.raises(ValueError, match="outside int8"):
        reference.run(graph, {"x": np.full((1, 6, 6, 2), 200)})
    with pytest.raises(ValueError, match="integers"):
        reference.run(graph, {"x": np.zeros((1, 6, 6, 2), np.float32)})
