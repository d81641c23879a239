"""Golden model of the activation pipeline (numpy).

This module is the contract: the RTL in ``hdl/activation_pipeline.py`` equals
it bit for bit. Per output column ``n`` of an accumulator row:

1. ``x = acc + bias[n]``, wrapping at 32 bits;
2. ``y = MultiplyByQuantizedMultiplier(x, multiplier[n], shift[n])`` exactly as
   TFLite's double-rounding reference (gemmlowp's
   ``SaturatingRoundingDoublingHighMul`` then ``RoundingDivideByPOT``). The
   left shift ``x * (1 << shift)`` for ``shift > 0`` wraps at 32 bits, which is
   what TFLite's reference does on two's complement machines (it marks the
   function ``TFLITE_NO_SANITIZE_INTEGER_OVERFLOW``); ``QuantizeMultiplier``
   output never overflows it for the accumulators a compiler produces.
   With ``single_round`` set instead ``y = (x * multiplier + 2**(30 - shift))
   >> (31 - shift)``, one rounding with ties toward +infinity, computed exactly
   (TFLite's int8 FULLY_CONNECTED); with ``mlas_round`` (``single_round``
   set or not) ``y = rint(float32(float32(x) * s))``, ``s =
   multiplier * 2**(shift - 31)``, half to even and saturated to int32: ONNX
   Runtime's (MLAS's) float32 requantization, computed from integers by
   ``tpu/models/mlas_rounding.py``, for a column whose multiplier is a
   float32 significand << 7 (magnitude in ``[2**30, 2**31)``, low 7 bits
   zero); a column whose multiplier is not rounds as ``single_round`` alone;
3. ``v = min(max(y + zero_point, low), high)`` computed exactly (no int32
   wrap), with ``low``/``high`` from the function and the output type;
4. SIGMOID and TANH replace ``v`` by ``lut[v + 128]`` (int8) or ``lut[v]``
   (uint8), an output byte;
5. pooling, on the quantized values, in raster order.

The table builders, ``quantize_multiplier`` and ``pool_reciprocal`` are what
the compiler uses to compute settings.
"""

import math
from dataclasses import dataclass, field, replace

import numpy as np

from .mlas_rounding import multiply_by_float32_multiplier
from ..hdl.activation_settings import (
    Function, Pooling, MAX_POOL_SIZE, MAX_POOL_COUNT, RECIPROCAL_SHIFT, RECIPROCAL_WIDTH,
    SHIFT_WIDTH, VALUE_WIDTH)


__all__ = [
    "Function", "Pooling", "ActivationSettings",
    "wrap_int32", "saturating_rounding_doubling_high_mul", "rounding_divide_by_pot",
    "multiply_by_quantized_multiplier", "multiply_by_quantized_multiplier_single_round",
    "multiply_mlas_or_single_round", "float32_multiplier",
    "quantize_multiplier",
    "type_range", "output_bounds", "requantize", "apply_function", "lut_index",
    "pool_reciprocal", "pool_average", "tflite_average", "pool", "output_rows",
    "run_operation", "sigmoid_table", "tanh_table", "IDENTITY_MULTIPLIER",
]

INT32_MIN = -(1 << 31)
INT32_MAX = (1 << 31) - 1

#: ``(multiplier, shift)`` of the identity: ``x * (2**31 - 1) / 2**31`` rounds to
#: ``x`` for ``|x| <= 2**30`` (and beyond that the result clamps the same).
#: ``(2**30, 1)`` would not do: its left shift wraps for ``|x| >= 2**30``.
IDENTITY_MULTIPLIER = (INT32_MAX, 0)


def wrap_int32(values):
    """Two's complement wrap to int32 (as int64)."""
    v = np.asarray(values, dtype=np.int64)
    return ((v + (1 << 31)) & 0xFFFFFFFF) - (1 << 31)


