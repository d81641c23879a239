"""The activation golden model against independent references written with
plain Python integers, fractions and floats."""

import math
from dataclasses import replace
from fractions import Fraction

import numpy as np
import pytest

from tpu.models.activation_model import (
    ActivationSettings, Function, Pooling, IDENTITY_MULTIPLIER,
    multiply_by_quantized_multiplier, multiply_by_quantized_multiplier_single_round, output_rows, pool, pool_average, pool_reciprocal,
    quantize_multiplier, requantize, rounding_divide_by_pot, run_operation,
    saturating_rounding_doubling_high_mul, sigmoid_table, tanh_table, tflite_average, output_bounds,
    wrap_int32)
from tpu.models.mlas_rounding import requantize_mlas


INT32_MIN = -(1 << 31)
INT32_MAX = (1 << 31) - 1
EDGE_INT32 = [INT32_MIN, INT32_MIN + 1, -(1 << 30) - 1, -(1 << 30), -(1 << 30) + 1, -3, -2, -1,
              0, 1, 2, 3, (1 << 30) - 1, 1 << 30, (1 << 30) + 1, INT32_MAX - 1, INT32_MAX]
EDGE_MULTIPLIERS = [INT32_MAX, 1 << 30, (1 << 30) + 1, (1 << 30) - 1, 1518500250, 1, 0, -1,
                    INT32_MIN, INT32_MIN + 1, -(1 << 30)]


# Independent references ------------------------------------------------------

def c_div(a, b):
    """C integer division: truncation toward zero."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


def ref_srdhm(a, b):
    """gemmlowp SaturatingRoundingDoublingHighMul, transcribed with Python ints."""
    if a == b == INT32_MIN:
        return INT32_MAX
    ab = a * b
    nudge = (1 << 30) if ab >= 0 else 1 - (1 << 30)
    return c_div(ab + nudge, 1 << 31)


def ref_srdhm_exact(a, b):
    """The same as a rounding rule: a*b/2**31 rounded half toward +infinity."""
    if a == b == INT32_MIN:
        return INT32_MAX
    return math.floor(Fraction(a * b, 1 << 31) + Fraction(1, 2))


def ref_rdbpot(x, exponent):
    """x / 2**exponent rounded half away from zero, with fractions."""
    q = Fraction(x, 1 << exponent)
    magnitude = math.floor(abs(q) + Fraction(1, 2))
    return magnitude if q >= 0 else -magnitude


def ref_mbqm(x, multiplier, shift):
    left, right = max(shift, 0), max(-shift, 0)
    shifted = ((x * 2 ** left - INT32_MIN) % (1 << 32)) + INT32_MIN     # int32 wrap
    return ref_rdbpot(ref_srdhm(shifted, multiplier), right)


def ref_average(total, count):
    """TFLite's rounding: the nearest integer to total/count, ties away from zero."""
    q = Fraction(total, count)
    magnitude = math.floor(abs(q) + Fraction(1, 2))
    return magnitude if q >= 0 else -magnitude


# Requantization -------------------------------------------------------------

def test_srdhm_matches_references_on_edges_and_random():
    rng = np.random.default_rng(1)
    a = EDGE_INT32 + [int(v) for v in rng.integers(INT32_MIN, INT32_MAX, size=400, endpoint=True)]
    b = EDGE_MULTIPLIERS + [int(v) for v in rng.integers(INT32_MIN, INT32_MAX, size=40,
                                                          endpoint=True)]
    aa, bb = np.meshgrid(a, b)
    got = saturating_rounding_doubling_high_mul(aa, bb)
    for i, j in np.ndindex(aa.shape):
        x, y = int(aa[i, j]), int(bb[i, j])
        want = ref_srdhm(x, y)
        assert want == ref_srdhm_exact(x, y)
        assert got[i, j] == want, (x, y)


