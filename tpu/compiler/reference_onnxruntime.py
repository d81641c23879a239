"""ONNX Runtime's CPU kernels for the operators the host runs, value for value.

The ONNX front end imports a softmax and the average pools whose result the
chip's integer rounding cannot reproduce (windows of an even number of
pixels tie; padded windows vary their count) as `ir.HostOp` layers naming
these functions, so the host computes exactly what ONNX Runtime does, in
the same float32 operations in the same order:

* `qlinear_softmax` ("qlinear_softmax"): ``com.microsoft.QLinearSoftmax``:
  a 256-entry table of ``exp((i - 255 + shift) * s_x)`` (double, stored as
  float32, ``shift = max(0, ln(FLT_MAX / D) - 5) / s_x``), indexed by the
  value's distance from the row's maximum, summed in float32 along the row;
  each output ``nearbyint(e * floor(1 / s_y) / sum) + z_y`` in float32.
* `qlinear_average_pool` ("qlinear_average_pool"):
  ``com.microsoft.QLinearAveragePool`` (ONNX Runtime also runs QDQ's
  DequantizeLinear -> AveragePool -> QuantizeLinear as it): each pixel
  dequantized ``s_x * (q - z_x)`` in float32, summed in float32 row by row
  over the window's real pixels, divided by their count, then
  ``nearbyint(avg / s_y + z_y)`` (ties to even) and saturated; with
  ``attrs["uint8"]`` an int8 pool is computed in uint8 as ONNX Runtime's
  x86 QDQ int8 -> uint8 transformation leaves it.
* `add_constant` ("add_constant"): an Add of a constant per channel (MatMul
  + Add): dequantize, add the constant, quantize, in float32.
* `qlinear_add`: ``com.microsoft.QLinearAdd`` as MLAS runs it on x86-64
  with AVX2 (``ir.Add(semantics="qlinear_add")``, and the host op
  "qlinear_add_constant" for a constant operand): float32 scale ratios
  ``r_a = s_a / s_c``, ``r_b = s_b / s_c``, one fixed term
  ``z_c - fma(r_a, z_a, r_b * z_b)``, then per value
  ``fma(a, r_a, fma(b, r_b, fixed))`` (a single value b is folded into the
  fixed term by the same fused multiply-add, which rounds alike), rounded
  half to even to int32 (out of range: INT32_MIN) and saturated.
"""

import math

import numpy as np

from .ir import IRError


__all__ = ["qlinear_softmax", "qlinear_average_pool", "add_constant", "qlinear_add", "fma32",
           "ONNXRUNTIME_HOST_OPS"]

_FLT_MAX = float(np.finfo(np.float32).max)


def softmax_table(x_scale, reduce_len, unsigned):
    """QLinearSoftmax's float32 table, indexed like ONNX Runtime's:
    ``[255 - max + q]`` for uint8, ``[uint8(127 - max + q)]`` for int8."""
    scale = float(np.float32(x_scale))
    shift = max(0.0, math.log(_FLT_MAX / reduce_len) - 5.0) / scale
    i = np.arange(256, dtype=np.float64)
    values = np.exp((i - 255 + shift) * scale).astype(np.float32)
    table = np.empty(256, np.float32)
    index = i.astype(np.int64) if unsigned else (i.astype(np.int64) - 128) & 0xFF
    table[index] = values
    return table


def qlinear_softmax(layer, inputs, in_quants, out_quants):
    """QLinearSoftmax over the last axis of ``(batch, ..., C)`` integers."""
    (x,), (in_q,), (out_q,) = inputs, in_quants, out_quants
    x = np.asarray(x, dtype=np.int64)
    if int(layer.attrs.get("axis", -1)) not in (-1, x.ndim - 1):
        raise IRError(f"layer {layer.name!r}: qlinear_softmax runs over the last axis only")
    if in_q.unsigned != out_q.unsigned:
        raise IRError(f"layer {layer.name!r}: QLinearSoftmax maps within one type")
    d = x.shape[-1]
    table = softmax_table(in_q.scale, d, in_q.unsigned)
    top = x.max(axis=-1, keepdims=True)
    index = 255 - top + x if in_q.unsigned else (127 - top + x) & 0xFF
    e = table[index]
    total = np.zeros(x.shape[:-1] + (1,), np.float32)
    for j in range(d):             # float32, in ONNX Runtime's order
        total += e[..., j:j + 1]
    y_scale = np.float32(math.floor(np.float32(1.0) / np.float32(out_q.scale)))
    q = np.rint((e * y_scale) / total).astype(np.int64) + int(out_q.zero_point)
    low, high = out_q.range
    return np.clip(q, low, high).astype(out_q.dtype)


