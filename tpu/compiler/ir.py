"""The compiler's intermediate representation: a graph of quantized layers.

Every front end (ONNX today, TFLite next) fills a `Graph`; the back end and
the reference interpreter only ever read this module's types. Nothing here
knows where a model came from.

Conventions
-----------
* **Per-sample shapes.** A `Tensor`'s ``shape`` leaves out the batch: an
  image is ``(H, W, C)`` (channels last, the chip's layout: one pixel per UB
  row, its channels across the row), a vector is ``(C,)``. The batch size is
  chosen when compiling and running, not here.
* **Quantization.** ``real = scale * (q - zero_point)``. Activations are int8
  or uint8 (`QuantType.unsigned`) with a zero point; weights are int8 with
  zero point 0 and a scale per output channel (a per-tensor scale is the same
  value repeated). Biases are int32 in units of ``input_scale * weight_scale[n]``
  and do *not* have the input zero point folded in: that is a back-end pass.
* **Requantization** of an int32 sum to an output tensor uses the real
  multiplier ``input_scale * weight_scale[n] / output_scale`` turned into the
  chip's (multiplier, shift) by `tpu.models.activation_model.quantize_multiplier`
  (TFLite's integer rounding), computed from float64 products of the stored
  float32 scales (`requant_multipliers`; TFLite's convolutions and
  FULLY_CONNECTED compute it so too). A matrix layer's ``rounding`` is
  "double" (the chip's MultiplyByQuantizedMultiplier) or "single" (TFLite's
  int8 FULLY_CONNECTED rounds once: ACT's ``single_round``) or "float32"
  (rounds once by ONNX Runtime's float32 multiplier; the ONNX front end's
  where ONNX Runtime runs the layer as a float32 operator) or "mlas" (by the
  same multiplier as ONNX Runtime's QLinearConv and QLinearMatMul do: a
  float32 product rounded half to even, ACT's ``mlas_round``; the ONNX front
  end's for the layers ONNX Runtime fuses into them).
* **Fused activations** (`Activation`) act in the output's quantized domain:
  ``relu`` is ``max(q, zero_point)``, ``clamp`` clamps to quantized bounds,
  ``sigmoid``/``tanh`` map the requantized value (in `Activation.pre`, the
  quantization the function's input has) through a 256-entry table to the
  output quantization.
* Layers are listed in an order where every input is produced before use
  (`Graph.validate` checks it).
"""

from dataclasses import dataclass, field
from enum import Enum

import numpy as np


__all__ = [
    "IRError", "QuantType", "Tensor", "Activation", "ActivationKind",
    "Dense", "Conv2D", "Pool2D", "GlobalAvgPool", "Add", "Elementwise", "Reshape", "HostOp",
    "Graph", "GraphInput", "GraphOutput", "requant_multipliers",
]


class IRError(ValueError):
    """A graph that breaks the rules of this module."""


@dataclass(frozen=True)
class QuantType:
    """Quantization of an activation tensor: ``real = scale * (q - zero_point)``,
    q int8 (or uint8 when `unsigned`)."""
    scale: float
    zero_point: int
    unsigned: bool = False

    def __post_init__(self):
        if not (np.isfinite(self.scale) and self.scale > 0):
            raise IRError(f"a quantization scale must be finite and positive, not {self.scale!r}")
        low, high = self.range
        if not low <= int(self.zero_point) <= high:
            raise IRError(f"zero point {self.zero_point} is outside {self.dtype} ({low}..{high})")

    @property
    def dtype(self):
        return np.dtype(np.uint8 if self.unsigned else np.int8)

    @property
    def range(self):
        return (0, 255) if self.unsigned else (-128, 127)


@dataclass
class Tensor:
    """A quantized activation tensor.

    Members: ``name`` (unique in the graph), ``shape`` (per sample, no batch:
    ``(H, W, C)`` or ``(C,)``), ``quant`` (`QuantType`).
    """
    name: str
    shape: tuple
    quant: QuantType

    def __post_init__(self):
        self.shape = tuple(int(d) for d in self.shape)
        if not self.shape or any(d < 1 for d in self.shape) or len(self.shape) not in (1, 3):
            raise IRError(f"tensor {self.name!r}: shape {self.shape} is neither (C,) nor (H, W, C)")

    @property
    def channels(self):
        return self.shape[-1]

    @property
    def size(self):
        return int(np.prod(self.shape))


class ActivationKind(str, Enum):
    NONE = "none"
    RELU = "relu"
    CLAMP = "clamp"
    SIGMOID = "sigmoid"
    TANH = "tanh"


