"""Matrix layers: Conv, QLinearConv (group 1 or depthwise), MatMul,
QLinearMatMul, Gemm and QGemm become `ir.Conv2D` and `ir.Dense`; the window
arithmetic (strides, paddings, output sizes) that pooling shares."""

import numpy as np

from .. import ir
from ..ir import Activation
from .loading import node_attrs


__all__ = ["MatrixOps"]


class MatrixOps:
    """Convolutions and products (a mixin of `graph.GraphReader`)."""

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

    def _qlinear_operands(self, node, weight_axis):
        """A QLinearConv's or QLinearMatMul's input tensor and quantization,
        weights, weight scales and output quantization (inputs 0 to 7)."""
        i = node.input
        in_q = self.quant(node, i[1], i[2], what="input")
        x, _ = self.activation_input(node, i[0], in_q)
        w, ws = self.weight(node, i[3], weight_axis, i[4], i[5])
        out_q = self.quant(node, i[6], i[7], what="output")
        return x, in_q, w, ws, out_q

    def op_QLinearConv(self, node):
        i = node.input
        x, in_q, w, ws, out_q = self._qlinear_operands(node, 0)
        bias = self.bias(node, i[8] if len(i) > 8 else "", in_q, ws, scale_known=True)
        self.conv(node, x, False, w, ws, bias, out_q)

    def conv(self, node, x, is_float, w, ws, bias, out_q=None):
        attrs = node_attrs(node)
        if w.ndim != 4:
            raise self.unsupported(node, f"a {w.ndim - 2}-D convolution; the chip runs 2-D ones")
        if attrs.get("channels_last", 0):
            raise self.unsupported(node, "channels_last=1 is not supported")
        if any(d != 1 for d in attrs.get("dilations", [1, 1])):
            raise self.unsupported(node, f"dilations={list(attrs['dilations'])}: the chip runs "
                                   f"only dilation 1")
        src = self.tensor(x)
        group = attrs.get("group", 1)
        if len(src.shape) != 3 or src.shape[2] != w.shape[1] * group:
            raise self.unsupported(node, f"input {src.shape} is not an image of "
                                   f"{w.shape[1] * group} channels")
        if group != 1:
            w = self.depthwise(node, w, group, src.shape[2])
        kernel = tuple(attrs.get("kernel_shape", w.shape[2:]))
        if kernel != tuple(w.shape[2:]):
            raise self.unsupported(node, f"kernel_shape {kernel} does not match the weights "
                                   f"{tuple(w.shape)}")
        stride, padding, (oh, ow) = self.window(node, attrs, src.shape, kernel)
        out, out_q, act = self.matrix_output(node, is_float, node.output[0],
                                             (oh, ow, w.shape[0]), out_q)
        if self.fused_by_onnxruntime(node):
            self.mlas_layers.add(self.label(node))
        self.layers.append(ir.Conv2D(self.label(node), x, out, w.transpose(2, 3, 1, 0), ws,
                                     bias, stride, padding, act))

    def depthwise(self, node, w, group, cin):
        """The ``(Cout, Cin, KH, KW)`` weights of a depthwise convolution
        (``group`` = Cin, each output channel ``o`` reading input channel
        ``o // m`` with ``m = Cout / Cin``) as a dense convolution's: zero
        but for ``[o, o // m]``, the block-diagonal form the TFLite front end
        gives DEPTHWISE_CONV_2D, whose all-zero weight tiles the back end
        leaves out. Other groupings are refused."""
        cout = w.shape[0]
        if group != cin or w.shape[1] != 1 or cout % cin:
            raise self.unsupported(node, f"group={group} over {cin} input channels: the chip "
                                   f"runs group=1 and depthwise (group = input channels) "
                                   f"convolutions, not grouped ones")
        dense = np.zeros((cout, cin, *w.shape[2:]), np.int8)
        dense[np.arange(cout), np.arange(cout) // (cout // cin)] = w[:, 0]
        return dense

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
        x, _, w, ws, out_q = self._qlinear_operands(node, 1)
        self.dense(node, x, w, ws, None, False, out_q)

    def gemm_attrs(self, node, has_bias):
        attrs = node_attrs(node)
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
        if self.fused_by_onnxruntime(node):
            self.mlas_layers.add(self.label(node))
        self.layers.append(ir.Dense(self.label(node), x, out, w, ws, bias, act))

