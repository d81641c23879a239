"""The ONNX front end: a quantized ONNX model in, an `ir.Graph` out.

`import_onnx` takes the two forms ONNX Runtime's ``quantize_static`` writes:

* **QDQ**: float operators between DequantizeLinear (of int8/uint8
  activations, int8 weights, int32 biases) and QuantizeLinear nodes. Each
  pattern ``DQ -> op -> Q`` becomes one IR layer whose output has the
  quantization of the Q that follows.
* **QOperator**: QLinearConv, QLinearMatMul and the com.microsoft QGemm,
  QLinearAdd, QLinearAveragePool, QLinearGlobalAveragePool, QLinearSigmoid
  and QLinearSoftmax, with MaxPool, Flatten and Reshape on int8 tensors,
  QuantizeLinear at the inputs and DequantizeLinear at the outputs. Operators
  the quantizer leaves in float (e.g. Tanh) sit between a DequantizeLinear
  and a QuantizeLinear, as in QDQ, and are read the same way.

NCHW images become the IR's (H, W, C); Conv weights OIHW become (KH, KW,
Cin, Cout); Dense weights are (K, N). A Relu, Clip, Sigmoid or Tanh right
after a Dense or Conv2D that nothing else reads is fused into its
``activation``. Models the chip cannot run raise `UnsupportedModel` naming
the node; files that are not quantized ONNX models raise `ModelError`.
"""

import os
from collections import defaultdict

import numpy as np

from . import ir
from .errors import CompileError, ModelError, UnsupportedModel
from .ir import Activation, ActivationKind
from ..isa import MAX_POOL_SIZE


__all__ = ["import_onnx", "SUPPORTED_OPS"]

#: What the front end reads, for error messages.
SUPPORTED_OPS = (
    "Conv, MatMul, Gemm, Add, Relu, Clip, Sigmoid, Tanh, MaxPool, AveragePool, GlobalAveragePool, "
    "Flatten, Reshape, Identity, Dropout, Softmax, QuantizeLinear, DequantizeLinear, QLinearConv, "
    "QLinearMatMul, QGemm, QLinearAdd, QLinearAveragePool, QLinearGlobalAveragePool, "
    "QLinearSigmoid, QLinearSoftmax")

_QUANT_OPS = {"QuantizeLinear", "DequantizeLinear", "QLinearConv", "QLinearMatMul", "QGemm",
              "QLinearAdd", "QLinearAveragePool", "QLinearGlobalAveragePool", "QLinearSigmoid",
              "QLinearSoftmax", "QLinearLeakyRelu", "MatMulInteger", "ConvInteger",
              "DynamicQuantizeLinear"}
_INT8 = (np.int8, np.uint8)
# diagonal weights of the layers that sum windows (`summing_conv`) and copy
# tensors (`identity`): large, so that the requantization's first rounding
# (of its high product) is fine against the step of the output
_SUM_WEIGHT = 64           # room for sums of up to 2**31 / (64 * 255) pixels
_IDENTITY_WEIGHT = 127
# The quantization of a sigmoid/tanh the quantizer leaves in float as a model
# output (the quantizer does not quantize Tanh): their ranges in TFLite's
# fixed output quantizations, in the input's type (the chip's table maps
# within one type).
_FUNCTION_OUTPUTS = {
    "Sigmoid": {False: ir.QuantType(1 / 256, -128), True: ir.QuantType(1 / 256, 0, True)},
    "Tanh": {False: ir.QuantType(1 / 128, 0), True: ir.QuantType(1 / 128, 128, True)},
}
# operators that give the same result before or after quantization
_COMMUTING = {"Relu", "Clip", "MaxPool", "Flatten", "Reshape", "Identity", "Dropout"}


def import_onnx(model, name=None):
    """Read a quantized ONNX model (a path, bytes or an ``onnx.ModelProto``)
    into an `ir.Graph`. ``name`` labels the graph in messages (default: the
    file name or the graph's name)."""
    proto, source = _load(model)
    return _Importer(proto, name or source).run()


# Loading -----------------------------------------------------------------------------------

def _one_line(exc):
    text = " ".join(str(exc).split())
    return text if len(text) <= 200 else text[:197] + "..."


def _load(model):
    import onnx
    from google.protobuf.message import DecodeError

    if isinstance(model, onnx.ModelProto):
        proto, source = model, model.graph.name or "model"
    else:
        bytes_given = isinstance(model, (bytes, bytearray))
        source = "model" if bytes_given else os.path.basename(os.fspath(model))
        if not bytes_given and not os.path.isfile(model):
            raise ModelError(f"{os.fspath(model)}: cannot read the model: no such file")
        try:
            # onnx.load also reads weights stored as external data next to the file
            proto = onnx.load_model_from_string(bytes(model)) if bytes_given \
                else onnx.load(os.fspath(model))
        except OSError as exc:
            raise ModelError(f"{source}: cannot read the model: {exc.strerror or exc}") from None
        except (DecodeError, ValueError, RuntimeError) as exc:
            raise ModelError(f"{source}: not an ONNX model (truncated or corrupt file): "
                             f"{_one_line(exc)}") from None
    try:
        onnx.checker.check_model(proto)
    except (onnx.checker.ValidationError, ValueError, RuntimeError) as exc:
        raise ModelError(f"{source}: not a valid ONNX model (truncated or corrupt?): "
                         f"{_one_line(exc)}") from None
    if not proto.graph.node:
        raise ModelError(f"{source}: the model's graph has no nodes")
    if not any(node.op_type in _QUANT_OPS for node in proto.graph.node):
        raise ModelError(f"{source}: the model is not quantized: quantize it with "
                         f"onnxruntime.quantization.quantize_static (QDQ or QOperator form, "
                         f"int8 weights) first")
    return proto, source


def _attrs(node):
    from onnx import helper
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _constant_value(node):
    from onnx import numpy_helper
    for a in node.attribute:
        if a.name == "value":
            return numpy_helper.to_array(a.t)
        if a.name == "value_float":
            return np.array(a.f, np.float32)
        if a.name == "value_floats":
            return np.array(list(a.floats), np.float32)
        if a.name == "value_int":
            return np.array(a.i, np.int64)
        if a.name == "value_ints":
            return np.array(list(a.ints), np.int64)
    return None


def _dims(value_info):
    """The declared shape of a graph input/output: ints, None where symbolic."""
    t = value_info.type.tensor_type
    if not t.HasField("shape"):
        return None
    return tuple(d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim)


def _elem_dtype(value_info):
    from onnx import helper
    return np.dtype(helper.tensor_dtype_to_np_dtype(value_info.type.tensor_type.elem_type))


