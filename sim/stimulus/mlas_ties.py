"""Requantizer operands at and next to the ties of ONNX Runtime's float32
rounding (`tpu.models.mlas_rounding`): the stimulus of the MLAS rounding's
tests, in the golden model and in the RTL."""

import numpy as np

from ...models.activation_model import multiply_by_quantized_multiplier_single_round
from ...models.mlas_rounding import multiply_by_float32_multiplier

__all__ = ["constructed_ties", "differing_ties", "conversion_ties"]


def modular_inverse(k, bits):
    return pow(int(k), -1, 1 << bits)


def constructed_ties(rng, count):
    """``(x, m, shift)`` whose product's fraction is at or next to the half,
    exactly or within stage 3's rounding: ``x = k * 2**i`` (``k`` odd, up to
    7 bits, ``i`` up to 24 so that ``|x|`` passes ``2**24``) and ``m`` solving
    ``k * m = 2**(F-1) + delta (mod 2**F)`` for a fraction of ``F`` bits,
    ``delta`` 0, the window's edges ``+-2**(g-1)`` and their neighbours."""
    xs, ms, shifts = [], [], []
    while len(xs) < count:
        k = int(rng.integers(0, 64)) * 2 + 1
        bk = k.bit_length()
        f = int(rng.integers(bk + 16, 24))
        i = int(rng.integers(0, 32 - bk))
        g = bk - 1 + int(rng.integers(0, 2))          # stage 3's g of k * m, a guess
        edge = 1 << max(g - 1, 0)
        delta = int(rng.choice([0, 1, -1, edge, -edge, edge + 1, -edge - 1, edge - 1,
                                1 - edge, 2 * edge, -2 * edge]))
        c = ((1 << (f - 1)) + delta) % (1 << f)
        low = c * modular_inverse(k, f) % (1 << f)
        m = low + int(rng.integers((1 << 23) >> f, (1 << 24) >> f)) * (1 << f)
        if not (1 << 23) <= m < (1 << 24):
            continue
        x = k << i
        if x >= 1 << 31:
            continue
        d = max(x.bit_length() - 24, 0)
        shift = 24 - d - (f + i)
        if not -32 <= shift <= 31:
            continue
        sign = int(rng.choice([-1, 1]))
        xs.append(sign * x)
        ms.append(m)
        shifts.append(shift)
    return np.array(xs), np.array(ms), np.array(shifts)


def differing_ties(rng, count, *, limit=300):
    """``count`` of `constructed_ties` (``m`` a 24-bit significand), half of
    them where the MLAS rounding and the chip's one rounding differ with a
    result below `limit` in magnitude (which an 8-bit output's clamp may pass)."""
    parts = [[], [], []]
    found = 0
    while found < count // 2 or not parts[0]:
        x, m, shift = constructed_ties(rng, 40 * count)
        y = multiply_by_float32_multiplier(x, m << 7, shift)
        differ = (y != multiply_by_quantized_multiplier_single_round(x, m << 7, shift)) \
            & (abs(y) < limit)
        # (about 1 in 60 differ: draw again until half of `count` do)
        pick = np.flatnonzero(differ)[:count // 2 - found]
        if not parts[0]:
            pick = np.concatenate([pick, np.flatnonzero(~differ)[:count - count // 2]])
        found += int(np.count_nonzero(differ[pick]))
        for part, values in zip(parts, (x, m, shift)):
            part.append(values[pick])
    return tuple(np.concatenate(part) for part in parts)


def conversion_ties(rng, count, odd=False):
    """``count`` of ``(x, m, shift)`` (``m`` a 24-bit significand) with
    ``|x| > 2**24`` exactly halfway between two float32 values (its dropped
    bits ``2**(d-1)``, the kept ones even) where rounding ``x`` up instead
    of to even changes ONNX Runtime's result, which is below 300 in
    magnitude: products within about ``2**-16`` below a half, found by
    drawing many. With `odd` the kept bits are odd, so that ``x`` rounds
    up, and rounding it down instead changes the result."""
    xs, ms, shifts = [], [], []
    while len(xs) < count:
        n = 200_000
        d = rng.integers(1, 8, n)
        top = rng.integers(1 << 22, 1 << 23, n) * 2 + odd
        x = (top << d) + (np.int64(1) << (d - 1))
        m = rng.integers(1 << 23, 1 << 24, n)
        shift = -15 - d - rng.integers(0, 2, n)
        y = multiply_by_float32_multiplier(x, m << 7, shift)
        up = multiply_by_float32_multiplier((top + 1 - odd) << d, m << 7, shift)
        for k in np.flatnonzero((y != up) & (np.abs(y) < 300))[:count - len(xs)]:
            xs.append(int(x[k]) * int(rng.choice([-1, 1])))
            ms.append(int(m[k]))
            shifts.append(int(shift[k]))
    return np.array(xs), np.array(ms), np.array(shifts)