def test_srdhm_ties_and_saturation():
    # 3 * 2**30 / 2**31 = 1.5 -> 2; -1.5 -> -1 (the nudge rounds half up).
    assert saturating_rounding_doubling_high_mul(3, 1 << 30) == 2
    assert saturating_rounding_doubling_high_mul(-3, 1 << 30) == -1
    assert saturating_rounding_doubling_high_mul(-1, 1 << 30) == 0
    assert saturating_rounding_doubling_high_mul(1, 1 << 30) == 1
    assert saturating_rounding_doubling_high_mul(INT32_MIN, INT32_MIN) == INT32_MAX
    assert saturating_rounding_doubling_high_mul(INT32_MIN, INT32_MAX) == INT32_MIN + 1
    assert saturating_rounding_doubling_high_mul(INT32_MAX, INT32_MAX) == INT32_MAX - 1


@pytest.mark.parametrize("exponent", list(range(0, 33)))
def test_rounding_divide_by_pot(exponent):
    rng = np.random.default_rng(exponent)
    base = [(2 * t + 1) << max(exponent - 1, 0) for t in range(-4, 4)] if exponent else []
    values = set(EDGE_INT32)
    for v in base:
        values.update({v - 1, v, v + 1})
    values.update(int(v) for v in rng.integers(INT32_MIN, INT32_MAX, size=300, endpoint=True))
    values = sorted(v for v in values if INT32_MIN <= v <= INT32_MAX)
    got = rounding_divide_by_pot(values, exponent)
    assert [int(g) for g in got] == [ref_rdbpot(v, exponent) for v in values]


def test_rounding_divide_by_pot_ties_go_away_from_zero():
    assert rounding_divide_by_pot(3, 1) == 2
    assert rounding_divide_by_pot(-3, 1) == -2
    assert rounding_divide_by_pot(-5, 2) == -1       # -1.25
    assert rounding_divide_by_pot(-6, 2) == -2       # -1.5
    assert rounding_divide_by_pot(1 << 30, 31) == 1
    assert rounding_divide_by_pot(-(1 << 30), 31) == -1
    assert rounding_divide_by_pot(INT32_MIN, 31) == -1
    assert rounding_divide_by_pot(INT32_MIN, 32) == -1    # -0.5, beyond gemmlowp's range
    assert rounding_divide_by_pot(INT32_MIN + 1, 32) == 0


def test_mbqm_matches_reference_over_all_shifts():
    rng = np.random.default_rng(7)
    xs = EDGE_INT32 + [int(v) for v in rng.integers(INT32_MIN, INT32_MAX, size=60, endpoint=True)]
    xs += [int(v) for v in rng.integers(-5000, 5000, size=40)]
    for shift in range(-32, 32):
        for multiplier in EDGE_MULTIPLIERS + [int(rng.integers(1 << 30, 1 << 31))]:
            got = multiply_by_quantized_multiplier(xs, multiplier, shift)
            want = [ref_mbqm(x, multiplier, shift) for x in xs]
            assert [int(g) for g in got] == want, (multiplier, shift)


def test_single_round_matches_exact_rounding_over_all_shifts():
    """``floor((x * m + 2**(t-1)) / 2**t)``, ``t = 31 - shift``, in exact
    integers: ties toward +infinity, no int64 overflow at INT32_MIN squared."""
    rng = np.random.default_rng(11)
    xs = EDGE_INT32 + [int(v) for v in rng.integers(INT32_MIN, INT32_MAX, size=40, endpoint=True)]
    for shift in range(-32, 32):
        total = 31 - shift
        for multiplier in EDGE_MULTIPLIERS + [INT32_MIN, int(rng.integers(1 << 30, 1 << 31))]:
            got = multiply_by_quantized_multiplier_single_round(xs, multiplier, shift)
            want = [(x * multiplier + ((1 << total) >> 1)) >> total for x in xs]
            assert [int(g) for g in got] == want, (multiplier, shift)
    # Ties: +1/2 rounds up, -1/2 rounds up too (toward +infinity).
    assert int(multiply_by_quantized_multiplier_single_round(3, 1 << 30, 0)) == 2
    assert int(multiply_by_quantized_multiplier_single_round(-3, 1 << 30, 0)) == -1