# The importer ------------------------------------------------------------------------------

class _Importer:
    def __init__(self, proto, source):
        from onnx import numpy_helper
        self.g = proto.graph
        self.source = source
        self.opset = {o.domain or "": o.version for o in proto.opset_import}
        self.consts = {i.name: numpy_helper.to_array(i) for i in self.g.initializer}
        self.consumers = defaultdict(list)
        for node in self.g.node:
            for name in node.input:
                if name:
                    self.consumers[name].append(node)
        self.model_inputs = {v.name: v for v in self.g.input if v.name not in self.consts}
        self.model_outputs = {v.name for v in self.g.output}
        self.tensors = {}           # IR name -> ir.Tensor
        self.names = {}             # ONNX name -> IR name (quantized tensors and their DQ outputs)
        self.floats = set()         # ONNX names that are DequantizeLinear outputs (real values)
        self.const_dq = {}          # ONNX name -> (values, scale, zero point, axis) of a DQ'd constant
        self.inputs = {}            # model input name -> ir.GraphInput
        self.layers = []
        self.done = set()           # ids of nodes read as part of an earlier pattern
        self.labels = {}

    # -- helpers ---------------------------------------------------------------------------

    def label(self, node):
        return node.name or self.labels.setdefault(id(node), f"{node.op_type}_{len(self.labels)}")

    def unsupported(self, node, message):
        return UnsupportedModel(message, self.label(node), node.op_type, self.source)

    def const(self, node, name, what):
        if name not in self.consts:
            raise self.unsupported(node, f"{what} {name!r} must be a constant (an initializer)")
        return self.consts[name]

    def opt_const(self, node, index, what):
        if len(node.input) <= index or not node.input[index]:
            return None
        return self.const(node, node.input[index], what)

    def quant(self, node, scale, zero_point=None, dtype=None, what="tensor"):
        """A per-tensor `ir.QuantType` from scale/zero-point constants (names
        or arrays); the type comes from the zero point (uint8 without one, as
        ONNX says)."""
        if isinstance(scale, str):
            scale = self.const(node, scale, f"the scale of the {what}")
        if isinstance(zero_point, str):
            zero_point = self.const(node, zero_point, f"the zero point of the {what}") \
                if zero_point else None
        scale = np.asarray(scale)
        if scale.size != 1:
            raise self.unsupported(node, f"the {what} has a per-axis scale; only weights may "
                                   f"have one scale per channel")
        if zero_point is None:
            zero_point = np.zeros((), dtype or np.uint8)
        zero_point = np.asarray(zero_point)
        if zero_point.dtype not in _INT8:
            raise self.unsupported(node, f"the {what} is {zero_point.dtype}; the chip takes "
                                   f"int8 and uint8 activations")
        try:
            return ir.QuantType(float(np.float32(scale.reshape(-1)[0])),
                                int(zero_point.reshape(-1)[0]), zero_point.dtype == np.uint8)
        except ir.IRError as exc:
            raise self.unsupported(node, f"the {what}'s quantization: {exc}") from None

    def qdq_quant(self, node, what):
        """The quantization a QuantizeLinear/DequantizeLinear node applies."""
        attrs = _attrs(node)
        if attrs.get("block_size", 0):
            raise self.unsupported(node, "blocked quantization is not supported")
        dtype = None
        if attrs.get("output_dtype"):
            from onnx import helper
            dtype = helper.tensor_dtype_to_np_dtype(attrs["output_dtype"])
        zp = node.input[2] if len(node.input) > 2 and node.input[2] else None
        return self.quant(node, node.input[1], zp, dtype, what)

    def new_tensor(self, node, name, shape, quant):
        if name in self.tensors:
            raise self.unsupported(node, f"tensor {name!r} is written twice")
        try:
            self.tensors[name] = ir.Tensor(name, shape, quant)
        except ir.IRError as exc:
            raise self.unsupported(node, str(exc)) from None
        self.names[name] = name
        return name

    def tensor(self, name):
        return self.tensors[self.names[name]]

    # -- inputs of nodes -------------------------------------------------------------------

    def model_input(self, node, name, quant, tensor=None):
        """Create the IR tensor of model input `name` (float, quantized by
        `node`, or int8/uint8 fed as is) with `quant`; its IR name."""
        info = self.model_inputs[name]
        dims = _dims(info)
        if dims is None or len(dims) not in (2, 4):
            raise self.unsupported(node, f"model input {name!r} has shape {dims}; the chip "
                                   f"takes (N, C) vectors and (N, C, H, W) images")
        if any(d is None for d in dims[1:]):
            raise self.unsupported(node, f"model input {name!r} has shape {dims}; only the "
                                   f"batch may be symbolic")
        shape = (dims[2], dims[3], dims[1]) if len(dims) == 4 else (dims[1],)
        dtype = _elem_dtype(info)
        if dtype in _INT8 and dtype != quant.dtype:
            raise self.unsupported(node, f"model input {name!r} is {dtype} but quantized as "
                                   f"{quant.dtype}")
        tensor = tensor or (name if dtype in _INT8 else node.output[0])
        self.new_tensor(node, tensor, shape, quant)
        self.inputs[name] = ir.GraphInput(tensor, name, dims, dtype,
                                          "nchw" if len(dims) == 4 else "nc")
        return tensor

    def activation_input(self, node, name, quant=None):
        """The IR tensor of activation input `name` and whether the node
        reads it as real values (QDQ) rather than integers. `quant`, for
        QOperator nodes, is the quantization the node says it has."""
        if name not in self.names and name in self.model_inputs and quant is not None \
                and _elem_dtype(self.model_inputs[name]) in _INT8:
            self.model_input(node, name, quant)
        if name not in self.names and name in self.model_inputs and quant is None \
                and node.op_type in _COMMUTING:
            return self.quantized_float_input(node, name), True
        if name not in self.names:
            if name in self.model_inputs:
                raise self.unsupported(node, f"reads model input {name!r} unquantized (no "
                                       f"QuantizeLinear follows it)")
            if name in self.consts or name in self.const_dq:
                raise self.unsupported(node, f"input {name!r} is a constant; the chip takes "
                                       f"constants only as weights and biases")
            raise self.unsupported(node, f"input {name!r} is not quantized: it must come from "
                                   f"a DequantizeLinear or a quantized operator")
        tensor = self.tensor(name)
        if quant is not None and quant != tensor.quant:
            raise self.unsupported(node, f"reads {name!r} as {quant}, but it was written as "
                                   f"{tensor.quant}")
        return self.names[name], name in self.floats

    def quantized_float_input(self, node, name):
        """A float model input that an operator reads before any
        QuantizeLinear (the quantizer leaves a Relu, Clip, MaxPool or reshape
        at the input in float). These commute with quantization, so the input
        is quantized as the operator's output is, and the operator runs on
        integers."""
        if name in self.inputs:
            return self.inputs[name].tensor
        step = node
        while True:
            users = self.consumers[step.output[0]]
            qs = [c for c in users if c.op_type == "QuantizeLinear"]
            if qs:
                quant = self.qdq_quant(qs[0], "output")
                return self.model_input(node, name, quant, name + "/quantized")
            if len(users) != 1 or users[0].op_type not in _COMMUTING:
                raise self.unsupported(node, f"reads model input {name!r} and its output is "
                                       f"not quantized either")
            step = users[0]

    def between_commuting(self, y):
        """Whether float value `y`, the output of an operator that commutes
        with quantization, has no QuantizeLinear and goes only to such
        operators or out of the model: it keeps its input's quantization
        (and a float model output is dequantized from it exactly)."""
        users = self.consumers[y]
        if any(c.op_type == "QuantizeLinear" for c in users):
            return False
        return (bool(users) or y in self.model_outputs) and \
            all(c.op_type in _COMMUTING for c in users)

    def q_after(self, node, y):
        """The QuantizeLinear(s) after float value `y`: the IR name and
        quantization they give it. Marks them read."""
        qs = [c for c in self.consumers[y] if c.op_type == "QuantizeLinear"]
        if not qs:
            raise self.unsupported(node, f"its output {y!r} is not quantized: no "
                                   f"QuantizeLinear follows it")
        quant = self.qdq_quant(qs[0], "output")
        for q in qs[1:]:
            if self.qdq_quant(q, "output") != quant:
                raise self.unsupported(node, f"its output {y!r} is quantized two ways")
        for q in qs:
            self.done.add(id(q))
        return qs[0].output[0], quant, qs[1:]

    def output(self, node, is_float, y, shape, quant=None, fallback=None):
        """Create the IR tensor for node output `y`: quantized by the
        QuantizeLinear after it (QDQ) or with `quant` (QOperator), or with
        `fallback` if it is a float model output with no QuantizeLinear. Its
        name and quantization."""
        if is_float and fallback is not None and y in self.model_outputs and not any(
                c.op_type == "QuantizeLinear" for c in self.consumers[y]):
            self.new_tensor(node, y, shape, fallback)
            return y, fallback
        if is_float and node.op_type in _COMMUTING and quant is not None \
                and self.between_commuting(y):
            self.new_tensor(node, y, shape, quant)
            self.floats.add(y)
            return y, quant
        if is_float:
            name, quant, others = self.q_after(node, y)
            self.new_tensor(node, name, shape, quant)
            for q in others:
                self.names[q.output[0]] = name
            return name, quant
        self.new_tensor(node, y, shape, quant)
        return y, quant

    # -- weights ---------------------------------------------------------------------------

    def weight(self, node, name, channel_axis, scale=None, zero_point=None):
        """(int values, per-channel scale) of weight input `name`: a
        DequantizeLinear of an int8 constant (QDQ) or the constant itself with
        `scale`/`zero_point` (QOperator). Folds a zero point when the
        shifted values still fit int8."""
        if scale is None:
            if name not in self.const_dq:
                raise self.unsupported(node, f"weight {name!r} is not quantized: it must be "
                                       f"a DequantizeLinear of an int8 constant")
            values, scale, zero_point, axis = self.const_dq[name]
        else:
            values = self.const(node, name, "the weight")
            scale = self.const(node, scale, "the weight scale")
            zero_point = self.const(node, zero_point, "the weight zero point") if zero_point \
                else np.zeros((), values.dtype)
            axis = channel_axis
        if values.dtype not in _INT8:
            raise self.unsupported(node, f"weight {name!r} is {values.dtype}; the chip takes "
                                   f"int8 weights")
        n = values.shape[channel_axis]
        scale = np.asarray(scale, np.float32).reshape(-1)
        zero_point = np.asarray(zero_point).astype(np.int64).reshape(-1)
        if scale.size > 1 or zero_point.size > 1:
            if axis % values.ndim != channel_axis % values.ndim or \
                    max(scale.size, zero_point.size) != n:
                raise self.unsupported(node, f"weight {name!r} is quantized per axis {axis}; "
                                       f"per-channel scales must be per output channel")
        shape = [1] * values.ndim
        shape[channel_axis] = -1
        shifted = values.astype(np.int64) - zero_point.reshape(shape if zero_point.size > 1
                                                               else [1] * values.ndim)
        if shifted.min(initial=0) < -128 or shifted.max(initial=0) > 127:
            raise self.unsupported(node, f"weight {name!r} has zero point "
                                   f"{zero_point.tolist()[:4]}; the chip takes symmetric int8 "
                                   f"weights (quantize with WeightSymmetric=True)")
        if np.any(scale <= 0) or not np.all(np.isfinite(scale)):
            raise self.unsupported(node, f"weight {name!r} has a scale that is not positive")
        return shifted.astype(np.int8), np.broadcast_to(scale, (n,)).astype(np.float64)

    def bias(self, node, name, in_quant, weight_scale, scale_known=False):
        """int32 bias in units of input scale x weight scale, from a DQ of an
        int32 constant, a float constant, or (QOperator, `scale_known`) an
        int32 constant in those units already."""
        if not name:
            return None
        unit = np.float64(np.float32(in_quant.scale)) * weight_scale.astype(np.float32)
        if scale_known:
            values = self.const(node, name, "the bias")
            if values.dtype != np.int32:
                raise self.unsupported(node, f"bias {name!r} is {values.dtype}, not int32")
            return values.astype(np.int64).reshape(-1)
        if name in self.const_dq:
            values, scale, zero_point, _ = self.const_dq[name]
            if np.any(np.asarray(zero_point) != 0):
                raise self.unsupported(node, f"bias {name!r} has a nonzero zero point")
            scale = np.asarray(scale, np.float64).reshape(-1)
            values = values.astype(np.int64).reshape(-1)
            if np.allclose(scale, unit, rtol=1e-6, atol=0):
                return values
            real = values * scale
        elif name in self.consts and self.consts[name].dtype.kind == "f":
            real = self.consts[name].astype(np.float64).reshape(-1)
        else:
            raise self.unsupported(node, f"bias {name!r} must be a constant (float, or a "
                                   f"DequantizeLinear of int32)")
        return np.rint(real / unit).astype(np.int64)

    # -- the walk --------------------------------------------------------------------------

    def run(self):
        for node in self.g.node:
            if node.op_type == "Constant" and node.domain in ("", "ai.onnx"):
                value = _constant_value(node)
                if value is not None:
                    self.consts[node.output[0]] = value
        for node in self.g.node:
            if id(node) in self.done or node.op_type == "Constant":
                continue
            handler = getattr(self, "op_" + node.op_type, None)
            if node.domain not in ("", "ai.onnx", "com.microsoft") or handler is None:
                raise self.unsupported(node, f"operator {node.op_type} is not supported; the "
                                       f"chip runs {SUPPORTED_OPS}")
            try:
                handler(node)
            except CompileError:
                raise
            except ir.IRError as exc:
                raise self.unsupported(node, _one_line(exc)) from None
            except (ValueError, KeyError, IndexError, TypeError) as exc:
                raise self.unsupported(node, f"cannot read this node ({type(exc).__name__}: "
                                       f"{_one_line(exc)})") from None
        self.fuse_activations()
        for layer in self.layers:
            # ONNX Runtime requantizes a sum with one float32 multiply by a
            # float32 multiplier and one rounding; the ACT's single rounding
            # by that multiplier differs only within about 2**-24 of a tie
            # (TFLite's double rounding within 2**-shift).
            if isinstance(layer, (ir.Dense, ir.Conv2D)):
                layer.rounding = "float32"
        graph = ir.Graph(self.tensors, self.layers, self.graph_inputs(), self.graph_outputs(),
                         self.source)
        try:
            return graph.validate()
        except ir.IRError as exc:
            raise ModelError(f"{self.source}: {_one_line(exc)}") from None

    def graph_inputs(self):
        missing = [n for n in self.model_inputs if n not in self.inputs]
        if missing:
            raise UnsupportedModel(f"{self.source}: model input {missing[0]!r} is never "
                                   f"quantized or used")
        return [self.inputs[n] for n in self.model_inputs]

    def graph_outputs(self):
        outputs = []
        for info in self.g.output:
            if info.name not in self.names:
                producer = next((n for n in self.g.node if info.name in n.output), None)
                message = f"model output {info.name!r} is not quantized (no QuantizeLinear " \
                          f"before its DequantizeLinear)"
                if producer is None:
                    raise UnsupportedModel(f"{self.source}: {message}")
                raise self.unsupported(producer, message)
            tensor = self.tensor(info.name)
            dims = _dims(info)
            if dims is None:
                dims = (None, *((tensor.shape[2], tensor.shape[0], tensor.shape[1])
                                if len(tensor.shape) == 3 else tensor.shape))
            layout = "nchw" if len(tensor.shape) == 3 else "nc"
            outputs.append(ir.GraphOutput(tensor.name, info.name, dims, _elem_dtype(info), layout))
        return outputs

    # -- quantize / dequantize -------------------------------------------------------------

    def op_QuantizeLinear(self, node):
        x, quant = node.input[0], self.qdq_quant(node, "output")
        if x in self.model_inputs and x not in self.inputs:
            self.model_input(node, x, quant)
            return
        if x in self.model_inputs and x in self.inputs:
            tensor = self.inputs[x].tensor
            if self.tensors[tensor].quant != quant:
                raise self.unsupported(node, f"model input {x!r} is quantized two ways")
            self.names[node.output[0]] = tensor
            return
        if x in self.floats:
            # Q(DQ(t)): a requantization
            source = self.tensor(x)
            if source.quant == quant:
                self.names[node.output[0]] = source.name
            else:
                out = self.new_tensor(node, node.output[0], source.shape, quant)
                self.layers.append(self.function(self.label(node), source.name, out))
            return
        raise self.unsupported(node, f"quantizes {x!r}, which is neither a model input nor "
                               f"the output of a supported operator")

    def op_DequantizeLinear(self, node):
        x, y = node.input[0], node.output[0]
        if x in self.consts:
            values = self.consts[x]
            scale = self.const(node, node.input[1], "the scale")
            zp = self.opt_const(node, 2, "the zero point")
            if zp is None:
                zp = np.zeros((), values.dtype)
            axis = _attrs(node).get("axis", 1)
            if _attrs(node).get("block_size", 0):
                raise self.unsupported(node, "blocked quantization is not supported")
            self.const_dq[y] = (values, scale, zp, axis)
            return
        quant = self.qdq_quant(node, "input")
        name, _ = self.activation_input(node, x, quant)
        self.names[y] = name
        self.floats.add(y)

    # -- matrix layers ---------------------------------------------------------------------

    def matrix_output(self, node, is_float, y, shape, quant=None):
        """The output of a Dense/Conv2D with a Relu/Clip the quantizer left
        between it and its QuantizeLinear folded in: (name, quant, activation)."""
        users = self.consumers[y]
        if is_float and y not in self.model_outputs and len(users) == 1 \
                and users[0].op_type in ("Relu", "Clip") \
                and not any(c.op_type == "QuantizeLinear" for c in users):
            act_node = users[0]
            self.done.add(id(act_node))
            name, quant = self.output(act_node, True, act_node.output[0], shape)
            return name, quant, self.clamp_activation(act_node, quant)
        name, quant = self.output(node, is_float, y, shape, quant)
        return name, quant, Activation()

    def op_Conv(self, node):
        x, is_float = self.activation_input(node, node.input[0])
        if not is_float:
            raise self.unsupported(node, "a float Conv reads integers")
        w, ws = self.weight(node, node.input[1], 0)
        bias = self.bias(node, node.input[2] if len(node.input) > 2 else "",
                         self.tensor(x).quant, ws)
        self.conv(node, x, is_float, w, ws, bias)

    def op_QLinearConv(self, node):
        i = node.input
        in_q = self.quant(node, i[1], i[2], what="input")
        x, _ = self.activation_input(node, i[0], in_q)
        w, ws = self.weight(node, i[3], 0, i[4], i[5])
        out_q = self.quant(node, i[6], i[7], what="output")
        bias = self.bias(node, i[8] if len(i) > 8 else "", in_q, ws, scale_known=True)
        self.conv(node, x, False, w, ws, bias, out_q)

    def conv(self, node, x, is_float, w, ws, bias, out_q=None):
        attrs = _attrs(node)
        if w.ndim != 4:
            raise self.unsupported(node, f"a {w.ndim - 2}-D convolution; the chip runs 2-D ones")
        if attrs.get("channels_last", 0):
            raise self.unsupported(node, "channels_last=1 is not supported")
        if attrs.get("group", 1) != 1:
            raise self.unsupported(node, f"group={attrs['group']}: the chip runs only group=1 "
                                   f"convolutions (no grouped or depthwise ones)")
        if any(d != 1 for d in attrs.get("dilations", [1, 1])):
            raise self.unsupported(node, f"dilations={list(attrs['dilations'])}: the chip runs "
                                   f"only dilation 1")
        src = self.tensor(x)
        if len(src.shape) != 3 or src.shape[2] != w.shape[1]:
            raise self.unsupported(node, f"input {src.shape} is not an image of {w.shape[1]} "
                                   f"channels")
        kernel = tuple(attrs.get("kernel_shape", w.shape[2:]))
        if kernel != tuple(w.shape[2:]):
            raise self.unsupported(node, f"kernel_shape {kernel} does not match the weights "
                                   f"{tuple(w.shape)}")
        stride, padding, (oh, ow) = self.window(node, attrs, src.shape, kernel)
        out, out_q, act = self.matrix_output(node, is_float, node.output[0],
                                             (oh, ow, w.shape[0]), out_q)
        self.layers.append(ir.Conv2D(self.label(node), x, out, w.transpose(2, 3, 1, 0), ws,
                                     bias, stride, padding, act))

    def window(self, node, attrs, shape, kernel, ceil_mode=0):
        """(stride, (top, left, bottom, right), (OH, OW)) of a conv or pool."""
        h, w = shape[0], shape[1]
        strides = tuple(attrs.get("strides", (1, 1)))
        if len(kernel) != 2 or len(strides) != 2:
            raise self.unsupported(node, f"kernel {kernel}: only 2-D windows are supported")
        auto_pad = attrs.get("auto_pad", b"NOTSET")
        auto_pad = auto_pad.decode() if isinstance(auto_pad, bytes) else auto_pad
        if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            pads = []
            for size, k, s in zip((h, w), kernel, strides):
                total = max((-(-size // s) - 1) * s + k - size, 0)
                small = total // 2
                pads.append((small, total - small) if auto_pad == "SAME_UPPER"
                            else (total - small, small))
            padding = (pads[0][0], pads[1][0], pads[0][1], pads[1][1])
        elif auto_pad == "VALID":
            padding = (0, 0, 0, 0)
        elif auto_pad in ("NOTSET", ""):
            padding = tuple(attrs.get("pads", (0, 0, 0, 0)))
        else:
            raise self.unsupported(node, f"auto_pad={auto_pad!r} is not one of NOTSET, "
                                   f"SAME_UPPER, SAME_LOWER, VALID")
        if len(padding) != 4:
            raise self.unsupported(node, f"pads={list(padding)}: only 2-D windows are supported")
        top, left, bottom, right = padding
        out = []
        for size, k, s, a, b in ((h, kernel[0], strides[0], top, bottom),
                                 (w, kernel[1], strides[1], left, right)):
            floor = (size + a + b - k) // s + 1
            if ceil_mode:
                ceil = -(-(size + a + b - k) // s) + 1
                if (ceil - 1) * s >= size + a:      # ONNX drops a window starting in the end pad
                    ceil -= 1
                if ceil != floor:
                    raise self.unsupported(node, "ceil_mode=1 changes the output size here; "
                                           "the chip pools with ceil_mode=0")
            out.append(floor)
        if min(out) < 1:
            raise self.unsupported(node, f"a {kernel} window does not fit the {h}x{w} input")
        return strides, padding, tuple(out)

    def op_MatMul(self, node):
        x, is_float = self.activation_input(node, node.input[0])
        if not is_float:
            raise self.unsupported(node, "a float MatMul reads integers")
        w, ws = self.weight(node, node.input[1], 1)
        self.dense(node, x, w, ws, None, is_float)

    def op_QLinearMatMul(self, node):
        i = node.input
        in_q = self.quant(node, i[1], i[2], what="input")
        x, _ = self.activation_input(node, i[0], in_q)
        w, ws = self.weight(node, i[3], 1, i[4], i[5])
        out_q = self.quant(node, i[6], i[7], what="output")
        self.dense(node, x, w, ws, None, False, out_q)

    def gemm_attrs(self, node, has_bias):
        attrs = _attrs(node)
        if attrs.get("transA", 0):
            raise self.unsupported(node, "transA=1 is not supported")
        if attrs.get("alpha", 1.0) != 1.0 or (has_bias and attrs.get("beta", 1.0) != 1.0):
            raise self.unsupported(node, "alpha and beta other than 1 are not supported")
        return 0 if attrs.get("transB", 0) else 1

    def op_Gemm(self, node):
        x, is_float = self.activation_input(node, node.input[0])
        if not is_float:
            raise self.unsupported(node, "a float Gemm reads integers")
        bias_name = node.input[2] if len(node.input) > 2 else ""
        axis = self.gemm_attrs(node, bool(bias_name))
        w, ws = self.weight(node, node.input[1], axis)
        if axis == 0:
            w = w.T
        bias = self.bias(node, bias_name, self.tensor(x).quant, ws)
        self.dense(node, x, w, ws, bias, is_float)

    def op_QGemm(self, node):
        i = list(node.input) + [""] * (9 - len(node.input))
        in_q = self.quant(node, i[1], i[2], what="input")
        x, _ = self.activation_input(node, i[0], in_q)
        axis = self.gemm_attrs(node, bool(i[6]))
        w, ws = self.weight(node, i[3], axis, i[4], i[5])
        if axis == 0:
            w = w.T
        if not i[7]:
            raise self.unsupported(node, "a QGemm with a float output is not supported")
        out_q = self.quant(node, i[7], i[8], what="output")
        bias = self.bias(node, i[6], in_q, ws, scale_known=True)
        self.dense(node, x, w, ws, bias, False, out_q)

    def dense(self, node, x, w, ws, bias, is_float, out_q=None):
        src = self.tensor(x)
        if len(src.shape) != 1:
            raise self.unsupported(node, f"input {x!r} is an image {src.shape}; flatten it "
                                   f"first (the chip's dense layers take (N, K) vectors)")
        if src.shape[0] != w.shape[0]:
            raise self.unsupported(node, f"input has {src.shape[0]} values, weights "
                                   f"{w.shape[0]} rows")
        out, out_q, act = self.matrix_output(node, is_float, node.output[0], (w.shape[1],), out_q)
        self.layers.append(ir.Dense(self.label(node), x, out, w, ws, bias, act))

    # -- element-wise functions ------------------------------------------------------------

    def clamp_activation(self, node, quant):
        """The quantized `Activation` of a Relu or Clip node in `quant`."""
        if node.op_type == "Relu":
            return Activation(ActivationKind.RELU)
        attrs = _attrs(node)
        low = self.opt_const(node, 1, "Clip's min")
        high = self.opt_const(node, 2, "Clip's max")
        low = attrs.get("min", -np.inf) if low is None else float(np.asarray(low).reshape(-1)[0])
        high = attrs.get("max", np.inf) if high is None else float(np.asarray(high).reshape(-1)[0])
        lo_q, hi_q = quant.range
        bound = lambda v: int(np.clip(np.rint(np.float32(v) / np.float32(quant.scale))
                                      + quant.zero_point, lo_q, hi_q)) if np.isfinite(v) else None
        qlow, qhigh = bound(low), bound(high)
        qlow = lo_q if qlow is None else qlow
        qhigh = hi_q if qhigh is None else qhigh
        if qlow == quant.zero_point and qhigh == hi_q:
            return Activation(ActivationKind.RELU)
        return Activation(ActivationKind.CLAMP, clamp_min=qlow, clamp_max=qhigh)

    def elementwise(self, node, kind, in_q=None, out_q=None):
        x, is_float = self.activation_input(node, node.input[0], in_q)
        src = self.tensor(x)
        out, quant = self.output(node, is_float, node.output[0], src.shape,
                                 out_q or src.quant, _FUNCTION_OUTPUTS.get(kind, {}).get(
                                     src.quant.unsigned))
        if kind in ("Relu", "Clip"):
            act = self.clamp_activation(node, quant)
        else:
            act = Activation(ActivationKind(kind.lower()), pre=src.quant)
            if src.quant.unsigned != quant.unsigned:
                raise self.unsupported(node, f"{kind} from {src.quant.dtype} to {quant.dtype}: "
                                       f"the chip's table maps within one type")
        self.layers.append(self.function(self.label(node), x, out, act))

    def function(self, name, src, out, activation=ir.NO_ACTIVATION):
        """`activation` applied alone from tensor `src` to `out`: an
        `ir.Elementwise` where no requantization comes first (equal
        quantizations, or a table lookup from its input), else an identity
        matrix layer, whose requantization rounds once from a sum scaled up
        by the identity's weight (an Elementwise requantizes the small
        difference ``q - zero_point`` directly, and TFLite's multiplier loses
        up to half a step on it, as ONNX Runtime does not)."""
        if activation.kind in (ActivationKind.SIGMOID, ActivationKind.TANH) \
                or self.tensors[src].quant == self.tensors[out].quant:
            return ir.Elementwise(name, src, out, activation)
        return self.identity(name, src, out, activation=activation)

    def identity(self, name, src, out, bias=None, activation=ir.NO_ACTIVATION):
        """A Dense (vectors) or 1x1 Conv2D (images) from `src` to `out` with
        weights ``_IDENTITY_WEIGHT`` on the diagonal, weight scale
        ``1 / _IDENTITY_WEIGHT`` and the given int32 `bias` in those units."""
        tensor = self.tensors[src]
        c = tensor.channels
        weight = (np.eye(c) * _IDENTITY_WEIGHT).astype(np.int8)
        scale = np.full(c, 1.0 / _IDENTITY_WEIGHT)
        if len(tensor.shape) == 1:
            return ir.Dense(name, src, out, weight, scale, bias, activation)
        return ir.Conv2D(name, src, out, weight.reshape(1, 1, c, c), scale, bias,
                         activation=activation)

    def op_Relu(self, node):
        self.elementwise(node, "Relu")

    def op_Clip(self, node):
        self.elementwise(node, "Clip")

    def op_Sigmoid(self, node):
        self.elementwise(node, "Sigmoid")

    def op_Tanh(self, node):
        self.elementwise(node, "Tanh")

    def op_QLinearSigmoid(self, node):
        i = node.input
        self.elementwise(node, "Sigmoid", self.quant(node, i[1], i[2], what="input"),
                         self.quant(node, i[3], i[4] if len(i) > 4 else None, what="output"))

    def op_QLinearLeakyRelu(self, node):
        raise self.unsupported(node, f"LeakyRelu is not supported; the chip's activations are "
                               f"relu, clip, sigmoid and tanh (supported operators: "
                               f"{SUPPORTED_OPS})")

    op_LeakyRelu = op_QLinearLeakyRelu

    def _integer_ops(self, node):
        raise self.unsupported(node, "dynamic quantization (integer-only operators) is not "
                               "supported: quantize with onnxruntime.quantization."
                               "quantize_static instead")

    op_MatMulInteger = op_ConvInteger = op_DynamicQuantizeLinear = _integer_ops

    # -- pooling ---------------------------------------------------------------------------

    def pool(self, node, kind, in_q=None, out_q=None):
        attrs = _attrs(node)
        x, is_float = self.activation_input(node, node.input[0], in_q)
        src = self.tensor(x)
        if len(src.shape) != 3:
            raise self.unsupported(node, f"pooling needs an image, not a vector {src.shape}")
        if attrs.get("channels_last", 0):
            raise self.unsupported(node, "channels_last=1 is not supported")
        if any(d != 1 for d in attrs.get("dilations", [1, 1])):
            raise self.unsupported(node, "dilations other than 1 are not supported")
        if len(node.output) > 1 and node.output[1]:
            raise self.unsupported(node, "MaxPool's Indices output is not supported")
        kernel = tuple(attrs["kernel_shape"])
        stride, padding, (oh, ow) = self.window(node, attrs, src.shape, kernel,
                                                attrs.get("ceil_mode", 0))
        # count_include_pad=1: a padded window divides by its whole size,
        # the pads counting as real zeros (the zero point)
        counted = kind == "avg" and bool(attrs.get("count_include_pad", 0)) and any(padding)
        shape = (oh, ow, src.shape[2])
        out, quant = self.output(node, is_float, node.output[0], shape, out_q or src.quant)
        odd = kernel[0] * kernel[1] % 2 == 1
        # one ACT pools a square window and stride up to MAX_POOL_SIZE; a
        # window of the whole image is a global pool (`pools.split_pools`)
        one_act = (kernel[0] == kernel[1] <= MAX_POOL_SIZE and stride[0] == stride[1]
                   <= MAX_POOL_SIZE) or tuple(kernel) == tuple(src.shape[:2])
        if kind == "avg" and (not any(padding) or counted) and (
                quant != src.quant or (odd and (counted or not one_act))):
            # On the matrix unit: a summing convolution, whose one rounding
            # is ONNX Runtime's (an odd window's average never ties)
            self.layers.append(self.summing_conv(node, x, out, kernel, stride,
                                                 padding if counted else (0, 0, 0, 0)))
        elif kind == "avg" and (quant != src.quant or any(padding) or not odd):
            # Even windows tie and padded ones vary their count: ONNX Runtime
            # rounds those averages in float32 (ties to even, or either way
            # by a float32 error), which the chip's integer rounding cannot
            # follow; the host computes them as ONNX Runtime does.
            self.layers.append(ir.HostOp(
                self.label(node), "qlinear_average_pool", [x], [out],
                {"kernel": list(kernel), "stride": list(stride), "padding": list(padding),
                 "count_include_pad": counted,
                 # ONNX Runtime turns QDQ's int8 into uint8 on x86
                 "uint8": node.op_type == "AveragePool" and not quant.unsigned}))
        else:
            self.layers.append(ir.Pool2D(self.label(node), x, out, kind, kernel, stride, padding))

    def summing_conv(self, node, x, out, kernel, stride, padding=(0, 0, 0, 0)):
        """An average pool that changes the quantization, as a Conv2D that
        sums each window per channel (weights ``_SUM_WEIGHT`` on the channel
        diagonal, scale ``1 / (_SUM_WEIGHT * window size)``): one rounding,
        ``round(s_in * sum(x - z_in) / (n * s_out)) + z_out``, as ONNX Runtime
        computes it. Requantizing every pixel first (a standalone pool's
        semantics) would saturate pixels beyond the output's range, which an
        average's range usually is. `padding` (count_include_pad=1) pads
        with the zero point, a real zero counted in the window's size."""
        c = self.tensor(x).channels
        weight = np.zeros((*kernel, c, c), np.int8)
        weight[:, :, np.arange(c), np.arange(c)] = _SUM_WEIGHT
        count = kernel[0] * kernel[1]
        return ir.Conv2D(self.label(node), x, out, weight, np.full(c, 1.0 / (_SUM_WEIGHT * count)),
                         None, stride, tuple(padding))

    def op_MaxPool(self, node):
        self.pool(node, "max")

    def op_AveragePool(self, node):
        self.pool(node, "avg")

    def op_QLinearAveragePool(self, node):
        i = node.input
        self.pool(node, "avg", self.quant(node, i[1], i[2], what="input"),
                  self.quant(node, i[3], i[4] if len(i) > 4 else None, what="output"))

    def global_pool(self, node, in_q=None, out_q=None):
        x, is_float = self.activation_input(node, node.input[0], in_q)
        src = self.tensor(x)
        if len(src.shape) != 3:
            raise self.unsupported(node, f"pooling needs an image, not a vector {src.shape}")
        if _attrs(node).get("channels_last", 0):
            raise self.unsupported(node, "channels_last=1 is not supported")
        shape = (1, 1, src.shape[2])
        out, quant = self.output(node, is_float, node.output[0], shape, out_q or src.quant)
        if quant != src.quant:
            self.layers.append(self.summing_conv(node, x, out, src.shape[:2], (1, 1)))
        else:
            self.layers.append(ir.GlobalAvgPool(self.label(node), x, out))

    def op_GlobalAveragePool(self, node):
        self.global_pool(node)

    def op_QLinearGlobalAveragePool(self, node):
        i = node.input
        self.global_pool(node, self.quant(node, i[1], i[2], what="input"),
                         self.quant(node, i[3], i[4] if len(i) > 4 else None, what="output"))

    # -- shapes ----------------------------------------------------------------------------

    def relabel(self, node, shape, order):
        """A Flatten/Reshape/Identity to per-sample `shape`: an alias when
        nothing changes, else an `ir.Reshape` ("chw": the model's order is
        channel-major), then a requantization if a QDQ model quantizes the
        result differently."""
        x, is_float = self.activation_input(node, node.input[0])
        src = self.tensor(x)
        y = node.output[0]
        if is_float and self.between_commuting(y):
            name, quant, others = y, src.quant, []
            self.floats.add(y)
        elif is_float:
            name, quant, others = self.q_after(node, y)
        else:
            name, quant, others = y, src.quant, []
        current = x
        if tuple(shape) != src.shape:
            moves = order == "chw" and len(src.shape) == 3 and src.shape[2] > 1 \
                and src.shape[0] * src.shape[1] > 1
            mid = name if quant == src.quant else name + "/reshaped"
            self.new_tensor(node, mid, shape, src.quant)
            self.layers.append(ir.Reshape(self.label(node), x, mid, "chw" if moves else "hwc"))
            current = mid
        if quant != src.quant:
            self.new_tensor(node, name, shape, quant)
            self.layers.append(self.function(self.label(node) + "/requantize", current, name))
            current = name
        for alias in [name, y] if not is_float else [name]:
            self.names[alias] = current
        for q in others:
            self.names[q.output[0]] = current

    def flat_shape(self, node, src, dims):
        """Per-sample IR shape and order of the model's (batch, ...) `dims`."""
        size = int(np.prod(src.shape))
        if len(dims) == 2 and dims[1] == size:
            return (size,), "chw"
        model = (src.shape[2], src.shape[0], src.shape[1]) if len(src.shape) == 3 else src.shape
        if tuple(dims[1:]) == tuple(model):
            return src.shape, "hwc"
        raise self.unsupported(node, f"reshapes {model} to {tuple(dims[1:])}; the chip "
                               f"reshapes only images to (N, C*H*W) vectors")

    def op_Flatten(self, node):
        x, _ = self.activation_input(node, node.input[0])
        src = self.tensor(x)
        axis = _attrs(node).get("axis", 1)
        if axis % (len(src.shape) + 1) != 1:
            raise self.unsupported(node, f"axis={axis}: only Flatten(axis=1) keeps the batch")
        self.relabel(node, *self.flat_shape(node, src, (None, src.size)))

    def op_Reshape(self, node):
        x, _ = self.activation_input(node, node.input[0])
        src = self.tensor(x)
        target = [int(d) for d in self.const(node, node.input[1], "the shape").reshape(-1)]
        model = (src.shape[2], src.shape[0], src.shape[1]) if len(src.shape) == 3 else src.shape
        dims = [1, *model]
        if _attrs(node).get("allowzero", 0) and 0 in target:
            raise self.unsupported(node, "allowzero=1 with a zero in the shape is not supported")
        out = [dims[i] if d == 0 else d for i, d in enumerate(target)]
        if out.count(-1) > 1:
            raise self.unsupported(node, f"shape {target} has more than one -1")
        if -1 in out:
            known = int(np.prod([d for d in out if d != -1]))
            out[out.index(-1)] = int(np.prod(dims)) // max(known, 1)
        if int(np.prod(out)) != int(np.prod(dims)) or out[0] != 1:
            raise self.unsupported(node, f"shape {target} does not keep the batch of "
                                   f"(N, {', '.join(map(str, model))})")
        self.relabel(node, *self.flat_shape(node, src, out))

    def op_Identity(self, node):
        x, _ = self.activation_input(node, node.input[0])
        self.relabel(node, self.tensor(x).shape, "hwc")

    def op_Dropout(self, node):
        if len(node.output) > 1 and node.output[1] and self.consumers[node.output[1]]:
            raise self.unsupported(node, "Dropout's mask output is not supported")
        self.op_Identity(node)

    # -- two-input and host operators ------------------------------------------------------

    def add(self, node, a_name, b_name, a_q=None, b_q=None, out_q=None, const_b=None):
        if const_b is not None:
            return self.add_bias(node, a_name, const_b, a_q, out_q)
        a, a_float = self.activation_input(node, a_name, a_q)
        b, b_float = self.activation_input(node, b_name, b_q)
        if self.tensor(a).shape != self.tensor(b).shape:
            raise self.unsupported(node, f"adds {self.tensor(a).shape} to "
                                   f"{self.tensor(b).shape}; the chip adds tensors of one "
                                   f"shape (no broadcasting)")
        out, _ = self.output(node, a_float, node.output[0], self.tensor(a).shape, out_q)
        self.layers.append(ir.Add(self.label(node), a, b, out))

    def add_bias(self, node, a_name, real_bias, a_q, out_q):
        """Add of a constant per channel (MatMul + Add, a bias after a Conv):
        a host step that adds it as ONNX Runtime does, in float32. Folding
        the constant into the layer before would round and saturate once
        where ONNX Runtime does twice (after the MatMul, after the Add), up
        to several steps apart; an identity matrix layer with the constant
        as its bias rounds the constant to 1/127 of an input step, which
        moved about 1% of the values a step."""
        a, is_float = self.activation_input(node, a_name, a_q)
        src = self.tensor(a)
        c = src.channels
        real_bias = np.asarray(real_bias, np.float64)
        # ONNX broadcasts from the last axis: per channel is (C,) for
        # vectors, (C, 1, 1) for NCHW images
        axis = -1 if len(src.shape) == 1 else -3
        if real_bias.size not in (1, c) or real_bias.ndim > len(src.shape) + 1 or \
                real_bias.size > 1 and (real_bias.ndim < -axis or real_bias.shape[axis] != c):
            raise self.unsupported(node, f"adds a constant of shape {real_bias.shape} to "
                                   f"{src.shape}; the chip adds constants only per channel")
        real_bias = np.broadcast_to(real_bias.reshape(-1), (c,))
        out, _ = self.output(node, is_float, node.output[0], src.shape, out_q)
        constant = [float(v) for v in real_bias.astype(np.float32)]
        self.layers.append(ir.HostOp(self.label(node), "add_constant", [a], [out],
                                     {"constant": constant}))

    def real_constant(self, name):
        """The real values of a constant Add operand (a float constant or a
        DQ of an integer one), or None if `name` is not constant."""
        if name in self.const_dq:
            values, scale, zp, axis = self.const_dq[name]
            return (values.astype(np.float64) - np.asarray(zp, np.float64)) \
                * np.asarray(scale, np.float64)
        if name in self.consts and self.consts[name].dtype.kind == "f":
            return self.consts[name].astype(np.float64)
        return None

    def op_Add(self, node):
        a, b = node.input
        if self.real_constant(a) is not None:
            a, b = b, a
        self.add(node, a, b, const_b=self.real_constant(b))

    def op_QLinearAdd(self, node):
        i = list(node.input) + [""] * (8 - len(node.input))
        qa = self.quant(node, i[1], i[2], what="first input")
        qb = self.quant(node, i[4], i[5], what="second input")
        out_q = self.quant(node, i[6], i[7], what="output")
        a, b = i[0], i[3]
        if a in self.consts:
            a, b, qa, qb = b, a, qb, qa
        const_b = None
        if b in self.consts:
            const_b = (self.consts[b].astype(np.float64) - qb.zero_point) * np.float32(qb.scale)
        self.add(node, a, b, qa, qb, out_q, const_b)

    def softmax(self, node, in_q=None, out_q=None):
        x, is_float = self.activation_input(node, node.input[0], in_q)
        src = self.tensor(x)
        attrs = _attrs(node)
        opset = attrs.get("opset", self.opset.get("", 13))
        axis = attrs.get("axis", -1 if opset >= 13 else 1)
        rank = len(src.shape) + 1
        # before opset 13 Softmax works on the tensor flattened from `axis` on
        channels = axis % rank == 1 and (rank == 2 or opset >= 13 or src.size == src.channels)
        if not channels:
            raise self.unsupported(node, f"softmax over axis {axis} of a {rank}-D tensor; the "
                                   f"host runs it over the channels only")
        out, _ = self.output(node, is_float, node.output[0], src.shape, out_q)
        # ONNX Runtime runs QLinearSoftmax for QDQ's DQ -> Softmax -> Q too
        self.layers.append(ir.HostOp(self.label(node), "qlinear_softmax", [x], [out],
                                     {"axis": -1}))

    def op_Softmax(self, node):
        self.softmax(node)

    def op_QLinearSoftmax(self, node):
        i = node.input
        self.softmax(node, self.quant(node, i[1], i[2], what="input"),
                     self.quant(node, i[3], i[4] if len(i) > 4 else None, what="output"))

    # -- fusion ----------------------------------------------------------------------------

    def fuse_activations(self):
        """Fold an Elementwise into the Dense/Conv2D before it when that
        layer's output is read by nothing else and the fold is exact:
        sigmoid/tanh take the layer's output quantization as ``pre``;
        relu/clamp need equal quantizations (no requantization between)."""
        outputs = {self.names[o] for o in self.model_outputs if o in self.names}
        producers = {layer.output: layer for layer in self.layers
                     if isinstance(layer, ir.MATRIX_LAYERS)}
        readers = defaultdict(list)
        for layer in self.layers:
            for name in layer.inputs:
                readers[name].append(layer)
        kept = []
        for layer in self.layers:
            if isinstance(layer, ir.Elementwise):
                src = layer.input
                producer = producers.get(src)
                kind = layer.activation.kind
                fusible = producer is not None and src not in outputs \
                    and producer.activation.kind == ActivationKind.NONE \
                    and len(readers[src]) == 1 and readers[src][0] is layer and (
                        kind in (ActivationKind.SIGMOID, ActivationKind.TANH)
                        or kind in (ActivationKind.RELU, ActivationKind.CLAMP)
                        and self.tensors[src].quant == self.tensors[layer.output].quant)
                if fusible:
                    producer.activation = layer.activation
                    producer.output = layer.output
                    producers[layer.output] = producer
                    del self.tensors[src]
                    continue
            kept.append(layer)
        self.layers = kept
