"""Shape operators: Flatten, Reshape (image to vector), Identity and
Dropout become aliases or an `ir.Reshape`."""

import numpy as np

from .. import ir
from .loading import node_attrs


__all__ = ["ShapeOps"]


class ShapeOps:
    """Reshapes and relabels (a mixin of `graph.GraphReader`)."""

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
        axis = node_attrs(node).get("axis", 1)
        if axis % (len(src.shape) + 1) != 1:
            raise self.unsupported(node, f"axis={axis}: only Flatten(axis=1) keeps the batch")
        self.relabel(node, *self.flat_shape(node, src, (None, src.size)))

    def op_Reshape(self, node):
        x, _ = self.activation_input(node, node.input[0])
        src = self.tensor(x)
        target = [int(d) for d in self.const(node, node.input[1], "the shape").reshape(-1)]
        model = (src.shape[2], src.shape[0], src.shape[1]) if len(src.shape) == 3 else src.shape
        dims = [1, *model]
        if node_attrs(node).get("allowzero", 0) and 0 in target:
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