def test_requantize_single_round_flag():
    # -6 / 4 = -1.5: one rounding goes up, the double one away from zero.
    settings = ActivationSettings(cols=2, multiplier=1 << 30, shift=-1, single_round=True)
    assert requantize([[-6, 2]], settings).tolist() == [[-1, 1]]
    settings = ActivationSettings(cols=2, multiplier=1 << 30, shift=-1)
    assert requantize([[-6, 2]], settings).tolist() == [[-2, 1]]


def test_mbqm_is_within_one_of_the_real_product():
    rng = np.random.default_rng(3)
    for _ in range(300):
        real = float(np.exp(rng.uniform(np.log(1e-6), np.log(8.0))))
        multiplier, shift = quantize_multiplier(real)
        x = int(rng.integers(-(1 << 20), 1 << 20))
        got = int(multiply_by_quantized_multiplier(x, multiplier, shift))
        exact = Fraction(x) * multiplier * Fraction(2) ** (shift - 31)
        assert abs(got - exact) <= 1
        assert abs(exact - x * real) <= abs(x) * real * 2.0 ** -30 + 1e-9


def test_left_shift_wraps_like_tflite():
    # x * (1 << 2) overflows int32: TFLite's reference wraps (two's complement).
    x = (1 << 30) + 5
    wrapped = ((x * 4 + (1 << 31)) % (1 << 32)) - (1 << 31)
    assert multiply_by_quantized_multiplier(x, 1 << 30, 2) == ref_srdhm(wrapped, 1 << 30)
    assert multiply_by_quantized_multiplier(1, 1 << 30, 31) == ref_srdhm(INT32_MIN, 1 << 30)


def test_quantize_multiplier_like_tflite():
    assert quantize_multiplier(0.0) == (0, 0)
    assert quantize_multiplier(0.5) == (1 << 30, 0)
    assert quantize_multiplier(1.0) == (1 << 30, 1)
    assert quantize_multiplier(0.75) == (3 << 29, 0)
    assert quantize_multiplier(-0.5) == (-(1 << 30), 0)
    assert quantize_multiplier(1 - 2.0 ** -40) == (1 << 30, 1)     # rounds up to 2**31: halved
    assert quantize_multiplier(2.0 ** -40) == (0, 0)               # shift < -31 flushes to zero
    assert quantize_multiplier(2.0 ** -31) == (1 << 30, -30)
    with pytest.raises(ValueError):
        quantize_multiplier(2.0 ** 31)
    with pytest.raises(ValueError):
        quantize_multiplier(float("inf"))
    rng = np.random.default_rng(5)
    for real in np.exp(rng.uniform(np.log(1e-9), np.log(1e3), size=500)):
        multiplier, shift = quantize_multiplier(real)
        assert (1 << 30) <= multiplier < (1 << 31)
        error = abs(Fraction(multiplier) * Fraction(2) ** (shift - 31) - Fraction(float(real)))
        assert error <= Fraction(2) ** (shift - 32)


def test_identity_requantization_and_clamp_order():
    settings = ActivationSettings(cols=3)
    assert settings.multiplier[0] == IDENTITY_MULTIPLIER[0]
    assert settings.shift[0] == IDENTITY_MULTIPLIER[1]
    acc = np.array([[5, -7, 300], [INT32_MIN, INT32_MAX, -128]])
    assert requantize(acc, settings).tolist() == [[5, -7, 127], [-128, 127, -128]]
    relu = ActivationSettings(cols=1, function=Function.RELU, zero_point=-3)
    assert requantize([[-10], [2]], relu).tolist() == [[-3], [-1]]
    relu_low = ActivationSettings(cols=1, function=Function.RELU, zero_point=-200)
    assert requantize([[-300]], relu_low).tolist() == [[-128]]
    # clamp_min > clamp_max: the upper bound is applied last and wins.
    crossed = ActivationSettings(cols=1, function=Function.CLAMP, clamp_min=50, clamp_max=10)
    assert requantize([[-100], [30], [100]], crossed).tolist() == [[10], [10], [10]]
    unsigned = ActivationSettings(cols=1, unsigned=True, zero_point=128, bias=1)
    assert requantize([[-1000], [-129], [0], [126], [1000]], unsigned).tolist() == \
        [[0], [0], [129], [255], [255]]
    # zero point added without int32 wrap.
    big = ActivationSettings(cols=1, zero_point=255, unsigned=True)
    assert requantize([[INT32_MAX]], big).tolist() == [[255]]


