"""ONNX Runtime's float32 requantization (MLAS) in integer arithmetic (numpy).

The golden model's ``mlas_round`` (ACT flag 2) computes this
(`tpu.models.activation_model.requantize`); the RTL computes the window
form below (``hdl/requantizer.py``); the compiler's "mlas" layers use it
(docs/compiler.md).

ONNX Runtime's QLinearConv and QLinearMatMul (MLAS's
``MlasRequantizeOutput``, and the convolution kernels' own output stage)
requantize an int32 sum ``x`` (bias included, wrapping) with the float32
scale ``s = float32(float32(s_x * s_w) / s_y)`` as

    v = float32(float32(x) * s)                  (each step rounded half to even)
    v = min(max(v, qmin - zp), qmax - zp)         (in float)
    y = rint(v) + zp                              (half to even)

`requantize_mlas` computes the same from integers only, as a circuit
would, with ``s`` given the way the chip's requantizer carries a
multiplier: ``multiplier`` is ``s``'s 24-bit significand shifted left by
7 (what `quantize_multiplier` gives for a float32 value: ``[2**30, 2**31)``,
the low 7 bits zero) and ``s = multiplier * 2**(shift - 31)``, so with
``m = multiplier >> 7`` (``2**23 <= m < 2**24``) ``s = m * 2**(shift - 24)``.
The arithmetic is on magnitudes (float rounding is symmetric); the sign
``sign(x) * sign(multiplier)`` is put back before the zero point.

1. ``float32(x)``: ``a = |x|`` (at most ``2**31``) has ``n`` bits; with
   ``d = max(n - 24, 0)`` (0..8, a leading-one position among ``a``'s
   top 8 bits) ``A = rne(a / 2**d)``, at most ``2**24`` (the rounding
   may carry into a 25th bit), so ``float32(x) = A * 2**d`` exactly.
   ``d > 0`` only for ``|x| > 2**24``.
2. The exact product ``P = A * m``, below ``2**48``; the value is
   ``P * 2**-T`` with ``T = 24 - d - shift`` bits of fraction.
3. ``float32`` of the product: ``P`` has ``L`` bits, ``L = la + 23`` or
   ``la + 24`` where ``la`` is ``A``'s bit length (a product of two
   significands in ``[1, 2)`` is in ``[1, 4)``), so the leading-one
   position of ``P`` is that of ``A`` and one bit of ``P``. With
   ``g = max(L - 24, 0)``, ``P' = rne(P / 2**g) * 2**g``: 24 significant
   bits, half to even.
4. ``rne(P' / 2**T)`` (``P' * 2**-T`` exactly for ``T <= 0``), saturated to
   ``[-2**31, 2**31)``: what ``rint`` of the clamped float gives, as the
   bounds are integers (clamping and rounding to an integer commute).
5. ``+ zp``, then ``min(max(., qmin), qmax)``.

What matters for int8 and uint8 outputs: the clamp bounds ``qmin - zp``
and ``qmax - zp`` lie in ``[-255, 255]``, so a value that is not clamped
has an integer part below ``2**8`` (``2**9`` with the zero point added).
Then

* ``P < 2**(T + 8)``, and stage 3 keeps 24 significant bits of which at
  most 8 are integer bits: it rounds at ``g <= T - 16``, at least 16 bits
  below the integer rounding of stage 4 (which therefore always has a
  guard bit and at least 15 sticky bits below it);
* stage 1 rounds (``|x| > 2**24``) only with ``s < 2**-16``;
* the only way stage 3 changes the result of rounding ``P * 2**-T`` once
  (half to even) is by moving ``P`` onto the half: if ``R`` is ``P``'s
  fraction (its low ``T`` bits) and ``H = 2**(T - 1)``, every ``R`` with
  ``|R - H| <= 2**(g - 1)`` becomes ``H`` (at the window's edges the
  tie at ``g`` goes to ``H``, which is even in units of ``2**g`` as
  ``g <= T - 2``), and no other ``R`` reaches or crosses ``H``.

So `requantize_mlas_window` (the same results, tested equal) is one
exact rounding with a wider tie: ``q = P >> T``, to the even of ``q`` and
``q + 1`` if ``|R - H| <= w`` (``w = 2**(g - 1)`` for ``g > 0``, else 0:
an exact tie), else up by one if ``R > H``, which outside the window is
the chip's present single rounding (``R >= H``, the bit below the integer
point). The window is a compare of the fraction bits from ``g`` up to the
half with a mask (all ones below ``H`` or all zeros above it) and of the
bits below ``g`` with ``2**(g - 1)``, at a position ``g`` taken from
``x``'s leading one and one bit of ``P``; stage 1's rounding of ``x`` is
the one adder it adds.
"""

import numpy as np

__all__ = ["float32_significand", "requantize_mlas", "requantize_mlas_window",
           "multiply_by_float32_multiplier", "multiply_by_float32_multiplier_window"]

_SATURATE = 1 << 31


def float32_significand(multiplier, shift):
    """``(m, exponent)`` with ``multiplier * 2**(shift - 31) = m * 2**exponent``
    and ``m`` the float32 scale's 24-bit significand (0 for 0). Raises
    ``ValueError`` for a multiplier that is not a float32 value's."""
    multiplier = np.asarray(multiplier, dtype=np.int64)
    shift = np.asarray(shift, dtype=np.int64)
    mag = np.abs(multiplier)
    if np.any((mag != 0) & ((mag < (1 << 30)) | (mag >= (1 << 31)) | (mag & 0x7F != 0))):
        raise ValueError("multiplier must be a float32 significand << 7 in [2**30, 2**31)")
    return mag >> 7, shift - 24


