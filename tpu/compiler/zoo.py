"""Small float ONNX models built from numpy weights, and their int8 forms.

The builders make the kinds of network the compiler takes: MLPs (Gemm with
or without transB, MatMul + Add), convolution stacks (any kernel, stride and
padding; max/average pooling; global average pooling; flatten; dense),
residual blocks (Add), and sigmoid/tanh heads. Weights are seeded random
unless given. `quantize` turns a float model into the int8 model ONNX
Runtime's ``quantize_static`` writes, in QDQ or QOperator form, and
`ort_run` runs any of them on ONNX Runtime's CPU provider.

A convolution stack is a list of layer specs made by the functions below::

    model = conv_net((1, 1, 8, 8), [conv(8, k=3, pad=1), maxpool(2),
                                    conv(16, k=3, pad=1), flatten(), dense(10, act=None)])
"""

import contextlib
import logging
import os
import tempfile
import warnings
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


__all__ = [
    "OPSET", "mlp", "conv_net", "conv", "maxpool", "avgpool", "global_avg_pool", "flatten",
    "dense", "activation", "residual", "quantize", "ort_run", "ort_session",
]

OPSET = 13
IR_VERSION = 8            # what every onnxruntime >= 1.14 loads
ACTIVATIONS = ("relu", "relu6", "sigmoid", "tanh", None)


# Layer specs of a convolution stack ---------------------------------------

@dataclass
class Conv:
    cout: int
    k: tuple
    stride: tuple
    pad: tuple              # (top, left, bottom, right)
    act: str
    weight: np.ndarray = None   # (cout, cin, kh, kw), ONNX's layout
    bias: np.ndarray = None


@dataclass
class Pool:
    kind: str               # "max" or "avg"
    k: tuple
    stride: tuple
    pad: tuple
    count_include_pad: int = 0


@dataclass
class GlobalAvgPool:
    pass


@dataclass
class Flatten:
    reshape: bool = False   # a Reshape to (N, -1) instead of a Flatten node


@dataclass
class Dense:
    n: int
    act: str
    op: str                 # "gemm" or "matmul"
    trans_b: bool
    weight: np.ndarray = None   # (k, n)
    bias: np.ndarray = None


@dataclass
class Act:
    act: str


@dataclass
class Residual:
    """``act(x + body(x))``; body keeps the shape (convs with "same" padding)."""
    body: list
    act: str = "relu"


def _pair(v):
    return (int(v), int(v)) if np.isscalar(v) else tuple(int(x) for x in v)


def _pads(p):
    if np.isscalar(p):
        return (int(p),) * 4
    p = tuple(int(x) for x in p)
    return p * 2 if len(p) == 2 else p


def conv(cout, k=3, stride=1, pad=0, act="relu", weight=None, bias=None):
    """A Conv (group 1, dilation 1). ``pad`` is an int, (ph, pw) or
    (top, left, bottom, right); ``weight`` (cout, cin, kh, kw) and ``bias``
    (cout,) if given."""
    _check_act(act)
    return Conv(int(cout), _pair(k), _pair(stride), _pads(pad), act, weight, bias)


def maxpool(k=2, stride=None, pad=0):
    return Pool("max", _pair(k), _pair(k if stride is None else stride), _pads(pad))


def avgpool(k=2, stride=None, pad=0, count_include_pad=0):
    """AveragePool (by default ``count_include_pad=0``)."""
    return Pool("avg", _pair(k), _pair(k if stride is None else stride), _pads(pad),
                count_include_pad)


def global_avg_pool():
    return GlobalAvgPool()


def flatten(reshape=False):
    return Flatten(reshape)


def dense(n, act="relu", op="gemm", trans_b=True, weight=None, bias=None):
    """A fully connected layer: Gemm (``trans_b``: weight stored (n, k)) or
    MatMul + Add. ``weight`` is (k, n) whatever the storage."""
    _check_act(act)
    if op not in ("gemm", "matmul"):
        raise ValueError(f"dense op {op!r} is neither 'gemm' nor 'matmul'")
    return Dense(int(n), act, op, bool(trans_b), weight, bias)