def test_bias_wraps():
    settings = ActivationSettings(cols=1, bias=1)
    assert requantize([[INT32_MAX]], settings).tolist() == [[-128]]


def test_settings_are_validated():
    with pytest.raises(ValueError):
        ActivationSettings(cols=2, shift=[0, 32])
    with pytest.raises(ValueError):
        ActivationSettings(cols=2, multiplier=[1 << 31, 0])
    with pytest.raises(ValueError):
        ActivationSettings(cols=1, pool_size=5)
    with pytest.raises(ValueError):
        ActivationSettings(cols=1, zero_point=256)
    with pytest.raises(ValueError):
        ActivationSettings(cols=0)
    with pytest.raises(ValueError):
        pool_reciprocal(4097)


# Function tables -------------------------------------------------------------

def _signed(table):
    return np.where(table >= 128, table - 256, table)


@pytest.mark.parametrize("unsigned", [False, True])
def test_sigmoid_table_is_right_for_negative_inputs(unsigned):
    in_zero = 128 if unsigned else 0
    out_zero = 0 if unsigned else -128
    in_scale = 0.05
    table = sigmoid_table(in_scale, in_zero, 1 / 256, out_zero, unsigned)
    values = np.arange(0, 256) if unsigned else np.arange(-128, 128)
    index = values if unsigned else values + 128
    out = table[index] if unsigned else _signed(table[index])
    # Monotone, the midpoint at the input zero point, small below it.
    assert np.all(np.diff(out) >= 0)
    mid = out[values == in_zero][0]
    assert mid == out_zero + 128
    below = out[values < in_zero]
    assert np.all(below <= mid) and below.min() == out_zero
    assert below[0] == out_zero + round(256 / (1 + math.exp(128 * in_scale)))
    # Within one step of the real function everywhere, exact nearly everywhere.
    real = 1 / (1 + np.exp(-in_scale * (values - in_zero)))
    ideal = np.clip(np.round(real * 256) + out_zero, out_zero, out_zero + 255)
    assert np.max(np.abs(out - ideal)) <= 1
    assert np.mean(out == ideal) > 0.97


def test_sigmoid_table_clamps_and_rounds_half_away():
    # 1 / float32(0.2) is 5.0 in float32, so sigmoid(0) / 0.2 = 2.5: a tie.
    assert sigmoid_table(0.1, 0, 0.2, 0, False)[128] == 3
    table = sigmoid_table(1.0, 0, 1 / 512, -128, False)
    assert _signed(table[0]) == -128          # sigmoid(-128) * 512 - 128
    assert _signed(table[255]) == 127         # 1.0 * 512 - 128 = 384 -> 127


def test_tanh_table_is_odd():
    table = _signed(tanh_table(0.02, 0, 1 / 128, 0, False))
    values = np.arange(-127, 128)
    assert np.array_equal(table[values + 128], -table[-values + 128])
    assert table[128] == 0 and np.all(np.diff(table) >= 0)
    # Saturated: +1.0 clamps to 127, -1.0 reaches -128, so odd only inside.
    table = _signed(tanh_table(0.05, 0, 1 / 128, 0, False))
    inside = np.abs(table[values + 128]) < 127
    assert np.array_equal(table[values + 128][inside], -table[-values + 128][inside])
    assert table[0] == -128 and table[255] == 127


def test_tanh_table_unsigned_is_symmetric_about_the_zero_point():
    table = tanh_table(0.03, 128, 1 / 128, 128, True).astype(np.int64)
    d = np.arange(1, 128)
    inside = table[128 - d] > 0           # 255 clamps +1.0 one step short of -1.0's 0
    assert np.array_equal((table[128 + d] - 128)[inside], (128 - table[128 - d])[inside])
    assert inside.sum() > 40 and table[128] == 128