@dataclass
class Activation:
    """A function applied in the quantized output domain after requantization.

    ``clamp_min``/``clamp_max`` (CLAMP) are quantized bounds in the output's
    type. For SIGMOID and TANH, ``pre`` is the quantization of the function's
    input (what the sum is requantized to before the table lookup).
    """
    kind: ActivationKind = ActivationKind.NONE
    clamp_min: int = None
    clamp_max: int = None
    pre: QuantType = None

    def __post_init__(self):
        self.kind = ActivationKind(self.kind)
        if self.kind == ActivationKind.CLAMP and (self.clamp_min is None or self.clamp_max is None):
            raise IRError("a clamp activation needs clamp_min and clamp_max")
        if self.kind in (ActivationKind.SIGMOID, ActivationKind.TANH) and self.pre is None:
            raise IRError(f"a {self.kind.value} activation needs the quantization of its input (pre)")


NO_ACTIVATION = Activation()


def _weights(name, weight, dims):
    weight = np.asarray(weight)
    if weight.ndim != dims or weight.dtype != np.int8:
        raise IRError(f"layer {name!r}: weights must be an int8 array of {dims} dimensions, "
                      f"not {weight.dtype} {weight.shape}")
    return weight


def _per_channel(name, what, values, n, dtype):
    values = np.asarray(values, dtype=dtype).reshape(-1)
    if values.size == 1:
        values = np.full(n, values[0], dtype=dtype)
    if values.shape != (n,):
        raise IRError(f"layer {name!r}: {what} has {values.size} entries for {n} output channels")
    return values


def _check_requant(layer):
    if layer.rounding not in ROUNDINGS:
        raise IRError(f"layer {layer.name!r}: rounding {layer.rounding!r} is not one of "
                      f"{', '.join(ROUNDINGS)}")


@dataclass
class Dense:
    """``out[n] = act(requant(sum_k (x[k] - zx) * weight[k, n] + bias[n]))``.

    Members: ``name``; ``input``, ``output`` (tensor names; the input is
    flattened in its (H, W, C) order if it is an image); ``weight`` int8
    ``(K, N)``; ``weight_scale`` float ``(N,)``; ``bias`` int32 ``(N,)``;
    ``activation``.
    """
    name: str
    input: str
    output: str
    weight: np.ndarray
    weight_scale: np.ndarray
    bias: np.ndarray = None
    activation: Activation = field(default_factory=Activation)
    rounding: str = "double"

    def __post_init__(self):
        self.weight = _weights(self.name, self.weight, 2)
        n = self.weight.shape[1]
        self.weight_scale = _per_channel(self.name, "weight_scale", self.weight_scale, n, np.float64)
        self.bias = _per_channel(self.name, "bias", 0 if self.bias is None else self.bias, n, np.int64)
        _check_requant(self)

    @property
    def inputs(self):
        return [self.input]


@dataclass
class Conv2D:
    """A 2-D convolution over an ``(H, W, Cin)`` image, group 1, dilation 1.

    Members: ``name``; ``input``, ``output``; ``weight`` int8
    ``(KH, KW, Cin, Cout)``; ``weight_scale`` ``(Cout,)``; ``bias`` int32
    ``(Cout,)``; ``stride`` ``(sh, sw)``; ``padding`` ``(top, left, bottom,
    right)``, padded with the input's zero point (real 0); ``activation``;
    ``pool``, an optional `Pool2D` fused by the back end (None from front ends).
    """
    name: str
    input: str
    output: str
    weight: np.ndarray
    weight_scale: np.ndarray
    bias: np.ndarray = None
    stride: tuple = (1, 1)
    padding: tuple = (0, 0, 0, 0)
    activation: Activation = field(default_factory=Activation)
    rounding: str = "double"

    def __post_init__(self):
        _check_requant(self)
        self.weight = _weights(self.name, self.weight, 4)
        n = self.weight.shape[3]
        self.weight_scale = _per_channel(self.name, "weight_scale", self.weight_scale, n, np.float64)
        self.bias = _per_channel(self.name, "bias", 0 if self.bias is None else self.bias, n, np.int64)
        self.stride = tuple(int(s) for s in self.stride)
        self.padding = tuple(int(p) for p in self.padding)
        if len(self.stride) != 2 or min(self.stride) < 1:
            raise IRError(f"layer {self.name!r}: stride {self.stride} must be two positive ints")
        if len(self.padding) != 4 or min(self.padding) < 0:
            raise IRError(f"layer {self.name!r}: padding {self.padding} must be four ints >= 0")

    @property
    def inputs(self):
        return [self.input]


