"""`tpu.models.mlas_rounding` against a float32 emulation of MLAS's
requantization and against ONNX Runtime's QLinearConv and QLinearMatMul."""

import numpy as np
import pytest

from tpu.models.activation_model import (
    multiply_by_quantized_multiplier_single_round, quantize_multiplier, type_range)
from tpu.models.mlas_rounding import (
    multiply_by_float32_multiplier, multiply_by_float32_multiplier_window, requantize_mlas,
    requantize_mlas_window, _stages)

from conftest import base_seed
from tpu.sim.stimulus.mlas_ties import constructed_ties as _constructed_ties

SHIFTS = range(-32, 32)          # every shift the chip's 6-bit field holds


def _scale(m, shift):
    """The float32 scale ``m * 2**(shift - 24)`` (m the 24-bit significand)."""
    return np.ldexp(np.float64(m), np.asarray(shift) - 24).astype(np.float32)


def _emulate(x, m, shift, zero_point, qmin, qmax):
    """MLAS's steps in numpy float32: ``float32(x) * s`` (rounded to float32),
    the clamp in float, ``rint`` (half to even), the zero point."""
    v = np.asarray(x, dtype=np.int64).astype(np.float32) * _scale(m, shift)
    v = np.clip(v, np.float32(qmin - zero_point), np.float32(qmax - zero_point))
    return np.rint(v).astype(np.int64) + zero_point


def _emulate_unclamped(x, m, shift):
    return np.asarray(x, dtype=np.int64).astype(np.float32) * _scale(m, shift)


def _check(x, m, shift, rng, label):
    """Every output type and a random zero point of each, and the unclamped
    product wherever float32 holds it below 2**31."""
    x = np.asarray(x, dtype=np.int64)
    for unsigned in (False, True):
        qmin, qmax = type_range(unsigned)
        zp = int(rng.integers(qmin, qmax + 1))
        want = _emulate(x, m, shift, zp, qmin, qmax)
        got = requantize_mlas(x, m << 7, shift, zp, qmin, qmax)
        bad = np.flatnonzero(got != want)
        assert bad.size == 0, (f"{label}: uint8={unsigned} zp={zp} m={np.ravel(m)[:1]} "
                               f"shift={np.ravel(shift)[:1]} x={x[bad[:5]]} "
                               f"got {got[bad[:5]]} want {want[bad[:5]]}")
        window = requantize_mlas_window(x, m << 7, shift, zp, qmin, qmax)
        assert np.array_equal(window, want), label
    v = _emulate_unclamped(x, m, shift)
    inside = np.abs(v) < 2.0 ** 31
    got = multiply_by_float32_multiplier(x, m << 7, shift)
    want = np.rint(v[inside]).astype(np.int64)
    assert np.array_equal(got[inside], want), label
    small = inside & (np.abs(v) < 2.0 ** 22)
    window = multiply_by_float32_multiplier_window(x, m << 7, shift)
    assert np.array_equal(window[small], got[small]), label
    return int(np.count_nonzero(inside))


def _random_x(rng, n):
    """int32 values of every magnitude (a random number of top bits
    dropped), both signs, the extremes included."""
    x = rng.integers(-(1 << 31), 1 << 31, n, dtype=np.int64) >> rng.integers(0, 32, n)
    return np.concatenate([x, [-(1 << 31), (1 << 31) - 1, (1 << 24) + 1, -(1 << 24) - 1, 0]])


def test_random_values_every_shift():
    seed = base_seed()
    print(f"seed {seed}")
    rng = np.random.default_rng(seed)
    total = 0
    for shift in SHIFTS:
        for _ in range(4):
            m = int(rng.integers(1 << 23, 1 << 24))
            total += _check(_random_x(rng, 6_000), m, shift, rng, f"random shift {shift}")
    assert total > 1_500_000 // 2


def test_real_model_scales_near_outputs():
    """Sums whose product lands in the 8-bit range (the values a real layer
    gives), for scales from 2**-32 to 2: most of them unclamped."""
    seed = base_seed() + 1
    print(f"seed {seed}")
    rng = np.random.default_rng(seed)
    for shift in range(-31, 2):
        for _ in range(6):
            m = int(rng.integers(1 << 23, 1 << 24))
            target = rng.uniform(-300.0, 300.0, 10_000)
            x = np.clip(np.round(target / float(_scale(m, shift))), -(1 << 31), (1 << 31) - 1)
            x = x.astype(np.int64) + rng.integers(-2, 3, x.size)
            _check(np.clip(x, -(1 << 31), (1 << 31) - 1), m, shift, rng, f"near shift {shift}")