def test_table_layout_follows_index_rule():
    table = sigmoid_table(0.1, 10, 1 / 256, -128, False)
    settings = ActivationSettings(cols=1, function=Function.SIGMOID, lut=table)
    got = run_operation(settings, np.arange(-128, 128)[:, None])
    assert np.array_equal(got[:, 0], table)


# Pooling ---------------------------------------------------------------------

def test_pool_reciprocal_is_exact_for_every_count():
    """For each count, the largest dividend of each quotient is the worst case
    (the error grows with the dividend), and the smallest is exact by
    construction: checking a = q*count + count - 1 for q = 0..255 covers all
    a < 256 * count."""
    q = np.arange(256, dtype=np.int64)
    for count in range(1, 4097):
        r = pool_reciprocal(count)
        top = q * count + count - 1
        assert np.array_equal((top * r) >> 32, q), count
        assert np.array_equal(((q * count) * r) >> 32, q), count


def test_pool_average_matches_tflite_including_negative_sums():
    rng = np.random.default_rng(11)
    for count in list(range(1, 70)) + [121, 255, 256, 1000, 4095, 4096]:
        half = count // 2
        sums = np.concatenate([
            rng.integers(-128 * count, 255 * count + 1, size=200),
            [0, 1, -1, half, -half, count + half, -count - half, 255 * count, -128 * count,
             count * 3 - half, half - count * 3],
        ])
        sums = sums[(sums >= -128 * count) & (sums <= 255 * count)]
        for unsigned in (False, True):
            low, high = (0, 255) if unsigned else (-128, 127)
            got = pool_average(sums, count, pool_reciprocal(count), unsigned)
            tflite = np.clip(tflite_average(sums, count), low, high)
            reference = np.clip([ref_average(int(s), count) for s in sums], low, high)
            assert np.array_equal(got, tflite), count
            assert np.array_equal(got, reference), count


def test_tflite_average_ties():
    assert tflite_average(2, 4) == 1        # 0.5 -> 1
    assert tflite_average(-2, 4) == -1      # -0.5 -> -1
    assert tflite_average(-6, 4) == -2      # -1.5 -> -2
    assert tflite_average(-5, 4) == -1      # -1.25 -> -1
    assert tflite_average(0, 9) == 0