def activation(act):
    """A standalone activation node."""
    _check_act(act)
    return Act(act)


def residual(body, act="relu"):
    _check_act(act)
    return Residual(list(body), act)


def _check_act(act):
    if act not in ACTIVATIONS:
        raise ValueError(f"activation {act!r} is not one of {ACTIVATIONS}")


# Graph building --------------------------------------------------------------

class _Builder:
    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)
        self.nodes = []
        self.inits = []
        self.count = 0

    def name(self, what):
        self.count += 1
        return f"{what}{self.count}"

    def init(self, what, array, dtype=np.float32):
        name = self.name(what)
        self.inits.append(numpy_helper.from_array(np.asarray(array, dtype=dtype), name))
        return name

    def node(self, op, inputs, **attrs):
        out = self.name(op.lower() + "_out")
        self.nodes.append(helper.make_node(op, inputs, [out], name=self.name(op.lower()), **attrs))
        return out

    def act(self, x, act):
        if act == "relu":
            return self.node("Relu", [x])
        if act == "relu6":
            return self.node("Clip", [x, self.init("lo", 0.0), self.init("hi", 6.0)])
        if act == "sigmoid":
            return self.node("Sigmoid", [x])
        if act == "tanh":
            return self.node("Tanh", [x])
        return x

    def random(self, shape, fan_in):
        # He-style scale keeps activations in a range where int8 keeps detail
        return self.rng.normal(0.0, np.sqrt(2.0 / fan_in), size=shape).astype(np.float32)

    def dense(self, x, k, spec):
        w = spec.weight if spec.weight is not None else self.random((k, spec.n), k)
        b = spec.bias if spec.bias is not None else self.rng.normal(0, 0.1, spec.n)
        w = np.asarray(w, np.float32)
        if w.shape != (k, spec.n):
            raise ValueError(f"dense weight has shape {w.shape}, expected {(k, spec.n)}")
        if spec.op == "gemm":
            wt = w.T if spec.trans_b else w
            y = self.node("Gemm", [x, self.init("W", wt), self.init("B", b)], transB=int(spec.trans_b))
        else:
            y = self.node("Add", [self.node("MatMul", [x, self.init("W", w)]), self.init("B", b)])
        return self.act(y, spec.act)

    def conv(self, x, shape, spec):
        c, h, w = shape
        kh, kw = spec.k
        weight = spec.weight if spec.weight is not None else self.random((spec.cout, c, kh, kw), c * kh * kw)
        bias = spec.bias if spec.bias is not None else self.rng.normal(0, 0.1, spec.cout)
        weight = np.asarray(weight, np.float32)
        if weight.shape != (spec.cout, c, kh, kw):
            raise ValueError(f"conv weight has shape {weight.shape}, expected {(spec.cout, c, kh, kw)}")
        top, left, bottom, right = spec.pad
        y = self.node("Conv", [x, self.init("W", weight), self.init("B", bias)],
                      kernel_shape=[kh, kw], strides=list(spec.stride), pads=[top, left, bottom, right])
        oh = (h + top + bottom - kh) // spec.stride[0] + 1
        ow = (w + left + right - kw) // spec.stride[1] + 1
        if oh < 1 or ow < 1:
            raise ValueError(f"a {kh}x{kw} conv leaves nothing of a {h}x{w} image")
        return self.act(y, spec.act), (spec.cout, oh, ow)

    def pool(self, x, shape, spec):
        c, h, w = shape
        kh, kw = spec.k
        top, left, bottom, right = spec.pad
        attrs = dict(kernel_shape=[kh, kw], strides=list(spec.stride), pads=[top, left, bottom, right])
        if spec.kind == "avg":
            attrs["count_include_pad"] = int(spec.count_include_pad)
        y = self.node("MaxPool" if spec.kind == "max" else "AveragePool", [x], **attrs)
        oh = (h + top + bottom - kh) // spec.stride[0] + 1
        ow = (w + left + right - kw) // spec.stride[1] + 1
        if oh < 1 or ow < 1:
            raise ValueError(f"a {kh}x{kw} pool leaves nothing of a {h}x{w} image")
        return y, (c, oh, ow)

    def model(self, name, x_name, x_shape, y, y_shape):
        graph = helper.make_graph(
            self.nodes, name,
            [helper.make_tensor_value_info(x_name, TensorProto.FLOAT, x_shape)],
            [helper.make_tensor_value_info(y, TensorProto.FLOAT, y_shape)],
            initializer=self.inits)
        model = helper.make_model(graph, producer_name="tpu.compiler.zoo",
                                  opset_imports=[helper.make_opsetid("", OPSET)])
        model.ir_version = IR_VERSION
        onnx.checker.check_model(model, full_check=True)
        return model


