"""The reference interpreter of the IR: what the chip must compute, bit for bit.

``run(graph, inputs)`` evaluates a `tpu.compiler.ir.Graph` on quantized
integer arrays with numpy. Every layer type also has a public function
(`dense`, `conv2d`, `pool2d`, `global_avg_pool`, `add`, `elementwise`,
`reshape`, `host_op`) that the runtime calls for the steps it runs on the
host, so a model run on the chip equals this module exactly.

Arrays carry the batch first: ``(batch, *tensor.shape)``, integers of any
dtype in; results in the output tensor's dtype (int8 or uint8).

Semantics
---------
* **Dense, Conv2D**: ``acc = sum (x - zx) * w + bias`` in 32-bit two's
  complement (padding pixels equal ``zx``, so contribute 0), then the
  activation unit's pipeline (`tpu.models.activation_model`):
  ``MultiplyByQuantizedMultiplier(acc, m[n], s[n]) + z`` with
  ``(m, s) = ir.requant_multipliers(in_q, weight_scale, target)``, where the
  target is ``activation.pre`` for sigmoid/tanh and the output otherwise,
  clamped to the function's bounds, then the 256-entry table for
  sigmoid/tanh.
* **Requantizing a tensor** (Pool2D, GlobalAvgPool, Elementwise with
  different quantizations): ``MultiplyByQuantizedMultiplier(q - zin, m, s) +
  zout`` with ``(m, s)`` from ``s_in / s_out`` the same way (the chip runs
  it as an identity matrix layer); equal quantizations give ``q`` unchanged.
* **Pool2D**: requantize every pixel, saturate, then the max (padding
  ignored) or the average with TFLite's rounding (`tflite_average`: ties
  away from zero) over the window's real pixels (ONNX
  ``count_include_pad=0``); output size as ONNX with ``ceil_mode=0``.
* **GlobalAvgPool**: requantize, then the average over all pixels (TFLite's
  rounding).
* **Add**: ONNX Runtime's dequantize-add-quantize in float32:
  ``round_half_even((sa*(a-za) + sb*(b-zb)) / sy) + zy``, then the activation
  (its bounds; for sigmoid/tanh the sum goes to ``activation.pre`` and the
  table).
* **Reshape**: the same values in a new shape; ``order="chw"`` takes the
  ``(H, W, C)`` input in channel-major order first (ONNX's Flatten of NCHW).
  Input and output quantization must be equal.
* **HostOp**: dequantize the inputs, apply the model's float32 operator,
  quantize to the output (`HOST_OPS`). ``softmax`` takes ``attrs["axis"]``
  as an axis of the IR array *including the batch* (default -1, the
  channels).
* **ONNX Runtime's kernels** (`reference_onnxruntime`): the host ops
  ``qlinear_softmax`` and ``qlinear_average_pool`` compute what ONNX
  Runtime's QLinearSoftmax and QLinearAveragePool do, in float32.
* **TFLite variants** (`reference_tflite`, chosen by the IR, see
  docs/tflite.md): matrix layers with ``rounding="single"``,
  ``Add(semantics="tflite")`` and the integer host op
  ``softmax_tflite`` compute what TFLite's reference kernels do.
* `quantize` / `dequantize`: ONNX ``QuantizeLinear`` (float32 division,
  round half to even, saturate) and ``DequantizeLinear``.
"""

from types import SimpleNamespace

import numpy as np

from ..models.activation_model import (
    Function, apply_function, multiply_by_quantized_multiplier, output_bounds, sigmoid_table,
    tanh_table, tflite_average, wrap_int32, multiply_mlas_or_single_round)
from . import ir
from .ir import ActivationKind, IRError
from .reference_onnxruntime import ONNXRUNTIME_HOST_OPS, qlinear_add
from .reference_tflite import (
    INTEGER_HOST_OPS, add_tflite, multiply_by_quantized_multiplier_single_round)


__all__ = [
    "run", "run_layer", "dense", "conv2d", "pool2d", "global_avg_pool", "add", "elementwise",
    "reshape", "host_op", "HOST_OPS", "quantize", "dequantize", "requantize_accumulators",
    "rescale", "activate",
]


# Quantization helpers ------------------------------------------------------------------

def quantize(real, quant):
    """ONNX ``QuantizeLinear``: ``saturate(round_half_even(real / scale) + zero_point)``
    in float32, as an array of the quantization's dtype."""
    real = np.asarray(real, dtype=np.float32)
    if np.isnan(real).any():
        raise ValueError("cannot quantize NaN")
    with np.errstate(over="ignore"):
        scaled = np.rint(real / np.float32(quant.scale)).astype(np.float64)
    low, high = quant.range
    return np.clip(scaled + int(quant.zero_point), low, high).astype(quant.dtype)