def qlinear_average_pool(layer, inputs, in_quants, out_quants):
    """QLinearAveragePool of ``(batch, H, W, C)`` integers with ``attrs``
    kernel ``(kh, kw)``, stride ``(sh, sw)``, padding ``(top, left, bottom,
    right)`` and ``count_include_pad`` (default 0: divide by the window's
    real pixels; 1: by its whole size)."""
    (x,), (in_q,), (out_q,) = inputs, in_quants, out_quants
    x = np.asarray(x, dtype=np.int64)
    if x.ndim != 4:
        raise IRError(f"layer {layer.name!r}: pooling needs (H, W, C) images, not {x.shape[1:]}")
    kh, kw = layer.attrs["kernel"]
    sh, sw = layer.attrs["stride"]
    top, left, bottom, right = layer.attrs["padding"]
    _, h, w, _ = x.shape
    oh = (h + top + bottom - kh) // sh + 1
    ow = (w + left + right - kw) // sw + 1
    real = np.float32(in_q.scale) * (x - int(in_q.zero_point)).astype(np.float32)
    out = np.empty((x.shape[0], oh, ow, x.shape[3]), np.float32)
    for oy in range(oh):
        y0, y1 = max(oy * sh - top, 0), min(oy * sh - top + kh, h)
        for ox in range(ow):
            x0, x1 = max(ox * sw - left, 0), min(ox * sw - left + kw, w)
            if y1 <= y0 or x1 <= x0:
                raise IRError(f"layer {layer.name!r}: a window covers only padding")
            total = np.zeros((x.shape[0], x.shape[3]), np.float32)
            for yy in range(y0, y1):
                for xx in range(x0, x1):
                    total += real[:, yy, xx, :]
            count = kh * kw if layer.attrs.get("count_include_pad") else (y1 - y0) * (x1 - x0)
            out[:, oy, ox, :] = total / np.float32(count)
    # ONNX Runtime adds the zero point before rounding, in float32 (which
    # moves near-ties), and on x86 runs QDQ int8 pools in uint8 (zero point
    # + 128): ``attrs["uint8"]``
    shift = 128 if layer.attrs.get("uint8") and not out_q.unsigned else 0
    q = np.rint(out / np.float32(out_q.scale) + np.float32(out_q.zero_point + shift)) - shift
    low, high = out_q.range
    return np.clip(q, low, high).astype(out_q.dtype)


def add_constant(layer, inputs, in_quants, out_quants):
    """An Add of a constant per channel (``attrs["constant"]``, real values,
    as float32) to ``(batch, ..., C)`` integers: ONNX Runtime's
    dequantize-add-quantize in float32, ties to even, saturated."""
    (x,), (in_q,), (out_q,) = inputs, in_quants, out_quants
    constant = np.asarray(layer.attrs["constant"], np.float64).astype(np.float32)
    x = np.asarray(x, dtype=np.int64)
    real = (x - int(in_q.zero_point)).astype(np.float32) * np.float32(in_q.scale)
    q = np.rint((real + constant) / np.float32(out_q.scale)) + int(out_q.zero_point)
    low, high = out_q.range
    return np.clip(q, low, high).astype(out_q.dtype)


def fma32(a, b, c):
    """float32 ``a * b + c`` rounded once, half to even (x86 FMA3): the
    product of two float32 is exact in float64; the float64 sum's rounding
    error (two-sum) breaks the ties a second rounding to float32 would get
    wrong."""
    a, b, c = np.broadcast_arrays(*(np.asarray(x, np.float32).astype(np.float64)
                                    for x in (a, b, c)))
    p = a * b
    with np.errstate(over="ignore", invalid="ignore"):
        s = p + c
        c_part = s - p
        err = (p - (s - c_part)) + (c - c_part)
        r = s.astype(np.float32)
        down = np.nextafter(r, np.float32(-np.inf))
        up = np.nextafter(r, np.float32(np.inf))
        rd = r.astype(np.float64)
        r = np.where((s == (rd + down.astype(np.float64)) / 2) & (err < 0), down, r)
        r = np.where((s == (rd + up.astype(np.float64)) / 2) & (err > 0), up, r)
    return r.astype(np.float32)


