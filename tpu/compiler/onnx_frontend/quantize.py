"""QuantizeLinear and DequantizeLinear, and the layers that requantize a
tensor from one quantization to another (`QuantizeOps.function`,
`QuantizeOps.identity`), which the other families use too."""

import numpy as np

from .. import ir
from ..ir import ActivationKind
from .loading import node_attrs


__all__ = ["QuantizeOps"]

# diagonal weight of the layers that copy tensors (`identity`): large, so
# that the requantization's first rounding (of its high product) is fine
# against the step of the output
_IDENTITY_WEIGHT = 127


class QuantizeOps:
    """QuantizeLinear / DequantizeLinear and requantizing layers (a mixin
    of `graph.GraphReader`)."""

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
            axis = node_attrs(node).get("axis", 1)
            if node_attrs(node).get("block_size", 0):
                raise self.unsupported(node, "blocked quantization is not supported")
            self.const_dq[y] = (values, scale, zp, axis)
            return
        quant = self.qdq_quant(node, "input")
        name, _ = self.activation_input(node, x, quant)
        self.names[y] = name
        self.floats.add(y)

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

