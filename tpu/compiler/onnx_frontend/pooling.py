"""Pooling: MaxPool, AveragePool, GlobalAveragePool and their QLinear forms
become `ir.Pool2D`, `ir.GlobalAvgPool`, a summing `ir.Conv2D` on the matrix
unit, or a host step that rounds as ONNX Runtime does."""

from functools import partialmethod

import numpy as np

from .. import ir
from ...isa import MAX_POOL_SIZE
from .loading import node_attrs


__all__ = ["PoolingOps"]

# diagonal weight of the layers that sum windows (`summing_conv`): large, so
# that the requantization's first rounding (of its high product) is fine
# against the step of the output
_SUM_WEIGHT = 64           # room for sums of up to 2**31 / (64 * 255) pixels


class PoolingOps:
    """Pooling operators (a mixin of `graph.GraphReader`)."""

    def pool(self, node, kind, in_q=None, out_q=None):
        attrs = node_attrs(node)
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

    op_MaxPool = partialmethod(pool, kind="max")
    op_AveragePool = partialmethod(pool, kind="avg")

    def op_QLinearAveragePool(self, node):
        self.pool(node, "avg", *self.qlinear_quants(node))

    def global_pool(self, node, in_q=None, out_q=None):
        x, is_float = self.activation_input(node, node.input[0], in_q)
        src = self.tensor(x)
        if len(src.shape) != 3:
            raise self.unsupported(node, f"pooling needs an image, not a vector {src.shape}")
        if node_attrs(node).get("channels_last", 0):
            raise self.unsupported(node, "channels_last=1 is not supported")
        shape = (1, 1, src.shape[2])
        out, quant = self.output(node, is_float, node.output[0], shape, out_q or src.quant)
        if quant != src.quant:
            self.layers.append(self.summing_conv(node, x, out, src.shape[:2], (1, 1)))
        else:
            self.layers.append(ir.GlobalAvgPool(self.label(node), x, out))

    op_GlobalAveragePool = global_pool

    def op_QLinearGlobalAveragePool(self, node):
        self.global_pool(node, *self.qlinear_quants(node))