def mlp(sizes, activation="relu", *, final_activation=None, op="gemm", trans_b=True,
        weights=None, seed=0, batch="N", name="mlp"):
    """A multi-layer perceptron ``sizes[0] -> sizes[1] -> ... -> sizes[-1]``:
    ``activation`` after every hidden layer, ``final_activation`` after the
    last. ``weights`` is a list of (W (k, n), b (n,)) pairs if given; else
    seeded random. Input "x" (batch, sizes[0]) float32."""
    sizes = [int(s) for s in sizes]
    if len(sizes) < 2 or min(sizes) < 1:
        raise ValueError(f"an MLP needs at least two positive sizes, not {sizes}")
    if weights is not None and len(weights) != len(sizes) - 1:
        raise ValueError(f"{len(weights)} weight pairs for {len(sizes) - 1} layers")
    b = _Builder(seed)
    x = "x"
    for i, (k, n) in enumerate(zip(sizes, sizes[1:])):
        last = i == len(sizes) - 2
        w, bias = weights[i] if weights is not None else (None, None)
        x = b.dense(x, k, dense(n, final_activation if last else activation, op, trans_b, w, bias))
    return b.model(name, "x", [batch, sizes[0]], x, [batch, sizes[-1]])


def conv_net(input_shape, layers, *, seed=0, name="conv_net"):
    """A network over an NCHW float input "x" of ``input_shape`` (the batch
    entry may be a name or None for a dynamic batch) made of the layer specs
    in ``layers`` (`conv`, `maxpool`, `avgpool`, `global_avg_pool`,
    `flatten`, `dense`, `activation`, `residual`)."""
    if len(input_shape) != 4:
        raise ValueError(f"input shape {input_shape} is not NCHW")
    batch = input_shape[0] if input_shape[0] is not None else "N"
    b = _Builder(seed)
    x, shape = _stack(b, "x", tuple(int(d) for d in input_shape[1:]), layers)
    out_shape = [batch, *shape] if isinstance(shape, tuple) else [batch, shape]
    return b.model(name, "x", [batch, *input_shape[1:]], x, out_shape)


def _stack(b, x, shape, layers):
    """Add ``layers`` after tensor ``x`` of per-sample ``shape`` ((C, H, W)
    or an int for a vector); return the output and its shape."""
    for spec in layers:
        image = isinstance(shape, tuple)
        if isinstance(spec, (Conv, Pool, GlobalAvgPool, Residual)) and not image:
            raise ValueError(f"{type(spec).__name__} needs an image, the stack has a vector here")
        if isinstance(spec, Conv):
            x, shape = b.conv(x, shape, spec)
        elif isinstance(spec, Pool):
            x, shape = b.pool(x, shape, spec)
        elif isinstance(spec, GlobalAvgPool):
            x, shape = b.node("GlobalAveragePool", [x]), (shape[0], 1, 1)
        elif isinstance(spec, Residual):
            y, out = _stack(b, x, shape, spec.body)
            if out != shape:
                raise ValueError(f"a residual body turns {shape} into {out}; it must keep the shape")
            x = b.act(b.node("Add", [x, y]), spec.act)
        elif isinstance(spec, Flatten):
            if not image:
                continue
            if spec.reshape:
                x = b.node("Reshape", [x, b.init("shape", [0, -1], np.int64)])
            else:
                x = b.node("Flatten", [x], axis=1)
            shape = int(np.prod(shape))
        elif isinstance(spec, Dense):
            if image:
                raise ValueError("a dense layer needs a vector: flatten the image first")
            x, shape = b.dense(x, shape, spec), spec.n
        elif isinstance(spec, Act):
            x = b.act(x, spec.act)
        else:
            raise ValueError(f"unknown layer spec {spec!r}")
    return x, shape