def ref_pool(values, kind, k, s, width):
    """Window pooling by explicit loops over the pixels that arrived."""
    n = len(values)
    lines = -(-n // width)
    out = []
    for oy in range((lines - k) // s + 1 if lines >= k else 0):
        for ox in range((width - k) // s + 1 if width >= k else 0):
            pixels = [(oy * s + dy) * width + ox * s + dx for dy in range(k) for dx in range(k)]
            if max(pixels) >= n:
                continue
            window = values[pixels]
            if kind == Pooling.MAX:
                out.append(window.max(axis=0))
            else:
                out.append([ref_average(int(t), k * k) for t in window.sum(axis=0)])
    return np.array(out, dtype=np.int64).reshape(-1, values.shape[1])


@pytest.mark.parametrize("kind", [Pooling.MAX, Pooling.AVG])
def test_window_pooling_matches_loops(kind):
    rng = np.random.default_rng(int(kind))
    for _ in range(120):
        k, s = int(rng.integers(1, 5)), int(rng.integers(1, 5))
        width = int(rng.integers(1, 12))
        n = int(rng.integers(1, 80))
        unsigned = bool(rng.random() < 0.5)
        low = 0 if unsigned else -128
        values = rng.integers(low, low + 256, size=(n, 3))
        settings = ActivationSettings(cols=3, unsigned=unsigned).with_pooling(
            kind, size=k, stride=s, width=width)
        want = ref_pool(values, kind, k, s, width)
        assert np.array_equal(pool(values, settings), want), (k, s, width, n)
        assert len(output_rows(settings, n)) == len(want)


def test_output_rows_are_the_completing_rows():
    settings = ActivationSettings(cols=1).with_pooling(Pooling.MAX, size=2, stride=2, width=4)
    # 4x3 image: windows end at pixels (1, 1) and (1, 3); line 2 starts no window.
    assert output_rows(settings, 12).tolist() == [5, 7]
    assert output_rows(settings, 6).tolist() == [5]
    glob = ActivationSettings(cols=1).with_pooling(Pooling.GLOBAL_AVG, rows=9)
    assert output_rows(glob, 9).tolist() == [8]


def test_global_pooling():
    values = np.array([[-128, 3], [-128, 4], [-127, 4], [-128, 4]])
    avg = ActivationSettings(cols=2).with_pooling(Pooling.GLOBAL_AVG, rows=4)
    assert pool(values, avg).tolist() == [[-128, 4]]       # -127.75 -> -128, 3.75 -> 4
    mx = ActivationSettings(cols=2).with_pooling(Pooling.GLOBAL_MAX)
    assert pool(values, mx).tolist() == [[-127, 4]]
    with pytest.raises(ValueError):
        pool(np.zeros((4097, 2), dtype=np.int64), avg)


def test_function_comes_before_pooling():
    settings = ActivationSettings(cols=1, function=Function.RELU).with_pooling(
        Pooling.AVG, size=2, stride=2, width=2)
    out = run_operation(settings, [[-100], [-100], [-100], [3]])
    assert out.tolist() == [[1]]           # relu first: (0 + 0 + 0 + 3) / 4 = 0.75 -> 1


def test_requantize_mlas_round_flag():
    # s = 0.5: halves round to even with mlas_round, toward +infinity with
    # single_round alone.
    acc = [[5, -5, 3, -3, 7]]
    once = ActivationSettings(cols=5, multiplier=1 << 30, shift=0, single_round=True)
    mlas = replace(once, mlas_round=True)
    assert requantize(acc, once).tolist() == [[3, -2, 2, -1, 4]]
    assert requantize(acc, mlas).tolist() == [[2, -2, 2, -2, 4]]
    # mlas_round rounds once with or without single_round
    assert requantize(acc, replace(mlas, single_round=False)).tolist() == [[2, -2, 2, -2, 4]]


def test_requantize_mlas_round_equals_requantize_mlas():
    """Columns with a float32 significand << 7 round as ONNX Runtime does
    (`requantize_mlas`); the others (low bits set, magnitude below 2**30)
    as single_round alone."""
    rng = np.random.default_rng(26)
    cols = 16
    for _ in range(50):
        scale = rng.uniform(1e-6, 2.0, cols).astype(np.float32)
        multiplier, shift = zip(*(quantize_multiplier(float(s)) for s in scale))
        multiplier = np.array(multiplier, dtype=np.int64) & ~0x7F
        multiplier = np.where(rng.random(cols) < 0.3, -multiplier, multiplier)
        shift = np.array(shift, dtype=np.int64)
        bad = rng.random(cols) < 0.25
        multiplier = np.where(bad, multiplier | rng.integers(1, 0x80, cols), multiplier)
        multiplier[0] = 1 << 29                 # magnitude below 2**30: not a significand
        bad[0] = True
        acc = rng.integers(-(1 << 31), 1 << 31, (64, cols))
        acc[:8] = rng.integers(-3000, 3000, (8, cols))
        settings = ActivationSettings(cols=cols, bias=rng.integers(-1000, 1000, cols),
                                      multiplier=multiplier, shift=shift, single_round=True,
                                      mlas_round=True, zero_point=int(rng.integers(-128, 128)),
                                      unsigned=bool(rng.random() < 0.5))
        got = requantize(acc, settings)
        x = wrap_int32(acc + settings.bias)
        low, high = output_bounds(settings)
        good = ~bad
        want = requantize_mlas(x[:, good], multiplier[good], shift[good], settings.zero_point,
                               low, high)
        assert (got[:, good] == want).all()
        once = requantize(acc, replace(settings, mlas_round=False))
        assert (got[:, bad] == once[:, bad]).all()