def _cvtps_epi32(x):
    """x86 float32 -> int32 conversion (round half to even); NaN and values
    out of the int32 range give INT32_MIN."""
    x = np.asarray(x, np.float64)
    with np.errstate(invalid="ignore"):
        bad = ~((x >= -2.0 ** 31) & (x < 2.0 ** 31))
    return np.where(bad, -(1 << 31), np.rint(np.where(bad, 0, x))).astype(np.int64)


def qlinear_add(a, b, a_q, b_q, out_q):
    """``com.microsoft.QLinearAdd`` of integer arrays `a` and `b` (numpy
    broadcasting) into `out_q`, as ONNX Runtime's MLAS x86-64
    AVX2 kernel computes it (see the module docstring); int64 values
    saturated to `out_q`'s range. The operands are not interchangeable:
    `a` is the one MLAS takes first (ONNX's first input, unless ONNX
    Runtime's broadcasting hands it over as single values)."""
    f32 = np.float32
    r_a = f32(f32(a_q.scale) / f32(out_q.scale))
    r_b = f32(f32(b_q.scale) / f32(out_q.scale))
    # the compiler contracts MLAS's C++ ``r_a * z_a + r_b * z_b`` and its
    # intrinsics' multiply-then-add of a single b into fused multiply-adds:
    # a single b rounds as a tensor's would
    fixed = f32(f32(out_q.zero_point)
                - fma32(r_a, f32(a_q.zero_point), f32(r_b * f32(b_q.zero_point))))
    a, b = np.broadcast_arrays(np.asarray(a, np.int64), np.asarray(b, np.int64))
    total = fma32(a.astype(f32), r_a, fma32(b.astype(f32), r_b, fixed))
    low, high = out_q.range
    return np.clip(_cvtps_epi32(total), low, high)


def qlinear_add_constant(layer, inputs, in_quants, out_quants):
    """A QLinearAdd of a tensor and a constant of one value or one per
    channel (``attrs``: "constant", its integers; "scale", "zero_point";
    "first", whether the constant is ONNX's first input). ONNX Runtime
    hands a constant that is one value over a span of pixels (a single
    value, or one per channel of an image) to MLAS as its second operand,
    the tensor first; a constant as long as the tensor's innermost
    dimension stays in ONNX's order."""
    (x,), (in_q,), (out_q,) = inputs, in_quants, out_quants
    x = np.asarray(x, dtype=np.int64)
    attrs = layer.attrs
    const = np.asarray(attrs["constant"], np.int64)
    const_q = type(in_q)(scale=float(attrs["scale"]), zero_point=int(attrs["zero_point"]),
                         unsigned=in_q.unsigned)
    pixels = int(np.prod(x.shape[1:-1])) if x.ndim > 2 else 1
    values = np.broadcast_to(const if const.size > 1 else const.reshape(()), x.shape)
    if attrs.get("first") and const.size > 1 and pixels == 1:
        out = qlinear_add(values, x, const_q, in_q, out_q)
    else:
        out = qlinear_add(x, values, in_q, const_q, out_q)
    return out.astype(out_q.dtype)


#: op name -> function(layer, integer inputs, input quantizations, output
#: quantizations) -> output array
ONNXRUNTIME_HOST_OPS = {
    "qlinear_softmax": lambda layer, xs, iq, oq: [qlinear_softmax(layer, xs, iq, oq)],
    "qlinear_average_pool": lambda layer, xs, iq, oq: [qlinear_average_pool(layer, xs, iq, oq)],
    "add_constant": lambda layer, xs, iq, oq: [add_constant(layer, xs, iq, oq)],
    "qlinear_add_constant": lambda layer, xs, iq, oq: [qlinear_add_constant(layer, xs, iq, oq)],
}
