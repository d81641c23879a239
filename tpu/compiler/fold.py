"""Pass: fold the input zero point into the int32 bias.

The chip multiplies the stored activations ``x`` (not ``x - zx``), so each
output channel's bias absorbs the zero point:
``sum (x - zx) * w + bias = sum x * w + (bias - zx * sum w)``. Padding pixels
hold ``zx``, so they still contribute nothing.
"""

import numpy as np

from .errors import CompileError


__all__ = ["fold_zero_point"]

INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1


def fold_zero_point(name, bias, weight, zero_point):
    """``bias - zero_point * (column sums of weight)`` as int64; `weight` is
    ``(..., N)``. A folded bias outside int32 is a `CompileError`."""
    w = np.asarray(weight)
    sums = w.reshape(-1, w.shape[-1]).sum(axis=0, dtype=np.int64)
    folded = np.asarray(bias, dtype=np.int64) - int(zero_point) * sums
    if folded.size and (folded.min() < INT32_MIN or folded.max() > INT32_MAX):
        raise CompileError(f"layer {name!r}: the bias with the input zero point folded in "
                           f"does not fit int32")
    return folded