def _bit_length(v):
    """Bit length of non-negative int64 values below 2**53 (exact: frexp of a
    float64 that holds them exactly)."""
    return np.frexp(np.asarray(v, dtype=np.float64))[1].astype(np.int64)


def _rne_shift(v, s):
    """``rne(v / 2**s)`` (half to even) of non-negative ``v`` for ``s`` 0..62."""
    v = np.asarray(v, dtype=np.int64)
    s = np.asarray(s, dtype=np.int64)
    q = v >> s
    r = v - (q << s)
    half = np.where(s > 0, np.int64(1) << np.maximum(s - 1, 0), 1)    # s = 0: r = 0 < 1
    up = (r > half) | ((r == half) & (q & 1 == 1))
    return q + up


def _scale_left(v, k):
    """``v * 2**k`` for ``k >= 0``, saturated to ``2**31``."""
    k = np.asarray(k, dtype=np.int64)
    small = np.minimum(v, _SATURATE) << np.minimum(k, 31)    # below 2**63
    return np.minimum(np.where(v == 0, 0, small), _SATURATE)


def _signed(x, multiplier, mag):
    negative = (np.asarray(x) < 0) != (np.asarray(multiplier) < 0)
    return np.clip(np.where(negative, -mag, mag), -_SATURATE, _SATURATE - 1)


def _stages(x, multiplier, shift):
    """Stages 1 to 3 on magnitudes: ``(P, d, g, T)`` with the value ``P * 2**-T``
    before stage 3's rounding."""
    x = np.asarray(x, dtype=np.int64)
    if np.any((x < -_SATURATE) | (x >= _SATURATE)):
        raise ValueError("x must be int32 values")
    m, _ = float32_significand(multiplier, shift)
    a = np.abs(x)
    d = np.maximum(_bit_length(a) - 24, 0)                  # stage 1
    big_a = _rne_shift(a, d)
    p = big_a * m                                           # stage 2
    g = np.maximum(_bit_length(p) - 24, 0)                  # stage 3's position
    t = 24 - d - np.asarray(shift, dtype=np.int64)
    return p, d, g, t


def multiply_by_float32_multiplier(x, multiplier, shift):
    """``rint(float32(float32(x) * s))``, ``s = multiplier * 2**(shift - 31)``,
    saturated to int32, from integers (stages 1 to 4 of the module's
    docstring). ``x`` int32, ``multiplier`` a float32 significand << 7,
    ``shift`` -32..31."""
    p, d, g, t = _stages(x, multiplier, shift)
    p24 = _rne_shift(p, g)                                  # stage 3: P' = p24 * 2**g
    t24 = t - g                                             # fraction bits left of p24
    down = _rne_shift(p24, np.clip(t24, 0, 62))             # stage 4
    mag = np.where(t24 > 0, down, _scale_left(p24, np.maximum(-t24, 0)))
    return _signed(x, multiplier, mag)


def multiply_by_float32_multiplier_window(x, multiplier, shift):
    """`multiply_by_float32_multiplier` as one rounding of the exact product
    with a tie window of ``2**(g - 1)`` around the half (the module's
    docstring): equal wherever stage 3 rounds at least 2 bits below the
    half (``g <= T - 2``: every result below ``2**22`` in magnitude, so
    every value an 8-bit output does not clamp); larger results may differ
    by a step, which no 8-bit output sees. Stage 1's rounding of ``x`` is
    kept."""
    p, d, g, t = _stages(x, multiplier, shift)
    tt = np.clip(t, 0, 62)
    q = p >> tt
    r = p - (q << tt)
    half = np.where(tt > 0, np.int64(1) << np.maximum(tt - 1, 0), 1)
    w = np.where(g > 0, np.int64(1) << np.maximum(g - 1, 0), 0)
    tie = np.abs(r - half) <= w
    up = np.where(tie, q & 1 == 1, r > half)
    mag = np.where(t > 0, q + up, _scale_left(p, np.maximum(-t, 0)))
    return _signed(x, multiplier, mag)


def _finish(y, zero_point, qmin, qmax):
    return np.minimum(np.maximum(y + np.asarray(zero_point, dtype=np.int64), qmin), qmax)


def requantize_mlas(x, multiplier, shift, zero_point, qmin, qmax):
    """ONNX Runtime's (MLAS's) requantization of int32 sums ``x``, bias
    included: ``clamp(rint(float32(float32(x) * s)) + zero_point, qmin,
    qmax)`` with ``s = multiplier * 2**(shift - 31)``, computed from integers
    (the module's docstring). Per-channel arrays broadcast against ``x``."""
    return _finish(multiply_by_float32_multiplier(x, multiplier, shift), zero_point, qmin, qmax)


def requantize_mlas_window(x, multiplier, shift, zero_point, qmin, qmax):
    """`requantize_mlas` by `multiply_by_float32_multiplier_window`."""
    return _finish(multiply_by_float32_multiplier_window(x, multiplier, shift),
                   zero_point, qmin, qmax)
