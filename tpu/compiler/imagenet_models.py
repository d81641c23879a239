"""ResNet-18 and MobileNetV2 as float ONNX models, from their public layer
definitions, with seeded random weights, and their QDQ int8 forms.

* `resnet18`: He et al., "Deep Residual Learning for Image Recognition"
  (2015), Table 1's 18-layer network as torchvision builds it: a 7x7
  stride-2 convolution to 64 channels, a 3x3 stride-2 max pool (padding
  1), four stages of two basic blocks (two 3x3 convolutions and a residual
  Add, the first block of stages 2-4 at stride 2 with a 1x1 stride-2
  convolution on the shortcut) of 64, 128, 256 and 512 channels, a global
  average pool and a 1000-way fully connected layer.
* `mobilenet_v2`: Sandler et al., "MobileNetV2: Inverted Residuals and
  Linear Bottlenecks" (2018), Table 2: a 3x3 stride-2 convolution to 32
  channels, 17 inverted residual blocks (1x1 expansion by ``t``, 3x3
  depthwise convolution, 1x1 linear projection; a residual Add where the
  stride is 1 and the channels stay) with (t, c, n, s) = (1, 16, 1, 1),
  (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3,
  2), (6, 320, 1, 1), a 1x1 convolution to 1280, a global average pool
  and a 1000-way fully connected layer; ReLU6 (Clip 0..6) after every
  convolution but the projections.

Batch normalisation is folded into the convolutions' weights and biases
(random ones here), as it is at inference. The input is ``input``
``(N, 3, size, size)`` float32 with a symbolic batch; 224 is the papers'
size, and any multiple of 32 keeps the architecture (a smaller image only
shrinks the feature maps: tests run them at 32x32). `quantized` makes the
QDQ model ``quantize_static`` writes (uint8 activations by default, int8
if asked, symmetric int8 weights per output channel, MinMax calibration on
seeded random images).
"""

import numpy as np
import onnx
from onnx import TensorProto, helper

from . import zoo


__all__ = ["MODELS", "resnet18", "mobilenet_v2", "quantized", "calibration_images"]

#: MobileNetV2's inverted residual blocks: (expansion t, channels c, repeats n, stride s)
MOBILENET_V2_BLOCKS = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
                       (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1))
#: ResNet-18's stages: (channels, stride of the first block)
RESNET18_STAGES = ((64, 1), (128, 2), (256, 2), (512, 2))
CLASSES = 1000


