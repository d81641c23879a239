"""TFLite's integer reference kernels that have no chip equivalent yet.

`tpu.compiler.reference` calls these for IR layers imported from TFLite
models, so the reference interpreter (and the host steps of a chip run)
equal the TFLite interpreter's reference kernels byte for byte:

* `add_tflite`: ``ir.Add`` with ``semantics="tflite"``, TFLite's int8 ADD
  (``reference_integer_ops::AddElementwise`` with the parameters of
  ``add.cc``'s Prepare): each input minus its zero point, shifted left by 20,
  scaled by its own ``QuantizeMultiplierSmallerThanOneExp`` multiplier of
  ``s_in / (2 max(s_a, s_b))``; the sum scaled by ``2 max(s_a, s_b) /
  (2**20 s_out)``; plus the output zero point; clamped to the activation's
  range.
* `softmax_tflite`: the ``ir.HostOp`` "softmax_tflite", TFLite's int8 softmax
  over the last axis (``reference_ops::Softmax``: gemmlowp fixed-point
  ``exp_on_negative_values`` of the input differences, a fixed-point
  reciprocal of their sum), output scale 1/256 and zero point -128 (0 for
  uint8).

All arithmetic is on int64 numpy arrays holding int32 values, following
gemmlowp's operations one for one.
"""

import math

import numpy as np

from ..models.activation_model import (
    multiply_by_quantized_multiplier, multiply_by_quantized_multiplier_single_round,
    quantize_multiplier, rounding_divide_by_pot,
    saturating_rounding_doubling_high_mul, wrap_int32)
from .ir import ActivationKind, IRError


__all__ = ["add_tflite", "softmax_tflite", "multiply_by_quantized_multiplier_single_round",
           "INTEGER_HOST_OPS", "ADD_LEFT_SHIFT"]

#: TFLite's left shift of int8 ADD inputs (``add.cc``: 20 unless int16)
ADD_LEFT_SHIFT = 20

INT32_MIN = -(1 << 31)
INT32_MAX = (1 << 31) - 1


def _bounds(out_q, activation):
    """The clamp of TFLite's fused activation as the IR stores it."""
    low, high = out_q.range
    if activation.kind == ActivationKind.RELU:
        low = max(low, int(out_q.zero_point))
    elif activation.kind == ActivationKind.CLAMP:
        low, high = max(low, int(activation.clamp_min)), min(high, int(activation.clamp_max))
    elif activation.kind != ActivationKind.NONE:
        raise IRError(f"a TFLite ADD has no fused {activation.kind.value} activation")
    return low, high


def add_parameters(a_q, b_q, out_q):
    """``((m_a, s_a), (m_b, s_b), (m_out, s_out))`` as TFLite's ADD Prepare
    computes them (double arithmetic from the float32 scales)."""
    sa, sb, so = (float(np.float32(q.scale)) for q in (a_q, b_q, out_q))
    twice_max = 2.0 * max(sa, sb)
    return (quantize_multiplier(sa / twice_max), quantize_multiplier(sb / twice_max),
            quantize_multiplier(twice_max / ((1 << ADD_LEFT_SHIFT) * so)))


def add_tflite(layer, a, b, a_q, b_q, out_q):
    """TFLite's int8 ADD of two same-shape tensors, then the fused activation's clamp."""
    a, b = np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64)
    if a.shape != b.shape:
        raise IRError(f"layer {layer.name!r}: adds {a.shape[1:]} to {b.shape[1:]}")
    (ma, sa), (mb, sb), (mo, so) = add_parameters(a_q, b_q, out_q)
    scaled_a = multiply_by_quantized_multiplier(
        (a - int(a_q.zero_point)) << ADD_LEFT_SHIFT, ma, sa)
    scaled_b = multiply_by_quantized_multiplier(
        (b - int(b_q.zero_point)) << ADD_LEFT_SHIFT, mb, sb)
    raw = multiply_by_quantized_multiplier(wrap_int32(scaled_a + scaled_b), mo, so) \
        + int(out_q.zero_point)
    low, high = _bounds(out_q, layer.activation)
    return np.clip(raw, low, high).astype(out_q.dtype)


# gemmlowp fixed point ---------------------------------------------------------------------

def _srdhm(a, b):
    return saturating_rounding_doubling_high_mul(a, b)


def _rdpot(x, exponent):
    return rounding_divide_by_pot(x, exponent)


def _saturating_shift_left(x, exponent):
    """gemmlowp's ``SaturatingRoundingMultiplyByPOT`` for a positive exponent."""
    threshold = (1 << (31 - exponent)) - 1
    return np.where(x > threshold, INT32_MAX, np.where(x < -threshold, INT32_MIN, x << exponent))


def _exp_on_interval_between_negative_one_quarter_and_0_excl(a):
    """``exp(a)`` for Q0.31 ``a`` in [-1/4, 0): a Taylor expansion around -1/8."""
    constant_term = 1895147668                      # exp(-1/8) in Q0.31
    constant_1_over_3 = 715827883
    x = wrap_int32(a + (1 << 28))                   # a + 1/8
    x2 = _srdhm(x, x)
    x3 = _srdhm(x2, x)
    x4 = _srdhm(x2, x2)
    x4_over_4 = _rdpot(x4, 2)
    poly = _rdpot(wrap_int32(_srdhm(wrap_int32(x4_over_4 + x3), constant_1_over_3) + x2), 1)
    return wrap_int32(constant_term + _srdhm(constant_term, wrap_int32(x + poly)))