def saturating_rounding_doubling_high_mul(a, b):
    """gemmlowp's ``SaturatingRoundingDoublingHighMul`` on int32 values.

    ``(a * b + nudge) / 2**31`` with C division (truncation toward zero),
    ``nudge = 2**30`` for a non-negative product, else ``1 - 2**30``; only
    ``INT32_MIN * INT32_MIN`` saturates (to ``INT32_MAX``).
    """
    a = np.asarray(a, dtype=np.int64)
    b = np.asarray(b, dtype=np.int64)
    overflow = (a == b) & (a == INT32_MIN)
    ab = a * b    # |ab| <= 2**62 fits int64
    nudged = ab + np.where(ab >= 0, 1 << 30, 1 - (1 << 30))
    high = np.where(nudged >= 0, nudged >> 31, -((-nudged) >> 31))
    return np.where(overflow, INT32_MAX, high)


def rounding_divide_by_pot(x, exponent):
    """gemmlowp's ``RoundingDivideByPOT``: ``x / 2**exponent`` rounded half
    away from zero. ``exponent`` 0..31 as in gemmlowp; 32 (beyond gemmlowp,
    whose mask would not fit) is the same formula in wider arithmetic."""
    x = np.asarray(x, dtype=np.int64)
    exponent = np.asarray(exponent, dtype=np.int64)
    if np.any((exponent < 0) | (exponent > 32)):
        raise ValueError("exponent must be in 0..32")
    mask = (np.int64(1) << exponent) - 1
    remainder = x & mask
    threshold = (mask >> 1) + (x < 0)
    return (x >> exponent) + (remainder > threshold)


def multiply_by_quantized_multiplier(x, multiplier, shift):
    """TFLite's double-rounding ``MultiplyByQuantizedMultiplier`` on int32
    values; the left shift wraps at 32 bits."""
    x = np.asarray(x, dtype=np.int64)
    shift = np.asarray(shift, dtype=np.int64)
    left = np.maximum(shift, 0)
    right = np.maximum(-shift, 0)
    shifted = wrap_int32(x << left)
    return rounding_divide_by_pot(saturating_rounding_doubling_high_mul(shifted, multiplier), right)


def multiply_by_quantized_multiplier_single_round(x, multiplier, shift):
    """``MultiplyByQuantizedMultiplier`` rounded once (ruy's, and TFLite's with
    ``TFLITE_SINGLE_ROUNDING``): ``(x * m + 2**(30 - shift)) >> (31 - shift)``,
    ties toward +infinity, exact (no int32 wrap or saturation). TFLite's int8
    FULLY_CONNECTED requantizes this way. ``shift`` is -32..31; for 31 there
    is nothing to round."""
    x = np.asarray(x, dtype=np.int64)
    total = 31 - np.asarray(shift, dtype=np.int64)
    if np.any((total < 0) | (total > 63)):
        raise ValueError("shift must be in -32..31")
    product = x * np.asarray(multiplier, dtype=np.int64)    # |x * m| <= 2**62 fits int64
    # floor((p + 2**(t-1)) / 2**t) == (floor(p / 2**(t-1)) + 1) >> 1, without the
    # 2**63 that p + 2**(t-1) reaches for INT32_MIN * INT32_MIN and t = 63.
    halved = ((product >> np.maximum(total - 1, 0)) + 1) >> 1
    return np.where(total == 0, product, halved)


def float32_multiplier(multiplier):
    """Whether `multiplier` is a float32 significand << 7: magnitude in
    ``[2**30, 2**31)`` with the low 7 bits zero (what `quantize_multiplier`
    gives for a float32 value), the multipliers ``mlas_round`` applies to."""
    mag = np.abs(np.asarray(multiplier, dtype=np.int64))
    return (mag >= 1 << 30) & (mag < 1 << 31) & (mag & 0x7F == 0)


def multiply_mlas_or_single_round(x, multiplier, shift):
    """``mlas_round``'s requantization of int32 ``x`` before the zero point:
    `multiply_by_float32_multiplier` (ONNX Runtime's float32 rounding) where
    the multiplier is a float32 significand << 7 (`float32_multiplier`),
    `multiply_by_quantized_multiplier_single_round` where it is not."""
    x = np.asarray(x, dtype=np.int64)
    multiplier = np.broadcast_to(np.asarray(multiplier, dtype=np.int64), np.broadcast(x, multiplier).shape)
    valid = float32_multiplier(multiplier)
    mlas = multiply_by_float32_multiplier(x, np.where(valid, multiplier, 1 << 30), shift)
    once = multiply_by_quantized_multiplier_single_round(x, multiplier, shift)
    return np.where(valid, mlas, once)


