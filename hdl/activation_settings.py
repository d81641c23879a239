"""Encodings and layouts shared by the activation pipeline, its golden model
and its drivers: functions, pooling modes, setting ranges, port payloads."""

from amaranth import *
from amaranth.lib import data, enum


__all__ = [
    "Function", "Pooling",
    "MAX_POOL_SIZE", "MAX_POOL_COUNT", "RECIPROCAL_SHIFT", "RECIPROCAL_WIDTH",
    "SHIFT_WIDTH", "VALUE_WIDTH",
    "InputRow", "OutputRow", "SettingsLayout", "ChannelWrite", "LutWrite",
]


class Function(enum.IntEnum, shape=3):
    """The activation function applied after requantization."""
    NONE = 0      #: clamp to the output type only
    RELU = 1      #: lower bound ``zero_point``
    CLAMP = 2     #: bounds ``clamp_min`` .. ``clamp_max`` (ReLU6, ReLU-N1-to-1, ...)
    SIGMOID = 3   #: 256-entry table lookup
    TANH = 4      #: 256-entry table lookup (same hardware as SIGMOID)


class Pooling(enum.IntEnum, shape=3):
    """The pooling applied after the function."""
    NONE = 0        #: one output row per input row
    MAX = 1         #: k x k windows, stride s, maximum
    AVG = 2         #: k x k windows, stride s, rounded average
    GLOBAL_AVG = 3  #: rounded average of all rows of the operation
    GLOBAL_MAX = 4  #: maximum of all rows of the operation


#: Largest pooling window side and stride.
MAX_POOL_SIZE = 4
#: Largest divisor of average pooling (and so the most rows of a GLOBAL_AVG operation).
MAX_POOL_COUNT = 4096
#: Average pooling divides by multiplying with ``reciprocal`` and shifting right by this.
RECIPROCAL_SHIFT = 32
#: Width of the reciprocal setting: ``ceil(2**32 / count)`` needs 33 bits for ``count == 1``.
RECIPROCAL_WIDTH = RECIPROCAL_SHIFT + 1
#: Width of the per-column shift (two's complement, -32..31).
SHIFT_WIDTH = 6
#: Width of an activation value between the clamp and the output byte: int8 and uint8 both fit.
VALUE_WIDTH = 9


def InputRow(cols):
    """Payload of the activation pipeline's input: one accumulator row.

    ``last`` marks the last row of an operation.
    """
    return data.StructLayout({
        "data": data.ArrayLayout(signed(32), cols),
        "last": 1,
    })


def OutputRow(cols):
    """Payload of the activation pipeline's output: one unified-buffer row of bytes."""
    return data.ArrayLayout(unsigned(8), cols)


def SettingsLayout(max_width, mlas_rounding=True):
    """The operation-wide settings, written all at once (``mlas_round``
    only with `mlas_rounding`, `TPUConfig.mlas_rounding`)."""
    return data.StructLayout({
        "function":        Function,
        "unsigned":        1,
        "single_round":    1,
        **({"mlas_round":  1} if mlas_rounding else {}),
        "zero_point":      signed(VALUE_WIDTH),
        "clamp_min":       signed(VALUE_WIDTH),
        "clamp_max":       signed(VALUE_WIDTH),
        "pool":            Pooling,
        "pool_size":       range(MAX_POOL_SIZE + 1),
        "pool_stride":     range(MAX_POOL_SIZE + 1),
        "pool_width":      range(max_width + 1),
        "pool_count":      range(MAX_POOL_COUNT + 1),
        "pool_reciprocal": unsigned(RECIPROCAL_WIDTH),
    })


def ChannelWrite(cols):
    """Payload of a per-column write: requantization parameters of column ``col``."""
    return data.StructLayout({
        "col":        range(cols),
        "bias":       signed(32),
        "multiplier": signed(32),
        "shift":      signed(SHIFT_WIDTH),
    })


def LutWrite():
    """Payload of a function-table write: entry ``index`` becomes ``value``."""
    return data.StructLayout({
        "index": unsigned(8),
        "value": unsigned(8),
    })
