"""TFLite front end: an int8 ``.tflite`` model -> `tpu.compiler.ir.Graph`.

``import_tflite(path_or_bytes)`` reads the flatbuffer with the PyPI
``tflite`` package (the schema's generated reader) and maps each operator
of the model's one subgraph onto IR layers with TFLite's own integer
semantics, so that `tpu.compiler.reference` computes what the TFLite
interpreter's reference kernels compute, byte for byte:

* FULLY_CONNECTED -> `ir.Dense` (weights ``(N, K)`` transposed);
  CONV_2D -> `ir.Conv2D` (weights OHWI -> HWIO); DEPTHWISE_CONV_2D ->
  `ir.Conv2D` with block-diagonal weights (``weight[kh, kw, c, c*m + j] =
  w[0, kh, kw, c*m + j]`` for depth multiplier ``m``). Requantization is
  ``ir.requant_multipliers`` (float64 products of the float32 scales, as
  TFLite's ``PopulateConvolutionQuantizationParams``); per-channel scales as
  TFLite stores them (axis 0 of OHWI, axis 3 of 1HWO). FULLY_CONNECTED
  rounds once (``rounding="single"``), as TFLite's int8 kernel does.
* SAME padding as TFLite: ``total = max(0, (out - 1) * stride + k - in)``,
  ``before = total // 2``.
* Fused activations: RELU -> ``max(q, zp)``; RELU6 / RELU_N1_TO_1 -> a clamp
  to ``zp + round(6 / scale)`` etc. (float32 division, round half away from
  zero: ``CalculateActivationRangeQuantized``).
* ADD -> `ir.Add` with ``semantics="tflite"`` (left shift 20, each input
  rescaled by its own multiplier, output multiplier, clamp).
* AVERAGE_POOL_2D / MAX_POOL_2D -> `ir.Pool2D` (padding not counted in the
  average), or `ir.GlobalAvgPool` when one VALID window covers the image;
  a fused activation becomes an `ir.Elementwise` after it.
* RESHAPE -> `ir.Reshape` (order "hwc": TFLite is NHWC already).
* SOFTMAX -> `ir.HostOp` "softmax_tflite" (TFLite's integer reference).
* LOGISTIC / TANH -> `ir.Elementwise` (the chip's 256-entry tables are
  TFLite's ``LUTPopulate``).
* QUANTIZE of a float32 model input / DEQUANTIZE to a float32 model output
  become a float graph input / output; an int8 -> int8 QUANTIZE is a
  requantizing `ir.Elementwise`.

Shapes drop TFLite's batch dimension (which must be 1): ``[1, H, W, C]`` ->
``(H, W, C)``, ``[1, N]`` -> ``(N,)``. Anything else (other operators, fused
activations, int16 or float layers inside the model, uint8 weights)
raises `UnsupportedModel` naming the operator's index and name.
"""

import struct
from pathlib import Path

import numpy as np

from . import ir
from .errors import ModelError, UnsupportedModel
from .ir import Activation, ActivationKind


__all__ = ["import_tflite", "SUPPORTED_OPERATORS"]

SUPPORTED_OPERATORS = (
    "FULLY_CONNECTED", "CONV_2D", "DEPTHWISE_CONV_2D", "ADD", "AVERAGE_POOL_2D", "MAX_POOL_2D",
    "RESHAPE", "SOFTMAX", "LOGISTIC", "TANH", "QUANTIZE", "DEQUANTIZE")


def _tflite():
    try:
        import tflite
    except ImportError:             # pragma: no cover - a declared dependency
        raise ModelError("reading .tflite models needs the 'tflite' package "
                         "(pip install tflite)") from None
    return tflite


def _enum_names(enum_class):
    return {v: k for k, v in vars(enum_class).items() if not k.startswith("_")}