def quantize_multiplier(real_multiplier):
    """``(multiplier, shift)`` with ``real ~= multiplier * 2**(shift - 31)``,
    as TFLite's ``QuantizeMultiplier``.

    ``multiplier`` is in ``[2**30, 2**31)`` (negative for a negative real);
    reals below about ``2**-32`` flush to ``(0, 0)``. Raises ``ValueError`` if
    the shift would exceed the chip's largest left shift, 31.
    """
    real = float(real_multiplier)
    if not math.isfinite(real):
        raise ValueError(f"multiplier {real_multiplier!r} is not finite")
    if real == 0.0:
        return 0, 0
    q, shift = math.frexp(real)
    scaled = q * (1 << 31)                     # exact: a power-of-two scaling
    q_fixed = int(math.copysign(math.floor(abs(scaled) + 0.5), scaled))   # std::round
    if abs(q_fixed) == 1 << 31:
        q_fixed //= 2
        shift += 1
    if shift < -31:
        return 0, 0
    if shift > (1 << (SHIFT_WIDTH - 1)) - 1:
        raise ValueError(f"multiplier {real_multiplier!r} needs a left shift of {shift}; "
                         f"the chip shifts left by at most 31")
    return q_fixed, shift


def type_range(unsigned):
    """``(low, high)`` of uint8 or int8."""
    return (0, 255) if unsigned else (-128, 127)


def output_bounds(settings):
    """``(low, high)`` of the clamp after requantization. The clamp is
    ``min(max(v, low), high)``, so ``high`` wins if ``low > high``."""
    low, high = type_range(settings.unsigned)
    if settings.function == Function.RELU:
        low = max(low, settings.zero_point)
    elif settings.function == Function.CLAMP:
        low = max(low, settings.clamp_min)
        high = min(high, settings.clamp_max)
    return low, high