def dequantize(q, quant):
    """ONNX ``DequantizeLinear``: ``(q - zero_point) * scale`` in float32."""
    q = np.asarray(q, dtype=np.int64)
    return (q - int(quant.zero_point)).astype(np.float32) * np.float32(quant.scale)


def _ints(x, what="input"):
    x = np.asarray(x)
    if x.dtype.kind not in "iub":
        raise ValueError(f"{what} must be an integer array, not {x.dtype}")
    return x.astype(np.int64)


def _saturate(values, quant):
    low, high = quant.range
    return np.clip(values, low, high).astype(quant.dtype)


_FUNCTIONS = {ActivationKind.NONE: Function.NONE, ActivationKind.RELU: Function.RELU,
              ActivationKind.CLAMP: Function.CLAMP, ActivationKind.SIGMOID: Function.SIGMOID,
              ActivationKind.TANH: Function.TANH}
_TABLES = {ActivationKind.SIGMOID: sigmoid_table, ActivationKind.TANH: tanh_table}


def _target(out_q, activation):
    """The quantization a sum is requantized to: the function's input for
    sigmoid/tanh, else the output."""
    if activation.kind in _TABLES:
        if activation.pre.unsigned != out_q.unsigned:
            raise IRError(f"a {activation.kind.value} activation from {activation.pre.dtype} "
                          f"to {out_q.dtype}: the chip's table maps within one type")
        return activation.pre
    return out_q


def _settings(out_q, activation):
    """The activation unit's settings (the fields `output_bounds` and
    `apply_function` read) for `activation` into `out_q`."""
    kind = activation.kind
    target = _target(out_q, activation)
    lut = None
    if kind in _TABLES:
        lut = _TABLES[kind](np.float32(target.scale), target.zero_point, np.float32(out_q.scale),
                            out_q.zero_point, out_q.unsigned)
    return SimpleNamespace(
        function=_FUNCTIONS[kind], unsigned=out_q.unsigned, zero_point=int(target.zero_point),
        clamp_min=-256 if activation.clamp_min is None else int(activation.clamp_min),
        clamp_max=255 if activation.clamp_max is None else int(activation.clamp_max), lut=lut)


def activate(values, out_q, activation=ir.NO_ACTIVATION):
    """Values already in the target domain (zero point added, not yet
    clamped) -> the output: the function's clamp, then the table for
    sigmoid/tanh. Returns the output dtype."""
    settings = _settings(out_q, activation)
    low, high = output_bounds(settings)
    clamped = np.minimum(np.maximum(np.asarray(values, dtype=np.int64), low), high)
    return apply_function(clamped, settings).astype(out_q.dtype)


def requantize_accumulators(acc, in_q, weight_scale, out_q, activation=ir.NO_ACTIVATION,
                            rounding="double"):
    """int32 sums ``(..., N)`` (bias included) -> output values: the activation
    unit's requantization, clamp and function (``rounding="single"``: TFLite's
    one-step rounding, `multiply_by_quantized_multiplier_single_round`;
    "float32": the same of ONNX Runtime's float32 multiplier; "mlas": ONNX
    Runtime's float32 rounding by it, `multiply_mlas_or_single_round`)."""
    target = _target(out_q, activation)
    m, s = ir.requant_multipliers(in_q, weight_scale, target, rounding)
    if rounding == "mlas":
        y = multiply_mlas_or_single_round(wrap_int32(acc), m, s)
    elif rounding in ("single", "float32"):
        y = multiply_by_quantized_multiplier_single_round(wrap_int32(acc), m, s)
    else:
        y = multiply_by_quantized_multiplier(wrap_int32(acc), m, s)
    return activate(y + int(target.zero_point), out_q, activation)


def rescale(q, in_q, out_q):
    """Requantize tensor values from `in_q` to `out_q` as the chip does
    (``MultiplyByQuantizedMultiplier(q - zin, m, s) + zout``), not yet
    saturated (int64). Equal quantizations give `q`."""
    q = _ints(q)
    if in_q == out_q:
        return q
    m, s = ir.requant_multipliers(in_q, [1.0], out_q)
    return multiply_by_quantized_multiplier(q - int(in_q.zero_point), m[0], s[0]) \
        + int(out_q.zero_point)


# Layers -------------------------------------------------------------------------------------