@dataclass
class Pool2D:
    """Max or average pooling of an ``(H, W, C)`` image.

    ``kind`` "max" or "avg"; ``size`` ``(kh, kw)``; ``stride`` ``(sh, sw)``;
    ``padding`` ``(top, left, bottom, right)`` (max pads with the type's
    lowest value; avg counts only real pixels, ONNX's
    ``count_include_pad=0``). Input and output quantization may differ
    (the values are requantized).
    """
    name: str
    input: str
    output: str
    kind: str
    size: tuple
    stride: tuple
    padding: tuple = (0, 0, 0, 0)

    def __post_init__(self):
        if self.kind not in ("max", "avg"):
            raise IRError(f"layer {self.name!r}: pooling kind {self.kind!r} is neither max nor avg")
        self.size = tuple(int(s) for s in self.size)
        self.stride = tuple(int(s) for s in self.stride)
        self.padding = tuple(int(p) for p in self.padding)

    @property
    def inputs(self):
        return [self.input]


@dataclass
class GlobalAvgPool:
    """The average over all pixels of an ``(H, W, C)`` image: output ``(1, 1, C)``."""
    name: str
    input: str
    output: str

    @property
    def inputs(self):
        return [self.input]


ADD_SEMANTICS = ("onnx", "qlinear_add", "qlinear_add_uint8", "tflite")


@dataclass
class Add:
    """Element-wise sum of two quantized tensors of one shape, requantized to
    the output, then ``activation``.

    ``semantics`` says whose integer arithmetic it follows: "onnx" (ONNX
    Runtime's float32 dequantize-add-quantize of a QDQ Add), "qlinear_add"
    (ONNX Runtime's QLinearAdd: MLAS's float32 scale ratios and
    multiply-adds), "qlinear_add_uint8" (the same on int8 tensors that ONNX
    Runtime moves to uint8 first, values and zero points plus 128, as it
    does to a QDQ model's on x86-64; the float32 arithmetic then rounds
    otherwise in a few values) or "tflite" (TFLite's int8 ADD:
    inputs shifted left by 20, each rescaled by its own multiplier, summed,
    rescaled to the output)."""
    name: str
    a: str
    b: str
    output: str
    activation: Activation = field(default_factory=Activation)
    semantics: str = "onnx"

    def __post_init__(self):
        if self.semantics not in ADD_SEMANTICS:
            raise IRError(f"layer {self.name!r}: add semantics {self.semantics!r} is not one of "
                          f"{', '.join(ADD_SEMANTICS)}")

    @property
    def inputs(self):
        return [self.a, self.b]


@dataclass
class Elementwise:
    """A fused-activation function applied alone to a tensor (a Relu, Clip,
    Sigmoid or Tanh that no matrix layer precedes), requantizing from the
    input's quantization to the output's."""
    name: str
    input: str
    output: str
    activation: Activation

    @property
    def inputs(self):
        return [self.input]


@dataclass
class Reshape:
    """A change of shape that keeps the element order of the model's own
    layout. ``order`` says which: "hwc" (the IR's, so a plain relabel) or
    "chw" (the model flattens channels-first, as ONNX's Flatten of an NCHW
    tensor does, so the back end must permute)."""
    name: str
    input: str
    output: str
    order: str = "hwc"

    def __post_init__(self):
        if self.order not in ("hwc", "chw"):
            raise IRError(f"layer {self.name!r}: order {self.order!r} is neither hwc nor chw")

    @property
    def inputs(self):
        return [self.input]


@dataclass
class HostOp:
    """An operator the chip does not run: the runtime runs it on the host with
    the model's own reference semantics. ``op`` names it (e.g. "softmax"),
    ``attrs`` holds what it needs; ``inputs``/``outputs`` are tensor names."""
    name: str
    op: str
    inputs: list
    outputs: list
    attrs: dict = field(default_factory=dict)


@dataclass
class GraphInput:
    """A model input. ``tensor`` is the quantized IR tensor; ``model_name``,
    ``model_shape`` (with the batch dimension, None where dynamic) and
    ``model_dtype`` are what the user feeds. ``layout`` "nchw", "nhwc" or
    "nc" says how the model's array maps onto the IR's per-sample shape.
    A float input is quantized on the host with the tensor's quantization
    (round half to even, saturate), as the model's own QuantizeLinear does."""
    tensor: str
    model_name: str
    model_shape: tuple
    model_dtype: np.dtype
    layout: str