def test_stage_sizes_for_8_bit_outputs():
    """What the module's docstring sizes the stages by: wherever an 8-bit
    output is not clamped, stage 3 rounds at least 16 bits below the
    integer point (``g <= T - 16``) and stage 1 rounds only for scales
    below ``2**-16``."""
    seed = base_seed() + 10
    print(f"seed {seed}")
    rng = np.random.default_rng(seed)
    for shift in range(-31, 2):
        m = rng.integers(1 << 23, 1 << 24, 200_000)
        x = _random_x(rng, m.size - 5)
        p, d, g, t = _stages(x, m << 7, shift)
        free = np.abs(multiply_by_float32_multiplier(x, m << 7, shift)) <= 255
        assert np.all(g[free] <= t[free] - 16)
        assert np.all(_scale(m[free & (d > 0)], shift) < 2.0 ** -16)


def test_constructed_ties_at_both_roundings():
    seed = base_seed() + 2
    print(f"seed {seed}")
    rng = np.random.default_rng(seed)
    x, m, shift = _constructed_ties(rng, 60_000)
    _check(x, m, shift, rng, "constructed ties")
    # the cases are there: exact ties (the exact product is k + 1/2: x is
    # exact in float32 here) and products that only float32 rounding puts
    # on the half
    v = _emulate_unclamped(x, m, shift).astype(np.float64)
    on_half = (v - np.floor(v)) == 0.5
    t = 24 - shift                                     # fraction bits of |x| * m
    product = np.abs(x) * m                            # below 2**55
    exact_half = (t >= 1) & ((product & ((1 << t) - 1)) == (1 << np.maximum(t - 1, 0)))
    exact_ties = np.count_nonzero(on_half & exact_half)
    float32_ties = np.count_nonzero(on_half & ~exact_half)
    near = np.count_nonzero(~on_half & (np.abs(v - np.floor(v) - 0.5) < 2.0 ** -14))
    print(f"exact ties {exact_ties}, float32 ties {float32_ties}, next to a tie {near}")
    assert exact_ties > 1000 and float32_ties > 1000 and near > 1000
    # and they are where the chip's one rounding (ties up) differs
    chip = multiply_by_quantized_multiplier_single_round(x, m << 7, shift)
    differ = np.count_nonzero(chip != multiply_by_float32_multiplier(x, m << 7, shift))
    print(f"the chip's single rounding differs in {differ} of {x.size}")
    assert differ > 1000


def test_float32_conversion_ties_above_2_24():
    """``|x| > 2**24``: ``float32(x)`` rounds half to even, at every position
    (``x`` of 25 to 31 bits, the dropped bits exactly a half, just below and
    just above), with scales that keep the product in the 8-bit range."""
    seed = base_seed() + 3
    print(f"seed {seed}")
    rng = np.random.default_rng(seed)
    for bits in range(25, 32):
        d = bits - 24
        top = rng.integers(1 << 23, 1 << 24, 30_000, dtype=np.int64)
        half = 1 << (d - 1)
        for offset in (half, half - 1, half + 1 if d > 1 else 0):
            x = (top << d) + offset
            x = np.where(rng.integers(0, 2, x.size) == 1, -x, x)
            for shift in range(-bits - 8, -bits + 8, 3):    # products of 2**-8 to 2**7
                m = int(rng.integers(1 << 23, 1 << 24))
                _check(x, m, shift, rng, f"x of {bits} bits, shift {shift}")


def test_multiplier_must_be_a_float32_significand():
    with pytest.raises(ValueError):
        requantize_mlas(1, (1 << 30) + 1, 0, 0, -128, 127)
    m, s = quantize_multiplier(float(np.float32(0.0123)))
    assert m % 128 == 0
    assert int(requantize_mlas(100, m, s, 0, -128, 127)) == 1


# ONNX Runtime ---------------------------------------------------------------------------------