class _Graph(zoo._Builder):
    """Nodes and initializers of a float NCHW network being built, with the
    shape (C, H, W) of each tensor."""

    def __init__(self, seed, size):
        super().__init__(seed)
        self.shapes = {"input": (3, size, size)}

    def name(self, what):
        self.count += 1
        return f"{what}_{self.count}"

    def node(self, op, inputs, shape, **attrs):
        name = self.name(op.lower())
        self.nodes.append(helper.make_node(op, inputs, [name], name=name, **attrs))
        self.shapes[name] = shape
        return name

    def conv(self, x, cout, k, stride=1, groups=1, act="relu"):
        """A k x k convolution with padding k // 2 (a folded batch norm's
        bias), then `act` ("relu", "relu6" or None)."""
        cin, h, w = self.shapes[x]
        pad = k // 2
        fan_in = cin // groups * k * k
        # He initialisation keeps the activations' scale from layer to layer
        weight = self.rng.normal(0.0, np.sqrt(2.0 / fan_in), (cout, cin // groups, k, k))
        bias = self.rng.normal(0.0, 0.1, cout)
        oh, ow = (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1
        y = self.node("Conv", [x, self.init("weight", weight), self.init("bias", bias)],
                      (cout, oh, ow), kernel_shape=[k, k], strides=[stride, stride],
                      pads=[pad] * 4, group=groups)
        return self.act(y, act)

    def act(self, x, act):
        if act == "relu":
            return self.node("Relu", [x], self.shapes[x])
        if act == "relu6":
            return self.node("Clip", [x, self.init("min", 0.0), self.init("max", 6.0)],
                             self.shapes[x])
        return x

    def add(self, a, b):
        return self.node("Add", [a, b], self.shapes[a])

    def head(self, x):
        """Global average pool, flatten and the 1000-way classifier."""
        c = self.shapes[x][0]
        x = self.node("GlobalAveragePool", [x], (c, 1, 1))
        x = self.node("Flatten", [x], (c,), axis=1)
        weight = self.rng.normal(0.0, np.sqrt(1.0 / c), (CLASSES, c))
        return self.node("Gemm", [x, self.init("fc_weight", weight),
                                  self.init("fc_bias", self.rng.normal(0.0, 0.1, CLASSES))],
                         (CLASSES,), transB=1)

    def model(self, name, y):
        size = self.shapes["input"][1]
        graph = helper.make_graph(
            self.nodes, name,
            [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 3, size, size])],
            [helper.make_tensor_value_info(y, TensorProto.FLOAT, ["N", CLASSES])],
            initializer=self.inits)
        model = helper.make_model(graph, producer_name="tpu.compiler.imagenet_models",
                                  opset_imports=[helper.make_opsetid("", zoo.OPSET)])
        model.ir_version = zoo.IR_VERSION
        onnx.checker.check_model(model, full_check=True)
        return model


def _check_size(size):
    if size < 32 or size % 32:
        raise ValueError(f"image size {size} is not a multiple of 32 (the networks halve the "
                         f"image five times)")


def resnet18(size=224, seed=0):
    """ResNet-18 for ``size x size`` RGB images (a float ONNX model)."""
    _check_size(size)
    g = _Graph(seed, size)
    x = g.conv("input", 64, 7, stride=2)
    c, h, w = g.shapes[x]
    x = g.node("MaxPool", [x], (c, (h - 1) // 2 + 1, (w - 1) // 2 + 1),
               kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    for channels, first_stride in RESNET18_STAGES:
        for block in range(2):
            stride = first_stride if block == 0 else 1
            y = g.conv(x, channels, 3, stride)
            y = g.conv(y, channels, 3, act=None)
            shortcut = x
            if stride != 1 or g.shapes[x][0] != channels:
                shortcut = g.conv(x, channels, 1, stride, act=None)
            x = g.act(g.add(y, shortcut), "relu")
    return g.model("resnet18", g.head(x))


def mobilenet_v2(size=224, seed=0):
    """MobileNetV2 (width 1.0) for ``size x size`` RGB images (a float ONNX
    model)."""
    _check_size(size)
    g = _Graph(seed, size)
    x = g.conv("input", 32, 3, stride=2, act="relu6")
    for t, channels, repeats, first_stride in MOBILENET_V2_BLOCKS:
        for block in range(repeats):
            stride = first_stride if block == 0 else 1
            cin = g.shapes[x][0]
            y = g.conv(x, cin * t, 1, act="relu6") if t != 1 else x
            y = g.conv(y, cin * t, 3, stride, groups=cin * t, act="relu6")
            y = g.conv(y, channels, 1, act=None)
            x = g.add(x, y) if stride == 1 and cin == channels else y
    x = g.conv(x, 1280, 1, act="relu6")
    return g.model("mobilenet_v2", g.head(x))


MODELS = {"resnet18": resnet18, "mobilenet_v2": mobilenet_v2}


def calibration_images(size, count=8, seed=1):
    """``count`` seeded random float images ``(count, 3, size, size)``,
    roughly normalised pixels."""
    return np.random.default_rng(seed).standard_normal((count, 3, size, size)).astype(np.float32)


def quantized(name, size=224, seed=0, calibration=8, activation_type="uint8"):
    """The QDQ model of `MODELS[name]` at ``size``: ``quantize_static`` with
    ``activation_type`` activations (uint8 or int8, asymmetric), symmetric
    int8 weights per output channel, on ``calibration`` random images.

    With uint8 activations ONNX Runtime (on x86-64) fuses every QDQ group:
    all convolutions into QLinearConv, the classifier into QGemm, every
    residual Add into QLinearAdd, and the model runs on integers alone. With
    int8 ones it moves a tensor to uint8 only where one QuantizeLinear ->
    DequantizeLinear pair feeds one node (it fuses no int8 convolution on
    x86-64), so the layers after a tensor read twice (a residual block's
    input) stay float32 Conv and Add (docs/compiler.md)."""
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; one of {', '.join(MODELS)}")
    model = MODELS[name](size, seed)
    return zoo.quantize(model, calibration_images(size, calibration), form="qdq",
                        per_channel=True, activation_type=activation_type)