# Quantization and ONNX Runtime ---------------------------------------------

@contextlib.contextmanager
def _quiet():
    """Silence onnxruntime's quantizer: its Python logging (advice to
    pre-process the model) and the deprecation warnings of its own imports."""
    level = logging.root.manager.disable
    logging.disable(logging.WARNING)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        logging.disable(level)


def _reader(calibration_inputs, input_name, step=32):
    """A CalibrationDataReader over the given arrays, ``step`` samples a time."""
    from onnxruntime.quantization import CalibrationDataReader

    if isinstance(calibration_inputs, dict):
        arrays = {k: np.asarray(v, np.float32) for k, v in calibration_inputs.items()}
    else:
        arrays = {input_name: np.asarray(calibration_inputs, np.float32)}
    n = len(next(iter(arrays.values())))
    batches = [{k: v[i:i + step] for k, v in arrays.items()} for i in range(0, n, step)]

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.batches = iter(batches)

        def get_next(self):
            return next(self.batches, None)

    return Reader()


def quantize(float_model, calibration_inputs, *, form="qdq", per_channel=False,
             activation_type="int8", reduce_range=False):
    """The int8 model ONNX Runtime's ``quantize_static`` makes of
    ``float_model`` (a ModelProto or path), calibrated (MinMax) on
    ``calibration_inputs`` (an array for the model's only input, or a dict of
    arrays by input name). ``form`` "qdq" or "qoperator"; activations
    ``activation_type`` "int8" or "uint8" with zero points; weights int8
    symmetric, per output channel if ``per_channel``."""
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_static
    forms = {"qdq": QuantFormat.QDQ, "qoperator": QuantFormat.QOperator}
    types = {"int8": QuantType.QInt8, "uint8": QuantType.QUInt8}
    if form not in forms:
        raise ValueError(f"quantization form {form!r} is neither 'qdq' nor 'qoperator'")
    if activation_type not in types:
        raise ValueError(f"activation type {activation_type!r} is neither 'int8' nor 'uint8'")
    if not isinstance(float_model, onnx.ModelProto):
        float_model = onnx.load(str(float_model))
    input_name = float_model.graph.input[0].name
    with tempfile.TemporaryDirectory(prefix="tpu-quantize-") as tmp, _quiet():
        src = os.path.join(tmp, "float.onnx")
        dst = os.path.join(tmp, "int8.onnx")
        onnx.save(float_model, src)
        quantize_static(src, dst, _reader(calibration_inputs, input_name),
                        quant_format=forms[form], per_channel=per_channel,
                        activation_type=types[activation_type], weight_type=QuantType.QInt8,
                        reduce_range=reduce_range,
                        extra_options={"WeightSymmetric": True, "ActivationSymmetric": False})
        return onnx.load(dst)


# Integer products whose first (activation) operand's zero point is input 2.
_INTEGER_PRODUCTS = ("QLinearConv", "QLinearMatMul", "QGemm", "MatMulInteger")