def _multiplier(x_scale, w_scales, y_scale):
    """(multiplier, shift) per channel of ONNX Runtime's float32 scale
    ``(s_x * s_w) / s_y``."""
    pairs = [quantize_multiplier(float((np.float32(x_scale) * np.float32(s)) / np.float32(y_scale)))
             for s in np.asarray(w_scales).reshape(-1)]
    return np.array([p[0] for p in pairs]), np.array([p[1] for p in pairs])


def _scales(rng, n, center=None):
    """float32 scales of a real model's range (or within 20% of `center`),
    some with short significands (more exact ties)."""
    if center is None:
        s = np.exp2(rng.uniform(-12, -2, n)).astype(np.float32)
    else:
        s = (center * rng.uniform(0.8, 1.2, n)).astype(np.float32)
    short = rng.integers(0, 2, n) == 1
    coarse = (np.round(np.ldexp(np.frexp(s)[0], 6)) * np.ldexp(1.0, np.frexp(s)[1] - 6))
    return np.where(short, coarse.astype(np.float32), s).astype(np.float32)


def _short(scale, bits):
    """`scale` rounded to a significand of `bits` bits (float32)."""
    mantissa, exponent = np.frexp(np.asarray(scale, dtype=np.float64))
    return np.ldexp(np.round(np.ldexp(mantissa, bits)), exponent - bits).astype(np.float32)


def _output_scale(rng, reals):
    """An output scale that maps most of ``reals`` into 8 bits (as a
    calibrated model's does), sometimes of a short significand."""
    spread = max(float(np.percentile(np.abs(reals), 95)), 1e-12)
    (scale,) = _scales(rng, 1, center=spread / 120)
    return scale