@dataclass
class ActivationSettings:
    """Every setting of the pipeline. The defaults are the RTL's reset values:
    identity requantization into int8, no function, no pooling.

    Per-column arrays have ``cols`` entries; scalars apply to all columns.
    ``pool_count`` and ``pool_reciprocal`` are the divisor of average pooling
    and ``pool_reciprocal(pool_count)``; `with_pooling` fills them in.
    """
    cols: int
    bias: np.ndarray = None
    multiplier: np.ndarray = None
    shift: np.ndarray = None
    function: Function = Function.NONE
    unsigned: bool = False
    single_round: bool = False
    mlas_round: bool = False
    zero_point: int = 0
    clamp_min: int = -(1 << (VALUE_WIDTH - 1))
    clamp_max: int = (1 << (VALUE_WIDTH - 1)) - 1
    pool: Pooling = Pooling.NONE
    pool_size: int = 1
    pool_stride: int = 1
    pool_width: int = 1
    pool_count: int = 1
    pool_reciprocal: int = 1 << RECIPROCAL_SHIFT
    lut: np.ndarray = field(default=None)

    def __post_init__(self):
        cols = self.cols
        if not isinstance(cols, int) or not 1 <= cols <= 256:
            raise ValueError(f"cols must be an int in 1..256, not {cols!r}")
        if self.bias is None:
            self.bias = np.zeros(cols, dtype=np.int64)
        if self.multiplier is None:
            self.multiplier = np.full(cols, IDENTITY_MULTIPLIER[0], dtype=np.int64)
        if self.shift is None:
            self.shift = np.full(cols, IDENTITY_MULTIPLIER[1], dtype=np.int64)
        if self.lut is None:
            self.lut = np.zeros(256, dtype=np.int64)
        for name, size in (("bias", cols), ("multiplier", cols), ("shift", cols), ("lut", 256)):
            value = np.array(getattr(self, name), dtype=np.int64).reshape(-1)
            if value.size == 1 and size > 1:
                value = np.full(size, value[0], dtype=np.int64)
            setattr(self, name, value)
        self.function = Function(self.function)
        self.pool = Pooling(self.pool)
        self.unsigned = bool(self.unsigned)
        self.mlas_round = bool(self.mlas_round)
        # MLAS's rounding is a one rounding: the activation unit sets both.
        self.single_round = bool(self.single_round) or self.mlas_round
        self.validate()

    def validate(self):
        """Raise ``ValueError`` if a setting is outside what the RTL holds."""
        def check(name, value, low, high):
            if isinstance(value, int):          # most settings: no array to scan
                bad = not low <= value <= high
            else:
                v = np.asarray(value)
                bad = v.size and (v.min() < low or v.max() > high)
            if bad:
                raise ValueError(f"{name} must be in {low}..{high}")
        cols = self.cols
        for name in ("bias", "multiplier", "shift"):
            if getattr(self, name).shape != (cols,):
                raise ValueError(f"{name} must have {cols} entries")
        if self.lut.shape != (256,):
            raise ValueError("lut must have 256 entries")
        check("bias", self.bias, INT32_MIN, INT32_MAX)
        check("multiplier", self.multiplier, INT32_MIN, INT32_MAX)
        check("shift", self.shift, -(1 << (SHIFT_WIDTH - 1)), (1 << (SHIFT_WIDTH - 1)) - 1)
        check("lut", self.lut, 0, 255)
        v_low, v_high = -(1 << (VALUE_WIDTH - 1)), (1 << (VALUE_WIDTH - 1)) - 1
        for name in ("zero_point", "clamp_min", "clamp_max"):
            check(name, getattr(self, name), v_low, v_high)
        check("pool_size", self.pool_size, 1, MAX_POOL_SIZE)
        check("pool_stride", self.pool_stride, 1, MAX_POOL_SIZE)
        check("pool_width", self.pool_width, 1, 1 << 16)
        check("pool_count", self.pool_count, 1, MAX_POOL_COUNT)
        check("pool_reciprocal", self.pool_reciprocal, 0, (1 << RECIPROCAL_WIDTH) - 1)

    def with_pooling(self, pool, *, size=1, stride=1, width=1, rows=None):
        """A copy with pooling set up, divisor and reciprocal included:
        ``size * size`` for window pooling, `rows` for GLOBAL_AVG."""
        pool = Pooling(pool)
        count = rows if pool == Pooling.GLOBAL_AVG else size * size
        if count is None:
            raise ValueError("GLOBAL_AVG needs the number of rows")
        return replace(self, pool=pool, pool_size=size, pool_stride=stride, pool_width=width,
                       pool_count=count, pool_reciprocal=pool_reciprocal(count))


def requantize(acc, settings):
    """Accumulator rows ``(rows, cols)`` -> clamped values before the function."""
    acc = np.asarray(acc, dtype=np.int64)
    x = wrap_int32(acc + settings.bias)
    if settings.mlas_round:
        y = multiply_mlas_or_single_round(x, settings.multiplier, settings.shift)
    elif settings.single_round:
        y = multiply_by_quantized_multiplier_single_round(x, settings.multiplier, settings.shift)
    else:
        y = multiply_by_quantized_multiplier(x, settings.multiplier, settings.shift)
    low, high = output_bounds(settings)
    return np.minimum(np.maximum(y + settings.zero_point, low), high)


def lut_index(values, unsigned):
    """Table index of clamped values: ``v + 128`` for int8, ``v`` for uint8."""
    values = np.asarray(values, dtype=np.int64)
    return values if unsigned else values + 128


def apply_function(values, settings):
    """The function stage: table lookup for SIGMOID/TANH, else unchanged.
    Returns values in the output type's range."""
    values = np.asarray(values, dtype=np.int64)
    if settings.function not in (Function.SIGMOID, Function.TANH):
        return values
    byte = settings.lut[lut_index(values, settings.unsigned)]
    return byte if settings.unsigned else byte - ((byte & 0x80) << 1)