#: gemmlowp's barrel shifter of ``exp_on_negative_values``: (exponent, exp(-2**exponent) in Q0.31)
_EXP_BARREL = ((-2, 1672461947), (-1, 1302514674), (0, 790015084), (1, 290630308),
               (2, 39332535), (3, 720401), (4, 242))


def exp_on_negative_values(a, integer_bits):
    """gemmlowp's ``exp_on_negative_values`` of Q(integer_bits) values ``a <= 0``
    -> Q0.31."""
    fractional_bits = 31 - integer_bits
    one_quarter = 1 << (fractional_bits - 2)
    mask = one_quarter - 1
    a_mod_quarter_minus_one_quarter = (a & mask) - one_quarter
    result = _exp_on_interval_between_negative_one_quarter_and_0_excl(
        _saturating_shift_left(a_mod_quarter_minus_one_quarter, integer_bits))
    remainder = a_mod_quarter_minus_one_quarter - a
    for exponent, multiplier in _EXP_BARREL:
        if integer_bits > exponent:
            bit = 1 << (fractional_bits + exponent)
            result = np.where(remainder & bit, _srdhm(result, multiplier), result)
    if integer_bits > 5:
        clamp = -(1 << (36 - integer_bits))
        result = np.where(a < clamp, 0, result)
    return np.where(a == 0, INT32_MAX, result)


def _one_over_one_plus_x_for_x_in_0_1(a):
    """gemmlowp's Newton-Raphson ``1 / (1 + a)`` for Q0.31 ``a`` in [0, 1) -> Q0.31."""
    s = a + INT32_MAX                                # RoundingHalfSum(a, One())
    half_denominator = np.where(s >= 0, (s + 1) // 2, -((-s + 1) // 2))
    constant_48_over_17 = 1515870810                 # Q2.29
    constant_neg_32_over_17 = -1010580540
    x = wrap_int32(constant_48_over_17 + _srdhm(half_denominator, constant_neg_32_over_17))
    one = 1 << 29
    for _ in range(3):
        half_denominator_times_x = _srdhm(half_denominator, x)
        one_minus = wrap_int32(one - half_denominator_times_x)
        x = wrap_int32(x + _saturating_shift_left(_srdhm(x, one_minus), 2))
    return _saturating_shift_left(x, 1)


def _count_leading_zeros(x):
    """Leading zeros of uint32 values (x > 0)."""
    x = np.asarray(x, dtype=np.int64) & 0xFFFFFFFF
    return np.array([32 - int(v).bit_length() for v in x.reshape(-1)],
                    dtype=np.int64).reshape(x.shape)


def get_reciprocal(x, x_integer_bits):
    """TFLite's ``GetReciprocal``: ``(1 / x in Q0.31 scaled, num_bits_over_unit)``."""
    headroom_plus_one = _count_leading_zeros(x)
    num_bits_over_unit = x_integer_bits - headroom_plus_one
    shifted = ((np.asarray(x, dtype=np.int64) << headroom_plus_one) & 0xFFFFFFFF) - (1 << 31)
    return _one_over_one_plus_x_for_x_in_0_1(wrap_int32(shifted)), num_bits_over_unit


SOFTMAX_SCALED_DIFF_INTEGER_BITS = 5
SOFTMAX_ACCUMULATION_INTEGER_BITS = 12


def softmax_parameters(beta, input_scale):
    """``(input_multiplier, input_left_shift, diff_min)`` as TFLite's
    ``PreprocessSoftmaxScaling`` and ``CalculateInputRadius``."""
    bits = SOFTMAX_SCALED_DIFF_INTEGER_BITS
    real = min(float(beta) * float(np.float32(input_scale)) * (1 << (31 - bits)),
               float((1 << 31) - 1))
    multiplier, left_shift = quantize_multiplier(real)
    if left_shift < 0:
        raise IRError(f"softmax input scale {input_scale} with beta {beta}: TFLite needs a "
                      f"multiplier above one")
    radius = math.floor(((1 << bits) - 1) * (1 << (31 - bits)) / (1 << left_shift))
    return multiplier, left_shift, -radius


def softmax_tflite(layer, inputs, in_quants, out_quants):
    """TFLite's int8/uint8 reference softmax over the last axis."""
    (x,), (in_q,), (out_q,) = inputs, in_quants, out_quants
    x = np.asarray(x, dtype=np.int64)
    beta = float(layer.attrs.get("beta", 1.0))
    multiplier, left_shift, diff_min = softmax_parameters(beta, in_q.scale)
    diff = x - x.max(axis=-1, keepdims=True)
    valid = diff >= diff_min
    rescaled = _srdhm(wrap_int32(diff << left_shift), multiplier)
    exps = exp_on_negative_values(rescaled, SOFTMAX_SCALED_DIFF_INTEGER_BITS)
    terms = np.where(valid, _rdpot(exps, SOFTMAX_ACCUMULATION_INTEGER_BITS), 0)
    sums = wrap_int32(terms.sum(axis=-1, keepdims=True))
    shifted_scale, num_bits_over_unit = get_reciprocal(sums, SOFTMAX_ACCUMULATION_INTEGER_BITS)
    out_bits = 8
    unsat = _rdpot(_srdhm(shifted_scale, exps), num_bits_over_unit + 31 - out_bits)
    low, high = out_q.range
    shifted = unsat + low
    y = np.where(valid, np.clip(shifted, low, high), low)
    return [y.astype(out_q.dtype)]


#: op name -> function(layer, int64 input arrays, input quants, output quants) -> output arrays
INTEGER_HOST_OPS = {"softmax_tflite": softmax_tflite}
