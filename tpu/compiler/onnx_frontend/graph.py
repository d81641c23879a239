"""The graph reader: the state of an import (IR tensors and layers, the
names ONNX tensors have in the IR, DequantizeLinear'd constants), the
quantization parameters of nodes, the inputs and outputs of nodes and of
the model, weights and biases, the walk over the nodes and the fusion of
activations into the matrix layers before them.

The operator families are mixins (`matrix`, `pooling`, `elementwise`,
`shapes`, `quantize`), each with an ``op_<OpType>`` method per operator;
`tpu.compiler.onnx_frontend` puts them together with `GraphReader`.
"""

from collections import defaultdict

import numpy as np

from .. import ir
from ..errors import CompileError, ModelError, UnsupportedModel
from ..ir import ActivationKind
from .loading import constant_value, declared_dims, elem_dtype, node_attrs, one_line


__all__ = ["GraphReader", "SUPPORTED_OPS", "INT8", "COMMUTING"]

#: What the front end reads, for error messages.
SUPPORTED_OPS = (
    "Conv, MatMul, Gemm, Add, Relu, Clip, Sigmoid, Tanh, MaxPool, AveragePool, GlobalAveragePool, "
    "Flatten, Reshape, Identity, Dropout, Softmax, QuantizeLinear, DequantizeLinear, QLinearConv, "
    "QLinearMatMul, QGemm, QLinearAdd, QLinearAveragePool, QLinearGlobalAveragePool, "
    "QLinearSigmoid, QLinearSoftmax")

INT8 = (np.int8, np.uint8)
#: operators that give the same result before or after quantization
COMMUTING = {"Relu", "Clip", "MaxPool", "Flatten", "Reshape", "Identity", "Dropout"}