def pool_reciprocal(count):
    """``ceil(2**32 / count)``: with it, ``(a * r) >> 32 == a // count`` for
    every ``0 <= a < 256 * count`` and ``1 <= count <= 4096``.

    Proof: ``r * count = 2**32 + e`` with ``0 <= e < count``, so
    ``a * r / 2**32 = a / count + a * e / (count * 2**32)``. With
    ``a = q * count + rem`` (``rem <= count - 1``) the floor stays ``q`` as long
    as ``a * e < 2**32``, and ``a * e < 256 * count * count <= 2**32``.
    """
    count = int(count)
    if not 1 <= count <= MAX_POOL_COUNT:
        raise ValueError(f"pool count must be in 1..{MAX_POOL_COUNT}, not {count}")
    return -(-(1 << RECIPROCAL_SHIFT) // count)


def pool_average(sums, count, reciprocal, unsigned):
    """The RTL's average: ``sign(s) * (((|s| + count // 2) * reciprocal) >> 32)``,
    clamped to the output type. Equals `tflite_average` when ``reciprocal ==
    pool_reciprocal(count)`` and ``|s| <= 255 * count``."""
    sums = np.asarray(sums, dtype=np.int64)
    magnitude = ((np.abs(sums) + (int(count) >> 1)) * int(reciprocal)) >> RECIPROCAL_SHIFT
    low, high = type_range(unsigned)
    return np.clip(np.where(sums < 0, -magnitude, magnitude), low, high)


def tflite_average(sums, count):
    """TFLite's reference integer AveragePool rounding: ``(s + count/2) / count``
    for ``s > 0``, else ``(s - count/2) / count``, with C division."""
    sums = np.asarray(sums, dtype=np.int64)
    half = int(count) // 2
    return np.where(sums > 0, (sums + half) // count, -((half - sums) // count))


def pool(values, settings):
    """Pool one operation's values ``(rows, cols)`` (after the function).

    Window pooling: row ``i`` is pixel ``(i // width, i % width)``; window
    ``(oy, ox)`` covers lines ``oy*s .. oy*s+k-1`` and pixels
    ``ox*s .. ox*s+k-1`` and is emitted when its last pixel arrives (windows
    that would cross the line end are never formed; rows of an unfinished
    window are dropped). Global pooling emits one row at the operation's last
    row.
    """
    values = np.asarray(values, dtype=np.int64)
    n, cols = values.shape
    mode = settings.pool
    if mode == Pooling.NONE:
        return values
    if mode in (Pooling.GLOBAL_AVG, Pooling.GLOBAL_MAX):
        if n == 0:
            return np.zeros((0, cols), dtype=np.int64)
        if mode == Pooling.GLOBAL_MAX:
            return values.max(axis=0, keepdims=True)
        if n > MAX_POOL_COUNT:
            raise ValueError(f"GLOBAL_AVG over {n} rows: at most {MAX_POOL_COUNT} are supported")
        return pool_average(values.sum(axis=0, keepdims=True), settings.pool_count,
                            settings.pool_reciprocal, settings.unsigned)
    k, s, width = settings.pool_size, settings.pool_stride, settings.pool_width
    lines = -(-n // width)
    out_h, out_w, ends = _windows(settings, n)
    if ends.size == 0:
        return np.zeros((0, cols), dtype=np.int64)
    image = np.zeros((lines * width, cols), dtype=np.int64)
    image[:n] = values
    image = image.reshape(lines, width, cols)
    result = None
    for dy in range(k):
        for dx in range(k):
            part = image[dy:dy + s * (out_h - 1) + 1:s, dx:dx + s * (out_w - 1) + 1:s]
            if result is None:
                result = part.copy()
            elif mode == Pooling.MAX:
                result = np.maximum(result, part)
            else:
                result = result + part
    if mode == Pooling.AVG:
        result = pool_average(result, settings.pool_count, settings.pool_reciprocal,
                              settings.unsigned)
    return result.reshape(-1, cols)[:ends.size]


def _windows(settings, n):
    """``(out_h, out_w, ends)`` of window pooling over `n` rows: ``ends`` are
    the rows that complete a window, in output order."""
    k, s, width = settings.pool_size, settings.pool_stride, settings.pool_width
    lines = -(-n // width)
    out_w = (width - k) // s + 1 if width >= k else 0
    out_h = (lines - k) // s + 1 if lines >= k else 0
    oy, ox = np.meshgrid(np.arange(out_h), np.arange(out_w), indexing="ij")
    ends = ((oy * s + k - 1) * width + ox * s + k - 1).reshape(-1)
    # Raster order: the windows that completed are a prefix.
    return out_h, out_w, ends[ends < n]


def output_rows(settings, n):
    """Index of the input row that completes each output row of an operation
    of `n` rows (the output appears `latency` cycles after that row)."""
    if settings.pool == Pooling.NONE:
        return np.arange(n)
    if settings.pool in (Pooling.GLOBAL_AVG, Pooling.GLOBAL_MAX):
        return np.array([n - 1]) if n else np.zeros(0, dtype=np.int64)
    return _windows(settings, n)[2]


def run_operation(settings, acc):
    """One operation: accumulator rows ``(rows, cols)``, the last one flagged
    ``last``; returns the output rows as bytes ``(out_rows, cols)`` uint8."""
    acc = np.asarray(acc, dtype=np.int64).reshape(-1, settings.cols)
    settings.validate()
    values = apply_function(requantize(acc, settings), settings)
    return (pool(values, settings) & 0xFF).astype(np.uint8)


# Function tables ------------------------------------------------------------

def _round_half_away(value):
    """C ``round`` of a float: half away from zero."""
    value = float(value)
    return math.copysign(math.floor(abs(value) + 0.5), value) if abs(value) < 2 ** 52 else value


def _build_table(transform, in_scale, in_zero, out_scale, out_zero, unsigned):
    """TFLite's ``LUTPopulate`` in float32 arithmetic, in our index order."""
    in_scale, out_scale = float(in_scale), float(out_scale)
    if not all(math.isfinite(scale) and scale > 0 for scale in (in_scale, out_scale)):
        raise ValueError("scales must be positive and finite")
    low, high = type_range(unsigned)
    f32 = np.float32
    inverse_scale = f32(1.0) / f32(out_scale)
    table = np.zeros(256, dtype=np.int64)
    with np.errstate(over="ignore", invalid="ignore"):
        for val in range(low, high + 1):
            dequantized = f32(in_scale) * f32(val - int(in_zero))
            transformed = f32(transform(dequantized))
            rescaled = _round_half_away(f32(transformed * inverse_scale))
            quantized = float(f32(f32(rescaled) + f32(int(out_zero))))
            # static_cast<int32_t> truncates; clamping first is the same for integer bounds.
            quantized = int(min(max(quantized, low), high))
            table[int(lut_index(val, unsigned))] = quantized & 0xFF
    return table


def _sigmoid(x):
    f32 = np.float32
    with np.errstate(over="ignore"):
        e = f32(np.exp(-np.float64(x)))             # expf, correctly rounded
    return f32(1.0) / (f32(1.0) + e)


def _tanh(x):
    return np.float32(np.tanh(np.float64(x)))               # tanhf, correctly rounded


def sigmoid_table(in_scale, in_zero, out_scale, out_zero, unsigned):
    """The 256-byte table of ``1 / (1 + exp(-x))`` from the quantized input
    domain ``(in_scale, in_zero)`` to ``(out_scale, out_zero)``, in the order the
    chip indexes it (``v + 128`` for int8, ``v`` for uint8). Computed in
    float32 like TFLite's ``LUTPopulate`` (``TfLiteRound``: half away from zero)."""
    return _build_table(_sigmoid, in_scale, in_zero, out_scale, out_zero, unsigned)


def tanh_table(in_scale, in_zero, out_scale, out_zero, unsigned):
    """As `sigmoid_table`, for ``tanh``."""
    return _build_table(_tanh, in_scale, in_zero, out_scale, out_zero, unsigned)