def dense(layer, x, in_q, out_q):
    """`ir.Dense` on ``(batch, *input shape)`` (flattened in (H, W, C) order)
    -> ``(batch, N)``."""
    x = _ints(x)
    k, n = layer.weight.shape
    x = x.reshape(x.shape[0], -1)
    if x.shape[1] != k:
        raise IRError(f"layer {layer.name!r}: input has {x.shape[1]} values per sample, "
                      f"weights {k} rows")
    acc = (x - int(in_q.zero_point)) @ layer.weight.astype(np.int64) + layer.bias
    return requantize_accumulators(acc, in_q, layer.weight_scale, out_q, layer.activation,
                                   getattr(layer, "rounding", "double"))


def conv_output_size(size, kernel, stride, pad_before, pad_after):
    """ONNX's output length (``ceil_mode=0``) of a convolution or pooling axis."""
    return (size + pad_before + pad_after - kernel) // stride + 1


def conv2d(layer, x, in_q, out_q):
    """`ir.Conv2D` on ``(batch, H, W, Cin)`` -> ``(batch, OH, OW, Cout)``."""
    x = _ints(x)
    kh, kw, cin, cout = layer.weight.shape
    if x.ndim != 4 or x.shape[3] != cin:
        raise IRError(f"layer {layer.name!r}: input {x.shape[1:]} is not an image of {cin} "
                      f"channels")
    top, left, bottom, right = layer.padding
    sh, sw = layer.stride
    oh = conv_output_size(x.shape[1], kh, sh, top, bottom)
    ow = conv_output_size(x.shape[2], kw, sw, left, right)
    if oh < 1 or ow < 1:
        raise IRError(f"layer {layer.name!r}: a {kh}x{kw} kernel does not fit the padded "
                      f"{x.shape[1]}x{x.shape[2]} input")
    # Padding with the zero point contributes 0 once it is subtracted.
    xp = np.pad(x - int(in_q.zero_point), ((0, 0), (top, bottom), (left, right), (0, 0)))
    w = layer.weight.astype(np.int64)
    acc = np.zeros((x.shape[0], oh, ow, cout), dtype=np.int64)
    for dy in range(kh):
        for dx in range(kw):
            patch = xp[:, dy:dy + sh * (oh - 1) + 1:sh, dx:dx + sw * (ow - 1) + 1:sw, :]
            acc += patch @ w[dy, dx]
    out = requantize_accumulators(acc + layer.bias, in_q, layer.weight_scale, out_q,
                                  layer.activation, getattr(layer, "rounding", "double"))
    pool = getattr(layer, "pool", None)
    return out if pool is None else pool2d(pool, out, out_q, out_q)


def _average(sums, counts):
    """TFLite's rounded average of `sums` by per-element `counts`."""
    out = np.empty_like(sums)
    for count in np.unique(counts):
        where = counts == count
        out[where] = tflite_average(sums[where], int(count))
    return out


def pool2d(layer, x, in_q, out_q):
    """`ir.Pool2D` on ``(batch, H, W, C)`` -> ``(batch, OH, OW, C)``."""
    x = _ints(x)
    if x.ndim != 4:
        raise IRError(f"layer {layer.name!r}: pooling needs (H, W, C) images, not {x.shape[1:]}")
    values = _saturate(rescale(x, in_q, out_q), out_q).astype(np.int64)
    kh, kw = layer.size
    sh, sw = layer.stride
    top, left, bottom, right = layer.padding
    b, h, w, c = values.shape
    oh = conv_output_size(h, kh, sh, top, bottom)
    ow = conv_output_size(w, kw, sw, left, right)
    if oh < 1 or ow < 1:
        raise IRError(f"layer {layer.name!r}: a {kh}x{kw} window does not fit the padded "
                      f"{h}x{w} input")
    padded = np.pad(values, ((0, 0), (top, bottom), (left, right), (0, 0)))
    real = np.pad(np.ones((h, w), dtype=np.int64), ((top, bottom), (left, right)))
    low = out_q.range[0]
    result = np.full((b, oh, ow, c), low, dtype=np.int64) if layer.kind == "max" \
        else np.zeros((b, oh, ow, c), dtype=np.int64)
    counts = np.zeros((oh, ow), dtype=np.int64)
    for dy in range(kh):
        for dx in range(kw):
            rows = slice(dy, dy + sh * (oh - 1) + 1, sh)
            cols = slice(dx, dx + sw * (ow - 1) + 1, sw)
            part, inside = padded[:, rows, cols, :], real[rows, cols]
            counts += inside
            if layer.kind == "max":
                result = np.where(inside[None, :, :, None] == 1, np.maximum(result, part), result)
            else:
                result += part          # pads are 0 and not counted
    if layer.kind == "avg":
        if counts.min() < 1:
            raise IRError(f"layer {layer.name!r}: a window covers only padding")
        result = _average(result, np.broadcast_to(counts[None, :, :, None], result.shape))
    return _saturate(result, out_q)