class _Reader:
    """The one subgraph of a TFLite model, with its tensors decoded."""

    def __init__(self, data, source):
        tflite = _tflite()
        self.tflite = tflite
        self.source = source
        self.data = data
        if len(data) < 8 or data[4:8] != b"TFL3":
            raise ModelError(f"{source}: not a TFLite model (no 'TFL3' file identifier)")
        try:
            self.model = tflite.Model.GetRootAsModel(data, 0)
            if self.model.SubgraphsLength() != 1:
                raise UnsupportedModel(f"{source}: {self.model.SubgraphsLength()} subgraphs; only "
                                       f"models of one subgraph are supported")
            self.graph = self.model.Subgraphs(0)
            self.op_names = _enum_names(tflite.BuiltinOperator)
            self.type_names = _enum_names(tflite.TensorType)
            self.activation_names = _enum_names(tflite.ActivationFunctionType)
            self.tensors = [self.graph.Tensors(i) for i in range(self.graph.TensorsLength())]
            self.operators = [self.graph.Operators(i) for i in range(self.graph.OperatorsLength())]
            self.codes = [self.model.OperatorCodes(i)
                          for i in range(self.model.OperatorCodesLength())]
        except (IndexError, ValueError, TypeError, AttributeError, struct.error) as e:
            if isinstance(e, UnsupportedModel):
                raise
            raise ModelError(f"{source}: malformed or truncated TFLite model ({e})") from None
        self.names = self._unique_names()

    def _unique_names(self):
        names, seen = [], set()
        for i, t in enumerate(self.tensors):
            name = (t.Name() or b"").decode("utf-8", "replace") or f"tensor{i}"
            if name in seen:
                name = f"{name}#{i}"
            seen.add(name)
            names.append(name)
        return names

    # Operators

    def op_name(self, op):
        code = self.codes[op.OpcodeIndex()]
        builtin = max(code.BuiltinCode(), code.DeprecatedBuiltinCode())
        name = self.op_names.get(builtin, f"BUILTIN_{builtin}")
        if name == "CUSTOM":
            custom = code.CustomCode()
            name = f"CUSTOM {custom.decode('utf-8', 'replace') if custom else '?'}"
        return name

    def options(self, op, cls_name):
        """The operator's builtin options table as ``tflite.<cls_name>``."""
        table = op.BuiltinOptions()
        options = getattr(self.tflite, cls_name)()
        if table is None:
            return None
        options.Init(table.Bytes, table.Pos)
        return options

    # Tensors

    def type_name(self, index):
        return self.type_names.get(self.tensors[index].Type(), str(self.tensors[index].Type()))

    def shape(self, index):
        t = self.tensors[index]
        return tuple(int(d) for d in t.ShapeAsNumpy()) if t.ShapeLength() else ()

    def quant(self, index):
        """``(scales, zero_points, axis)`` arrays, or None if not quantized."""
        q = self.tensors[index].Quantization()
        if q is None or q.ScaleLength() == 0:
            return None
        scales = np.asarray(q.ScaleAsNumpy(), dtype=np.float32)
        zps = np.asarray(q.ZeroPointAsNumpy(), dtype=np.int64) if q.ZeroPointLength() \
            else np.zeros(scales.size, dtype=np.int64)
        return scales, zps, int(q.QuantizedDimension())

    def constant(self, index):
        """The tensor's stored values as a numpy array of its shape, or None."""
        t = self.tensors[index]
        buffer = self.model.Buffers(t.Buffer())
        raw = None
        if buffer is not None:
            offset = buffer.Offset() if hasattr(buffer, "Offset") else 0
            if offset > 1:
                raw = self.data[offset:offset + buffer.Size()]
            elif buffer.DataLength():
                raw = buffer.DataAsNumpy().tobytes()
        if raw is None:
            return None
        dtype = {"INT8": "<i1", "UINT8": "u1", "INT32": "<i4", "INT64": "<i8", "INT16": "<i2",
                 "FLOAT32": "<f4"}.get(self.type_name(index))
        if dtype is None:
            raise UnsupportedModel(f"{self.source}: constant tensor {self.names[index]!r} of type "
                                   f"{self.type_name(index)}")
        values = np.frombuffer(raw, dtype=dtype)
        shape = self.shape(index)
        if values.size != int(np.prod(shape)):
            raise ModelError(f"{self.source}: tensor {self.names[index]!r} holds {values.size} "
                             f"values for shape {list(shape)}")
        return values.reshape(shape)