def _exact_products_apply(model):
    """Whether ONNX Runtime's "session.x64quantprecision" can be asked for
    ``model`` (a ModelProto). It turns every constant int8 weight of an
    integer product (and of a DequantizeLinear) into uint8, which ONNX
    Runtime cannot run in two cases: a product over int8 activations (it
    has no s8 x u8 kernels; its s8 x s8 ones sum in int32 and need no help)
    and a per-axis DequantizeLinear without a zero point (it is given a
    scalar one, which a per-axis DequantizeLinear refuses)."""
    graph = model.graph
    types = {t.name: t.data_type for t in graph.initializer}
    types.update((v.name, v.type.tensor_type.elem_type)
                 for v in [*graph.input, *graph.value_info] if v.type.HasField("tensor_type"))
    sizes = {t.name: int(np.prod(t.dims)) for t in graph.initializer}
    int8 = TensorProto.INT8
    for node in graph.node:
        inputs = list(node.input)
        if node.op_type in _INTEGER_PRODUCTS:
            operand = inputs[2] if len(inputs) > 2 and inputs[2] else inputs[0]
            if types.get(operand) == int8:
                return False
        if node.op_type == "DequantizeLinear" and types.get(inputs[0]) == int8 \
                and sizes.get(inputs[1], 1) > 1 and (len(inputs) < 3 or not inputs[2]):
            return False
    return True


def _ort_options(model):
    """ONNX Runtime session options for ``model`` (a ModelProto): only errors
    logged, and exact integer products on every x86-64 processor. Without
    VNNI (AVX2, or AVX-512 without VNNI) ONNX Runtime multiplies uint8
    activations by int8 weights with VPMADDUBSW, which adds the products in
    pairs in saturating int16: a pair past 32767 (255 * 127 * 2 is) makes a
    QLinearConv, QLinearMatMul, QGemm or MatMulInteger wrong, by up to a
    hundred steps after requantization, on such processors only (QDQ
    models with int8 activations too: ONNX Runtime moves them to uint8).
    "session.x64quantprecision" makes it use exact uint8 x uint8 products
    there; it changes nothing on a processor with VNNI."""
    import onnxruntime as ort
    options = ort.SessionOptions()
    options.log_severity_level = 3
    if _exact_products_apply(model):
        options.add_session_config_entry("session.x64quantprecision", "1")
    return options


def _as_proto(model):
    """``model`` (a ModelProto, bytes or path) as a ModelProto, with no
    external data loaded."""
    if isinstance(model, onnx.ModelProto):
        return model
    if isinstance(model, bytes):
        return onnx.load_from_string(model)
    return onnx.load(str(model), load_external_data=False)


def ort_session(model):
    """An ONNX Runtime CPU session of ``model`` (a ModelProto, bytes or path),
    logging only errors, with exact integer products (`_ort_options`)."""
    import onnxruntime as ort
    options = _ort_options(_as_proto(model))
    if isinstance(model, onnx.ModelProto):
        model = model.SerializeToString()
    elif not isinstance(model, bytes):
        model = str(model)
    return ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])


def ort_optimized(model):
    """``model`` as ONNX Runtime runs it: the graph after its optimizations
    (QDQ groups fused into QLinearConv, QLinearMatMul, QLinearAveragePool,
    ...), as a ModelProto whose tensors keep their names."""
    import onnxruntime as ort
    options = _ort_options(_as_proto(model))
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    if isinstance(model, onnx.ModelProto):
        model = model.SerializeToString()
    with tempfile.TemporaryDirectory() as tmp:
        options.optimized_model_filepath = os.path.join(tmp, "optimized.onnx")
        ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
        return onnx.load(options.optimized_model_filepath)


def ort_run(model, feeds):
    """Run ``model`` on ONNX Runtime's CPU provider: ``feeds`` is a dict by
    input name, or one array for the model's only input. Returns the list of
    outputs, as ``InferenceSession.run(None, feeds)`` does."""
    session = model if hasattr(model, "get_inputs") else ort_session(model)
    if not isinstance(feeds, dict):
        feeds = {session.get_inputs()[0].name: feeds}
    return session.run(None, feeds)