def global_avg_pool(layer, x, in_q, out_q):
    """`ir.GlobalAvgPool` on ``(batch, H, W, C)`` -> ``(batch, 1, 1, C)``."""
    x = _ints(x)
    if x.ndim != 4:
        raise IRError(f"layer {layer.name!r}: global pooling needs (H, W, C) images, "
                      f"not {x.shape[1:]}")
    values = _saturate(rescale(x, in_q, out_q), out_q).astype(np.int64)
    pixels = values.shape[1] * values.shape[2]
    sums = values.sum(axis=(1, 2), keepdims=True)
    return _saturate(tflite_average(sums, pixels), out_q)


def add(layer, a, b, a_q, b_q, out_q):
    """`ir.Add`: ONNX Runtime's float32 dequantize-add-quantize (a QDQ Add),
    then the activation; ``semantics="qlinear_add"``: ONNX Runtime's
    QLinearAdd (`reference_onnxruntime.qlinear_add`, MLAS's scale ratios),
    ``"qlinear_add_uint8"`` the same on int8 tensors moved to uint8 (plus
    128) as ONNX Runtime moves them; ``semantics="tflite"``: `add_tflite`."""
    semantics = getattr(layer, "semantics", "onnx")
    if semantics == "tflite":
        return add_tflite(layer, a, b, a_q, b_q, out_q)
    a, b = _ints(a), _ints(b)
    if a.shape != b.shape:
        raise IRError(f"layer {layer.name!r}: adds {a.shape[1:]} to {b.shape[1:]}")
    target = _target(out_q, layer.activation)
    if semantics in ("qlinear_add", "qlinear_add_uint8"):
        shift = 0
        if semantics == "qlinear_add_uint8":
            def moved(q):
                return q if q.unsigned else type(q)(scale=q.scale, zero_point=q.zero_point + 128,
                                                    unsigned=True)
            a, b = a + (0 if a_q.unsigned else 128), b + (0 if b_q.unsigned else 128)
            shift = 0 if target.unsigned else 128
            a_q, b_q, target = moved(a_q), moved(b_q), moved(target)
        if a.size == 1:
            # ONNX Runtime takes a one-value first input as the single value
            q = qlinear_add(b, a, b_q, a_q, target)
        else:
            q = qlinear_add(a, b, a_q, b_q, target)
        return activate(q - shift, out_q, layer.activation)
    total = dequantize(a, a_q) + dequantize(b, b_q)
    with np.errstate(over="ignore"):
        q = np.rint(total / np.float32(target.scale)).astype(np.float64)
    # Beyond any bound anyway; keeps the integer conversion exact.
    q = np.clip(q, -1 << 20, 1 << 20).astype(np.int64) + int(target.zero_point)
    return activate(q, out_q, layer.activation)


def elementwise(layer, x, in_q, out_q):
    """`ir.Elementwise`: requantize to the output (or the function's input
    for sigmoid/tanh), then the activation."""
    target = _target(out_q, layer.activation)
    return activate(rescale(x, in_q, target), out_q, layer.activation)


def reshape(layer, x, out_shape, in_q=None, out_q=None):
    """`ir.Reshape` of ``(batch, *input shape)`` to ``(batch, *out_shape)``."""
    if in_q is not None and out_q is not None and in_q != out_q:
        raise IRError(f"layer {layer.name!r}: a reshape cannot change the quantization "
                      f"({in_q} -> {out_q})")
    x = np.asarray(x)
    if layer.order == "chw" and x.ndim == 4:
        x = x.transpose(0, 3, 1, 2)
    if int(np.prod(x.shape[1:])) != int(np.prod(out_shape)):
        raise IRError(f"layer {layer.name!r}: {x.shape[1:]} has {int(np.prod(x.shape[1:]))} "
                      f"values, {tuple(out_shape)} needs {int(np.prod(out_shape))}")
    return np.ascontiguousarray(x).reshape((x.shape[0], *out_shape))


def _softmax(layer, values):
    (x,) = values
    axis = int(layer.attrs.get("axis", -1))
    shifted = x - x.max(axis=axis, keepdims=True)
    e = np.exp(shifted, dtype=np.float32)
    return [e / e.sum(axis=axis, keepdims=True, dtype=np.float32)]


#: op name -> function(layer, float32 input arrays) -> float32 output arrays
HOST_OPS = {"softmax": _softmax}


