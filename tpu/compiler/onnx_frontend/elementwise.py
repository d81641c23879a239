"""Element-wise operators: Relu, Clip, Sigmoid, Tanh (fused into the matrix
layer before them, or an `ir.Elementwise`), Add of two tensors (`ir.Add`)
or of a constant, Softmax (a host step), and the refusals of LeakyRelu and
of dynamic quantization."""

from functools import partialmethod

import numpy as np

from .. import ir
from ..ir import Activation, ActivationKind
from .graph import SUPPORTED_OPS
from .loading import node_attrs


__all__ = ["ElementwiseOps"]

# The quantization of a sigmoid/tanh the quantizer leaves in float as a model
# output (the quantizer does not quantize Tanh): their ranges in TFLite's
# fixed output quantizations, in the input's type (the chip's table maps
# within one type).
_FUNCTION_OUTPUTS = {
    "Sigmoid": {False: ir.QuantType(1 / 256, -128), True: ir.QuantType(1 / 256, 0, True)},
    "Tanh": {False: ir.QuantType(1 / 128, 0), True: ir.QuantType(1 / 128, 128, True)},
}


class ElementwiseOps:
    """Activations, additions and softmax (a mixin of `graph.GraphReader`)."""

    def clamp_activation(self, node, quant):
        """The quantized `Activation` of a Relu or Clip node in `quant`."""
        if node.op_type == "Relu":
            return Activation(ActivationKind.RELU)
        attrs = node_attrs(node)
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

    op_Relu = partialmethod(elementwise, kind="Relu")
    op_Clip = partialmethod(elementwise, kind="Clip")
    op_Sigmoid = partialmethod(elementwise, kind="Sigmoid")
    op_Tanh = partialmethod(elementwise, kind="Tanh")

    def op_QLinearSigmoid(self, node):
        self.elementwise(node, "Sigmoid", *self.qlinear_quants(node))

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

    # -- two-input and host operators ------------------------------------------------------

    def add(self, node, a_name, b_name, a_q=None, b_q=None, out_q=None, const_b=None,
            semantics="onnx"):
        if const_b is not None:
            return self.add_bias(node, a_name, const_b, a_q, out_q)
        a, a_float = self.activation_input(node, a_name, a_q)
        b, b_float = self.activation_input(node, b_name, b_q)
        if self.tensor(a).shape != self.tensor(b).shape:
            raise self.unsupported(node, f"adds {self.tensor(a).shape} to "
                                   f"{self.tensor(b).shape}; the chip adds tensors of one "
                                   f"shape (no broadcasting)")
        out, _ = self.output(node, a_float, node.output[0], self.tensor(a).shape, out_q)
        self.layers.append(ir.Add(self.label(node), a, b, out, semantics=semantics))

    def add_bias(self, node, a_name, real_bias, a_q, out_q, qlinear=None):
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
        out, _ = self.output(node, is_float, node.output[0], src.shape, out_q)
        if qlinear is not None:
            # QLinearAdd: MLAS's arithmetic on the constant's integers
            values, scale, zero_point, first = qlinear
            attrs = {"constant": [int(v) for v in np.asarray(values).reshape(-1)],
                     "scale": float(scale), "zero_point": int(zero_point), "first": first}
            self.layers.append(ir.HostOp(self.label(node), "qlinear_add_constant", [a], [out],
                                         attrs))
            return
        real_bias = np.broadcast_to(real_bias.reshape(-1), (c,))
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
        const_b = self.real_constant(b)
        # a QDQ Add ONNX Runtime fuses runs as QLinearAdd (MLAS's
        # arithmetic on the integers), the others dequantize, add in float
        # and quantize
        semantics = "onnx"
        if const_b is None and self.qlinear_add_by_onnxruntime(node):
            # on int8 tensors ONNX Runtime has moved to uint8 (x86-64), or not
            quantize = self.consumers[node.output[0]][0]
            moved = self.onnxruntime_qtype(quantize.output[0]) == np.uint8 \
                and not self.qdq_quant(quantize, "output").unsigned
            semantics = "qlinear_add_uint8" if moved else "qlinear_add"
        self.add(node, a, b, const_b=const_b, semantics=semantics)

    def op_QLinearAdd(self, node):
        i = list(node.input) + [""] * (8 - len(node.input))
        qa = self.quant(node, i[1], i[2], what="first input")
        qb = self.quant(node, i[4], i[5], what="second input")
        out_q = self.quant(node, i[6], i[7], what="output")
        a, b = i[0], i[3]
        first = a in self.consts
        if first:
            a, b, qa, qb = b, a, qb, qa
        if b in self.consts:
            const_b = (self.consts[b].astype(np.float64) - qb.zero_point) * np.float32(qb.scale)
            return self.add_bias(node, a, const_b, qa, out_q,
                                 qlinear=(self.consts[b], qb.scale, qb.zero_point, first))
        self.add(node, a, b, qa, qb, out_q, semantics="qlinear_add")

    def softmax(self, node, in_q=None, out_q=None):
        x, is_float = self.activation_input(node, node.input[0], in_q)
        src = self.tensor(x)
        attrs = node_attrs(node)
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

    op_Softmax = softmax

    def op_QLinearSoftmax(self, node):
        self.softmax(node, *self.qlinear_quants(node))