def _conv_acc(x, zx, w, bias, stride, pad, group):
    """int64 sums of a QLinearConv (NCHW, OIHW weights of zero point 0)."""
    n, cin, h, wd = x.shape
    cout, cin_g, kh, kw = w.shape
    xp = np.pad(x.astype(np.int64) - zx, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh = (h + 2 * pad - kh) // stride + 1
    ow = (wd + 2 * pad - kw) // stride + 1
    out = np.zeros((n, cout, oh, ow), np.int64)
    per = cout // group
    for o in range(cout):
        gi = o // per
        xs = xp[:, gi * cin_g:(gi + 1) * cin_g]
        for i in range(kh):
            for j in range(kw):
                patch = xs[:, :, i:i + stride * oh:stride, j:j + stride * ow:stride]
                out[:, o] += np.einsum("nchw,c->nhw", patch, w[o, :, i, j].astype(np.int64))
    return out + bias.reshape(1, -1, 1, 1)


def _counts(acc, mult, shift, zy, qmin, qmax, ours):
    """Values compared, not clamped, with ``|acc| > 2**24``, and where the
    chip's present rounding (the exact product rounded once, ties up)
    differs."""
    chip = np.clip(multiply_by_quantized_multiplier_single_round(acc, mult, shift) + zy,
                   qmin, qmax)
    free = (ours > qmin) & (ours < qmax)
    return np.array([ours.size, np.count_nonzero(free), np.count_nonzero(np.abs(acc) > 1 << 24),
                     np.count_nonzero(chip != ours)])


def _report(counts, differ=0):
    print(f"{counts[0]} values equal, {counts[1]} of them not clamped, {counts[2]} sums past "
          f"2**24; the chip's one rounding differs in {counts[3]}")
    assert counts[1] > counts[0] // 2 and counts[3] >= differ


def _one_node_model(node, elem_type, in_name, in_shape, out_shape, inits):
    """A checked model of `node` alone: input `in_name` and output ``y`` of
    `elem_type`, the other inputs from `inits`."""
    import onnx
    from onnx import helper
    from tpu.compiler import zoo
    graph = helper.make_graph([node], node.op_type.lower(),
                              [helper.make_tensor_value_info(in_name, elem_type, list(in_shape))],
                              [helper.make_tensor_value_info("y", elem_type, list(out_shape))],
                              inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", zoo.OPSET)])
    model.ir_version = zoo.IR_VERSION
    onnx.checker.check_model(model)
    return model


def _qlinearconv_model(x_type, shape, out_shape, x_scale, zx, w, w_scale, y_scale, zy, bias,
                       stride, pad, group, w_type=np.int8, zw=0):
    from onnx import TensorProto, helper, numpy_helper
    np_type = np.uint8 if x_type == TensorProto.UINT8 else np.int8
    inits = [numpy_helper.from_array(np.float32(x_scale), "sx"),
             numpy_helper.from_array(np_type(zx), "zx"),
             numpy_helper.from_array((w + zw).astype(w_type), "w"),
             numpy_helper.from_array(w_scale.astype(np.float32), "sw"),
             numpy_helper.from_array(np.full(w.shape[0], zw, w_type), "zw"),
             numpy_helper.from_array(np.float32(y_scale), "sy"),
             numpy_helper.from_array(np_type(zy), "zy"),
             numpy_helper.from_array(bias.astype(np.int32), "b")]
    node = helper.make_node("QLinearConv", ["x", "sx", "zx", "w", "sw", "zw", "sy", "zy", "b"],
                            ["y"], kernel_shape=list(w.shape[2:]), strides=[stride, stride],
                            pads=[pad] * 4, group=group)
    return _one_node_model(node, x_type, "x", shape, out_shape, inits)


@pytest.mark.parametrize("unsigned", [False, True])
def test_qlinearconv_matches_onnxruntime(unsigned):
    pytest.importorskip("onnxruntime")
    from onnx import TensorProto
    from tpu.compiler import zoo
    seed = base_seed() + 4 + unsigned
    print(f"seed {seed}")
    rng = np.random.default_rng(seed)
    qmin, qmax = type_range(unsigned)
    x_type = TensorProto.UINT8 if unsigned else TensorProto.INT8
    counts = np.zeros(4, np.int64)
    for case in range(40):
        group = 1 if case % 3 else int(rng.choice([2, 4]))
        depthwise = case % 6 == 0
        cin = int(rng.integers(1, 9)) * group
        cout = cin if depthwise else int(rng.integers(1, 9)) * group
        group = cin if depthwise else group
        k = int(rng.choice([1, 3, 5]))
        stride, pad = int(rng.integers(1, 3)), int(rng.integers(0, k // 2 + 1))
        h, wd = int(rng.integers(k, 20)), int(rng.integers(k, 20))
        x = rng.integers(qmin, qmax + 1, (2, cin, h, wd))
        w = rng.integers(-127, 128, (cout, cin // group, k, k))
        # with uint8 inputs, uint8 weights (of a zero point) in some layers
        w_type, zw = (np.uint8, int(rng.integers(0, 256))) if unsigned and case % 4 == 1 \
            else (np.int8, 0)
        w = np.clip(w + zw, 0, 255) - zw if w_type is np.uint8 else w
        (x_scale,) = _scales(rng, 1)
        w_scale = _scales(rng, cout)
        if case % 2:        # scales of short significands: exact ties are common
            x_scale, w_scale = _short(x_scale, 2), _short(w_scale, 2)
        zx, zy = (int(v) for v in rng.integers(qmin, qmax + 1, 2))
        # biases up to 2**26 in some layers: sums past float32's 2**24
        bias = rng.integers(-(1 << int(rng.choice([12, 20, 26]))), 1 << 12, cout)
        acc = _conv_acc(x, zx, w, bias, stride, pad, group)
        reals = acc * (x_scale * w_scale.astype(np.float64)).reshape(1, -1, 1, 1)
        y_scale = _output_scale(rng, reals)
        if case % 2:
            y_scale = _short(y_scale, 1)
        mult, shift = _multiplier(x_scale, w_scale, y_scale)
        model = _qlinearconv_model(x_type, x.shape, acc.shape, x_scale, zx, w, w_scale, y_scale, zy,
                                   bias, stride, pad, group, w_type, zw)
        (theirs,) = zoo.ort_run(model, x.astype(np.uint8 if unsigned else np.int8))
        mult, shift = mult.reshape(1, -1, 1, 1), shift.reshape(1, -1, 1, 1)
        ours = requantize_mlas(acc, mult, shift, zy, qmin, qmax)
        bad = np.flatnonzero(ours != theirs.astype(np.int64))
        assert bad.size == 0, f"case {case}: {bad.size} of {ours.size} differ"
        counts += _counts(acc, mult, shift, zy, qmin, qmax, ours)
    _report(counts)


def _qlinearmatmul_model(a_type, b_type, a_shape, out_shape, a_scale, za, b, b_scale, zb,
                         y_scale, zy):
    from onnx import TensorProto, helper, numpy_helper
    a_np = np.uint8 if a_type == TensorProto.UINT8 else np.int8
    b_np = np.uint8 if b_type == TensorProto.UINT8 else np.int8
    inits = [numpy_helper.from_array(np.float32(a_scale), "sa"),
             numpy_helper.from_array(a_np(za), "za"),
             numpy_helper.from_array(b.astype(b_np), "b"),
             numpy_helper.from_array(np.float32(b_scale), "sb"),
             numpy_helper.from_array(b_np(zb), "zb"),
             numpy_helper.from_array(np.float32(y_scale), "sy"),
             numpy_helper.from_array(a_np(zy), "zy")]
    node = helper.make_node("QLinearMatMul", ["a", "sa", "za", "b", "sb", "zb", "sy", "zy"],
                            ["y"])
    return _one_node_model(node, a_type, "a", a_shape, out_shape, inits)


@pytest.mark.parametrize("unsigned", [False, True])
def test_qlinearmatmul_matches_onnxruntime(unsigned):
    pytest.importorskip("onnxruntime")
    from onnx import TensorProto
    from tpu.compiler import zoo
    seed = base_seed() + 6 + unsigned
    print(f"seed {seed}")
    rng = np.random.default_rng(seed)
    qmin, qmax = type_range(unsigned)
    a_type = TensorProto.UINT8 if unsigned else TensorProto.INT8
    counts = np.zeros(4, np.int64)
    for case in range(40):
        m, k, n = (int(v) for v in rng.integers(1, 70, 3))
        a = rng.integers(qmin, qmax + 1, (m, k))
        b = rng.integers(-127, 128, (k, n))
        b_type, zb = (TensorProto.UINT8, int(rng.integers(0, 256))) if unsigned and case % 4 == 1 \
            else (TensorProto.INT8, 0)
        b = np.clip(b + zb, 0, 255) - zb if b_type == TensorProto.UINT8 else b
        a_scale, b_scale = _scales(rng, 2)
        if case % 2:
            a_scale, b_scale = _short(a_scale, 2), _short(b_scale, 2)
        za, zy = (int(v) for v in rng.integers(qmin, qmax + 1, 2))
        acc = (a - za) @ b
        y_scale = _output_scale(rng, acc * (float(a_scale) * float(b_scale)))
        if case % 2:
            y_scale = _short(y_scale, 1)
        mult, shift = _multiplier(a_scale, [b_scale], y_scale)
        model = _qlinearmatmul_model(a_type, b_type, a.shape, acc.shape, a_scale, za, b + zb,
                                     b_scale, zb, y_scale, zy)
        (theirs,) = zoo.ort_run(model, a.astype(np.uint8 if unsigned else np.int8))
        ours = requantize_mlas(acc, mult[0], shift[0], zy, qmin, qmax)
        bad = np.flatnonzero(ours != theirs.astype(np.int64))
        assert bad.size == 0, f"case {case}: {bad.size} of {ours.size} differ"
        counts += _counts(acc, mult[0], shift[0], zy, qmin, qmax, ours)
    _report(counts)


def _tie_conv(rng, unsigned, ties, m, shift):
    """The QLinearConv operands for the ties ``(ties, m, shift)``: every
    input value of the type in a 16x16 image of one channel, weight 1 per
    tie's channel, and an output zero point drawn from `rng` in the middle
    half of the range (a calibrated model's: products reach +-256, and at
    an end of the range half of them clamp). ``(x_type, ties, m, shift,
    zx, x, w, zy, acc)``, the ties kept those ONNX Runtime computes
    exactly (shift -32 flushes to 0)."""
    from onnx import TensorProto
    qmin, qmax = type_range(unsigned)
    x_type = TensorProto.UINT8 if unsigned else TensorProto.INT8
    keep = (np.abs(ties) < (1 << 31) - 512) & (shift >= -31)
    ties, m, shift = ties[keep], m[keep], shift[keep]
    zx = 0 if not unsigned else 128
    x = np.arange(qmin, qmax + 1).reshape(1, 1, 16, 16)
    w = np.ones((ties.size, 1, 1, 1), np.int64)
    zy = int(rng.integers(qmin + 64, qmax - 63))
    return x_type, ties, m, shift, zx, x, w, zy, _conv_acc(x, zx, w, ties, 1, 0, 1)


@pytest.mark.parametrize("unsigned", [False, True])
def test_constructed_ties_match_onnxruntime(unsigned):
    """The constructed ties, through ONNX Runtime: a 1x1 QLinearConv of one
    input channel, weight 1, input and output scales 1, so that channel
    ``c``'s float32 scale is its weight scale (``m * 2**(shift - 24)``) and
    its sums are ``bias[c]`` (the tie's ``x``) plus every input value."""
    pytest.importorskip("onnxruntime")
    from tpu.compiler import zoo
    seed = base_seed() + 8 + unsigned
    print(f"seed {seed}")
    rng = np.random.default_rng(seed)
    qmin, qmax = type_range(unsigned)
    x_type, ties, m, shift, zx, x, w, zy, acc = _tie_conv(rng, unsigned,
                                                          *_constructed_ties(rng, 3000))
    w_scale = _scale(m, shift)
    model = _qlinearconv_model(x_type, x.shape, acc.shape, 1.0, zx, w, w_scale, 1.0, zy, ties,
                               1, 0, 1)
    (theirs,) = zoo.ort_run(model, x.astype(np.uint8 if unsigned else np.int8))
    mult, shift = _multiplier(1.0, w_scale, 1.0)
    assert np.array_equal(mult, m << 7)
    mult, shift = mult.reshape(1, -1, 1, 1), shift.reshape(1, -1, 1, 1)
    ours = requantize_mlas(acc, mult, shift, zy, qmin, qmax)
    bad = np.flatnonzero(ours != theirs.astype(np.int64))
    assert bad.size == 0, f"{bad.size} of {ours.size} differ"
    _report(_counts(acc, mult, shift, zy, qmin, qmax, ours), differ=100)


def test_mobilenet_tie_of_test_onnx_rounding():
    """tests/test_onnx_rounding.py's case (MobileNetV2's conv_33): the exact
    product 116.5000049 is 116.5 in float32; ONNX Runtime gives 116, the
    chip's one rounding 117."""
    from test_onnx_rounding import IN_SCALE, OUT_SCALE, OUT_ZERO, W_SCALE
    m, s = _multiplier(IN_SCALE, [W_SCALE], OUT_SCALE)
    acc = 11258
    assert int(requantize_mlas(acc, m[0], s[0], OUT_ZERO, -128, 127)) == 116 + OUT_ZERO
    assert int(multiply_by_quantized_multiplier_single_round(acc, m[0], s[0])) == 117


@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v2"])
def test_every_layer_of_the_imagenet_models_at_32x32(name):
    """scripts/bench_mlas_rounding.py at 32x32: every matrix layer, on the
    reference's input for a random image, equals ONNX Runtime's QLinearConv
    of it with `requantize_mlas` (at 224x224 too, docs/compiler.md)."""
    pytest.importorskip("onnxruntime")
    from script_loader import load_script
    from tpu.compiler import imagenet_models
    bench = load_script("bench_mlas_rounding")
    seed = base_seed()
    print(f"seed {seed}")
    x = np.random.default_rng(seed).standard_normal((2, 3, 32, 32)).astype(np.float32)
    rows = bench.compare(imagenet_models.quantized(name, 32), x)
    assert len(rows) >= 21         # 20 convolutions and the classifier at least
    assert [row for row in rows if row[-1]] == []


def _quantized_io(model, x_type, zx, zy):
    """`model` (a QOperator graph of int8/uint8 input ``x`` and output ``y``)
    behind a QuantizeLinear and before a DequantizeLinear, both of scale 1:
    a model of float32 input and output, as `InferenceSession` runs."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    np_type = np.uint8 if x_type == TensorProto.UINT8 else np.int8
    graph = model.graph
    shape = [d.dim_value for d in graph.input[0].type.tensor_type.shape.dim]
    out_shape = [d.dim_value for d in graph.output[0].type.tensor_type.shape.dim]
    inits = list(graph.initializer) + [
        numpy_helper.from_array(np.float32(1.0), "one"),
        numpy_helper.from_array(np_type(zx), "zx_in"), numpy_helper.from_array(np_type(zy), "zy_out")]
    nodes = [helper.make_node("QuantizeLinear", ["xf", "one", "zx_in"], ["x"]), *graph.node,
             helper.make_node("DequantizeLinear", ["y", "one", "zy_out"], ["yf"])]
    wrapped = helper.make_graph(nodes, "float_io",
                                [helper.make_tensor_value_info("xf", TensorProto.FLOAT, shape)],
                                [helper.make_tensor_value_info("yf", TensorProto.FLOAT, out_shape)],
                                inits)
    out = helper.make_model(wrapped, opset_imports=list(model.opset_import))
    out.ir_version = model.ir_version
    onnx.checker.check_model(out)
    return out


def _compiled_ties(unsigned, config):
    """The constructed ties (half of them where the chip's one rounding
    differs) in a QLinearConv as `test_constructed_ties_match_onnxruntime`
    builds it, compiled for `config` and run on the golden chip: ``(ours,
    ONNX Runtime's, acc, multiplier, shift, zero point)``, the outputs as
    uint8 or int8 and the channel settings broadcast to ``acc``."""
    pytest.importorskip("onnxruntime")
    from tpu.compiler import zoo
    from tpu.compiler.onnx_frontend import import_onnx
    from tpu.compiler.session import InferenceSession
    from tpu.sim.stimulus.mlas_ties import differing_ties
    seed = base_seed() + 10 + unsigned
    print(f"seed {seed}")
    rng = np.random.default_rng(seed)
    x_type, ties, m, shift, zx, x, w, zy, acc = _tie_conv(rng, unsigned, *differing_ties(rng, 200))
    model = _quantized_io(_qlinearconv_model(x_type, x.shape, acc.shape, 1.0, zx, w,
                                             _scale(m, shift), 1.0, zy, ties, 1, 0, 1),
                          x_type, zx, zy)
    assert {layer.rounding for layer in import_onnx(model).layers} == {"mlas"}
    xf = (x - zx).astype(np.float32)
    (theirs,) = zoo.ort_run(model, xf)
    (ours,) = InferenceSession(model, backend="golden", config=config).run(None, {"xf": xf})
    return (ours, theirs, acc, (m << 7).reshape(1, -1, 1, 1), shift.reshape(1, -1, 1, 1), zy)


@pytest.mark.parametrize("unsigned", [False, True])
def test_compiled_ties_match_onnxruntime(unsigned):
    """The compiler's "mlas" rounding end to end: the constructed ties
    compiled (ACTs with mlas_round) and run on the golden chip, equal to
    ONNX Runtime element for element."""
    from tpu import TPUConfig
    config = TPUConfig(ub_rows=8192)           # 200 channels of 256 pixels in and out
    ours, theirs, acc, mult, shift, zy = _compiled_ties(unsigned, config)
    bad = np.flatnonzero(ours.reshape(-1) != theirs.reshape(-1))
    assert bad.size == 0, f"{bad.size} of {ours.size} differ"
    qmin, qmax = type_range(unsigned)
    _report(_counts(acc, mult, shift, zy, qmin, qmax, theirs.astype(np.int64) + zy), differ=30)


@pytest.mark.parametrize("unsigned", [False, True])
def test_compiled_ties_without_the_mlas_rounding(unsigned):
    """On a chip without the MLAS rounding (``mlas_rounding`` 0, the up5k
    profile's) the compiler rounds the same layer once by the same float32
    multiplier (rounding "float32", no ACT with mlas_round): every value is
    the one rounding's, which differs from ONNX Runtime's at the ties."""
    from tpu import TPUConfig
    config = TPUConfig(ub_rows=8192, mlas_rounding=0)
    ours, theirs, acc, mult, shift, zy = _compiled_ties(unsigned, config)
    qmin, qmax = type_range(unsigned)
    once = np.clip(multiply_by_quantized_multiplier_single_round(acc, mult, shift) + zy,
                   qmin, qmax)
    assert np.array_equal(ours.astype(np.int64) + zy, once)
    differ = np.count_nonzero(ours.reshape(-1) != theirs.reshape(-1))
    print(f"{differ} of {ours.size} values differ from ONNX Runtime")
    assert differ >= 30