class GraphReader:
    """One import: the model's graph read node by node into IR tensors and
    layers. The ``op_<OpType>`` methods come from the operator families."""

    def __init__(self, proto, source):
        from onnx import numpy_helper
        self.g = proto.graph
        self.source = source
        self.opset = {o.domain or "": o.version for o in proto.opset_import}
        self.consts = {i.name: numpy_helper.to_array(i) for i in self.g.initializer}
        self.consumers = defaultdict(list)
        self.producers = {}
        for node in self.g.node:
            for name in node.input:
                if name:
                    self.consumers[name].append(node)
            for name in node.output:
                self.producers[name] = node
        self.mlas_layers = set()    # IR names of the layers ONNX Runtime fuses (`fused_by_onnxruntime`)
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
        if zero_point.dtype not in INT8:
            raise self.unsupported(node, f"the {what} is {zero_point.dtype}; the chip takes "
                                   f"int8 and uint8 activations")
        try:
            return ir.QuantType(float(np.float32(scale.reshape(-1)[0])),
                                int(zero_point.reshape(-1)[0]), zero_point.dtype == np.uint8)
        except ir.IRError as exc:
            raise self.unsupported(node, f"the {what}'s quantization: {exc}") from None

    def qlinear_quants(self, node):
        """The input's and the output's quantization of a QLinear operator
        of one input, ``(x, x_scale, x_zero_point, y_scale[, y_zero_point])``:
        QLinearSigmoid, QLinearSoftmax, QLinearAveragePool,
        QLinearGlobalAveragePool."""
        i = node.input
        return (self.quant(node, i[1], i[2], what="input"),
                self.quant(node, i[3], i[4] if len(i) > 4 else None, what="output"))

    def qdq_quant(self, node, what):
        """The quantization a QuantizeLinear/DequantizeLinear node applies."""
        attrs = node_attrs(node)
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
        dims = declared_dims(info)
        if dims is None or len(dims) not in (2, 4):
            raise self.unsupported(node, f"model input {name!r} has shape {dims}; the chip "
                                   f"takes (N, C) vectors and (N, C, H, W) images")
        if any(d is None for d in dims[1:]):
            raise self.unsupported(node, f"model input {name!r} has shape {dims}; only the "
                                   f"batch may be symbolic")
        shape = (dims[2], dims[3], dims[1]) if len(dims) == 4 else (dims[1],)
        dtype = elem_dtype(info)
        if dtype in INT8 and dtype != quant.dtype:
            raise self.unsupported(node, f"model input {name!r} is {dtype} but quantized as "
                                   f"{quant.dtype}")
        tensor = tensor or (name if dtype in INT8 else node.output[0])
        self.new_tensor(node, tensor, shape, quant)
        self.inputs[name] = ir.GraphInput(tensor, name, dims, dtype,
                                          "nchw" if len(dims) == 4 else "nc")
        return tensor

    def activation_input(self, node, name, quant=None):
        """The IR tensor of activation input `name` and whether the node
        reads it as real values (QDQ) rather than integers. `quant`, for
        QOperator nodes, is the quantization the node says it has."""
        if name not in self.names and name in self.model_inputs and quant is not None \
                and elem_dtype(self.model_inputs[name]) in INT8:
            self.model_input(node, name, quant)
        if name not in self.names and name in self.model_inputs and quant is None \
                and node.op_type in COMMUTING:
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
            if len(users) != 1 or users[0].op_type not in COMMUTING:
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
            all(c.op_type in COMMUTING for c in users)

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
        if is_float and node.op_type in COMMUTING and quant is not None \
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
        if values.dtype not in INT8:
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
                value = constant_value(node)
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
                raise self.unsupported(node, one_line(exc)) from None
            except (ValueError, KeyError, IndexError, TypeError) as exc:
                raise self.unsupported(node, f"cannot read this node ({type(exc).__name__}: "
                                       f"{one_line(exc)})") from None
        self.fuse_activations()
        for layer in self.layers:
            # ONNX Runtime requantizes a sum with one float32 multiply by a
            # float32 multiplier: in its QLinearConv and QLinearMatMul
            # (MLAS) the product is rounded to float32 and then half to
            # even, which ACT's mlas_round computes; where it runs the layer
            # as a float32 operator its sums are float32 ones, which no
            # rounding of the chip's exact sums matches, and the layer
            # rounds once by that multiplier (within about 2**-24 of a tie).
            if isinstance(layer, (ir.Dense, ir.Conv2D)):
                layer.rounding = "mlas" if layer.name in self.mlas_layers else "float32"
        graph = ir.Graph(self.tensors, self.layers, self.graph_inputs(), self.graph_outputs(),
                         self.source)
        try:
            return graph.validate()
        except ir.IRError as exc:
            raise ModelError(f"{self.source}: {one_line(exc)}") from None

    def fused_by_onnxruntime(self, node):
        """Whether ONNX Runtime (its CPU provider on x86-64) runs the matrix
        operator `node` as a QLinearConv, QLinearMatMul or QGemm: it is one,
        or it is the float Conv, MatMul or Gemm of a QDQ node group that its
        QDQ transformer fuses into one (`qdq_group_by_onnxruntime`), over
        uint8 activations (it fuses none over int8 ones there: its
        ``QDQIsInt8Allowed`` is false on x86-64). Such a layer's sums are
        exact and MLAS requantizes them (``mlas_round``); the others are
        float32 operators on dequantized values."""
        if node.op_type in ("QLinearConv", "QLinearMatMul"):
            return True
        if node.op_type == "QGemm":
            # with an output scale (else its output is float)
            return len(node.input) > 7 and bool(node.input[7])
        if node.op_type not in ("Conv", "MatMul", "Gemm"):
            return False
        groups = self.qdq_group_by_onnxruntime(node)
        return groups is not None and groups[0] == groups[-1] == np.uint8

    def qlinear_add_by_onnxruntime(self, node):
        """Whether ONNX Runtime runs the QDQ Add `node` (of two tensors) as
        a QLinearAdd: a QDQ node group whose inputs and output have one
        type as it runs them (int8 or uint8)."""
        groups = self.qdq_group_by_onnxruntime(node)
        return groups is not None and len(set(groups)) == 1

    def qdq_group_by_onnxruntime(self, node):
        """The types ONNX Runtime runs the quantized inputs and the output
        of `node` in, if it takes `node` as a QDQ node group (its
        ``NodeGroupSelector``: every input a DequantizeLinear, the output
        read by one QuantizeLinear alone and not a model output), else
        None. A DequantizeLinear shared with other nodes does not matter
        (``EnsureUniqueDQForNodeUnit`` gives each its own); a shared
        QuantizeLinear does, through the types (`onnxruntime_qtype`)."""
        types = []
        for name in node.input:
            if not name:
                continue
            producer = self.producers.get(name)
            if producer is None or producer.op_type != "DequantizeLinear" \
                    or name in self.model_outputs:
                return None
            types.append(self.onnxruntime_qtype(producer.input[0]))
        y = node.output[0]
        users = self.consumers[y]
        if len(node.output) != 1 or y in self.model_outputs or len(users) != 1 \
                or users[0].op_type != "QuantizeLinear":
            return None
        return (*types[:2], self.onnxruntime_qtype(users[0].output[0]))

    def onnxruntime_qtype(self, name):
        """The integer type of the quantized tensor `name` (a QuantizeLinear
        output, a model input or a constant) as ONNX Runtime runs it on
        x86-64, or None if not known: its ``QDQS8ToU8Transformer`` moves an
        int8 QuantizeLinear whose output one DequantizeLinear alone reads
        (not a model output), itself read by one node, both with one and the
        same constant zero point, to uint8 (the zero point plus 128)."""
        from onnx import helper
        producer = self.producers.get(name)
        if name in self.consts:
            return self.consts[name].dtype.type
        if producer is None or producer.op_type != "QuantizeLinear":
            info = self.model_inputs.get(name)
            return elem_dtype(info).type if info is not None else None
        if len(producer.input) < 3 or not producer.input[2]:
            dtype = node_attrs(producer).get("output_dtype")
            return helper.tensor_dtype_to_np_dtype(dtype).type if dtype else np.uint8
        zp = self._zero_point(producer)
        if zp is None or zp.dtype != np.int8:
            return None if zp is None else zp.dtype.type
        users = self.consumers[name]
        # ONNX Runtime first gives each reader of a DequantizeLinear its own
        # copy (EnsureUniqueDQForNodeUnit), so a shared DequantizeLinear is a
        # QuantizeLinear read by several here; and its common-subexpression
        # pass makes one of equal QuantizeLinear nodes on one tensor (the
        # quantizer's DedicatedQDQPair), read by all their readers
        if len(users) == 1 and name not in self.model_outputs \
                and not self._twins(producer) \
                and users[0].op_type == "DequantizeLinear" \
                and len(self.consumers[users[0].output[0]]) \
                + (users[0].output[0] in self.model_outputs) == 1:
            dq_zp = self._zero_point(users[0])
            if zp.size == 1 and dq_zp is not None and dq_zp.size == 1 \
                    and dq_zp.dtype == np.int8 and int(dq_zp.reshape(-1)[0]) == int(zp.reshape(-1)[0]):
                return np.uint8
        return np.int8

    def _twins(self, q):
        """The other QuantizeLinear nodes of the tensor `q` quantizes, with
        equal scale, zero point and attributes (ONNX Runtime merges them)."""
        def key(node):
            params = []
            for n in node.input[1:3]:
                value = self.consts.get(n)
                params.append(n if value is None else (value.dtype.str, value.shape,
                                                      value.tobytes()))
            return params, node_attrs(node)
        mine = key(q)
        return [other for other in self.consumers[q.input[0]]
                if other is not q and other.op_type == "QuantizeLinear" and key(other) == mine]

    def _zero_point(self, node):
        """The constant zero point of a QuantizeLinear/DequantizeLinear
        node, or None if it has none (or it is not constant)."""
        if len(node.input) > 2 and node.input[2]:
            return self.consts.get(node.input[2])
        return None

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
            dims = declared_dims(info)
            if dims is None:
                dims = (None, *((tensor.shape[2], tensor.shape[0], tensor.shape[1])
                                if len(tensor.shape) == 3 else tensor.shape))
            layout = "nchw" if len(tensor.shape) == 3 else "nc"
            outputs.append(ir.GraphOutput(tensor.name, info.name, dims, elem_dtype(info), layout))
        return outputs

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