def host_op(layer, inputs, in_quants, out_quants):
    """`ir.HostOp`: dequantize `inputs`, apply ``HOST_OPS[layer.op]`` in
    float32, quantize to `out_quants`. Returns a list of arrays."""
    for integer_ops in (INTEGER_HOST_OPS, ONNXRUNTIME_HOST_OPS):
        if layer.op in integer_ops:
            return integer_ops[layer.op](layer, [_ints(x) for x in inputs], in_quants, out_quants)
    try:
        function = HOST_OPS[layer.op]
    except KeyError:
        known = [*HOST_OPS, *INTEGER_HOST_OPS, *ONNXRUNTIME_HOST_OPS]
        raise IRError(f"layer {layer.name!r}: no host operator {layer.op!r}; known: "
                      f"{', '.join(sorted(known))}") from None
    reals = [dequantize(_ints(x), q) for x, q in zip(inputs, in_quants)]
    outs = function(layer, reals)
    return [quantize(y, q) for y, q in zip(outs, out_quants)]


# The interpreter -----------------------------------------------------------------------------

def run_layer(graph, layer, values):
    """Evaluate one layer of `graph` on `values` (tensor name -> array);
    a dict of the tensors it writes."""
    q = lambda name: graph.tensor(name).quant
    if isinstance(layer, ir.HostOp):
        outs = host_op(layer, [values[n] for n in layer.inputs], [q(n) for n in layer.inputs],
                       [q(n) for n in layer.outputs])
        result = dict(zip(layer.outputs, outs))
    elif isinstance(layer, ir.Add):
        result = {layer.output: add(layer, values[layer.a], values[layer.b], q(layer.a),
                                    q(layer.b), q(layer.output))}
    elif isinstance(layer, ir.Reshape):
        result = {layer.output: reshape(layer, values[layer.input],
                                        graph.tensor(layer.output).shape, q(layer.input),
                                        q(layer.output))}
    else:
        function = _LAYERS.get(type(layer))
        if function is None:
            raise IRError(f"layer {layer.name!r}: the reference has no {type(layer).__name__}")
        result = {layer.output: function(layer, values[layer.input], q(layer.input),
                                         q(layer.output))}
    for name, value in result.items():
        shape = graph.tensor(name).shape
        if int(np.prod(value.shape[1:])) != int(np.prod(shape)):
            raise IRError(f"layer {layer.name!r}: computes {value.shape[1:]} for tensor "
                          f"{name!r} of shape {shape}")
        result[name] = value.reshape((value.shape[0], *shape))
    return result


_LAYERS = {ir.Dense: dense, ir.Conv2D: conv2d, ir.Pool2D: pool2d,
           ir.GlobalAvgPool: global_avg_pool, ir.Elementwise: elementwise}


def check_input(graph, name, value, batch=None):
    """`value` as an int64 array ``(batch, *shape)`` of tensor `name`; a one-line
    `ValueError` if its shape or values do not fit the tensor."""
    tensor = graph.tensor(name)
    value = np.asarray(value)
    if value.dtype.kind not in "iub":
        raise ValueError(f"input {name!r}: quantized values must be integers, not {value.dtype}")
    if value.shape[1:] != tensor.shape or value.ndim != len(tensor.shape) + 1 \
            or (batch is not None and value.shape[0] != batch):
        raise ValueError(f"input {name!r}: shape {value.shape} is not (batch, "
                         f"{', '.join(map(str, tensor.shape))})")
    low, high = tensor.quant.range
    if value.size and (value.min() < low or value.max() > high):
        raise ValueError(f"input {name!r}: values outside {tensor.quant.dtype} ({low}..{high})")
    return value.astype(np.int64)


def run(graph, inputs, outputs_only=False):
    """Evaluate `graph` on quantized `inputs` (IR tensor name -> integer array
    ``(batch, *shape)``); every tensor's values (in its dtype) by name, or only
    the graph outputs' with `outputs_only`."""
    expected = [i.tensor for i in graph.inputs]
    missing = [n for n in expected if n not in inputs]
    unknown = [n for n in inputs if n not in expected]
    if missing or unknown:
        raise ValueError(f"inputs {sorted(inputs)} do not match the graph's {expected}")
    values = {}
    batch = None
    for name in expected:
        values[name] = check_input(graph, name, inputs[name], batch)
        batch = values[name].shape[0]
    for name in expected:
        values[name] = values[name].astype(graph.tensor(name).quant.dtype)
    for layer in graph.layers:
        values.update(run_layer(graph, layer, values))
    if outputs_only:
        return {o.tensor: values[o.tensor] for o in graph.outputs}
    return values