@dataclass
class GraphOutput:
    """A model output: the IR tensor, the model's name, shape, dtype and
    layout. A float output is dequantized on the host."""
    tensor: str
    model_name: str
    model_shape: tuple
    model_dtype: np.dtype
    layout: str


MATRIX_LAYERS = (Dense, Conv2D)


@dataclass
class Graph:
    """A quantized model: tensors by name, layers in execution order, inputs
    and outputs. ``source`` names where it came from (for messages);
    ``origins`` maps a layer's name to the model operator it was imported
    from (``"operator 3 (CONV_2D)"``), which errors about the layer name."""
    tensors: dict
    layers: list
    inputs: list
    outputs: list
    source: str = ""
    origins: dict = field(default_factory=dict)

    def describe(self, layer_name):
        """How messages name a layer: its model operator first, when known."""
        origin = self.origins.get(layer_name)
        return f"{origin}, layer {layer_name!r}" if origin else f"layer {layer_name!r}"

    def tensor(self, name):
        try:
            return self.tensors[name]
        except KeyError:
            raise IRError(f"{self.source}: no tensor named {name!r}") from None

    def producer(self, name):
        """The layer that writes tensor `name`, or None for a graph input."""
        for layer in self.layers:
            outs = layer.outputs if isinstance(layer, HostOp) else [layer.output]
            if name in outs:
                return layer
        return None

    def consumers(self, name):
        return [layer for layer in self.layers if name in layer.inputs]

    def validate(self):
        """Raise `IRError` unless every tensor exists, is written once, and is
        written before it is read."""
        written = {i.tensor for i in self.inputs}
        for i in self.inputs:
            self.tensor(i.tensor)
        for layer in self.layers:
            for name in layer.inputs:
                self.tensor(name)
                if name not in written:
                    raise IRError(f"{self.source}: layer {layer.name!r} reads {name!r} before "
                                  f"anything writes it")
            outs = layer.outputs if isinstance(layer, HostOp) else [layer.output]
            for name in outs:
                self.tensor(name)
                if name in written:
                    raise IRError(f"{self.source}: tensor {name!r} is written twice")
                written.add(name)
        for o in self.outputs:
            if o.tensor not in written:
                raise IRError(f"{self.source}: output {o.model_name!r} is never computed")
        return self


#: how a matrix layer's requantization rounds: "double" is the chip's (and
#: TFLite's reference convolutions'): gemmlowp's SaturatingRoundingDoublingHighMul
#: then RoundingDivideByPOT; "single" rounds ``acc * m / 2**(31 - shift)`` once,
#: half up (ruy's, which TFLite's int8 FULLY_CONNECTED uses); "float32"
#: rounds once too, by the multiplier ONNX Runtime's QLinearConv,
#: QLinearMatMul and QGemm compute in float32, ``(s_x * s_w) / s_y``
#: (exact in the chip's 31 bits); "mlas" multiplies by that multiplier
#: and rounds as ONNX Runtime's QLinearConv and QLinearMatMul (MLAS) do:
#: ``rint(float32(float32(acc) * multiplier))`` (ACT's ``mlas_round``,
#: `tpu.models.mlas_rounding`)
ROUNDINGS = ("double", "single", "float32", "mlas")


def requant_multipliers(input_quant, weight_scale, output_quant, rounding="double"):
    """Per output channel ``(multiplier, shift)`` int64 arrays for the chip's
    requantization from ``input_scale * weight_scale[n]`` to the output scale
    (``rounding="float32"`` or "mlas": of the float32 multiplier ONNX Runtime uses)."""
    from ..models.activation_model import quantize_multiplier
    if rounding in ("float32", "mlas"):
        in_scale, out_scale = np.float32(input_quant.scale), np.float32(output_quant.scale)
        reals = [float((in_scale * np.float32(s)) / out_scale)
                 for s in np.asarray(weight_scale).reshape(-1)]
    else:
        in_scale = np.float64(np.float32(input_quant.scale))
        out_scale = np.float64(np.float32(output_quant.scale))
        reals = [in_scale * np.float64(np.float32(s)) / out_scale
                 for s in np.asarray(weight_scale).reshape(-1)]
    pairs = [quantize_multiplier(real) for real in reals]
    return (np.array([m for m, _ in pairs], dtype=np.int64),
            np.array([s for _, s in pairs], dtype=np.int64))