class _Importer:
    """Builds the IR graph operator by operator."""

    def __init__(self, reader, name):
        self.r = reader
        self.name = name
        self.tensors = {}
        self.layers = []
        self.inputs = []
        self.outputs = []
        self.aliases = {}           # TFLite tensor index -> IR tensor name (edge Q/DQ)
        self.float_inputs = {}      # IR tensor -> the float32 model input it quantizes
        self.float_outputs = {}     # float32 model output index -> the IR tensor it dequantizes
        self.index = None
        self.op = None

    # Errors name the operator

    def unsupported(self, what):
        where = "" if self.index is None else f" operator {self.index} ({self.op}):"
        e = UnsupportedModel(f"{self.name}:{where} {what}")
        e.node, e.op_type = self.index, self.op
        return e

    # Tensors

    def activation_quant(self, index, what="activation"):
        """The `ir.QuantType` of an int8 activation tensor, or an error."""
        r = self.r
        kind = r.type_name(index)
        if kind == "INT16":
            raise self.unsupported(f"{what} {r.names[index]!r} is int16; only int8 "
                                   f"activations are supported")
        if kind in ("FLOAT32", "FLOAT16"):
            raise self.unsupported(f"{what} {r.names[index]!r} is {kind.lower()}: float layers "
                                   f"inside the model are not supported (only int8 layers, "
                                   f"with QUANTIZE/DEQUANTIZE at the model's edges)")
        if kind not in ("INT8", "UINT8"):
            raise self.unsupported(f"{what} {r.names[index]!r} is {kind}; only int8 "
                                   f"activations are supported")
        q = r.quant(index)
        if q is None:
            raise self.unsupported(f"{what} {r.names[index]!r} has no quantization parameters")
        scales, zps, _ = q
        if scales.size != 1:
            raise self.unsupported(f"{what} {r.names[index]!r} is quantized per channel; "
                                   f"activations must be per tensor")
        return ir.QuantType(float(scales[0]), int(zps[0]), unsigned=kind == "UINT8")

    def ir_shape(self, index):
        shape = self.r.shape(index)
        if len(shape) < 2 or shape[0] != 1:
            raise self.unsupported(f"tensor {self.r.names[index]!r} has shape {list(shape)}; "
                                   f"expected a batch dimension of 1 first")
        rest = shape[1:]
        if len(rest) == 2:              # [1, A, B]: rows of vectors, kept in order
            rest = (1, *rest)
        if len(rest) not in (1, 3):
            raise self.unsupported(f"tensor {self.r.names[index]!r} of rank {len(shape)} is "
                                   f"not supported (ranks 2..4 with batch 1)")
        return rest

    def tensor(self, index):
        """The IR name of an activation tensor (declaring it on first use)."""
        if index in self.aliases:
            return self.aliases[index]
        name = self.r.names[index]
        if name not in self.tensors:
            if self.r.constant(index) is not None:
                raise self.unsupported(f"a constant tensor {name!r} as an activation input is "
                                       f"not supported")
            self.tensors[name] = ir.Tensor(name, self.ir_shape(index), self.activation_quant(index))
        return name

    def new_tensor(self, base, shape, quant):
        name, k = base, 1
        while name in self.tensors:
            name, k = f"{base}:{k}", k + 1
        self.tensors[name] = ir.Tensor(name, shape, quant)
        return name

    # Operator inputs

    def inputs_of(self, op, count):
        indices = [int(i) for i in op.InputsAsNumpy()] if op.InputsLength() else []
        if len(indices) < count:
            raise ModelError(f"{self.name}: operator {self.index} ({self.op}) has "
                             f"{len(indices)} inputs, needs {count}")
        return indices

    def output_of(self, op):
        outs = [int(i) for i in op.OutputsAsNumpy()] if op.OutputsLength() else []
        if len(outs) != 1:
            raise self.unsupported(f"{len(outs)} outputs; one is supported")
        return outs[0]

    def weights(self, index, channel_axis, channels):
        """int8 weights and float per-channel scales (``channels`` entries)."""
        r = self.r
        values = r.constant(index)
        if values is None:
            raise self.unsupported(f"weights {r.names[index]!r} are not constant")
        if r.type_name(index) != "INT8":
            raise self.unsupported(f"weights {r.names[index]!r} are {r.type_name(index)}; only "
                                   f"int8 weights are supported")
        q = r.quant(index)
        if q is None:
            raise self.unsupported(f"weights {r.names[index]!r} have no quantization parameters")
        scales, zps, axis = q
        if np.any(zps != 0):
            raise self.unsupported(f"weights {r.names[index]!r} have a non-zero zero point")
        if scales.size == 1:
            scales = np.full(channels, scales[0], dtype=np.float32)
        elif scales.size != channels or axis != channel_axis:
            raise self.unsupported(f"weights {r.names[index]!r}: {scales.size} scales on axis "
                                   f"{axis}; expected per tensor or {channels} on axis "
                                   f"{channel_axis}")
        return values.astype(np.int8), scales.astype(np.float64)

    def bias(self, indices, channels):
        if len(indices) < 3 or indices[2] < 0:
            return None
        values = self.r.constant(indices[2])
        if values is None or self.r.type_name(indices[2]) != "INT32":
            raise self.unsupported(f"bias {self.r.names[indices[2]]!r} must be a constant int32 "
                                   f"tensor")
        if values.size != channels:
            raise ModelError(f"{self.name}: operator {self.index} ({self.op}): bias has "
                             f"{values.size} values for {channels} channels")
        return values.astype(np.int64).reshape(-1)

    # Fused activations (CalculateActivationRangeQuantized)

    def activation(self, code, out_q):
        name = self.r.activation_names.get(code, str(code))
        if name == "NONE":
            return Activation()
        if name == "RELU":
            return Activation(ActivationKind.RELU)
        bounds = {"RELU6": (0.0, 6.0), "RELU_N1_TO_1": (-1.0, 1.0)}.get(name)
        if bounds is None:
            raise self.unsupported(f"fused activation {name} is not supported (NONE, RELU, "
                                   f"RELU6, RELU_N1_TO_1 are)")
        low, high = out_q.range
        quantize = lambda f: out_q.zero_point + _round_half_away(np.float32(f) /
                                                                np.float32(out_q.scale))
        return Activation(ActivationKind.CLAMP, clamp_min=max(low, quantize(bounds[0])),
                          clamp_max=min(high, quantize(bounds[1])))

    def padding(self, options, in_hw, kernel, stride):
        """``(top, left, bottom, right)`` and the output ``(OH, OW)`` as
        TFLite's ``ComputePaddingHeightWidth``."""
        padding = _enum_names(self.r.tflite.Padding).get(options.Padding(), "?")
        if padding not in ("SAME", "VALID"):
            raise self.unsupported(f"padding {padding} is not supported")
        pads, outs = [], []
        for size, k, s in zip(in_hw, kernel, stride):
            out = (size + s - 1) // s if padding == "SAME" else (size - k + s) // s
            if out < 1:
                raise self.unsupported(f"a {kernel[0]}x{kernel[1]} window does not fit the "
                                       f"{in_hw[0]}x{in_hw[1]} input")
            total = max(0, (out - 1) * s + k - size)
            pads.append((total // 2, total - total // 2))
            outs.append(out)
        (top, bottom), (left, right) = pads
        return (top, left, bottom, right), tuple(outs)

    def check_output_shape(self, out, expected):
        shape = self.tensors[out].shape
        if shape != tuple(expected):
            raise ModelError(f"{self.name}: operator {self.index} ({self.op}) computes "
                             f"{tuple(expected)} into a tensor of shape {shape}")

    def layer_name(self):
        return f"{self.op.lower()}_{self.index}"

    # Operators

    def fully_connected(self, op):
        r = self.r
        ins = self.inputs_of(op, 2)
        options = r.options(op, "FullyConnectedOptions")
        if options is not None and options.WeightsFormat() != 0:
            raise self.unsupported("shuffled weights are not supported")
        x = self.tensor(ins[0])
        out = self.tensor(self.output_of(op))
        n, k = r.shape(ins[1])
        if self.tensors[x].size != k:
            raise self.unsupported(f"input {x!r} of {self.tensors[x].size} values per sample "
                                   f"for weights of {k} columns (batched rows are not supported)")
        w, scales = self.weights(ins[1], 0, n)
        self.check_output_shape(out, (n,) if len(self.tensors[out].shape) == 1
                                else (*self.tensors[out].shape[:-1], n))
        if self.tensors[out].size != n:
            raise self.unsupported(f"output {out!r} of {self.tensors[out].size} values per "
                                   f"sample from {n} outputs")
        act = self.activation(options.FusedActivationFunction() if options else 0,
                              self.tensors[out].quant)
        # TFLite's int8 FULLY_CONNECTED rounds the requantization once (ruy's rounding).
        self.layers.append(ir.Dense(self.layer_name(), x, out, np.ascontiguousarray(w.T), scales,
                                    self.bias(ins, n), act, rounding="single"))

    def conv(self, op, depthwise):
        r = self.r
        ins = self.inputs_of(op, 2)
        options = r.options(op, "DepthwiseConv2DOptions" if depthwise else "Conv2DOptions")
        x = self.tensor(ins[0])
        out = self.tensor(self.output_of(op))
        in_shape = self.tensors[x].shape
        if len(in_shape) != 3:
            raise self.unsupported(f"input {x!r} of shape {in_shape} is not an image")
        if options.DilationHFactor() != 1 or options.DilationWFactor() != 1:
            raise self.unsupported("dilated convolutions are not supported")
        cin = in_shape[2]
        wshape = r.shape(ins[1])
        if depthwise:
            _, kh, kw, cout = wshape
            if cout % cin:
                raise self.unsupported(f"{cout} output channels are not a multiple of the "
                                       f"{cin} input channels")
            w, scales = self.weights(ins[1], 3, cout)
            multiplier = cout // cin
            weight = np.zeros((kh, kw, cin, cout), dtype=np.int8)
            for c in range(cin):
                for j in range(multiplier):
                    weight[:, :, c, c * multiplier + j] = w[0, :, :, c * multiplier + j]
        else:
            cout, kh, kw, wcin = wshape
            if wcin != cin:
                raise self.unsupported(f"grouped convolution ({cin} input channels, weights of "
                                       f"{wcin}) is not supported")
            w, scales = self.weights(ins[1], 0, cout)
            weight = np.ascontiguousarray(w.transpose(1, 2, 3, 0))
        stride = (options.StrideH(), options.StrideW())
        padding, (oh, ow) = self.padding(options, in_shape[:2], (kh, kw), stride)
        self.check_output_shape(out, (oh, ow, cout))
        act = self.activation(options.FusedActivationFunction(), self.tensors[out].quant)
        self.layers.append(ir.Conv2D(self.layer_name(), x, out, weight, scales,
                                     self.bias(ins, cout), stride, padding, act))

    def add(self, op):
        r = self.r
        ins = self.inputs_of(op, 2)
        options = r.options(op, "AddOptions")
        a, b = self.tensor(ins[0]), self.tensor(ins[1])
        out = self.tensor(self.output_of(op))
        shapes = {self.tensors[n].shape for n in (a, b, out)}
        if len(shapes) != 1:
            raise self.unsupported(f"broadcasting ({self.tensors[a].shape} + "
                                   f"{self.tensors[b].shape} -> {self.tensors[out].shape}) is "
                                   f"not supported")
        act = self.activation(options.FusedActivationFunction() if options else 0,
                              self.tensors[out].quant)
        self.layers.append(ir.Add(self.layer_name(), a, b, out, act, semantics="tflite"))

    def pool(self, op, kind):
        r = self.r
        ins = self.inputs_of(op, 1)
        options = r.options(op, "Pool2DOptions")
        x = self.tensor(ins[0])
        out = self.tensor(self.output_of(op))
        in_shape = self.tensors[x].shape
        if len(in_shape) != 3:
            raise self.unsupported(f"input {x!r} of shape {in_shape} is not an image")
        if self.tensors[x].quant != self.tensors[out].quant:
            raise self.unsupported("pooling that changes the quantization is not supported")
        size = (options.FilterHeight(), options.FilterWidth())
        stride = (options.StrideH(), options.StrideW())
        padding, (oh, ow) = self.padding(options, in_shape[:2], size, stride)
        self.check_output_shape(out, (oh, ow, in_shape[2]))
        act = self.activation(options.FusedActivationFunction(), self.tensors[out].quant)
        target = out if act.kind == ActivationKind.NONE else \
            self.new_tensor(f"{out}/pooled", self.tensors[out].shape, self.tensors[out].quant)
        name = self.layer_name()
        if kind == "avg" and (oh, ow) == (1, 1) and size == in_shape[:2] and not any(padding):
            self.layers.append(ir.GlobalAvgPool(name, x, target))
        else:
            self.layers.append(ir.Pool2D(name, x, target, kind, size, stride, padding))
        if target != out:
            self.layers.append(ir.Elementwise(f"{name}_activation", target, out, act))

    def reshape(self, op):
        ins = self.inputs_of(op, 1)
        x = self.tensor(ins[0])
        out = self.tensor(self.output_of(op))
        if self.tensors[x].quant != self.tensors[out].quant:
            raise self.unsupported("a reshape that changes the quantization")
        if self.tensors[x].size != self.tensors[out].size:
            raise ModelError(f"{self.name}: operator {self.index} ({self.op}) reshapes "
                             f"{self.tensors[x].size} values into {self.tensors[out].size}")
        self.layers.append(ir.Reshape(self.layer_name(), x, out, order="hwc"))

    def softmax(self, op):
        ins = self.inputs_of(op, 1)
        options = self.r.options(op, "SoftmaxOptions")
        x = self.tensor(ins[0])
        out = self.tensor(self.output_of(op))
        out_q = self.tensors[out].quant
        if out_q.unsigned != self.tensors[x].quant.unsigned:
            raise self.unsupported("softmax between int8 and uint8 is not supported")
        want = 0 if out_q.unsigned else -128
        if out_q.zero_point != want or abs(out_q.scale - 1 / 256) > 0.001 / 256:
            raise self.unsupported(f"softmax output quantization (scale {out_q.scale}, zero "
                                   f"point {out_q.zero_point}) is not TFLite's (1/256, {want})")
        beta = float(options.Beta()) if options is not None else 1.0
        self.layers.append(ir.HostOp(self.layer_name(), "softmax_tflite", [x], [out],
                                     {"beta": beta}))

    def table_function(self, op, kind):
        ins = self.inputs_of(op, 1)
        x = self.tensor(ins[0])
        out = self.tensor(self.output_of(op))
        in_q = self.tensors[x].quant
        self.layers.append(ir.Elementwise(self.layer_name(), x, out, Activation(kind, pre=in_q)))

    def quantize(self, op):
        r = self.r
        ins = self.inputs_of(op, 1)
        src, dst = ins[0], self.output_of(op)
        if r.type_name(src) == "FLOAT32" and src in self.graph_inputs:
            name = self.tensor(dst)
            self.float_inputs[name] = src
            return
        if r.type_name(src) == "FLOAT32":
            raise self.unsupported("a float32 input that is not the model's: float layers inside "
                                   "the model are not supported")
        x, out = self.tensor(src), self.tensor(dst)
        self.layers.append(ir.Elementwise(self.layer_name(), x, out, Activation()))

    def dequantize(self, op):
        ins = self.inputs_of(op, 1)
        dst = self.output_of(op)
        if dst not in self.graph_outputs or self.r.type_name(dst) != "FLOAT32":
            raise self.unsupported("DEQUANTIZE is supported only into a float32 model output: "
                                   "float layers inside the model are not supported")
        self.float_outputs[dst] = self.tensor(ins[0])

    # The model

    def run(self):
        r = self.r
        g = r.graph
        self.graph_inputs = [int(i) for i in g.InputsAsNumpy()] if g.InputsLength() else []
        self.graph_outputs = [int(i) for i in g.OutputsAsNumpy()] if g.OutputsLength() else []
        handlers = {
            "FULLY_CONNECTED": self.fully_connected,
            "CONV_2D": lambda op: self.conv(op, depthwise=False),
            "DEPTHWISE_CONV_2D": lambda op: self.conv(op, depthwise=True),
            "ADD": self.add,
            "AVERAGE_POOL_2D": lambda op: self.pool(op, "avg"),
            "MAX_POOL_2D": lambda op: self.pool(op, "max"),
            "RESHAPE": self.reshape,
            "SOFTMAX": self.softmax,
            "LOGISTIC": lambda op: self.table_function(op, ActivationKind.SIGMOID),
            "TANH": lambda op: self.table_function(op, ActivationKind.TANH),
            "QUANTIZE": self.quantize,
            "DEQUANTIZE": self.dequantize,
        }
        # Tensors are declared by the first operator that reads or writes them, so
        # a type error names that operator.
        self.origins = {}
        for self.index, op in enumerate(r.operators):
            self.op = r.op_name(op)
            handler = handlers.get(self.op)
            if handler is None:
                raise self.unsupported(f"operator {self.op} is not supported; supported: "
                                       f"{', '.join(SUPPORTED_OPERATORS)}")
            first = len(self.layers)
            handler(op)
            # The back end's errors about these layers name this operator.
            for layer in self.layers[first:]:
                self.origins[layer.name] = f"operator {self.index} ({self.op})"
        self.index = self.op = None
        return self.finish()

    def finish(self):
        r = self.r
        for index in self.graph_inputs:
            model_shape = (None, *r.shape(index)[1:])
            if r.type_name(index) == "FLOAT32":
                tensors = [t for t, src in self.float_inputs.items() if src == index]
                if len(tensors) != 1:
                    raise UnsupportedModel(f"{self.name}: float32 input {r.names[index]!r} must "
                                           f"feed exactly one QUANTIZE")
                tensor, dtype = tensors[0], np.dtype(np.float32)
            else:
                tensor = self.tensor(index)         # declared here if no operator reads it
                dtype = self.tensors[tensor].quant.dtype
            layout = "nhwc" if len(model_shape) == 4 else "nc"
            self.inputs.append(ir.GraphInput(tensor, r.names[index], model_shape, dtype, layout))
        for index in self.graph_outputs:
            model_shape = (None, *r.shape(index)[1:])
            if index in self.float_outputs:
                tensor, dtype = self.float_outputs[index], np.dtype(np.float32)
            else:
                if r.type_name(index) == "FLOAT32":
                    raise UnsupportedModel(f"{self.name}: float32 output {r.names[index]!r} "
                                           f"does not come from a DEQUANTIZE")
                tensor = r.names[index]
                if tensor not in self.tensors:
                    raise ModelError(f"{self.name}: output {tensor!r} is never computed")
                dtype = self.tensors[tensor].quant.dtype
            layout = "nhwc" if len(model_shape) == 4 else "nc"
            self.outputs.append(ir.GraphOutput(tensor, r.names[index], model_shape, dtype, layout))
        graph = ir.Graph(self.tensors, self.layers, self.inputs, self.outputs, source=self.name,
                         origins=self.origins)
        try:
            return graph.validate()
        except ir.IRError as e:
            raise ModelError(f"{self.name}: {e}") from None


def _round_half_away(value):
    """C's ``round`` (TfLiteRound) of a float as an int."""
    value = float(value)
    return int(np.copysign(np.floor(abs(value) + 0.5), value))


def import_tflite(model, name=None):
    """Import an int8 TFLite model (a path or the file's bytes) as an `ir.Graph`.

    Raises `ModelError` for a file that is not a readable TFLite model and
    `UnsupportedModel` (naming the operator index and name) for what the
    compiler does not support.
    """
    if isinstance(model, (bytes, bytearray, memoryview)):
        data, source = bytes(model), name or "model.tflite"
    else:
        path = Path(model)
        try:
            data = path.read_bytes()
        except OSError as e:
            raise ModelError(f"{path}: cannot read the model ({e.strerror or e})") from None
        source = name or path.name
    try:
        reader = _Reader(data, source)
        return _Importer(reader, source).run()
    except struct.error as e:           # the flatbuffer reader ran past the data
        raise ModelError(f"{source}: malformed or truncated TFLite model ({e})") from None
