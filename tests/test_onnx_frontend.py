"""The ONNX front end: models quantized by onnxruntime's quantize_static (QDQ
and QOperator forms, int8 and uint8 activations, per-tensor and per-channel
weights) are imported and run on the reference interpreter against ONNX
Runtime on the same input.

Every layer, fed ONNX Runtime's values of its inputs (read from the graph
ONNX Runtime optimizes the model into, so from the same fused kernels a
plain session runs), and every whole model must give ONNX Runtime's values
in at least 99% of the elements, none more than one step off: matrix layers
requantize once by ONNX Runtime's float32 multiplier (ACT ``single_round``,
and ``mlas_round`` where ONNX Runtime fuses the layer into QLinearConv or
QLinearMatMul),
and what the chip's integer rounding cannot follow (averages over even or
padded windows, softmax, an Add of a constant) runs on the host with ONNX
Runtime's own float32 arithmetic (`tpu.compiler.reference_onnxruntime`);
a QLinearAdd's must equal ONNX Runtime's on every value.
A QDQ int8 model's layers are checked end to end only: ONNX Runtime renames
their tensors when it runs them in uint8 on x86. Bad models raise a one-line
`CompileError` naming what is wrong."""

import itertools
import json
import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tpu.compiler import ir, reference, zoo
from tpu.compiler.errors import CompileError, ModelError, UnsupportedModel
from tpu.compiler.onnx_frontend import import_onnx

from conftest import base_seed, mlas_fma_missing


SAMPLES = 128
FORMS = list(itertools.product(("qdq", "qoperator"), ("int8", "uint8"), (False, True)))
FORM_IDS = [f"{f}-{a}-{'pc' if pc else 'pt'}" for f, a, pc in FORMS]


def quantized(model, calibration, form="qdq", act="int8", per_channel=False, **options):
    if not options:
        return zoo.quantize(model, calibration, form=form, activation_type=act,
                            per_channel=per_channel)
    return _quantize_static(model, calibration, form, act, per_channel, options)


def _quantize_static(model, calibration, form, act, per_channel, extra):
    """quantize_static with extra options the zoo's wrapper does not pass."""
    import tempfile
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_static
    options = {"WeightSymmetric": True, "ActivationSymmetric": False, **extra}
    with tempfile.TemporaryDirectory() as tmp, zoo._quiet():
        src, dst = os.path.join(tmp, "f.onnx"), os.path.join(tmp, "q.onnx")
        onnx.save(model, src)
        quantize_static(src, dst, zoo._reader(calibration, model.graph.input[0].name),
                        quant_format=QuantFormat.QDQ if form == "qdq" else QuantFormat.QOperator,
                        per_channel=per_channel, weight_type=QuantType.QInt8,
                        activation_type=QuantType.QInt8 if act == "int8" else QuantType.QUInt8,
                        extra_options=options)
        return onnx.load(dst)


def to_ir(array, layout):
    return array.transpose(0, 2, 3, 1) if layout == "nchw" else array


def from_ir(array, layout):
    return array.transpose(0, 3, 1, 2) if layout == "nchw" else array


def run_both(qmodel, x):
    """Quantized outputs of the imported graph (reference) and of ONNX
    Runtime on float input `x`, as int arrays in the model's layout."""
    graph = import_onnx(qmodel)
    (gin,) = graph.inputs
    in_q = graph.tensor(gin.tensor).quant
    feed = x if gin.model_dtype == np.float32 else reference.quantize(x, in_q)
    ours = reference.run(graph, {gin.tensor: reference.quantize(to_ir(x, gin.layout), in_q)},
                         outputs_only=True)
    theirs = zoo.ort_run(qmodel, feed)
    pairs = []
    for out, value in zip(graph.outputs, theirs):
        q = graph.tensor(out.tensor).quant
        if out.model_dtype == np.float32:
            value = reference.quantize(value, q)
        pairs.append((from_ir(ours[out.tensor], out.layout).astype(int), value.astype(int)))
    return graph, pairs


def ort_tensors(qmodel, graph, x):
    """ONNX Runtime's values of every IR tensor that is an ONNX tensor of
    `qmodel`, in the IR's layout, on float input `x`: read from the graph
    ONNX Runtime optimizes `qmodel` into (with the same fused kernels as a
    plain session; outputs added to `qmodel` itself would stop fusions)."""
    model = zoo.ort_optimized(qmodel)
    present = {o.name for o in model.graph.output}
    onnx_names = {n for node in model.graph.node for n in node.output}
    names = [n for n in graph.tensors if n in onnx_names]
    model.graph.output.extend(helper.make_empty_tensor_value_info(n) for n in names
                              if n not in present)
    values = zoo.ort_session(model).run(names, {model.graph.input[0].name: x})
    values = [reference.quantize(v, graph.tensor(n).quant) if v.dtype == np.float32 else v
              for n, v in zip(names, values)]
    return {n: to_ir(v, "nchw" if v.ndim == 4 else "nc") for n, v in zip(names, values)}


def allowed_step(graph, layer):
    """How many steps `layer`'s output may be off: none for a QLinearAdd
    (MLAS's arithmetic); one, or as far as one step of the function's input
    moves a fused sigmoid/tanh's output."""
    if getattr(layer, "semantics", None) in ("qlinear_add", "qlinear_add_uint8") or \
            getattr(layer, "op", None) == "qlinear_add_constant":
        # QLinearAdd: MLAS's x86-64 AVX2 arithmetic, value for value there
        return 0 if mlas_fma_missing() is None else 1
    activation = getattr(layer, "activation", ir.NO_ACTIVATION)
    if activation.kind not in (ir.ActivationKind.SIGMOID, ir.ActivationKind.TANH):
        return 1
    slope = 0.25 if activation.kind == ir.ActivationKind.SIGMOID else 1.0
    out = graph.tensor(layer.output).quant
    return 1 + int(np.ceil(slope * activation.pre.scale / out.scale))


def float32_ties(graph):
    """Whether a fused sigmoid/tanh table of `graph` has an entry whose
    float32 value lands exactly on a rounding tie. ONNX Runtime computes the
    function and its QuantizeLinear in float32, ties to even; the table is
    exact (as TFLite's, which rounds ties away from zero): at such an entry
    the two are a step apart and both right, and a step in a hidden layer
    may grow past one by the output."""
    for layer in graph.layers:
        activation = getattr(layer, "activation", ir.NO_ACTIVATION)
        if activation.kind not in (ir.ActivationKind.SIGMOID, ir.ActivationKind.TANH):
            continue
        pre, out = activation.pre, graph.tensor(layer.output).quant
        q = np.arange(256, dtype=np.float32) - (0 if pre.unsigned else 128) - pre.zero_point
        real = q * np.float32(pre.scale)
        value = np.tanh(real) if activation.kind == ir.ActivationKind.TANH \
            else np.float32(1) / (np.float32(1) + np.exp(-real))
        scaled = value.astype(np.float32) / np.float32(out.scale)
        if np.any(scaled - np.floor(scaled) == np.float32(0.5)):
            return True
    return False


def record(kind, diff):
    """Append agreement counts to the file $TPU_AGREEMENT_LOG names
    (scripts/bench_onnx_agreement.py sums them)."""
    path = os.environ.get("TPU_AGREEMENT_LOG")
    if path:
        with open(path, "a") as log:
            log.write(json.dumps({"kind": kind, "test": os.environ.get("PYTEST_CURRENT_TEST"),
                                  "values": int(diff.size),
                                  "equal": int((diff == 0).sum()),
                                  "max": int(diff.max(initial=0))}) + "\n")


def layer_kind(layer):
    """A label for the agreement log: the layer type and what decides its rounding."""
    kind = type(layer).__name__
    activation = getattr(layer, "activation", ir.NO_ACTIVATION).kind
    if activation in (ir.ActivationKind.SIGMOID, ir.ActivationKind.TANH):
        kind += f" + {activation.value}"
    if isinstance(layer, ir.Pool2D):
        kind += f" {layer.kind}" + (" padded" if any(layer.padding) else "") \
            + (" even" if layer.size[0] * layer.size[1] % 2 == 0 else "")
    if isinstance(layer, ir.HostOp):
        kind += f" {layer.op}"
    if getattr(layer, "semantics", "onnx") != "onnx":
        kind += f" {layer.semantics}"
    if layer.name.endswith("/requantize"):
        kind += " after a padded average"
    return kind


def check_layers(qmodel, graph, x, min_equal, what):
    """Each IR layer, fed ONNX Runtime's values of its inputs, must give ONNX
    Runtime's values of its output: this tests the import of every node
    without differences of earlier layers carried along."""
    theirs = ort_tensors(qmodel, graph, x)
    values = dict(theirs)
    for layer in graph.layers:
        if any(n not in values for n in layer.inputs):
            continue
        result = reference.run_layer(graph, layer, values)
        for name, ours in result.items():
            values.setdefault(name, ours)
            if name in theirs:
                diff = np.abs(ours.astype(int) - theirs[name].reshape(ours.shape).astype(int))
                record(layer_kind(layer), diff)
                step = allowed_step(graph, layer)
                assert diff.max() <= step, f"{what}, layer {layer.name}: off by {diff.max()}"
                assert (diff == 0).mean() >= min_equal, \
                    f"{what}, layer {layer.name}: only {(diff == 0).mean():.3f} equal"


def check(model, shape, seed, forms=FORMS, min_equal=0.99, end_to_end=0.99):
    """Quantize `model` in each form; compare the imported graph with ONNX
    Runtime layer by layer (`min_equal` of the values equal, none more than
    a step off) and end to end (`end_to_end` of the outputs equal). Returns
    the graphs."""
    rng = np.random.default_rng(seed)
    calibration = rng.normal(0, 1, (32, *shape)).astype(np.float32)
    x = rng.normal(0, 1, (SAMPLES, *shape)).astype(np.float32)
    graphs = []
    for form, act, per_channel in forms:
        what = f"seed {seed}, {form} {act} per_channel={per_channel}"
        q = quantized(model, calibration, form, act, per_channel)
        graph, pairs = run_both(q, x)
        check_layers(q, graph, x, min_equal, what)
        for ours, theirs in pairs:
            assert ours.shape == theirs.shape
            diff = np.abs(ours - theirs)
            record("whole model", diff)
            assert diff.max() <= 1, f"{what}: an output off by {diff.max()}"
            assert (diff == 0).mean() >= end_to_end, \
                f"{what}: only {(diff == 0).mean():.3f} of the outputs equal"
        graphs.append(graph)
    return graphs


def layers(graph, kind):
    return [layer for layer in graph.layers if isinstance(layer, kind)]


def float_model(nodes, inits, in_shape, opset=13, outputs=("y",)):
    """A float model from nodes and initializers (name -> array) over input
    "x" of (N, *in_shape)."""
    graph = helper.make_graph(
        nodes, "test",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", *in_shape])],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = zoo.IR_VERSION
    return onnx.shape_inference.infer_shapes(model)


def weights(rng, *shape):
    return rng.normal(0, 1 / np.sqrt(np.prod(shape[1:])), shape).astype(np.float32)


# Dense layers ---------------------------------------------------------------------------

@pytest.mark.parametrize("form", FORMS, ids=FORM_IDS)
@pytest.mark.parametrize("op,trans_b", [("gemm", True), ("gemm", False), ("matmul", False)])
def test_mlp(form, op, trans_b):
    seed = base_seed()
    print("seed", seed)
    model = zoo.mlp([12, 20, 9], op=op, trans_b=trans_b, seed=seed % 1000)
    (graph,) = check(model, (12,), seed, [form])
    dense = layers(graph, ir.Dense)
    assert [d.weight.shape for d in dense] == [(12, 20), (20, 9)]
    # ONNX Runtime runs the MatMuls as QLinearMatMul and the Gemms as QGemm
    # (MLAS's rounding, "mlas") where it fuses them: a QDQ Gemm over uint8
    # activations, or int8 ones it moves to uint8 (x86-64)
    calibration = np.random.default_rng(seed).normal(0, 1, (32, 12)).astype(np.float32)
    ops = [n.op_type for n in zoo.ort_optimized(quantized(model, calibration, *form)).graph.node]
    fused = ops.count("QLinearMatMul") + ops.count("QGemm")
    assert [d.rounding for d in dense] == ["mlas"] * fused + ["float32"] * (len(dense) - fused)
    if mlas_fma_missing() is None:
        assert fused == 2
    if op == "matmul":
        # each Add of a constant is a host step, as ONNX Runtime computes it:
        # in float32, or MLAS's arithmetic where it is a QLinearAdd
        adds = layers(graph, ir.HostOp)
        host = "qlinear_add_constant" if form[0] == "qoperator" else "add_constant"
        assert [h.op for h in adds] == [host] * 2
        assert len(adds[0].attrs["constant"]) == 20
    assert len(graph.layers) == len(dense) + (2 if op == "matmul" else 0)
    gin, gout = graph.inputs[0], graph.outputs[0]
    assert (gin.model_name, gin.model_shape, gin.model_dtype, gin.layout) == \
        ("x", (None, 12), np.float32, "nc")
    assert (gout.model_shape, gout.model_dtype, gout.layout) == ((None, 9), np.float32, "nc")
    assert graph.tensor(gin.tensor).quant.unsigned == (form[1] == "uint8")


@pytest.mark.parametrize("form", FORMS, ids=FORM_IDS)
@pytest.mark.parametrize("act", ["sigmoid", "tanh", "relu6"])
def test_activations_fuse_into_dense(form, act):
    seed = base_seed()
    # A model whose tables have a float32 tie is drawn again (float32_ties).
    for seed in range(seed, seed + 20):
        model = zoo.mlp([10, 16, 6], activation=act, final_activation=act, seed=seed % 1000)
        calibration = np.random.default_rng(seed).normal(0, 1, (32, 10)).astype(np.float32)
        if not float32_ties(import_onnx(quantized(model, calibration, *form))):
            break
    print("seed", seed)
    (graph,) = check(model, (10,), seed, [form])
    kind = ir.ActivationKind("clamp" if act == "relu6" else act)
    dense = layers(graph, ir.Dense)
    assert len(graph.layers) == 2 and len(dense) == 2
    for d in dense:
        if kind == ir.ActivationKind.CLAMP and graph.tensor(d.output).quant.zero_point \
                == graph.tensor(d.output).quant.range[0]:
            # the quantizer may fold a clip from 0 into the output range
            assert d.activation.kind in (ir.ActivationKind.CLAMP, ir.ActivationKind.NONE)
        else:
            assert d.activation.kind in (kind, ir.ActivationKind.NONE)
        if d.activation.kind in (ir.ActivationKind.SIGMOID, ir.ActivationKind.TANH):
            assert d.activation.pre is not None
    assert any(d.activation.kind == kind for d in dense) or kind == ir.ActivationKind.CLAMP


def test_softmax_runs_on_the_host():
    seed = base_seed()
    print("seed", seed)
    rng = np.random.default_rng(seed)
    nodes = [helper.make_node("Gemm", ["x", "w", "b"], ["h"], name="fc", transB=1),
             helper.make_node("Softmax", ["h"], ["y"], name="softmax", axis=-1)]
    model = float_model(nodes, {"w": weights(rng, 7, 10) * 3, "b": np.zeros(7, np.float32)},
                        [10])
    for graph in check(model, (10,), seed):
        (host,) = layers(graph, ir.HostOp)
        assert host.op == "qlinear_softmax" and host.attrs == {"axis": -1}


# Convolutions ---------------------------------------------------------------------------

@pytest.mark.parametrize("form", FORMS, ids=FORM_IDS)
def test_conv_stack(form):
    seed = base_seed()
    print("seed", seed)
    model = zoo.conv_net((None, 3, 12, 10), [
        zoo.conv(6, k=3, pad=1), zoo.maxpool(2),
        zoo.conv(8, k=(3, 5), stride=(1, 2), pad=(0, 1, 2, 2), act="relu6"),
        zoo.conv(5, k=1, act=None), zoo.flatten(), zoo.dense(7, act=None)], seed=seed % 1000)
    (graph,) = check(model, (3, 12, 10), seed, [form])
    convs = layers(graph, ir.Conv2D)
    assert [c.weight.shape for c in convs] == [(3, 3, 3, 6), (3, 5, 6, 8), (1, 1, 8, 5)]
    assert convs[1].stride == (1, 2) and convs[1].padding == (0, 1, 2, 2)
    assert graph.tensor(convs[0].input).shape == (12, 10, 3)
    assert graph.tensor(convs[1].output).shape == (6, 2, 8)
    (flat,) = layers(graph, ir.Reshape)
    assert flat.order == "chw" and graph.tensor(flat.output).shape == (60,)
    assert graph.inputs[0].layout == "nchw" and graph.inputs[0].model_shape == (None, 3, 12, 10)


@pytest.mark.parametrize("kernel", [1, 2, 4, 5, 7])
def test_conv_kernels(kernel):
    seed = base_seed()
    print("seed", seed)
    model = zoo.conv_net((None, 2, 9, 9), [zoo.conv(4, k=kernel, pad=kernel // 2, stride=2)],
                         seed=seed % 1000)
    check(model, (2, 9, 9), seed, [FORMS[0], FORMS[7]])


@pytest.mark.parametrize("multiplier,stride,pad", [(1, 1, 1), (2, 2, 1), (1, 2, 0)])
def test_depthwise_conv(multiplier, stride, pad):
    """A Conv with group = input channels (each output channel ``o`` reads
    input channel ``o // multiplier``) is a Conv2D with block-diagonal
    weights, equal to ONNX Runtime's QLinearConv."""
    seed = base_seed()
    print("seed", seed)
    rng = np.random.default_rng(seed)
    c = int(rng.integers(2, 11))
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["h"], name="depthwise", group=c,
                              strides=[stride, stride], pads=[pad] * 4),
             helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("Conv", ["r", "w2"], ["y"], name="pointwise")]
    inits = {"w": weights(rng, c * multiplier, 1, 3, 3),
             "b": rng.normal(0, 0.1, c * multiplier).astype(np.float32),
             "w2": weights(rng, 5, c * multiplier, 1, 1)}
    model = float_model(nodes, inits, [c, 9, 7])
    for graph in check(model, (c, 9, 7), seed, [FORMS[0], FORMS[3], FORMS[5]]):
        depthwise = layers(graph, ir.Conv2D)[0]
        assert depthwise.weight.shape == (3, 3, c, c * multiplier)
        rows, cols = np.nonzero(np.any(depthwise.weight, axis=(0, 1)))
        assert np.array_equal(rows, cols // multiplier)


@pytest.mark.parametrize("auto_pad,stride,kernel", [
    ("SAME_UPPER", 1, 4), ("SAME_LOWER", 1, 4), ("SAME_UPPER", 2, 3), ("SAME_LOWER", 2, 2),
    ("VALID", 2, 3), ("NOTSET", 3, 3)])
def test_conv_auto_pad(auto_pad, stride, kernel):
    seed = base_seed()
    print("seed", seed)
    rng = np.random.default_rng(seed)
    attrs = dict(auto_pad=auto_pad, strides=[stride, stride])
    if auto_pad == "NOTSET":
        attrs["pads"] = [2, 0, 1, 1]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["y"], name="conv", **attrs)]
    model = float_model(nodes, {"w": weights(rng, 5, 3, kernel, kernel),
                                "b": rng.normal(0, 0.1, 5).astype(np.float32)}, [3, 7, 8])
    for graph in check(model, (3, 7, 8), seed, [FORMS[0], FORMS[6]]):
        (conv,) = layers(graph, ir.Conv2D)
        if auto_pad == "VALID":
            assert conv.padding == (0, 0, 0, 0)
        if auto_pad == "SAME_UPPER" and stride == 1:
            assert conv.padding == (1, 1, 2, 2)
        if auto_pad == "SAME_LOWER" and stride == 1:
            assert conv.padding == (2, 2, 1, 1)


def test_relu_kept_by_the_quantizer():
    """With QDQKeepRemovableActivations the Relu stays between its own Q/DQ
    pairs: an Elementwise, or fused when the quantizations agree."""
    seed = base_seed()
    print("seed", seed)
    model = zoo.conv_net((None, 2, 6, 6), [zoo.conv(4, k=3, pad=1), zoo.flatten(),
                                        zoo.dense(3, act="relu")], seed=seed % 1000)
    rng = np.random.default_rng(seed)
    calibration = rng.normal(0, 1, (32, 2, 6, 6)).astype(np.float32)
    x = rng.normal(0, 1, (16, 2, 6, 6)).astype(np.float32)
    q = quantized(model, calibration, QDQKeepRemovableActivations=True)
    assert sum(n.op_type == "Relu" for n in q.graph.node) == 2
    graph, _ = run_both(q, x)
    check_layers(q, graph, x, 0.99, f"seed {seed}")
    relus = [l for l in graph.layers if getattr(l, "activation", ir.NO_ACTIVATION).kind
             == ir.ActivationKind.RELU]
    assert len(relus) == 2


# Pooling ----------------------------------------------------------------------------------

@pytest.mark.parametrize("form", FORMS, ids=FORM_IDS)
def test_pools(form):
    seed = base_seed()
    print("seed", seed)
    model = zoo.conv_net((None, 2, 11, 11), [
        zoo.conv(6, k=3, pad=1), zoo.maxpool(3, stride=2, pad=1), zoo.avgpool(3, stride=1),
        zoo.conv(4, k=1, act=None), zoo.global_avg_pool(), zoo.flatten()], seed=seed % 1000)
    (graph,) = check(model, (2, 11, 11), seed, [form])
    pools = layers(graph, ir.Pool2D)
    assert pools[0].kind == "max" and pools[0].padding == (1, 1, 1, 1)
    assert pools[0].size == (3, 3) and pools[0].stride == (2, 2)
    # the odd 3x3 average without padding never ties: on the chip (or a
    # summing Conv2D where it changes the quantization)
    assert not layers(graph, ir.HostOp)


@pytest.mark.parametrize("form", FORMS[::3], ids=FORM_IDS[::3])
def test_even_average_pools(form):
    """Averages over an even number of pixels tie, and padded windows vary
    their count: these run on the host as ONNX Runtime computes them, in
    float32 (a tie goes either way by a float32 error, which the chip's
    integer rounding cannot follow), and equal ONNX Runtime's."""
    seed = base_seed()
    print("seed", seed)
    model = zoo.conv_net((None, 2, 8, 8), [
        zoo.conv(4, k=3, pad=1), zoo.avgpool(2), zoo.avgpool(2, stride=1, pad=(0, 0, 1, 1)),
        zoo.flatten(), zoo.dense(5, act=None)], seed=seed % 1000)
    (graph,) = check(model, (2, 8, 8), seed, [form])
    # the padded one; the 2x2 one too unless QOperator changes the
    # quantization (then a summing Conv2D, which rounds once, on the chip)
    ops = [h.op for h in layers(graph, ir.HostOp)]
    assert ops == ["qlinear_average_pool"] * (1 if form[0] == "qoperator" else 2)


def test_pool_attributes():
    seed = base_seed()
    print("seed", seed)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
             helper.make_node("MaxPool", ["c"], ["m"], name="max", kernel_shape=[3, 2],
                              strides=[2, 1], auto_pad="SAME_UPPER"),
             helper.make_node("AveragePool", ["m"], ["a"], name="avg", kernel_shape=[3, 3],
                              ceil_mode=1, strides=[2, 2]),
             helper.make_node("GlobalAveragePool", ["a"], ["y"], name="gap")]
    model = float_model(nodes, {"w": weights(np.random.default_rng(seed), 3, 3, 1, 1)},
                        [3, 9, 9])
    for graph in check(model, (3, 9, 9), seed, [FORMS[0], FORMS[5]]):
        kinds = [type(l).__name__ for l in graph.layers]
        assert kinds[1] == "Pool2D" and graph.layers[1].padding == (1, 0, 1, 1)
        assert graph.tensor(graph.outputs[0].tensor).shape == (1, 1, 3)


# Other operators ------------------------------------------------------------------------

@pytest.mark.parametrize("form", FORMS[::2], ids=FORM_IDS[::2])
def test_residual_add(form):
    seed = base_seed()
    print("seed", seed)
    model = zoo.conv_net((None, 4, 6, 6), [
        zoo.conv(4, k=3, pad=1),
        zoo.residual([zoo.conv(4, k=3, pad=1), zoo.conv(4, k=3, pad=1, act=None)]),
        zoo.global_avg_pool(), zoo.flatten(), zoo.dense(3, act=None)], seed=seed % 1000)
    (graph,) = check(model, (4, 6, 6), seed, [form])
    assert len(layers(graph, ir.Add)) == 1


@pytest.mark.parametrize("form", FORMS[::3], ids=FORM_IDS[::3])
def test_flatten_as_reshape(form):
    seed = base_seed()
    print("seed", seed)
    model = zoo.conv_net((None, 3, 5, 4), [zoo.conv(4, k=3, pad=1), zoo.flatten(reshape=True),
                                           zoo.dense(6, act=None)], seed=seed % 1000)
    (graph,) = check(model, (3, 5, 4), seed, [form])
    (reshape,) = layers(graph, ir.Reshape)
    assert reshape.order == "chw" and graph.tensor(reshape.output).shape == (80,)


@pytest.mark.parametrize("op", ["Relu", "Sigmoid", "Tanh", "Clip"])
def test_standalone_functions(op):
    """A function after an Add has no matrix layer to fuse into: an Elementwise."""
    seed = base_seed()
    print("seed", seed)
    rng = np.random.default_rng(seed)
    inputs = ["s", "lo", "hi"] if op == "Clip" else ["s"]
    nodes = [helper.make_node("Gemm", ["x", "w1", "b"], ["a"], name="fc1", transB=1),
             helper.make_node("Gemm", ["x", "w2", "b"], ["b2"], name="fc2", transB=1),
             helper.make_node("Add", ["a", "b2"], ["s"], name="add"),
             helper.make_node(op, inputs, ["f"], name="function"),
             helper.make_node("Gemm", ["f", "w3", "b"], ["y"], name="fc3", transB=1)]
    inits = {"w1": weights(rng, 6, 6), "w2": weights(rng, 6, 6), "w3": weights(rng, 6, 6),
             "b": np.zeros(6, np.float32)}
    if op == "Clip":
        inits.update(lo=np.float32(-0.5), hi=np.float32(1.0))
    model = float_model(nodes, inits, [6])
    for graph in check(model, (6,), seed, [FORMS[0], FORMS[2], FORMS[5]]):
        functions = layers(graph, ir.Elementwise)
        if op in ("Relu", "Clip") and not functions:
            # the quantizer folded it into the Add's output range
            continue
        (function,) = functions
        kind = "clamp" if op == "Clip" else op.lower()
        assert function.activation.kind == ir.ActivationKind(kind)


@pytest.mark.parametrize("op", ["Relu", "Clip", "Identity", "MaxPool", "Flatten"])
def test_functions_on_the_float_input(op):
    """The quantizer leaves these in float when they read the model input;
    they commute with quantization, so they run on the quantized input."""
    seed = base_seed()
    print("seed", seed)
    rng = np.random.default_rng(seed)
    inputs = ["x", "lo", "hi"] if op == "Clip" else ["x"]
    attrs = dict(kernel_shape=[2, 2], strides=[2, 2]) if op == "MaxPool" else {}
    nodes = [helper.make_node(op, inputs, ["f"], name="function", **attrs),
             helper.make_node("Flatten", ["f"], ["g"], name="flat"),
             helper.make_node("Gemm", ["g", "w", "b"], ["y"], name="fc", transB=1)]
    inits = {"w": weights(rng, 5, 12 if op == "MaxPool" else 48), "b": np.zeros(5, np.float32),
             "lo": np.float32(-0.5), "hi": np.float32(1.0)}
    model = float_model(nodes, inits, [3, 4, 4])
    for graph in check(model, (3, 4, 4), seed, [FORMS[0], FORMS[7]]):
        assert graph.inputs[0].model_dtype == np.float32


def test_tanh_output_left_in_float():
    """The quantizer does not quantize Tanh: as a model output it gets the
    fixed quantization of tanh's range."""
    seed = base_seed()
    print("seed", seed)
    model = zoo.mlp([8, 6], activation=None, final_activation="tanh", seed=seed % 1000)
    for graph in check(model, (8,), seed, [FORMS[0], FORMS[3], FORMS[4]]):
        (dense,) = graph.layers
        assert dense.activation.kind == ir.ActivationKind.TANH
        assert graph.tensor(dense.output).quant.scale == 1 / 128


def _qdq_clip_model(opset, scale=0.02):
    """A hand-written QDQ model x -> Q -> DQ -> Clip -> Q -> DQ -> y, with
    Clip's bounds as attributes (opset 10) or inputs (opset 13)."""
    clip_inputs = ["xd"] if opset < 11 else ["xd", "lo", "hi"]
    clip_attrs = dict(min=-0.5, max=1.0) if opset < 11 else {}
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"], name="q_in"),
             helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"], name="dq_in"),
             helper.make_node("Clip", clip_inputs, ["c"], name="clip", **clip_attrs),
             helper.make_node("QuantizeLinear", ["c", "s2", "z2"], ["cq"], name="q_out"),
             helper.make_node("DequantizeLinear", ["cq", "s2", "z2"], ["y"], name="dq_out")]
    inits = {"s": np.float32(scale), "z": np.int8(3), "s2": np.float32(scale * 0.7),
             "z2": np.int8(-20), "lo": np.float32(-0.5), "hi": np.float32(1.0)}
    if opset < 11:
        del inits["lo"], inits["hi"]
    return float_model(nodes, inits, [16], opset=opset)


@pytest.mark.parametrize("opset", [10, 13])
def test_clip_bounds_as_attributes_or_inputs(opset):
    seed = base_seed()
    print("seed", seed)
    model = _qdq_clip_model(opset)
    x = np.random.default_rng(seed).normal(0, 1.5, (8, 16)).astype(np.float32)
    graph, [(ours, theirs)] = run_both(model, x)
    assert np.abs(ours - theirs).max() <= 1 and (ours == theirs).mean() >= 0.99
    (clip,) = graph.layers
    assert clip.activation.kind == ir.ActivationKind.CLAMP
    assert (clip.activation.clamp_min, clip.activation.clamp_max) == (-56, 51)


@pytest.mark.parametrize("weight_zero_point", [0, 5])
def test_quantized_input_and_output(weight_zero_point):
    """A QOperator model that takes and returns uint8 directly; a weight zero
    point is folded into the weights when they still fit int8."""
    seed = base_seed()
    print("seed", seed)
    rng = np.random.default_rng(seed)
    w = rng.integers(-120, 120, (8, 5)).astype(np.int8)
    nodes = [helper.make_node("QLinearMatMul", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"],
                              ["y"], name="mm")]
    inits = {"xs": np.float32(0.05), "xz": np.uint8(128), "w": w, "ws": np.float32(0.01),
             "wz": np.int8(weight_zero_point), "ys": np.float32(0.2), "yz": np.uint8(100)}
    graph = helper.make_graph(
        nodes, "q", [helper.make_tensor_value_info("x", TensorProto.UINT8, ["N", 8])],
        [helper.make_tensor_value_info("y", TensorProto.UINT8, ["N", 5])],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = zoo.IR_VERSION
    imported = import_onnx(model)
    gin, gout = imported.inputs[0], imported.outputs[0]
    assert gin.model_dtype == np.uint8 and gout.model_dtype == np.uint8
    assert imported.tensor(gin.tensor).quant == ir.QuantType(float(np.float32(0.05)), 128, True)
    (dense,) = imported.layers
    assert np.array_equal(dense.weight, w.astype(int) - weight_zero_point)
    x = rng.integers(0, 256, (16, 8)).astype(np.uint8)
    ours = reference.run(imported, {gin.tensor: x}, outputs_only=True)[gout.tensor]
    (theirs,) = zoo.ort_run(model, x)
    assert np.abs(ours.astype(int) - theirs).max() <= 1
    assert (ours == theirs).mean() >= 0.99


def test_import_from_path_and_bytes(tmp_path):
    model = zoo.mlp([4, 3], seed=1)
    q = quantized(model, np.random.default_rng(1).normal(0, 1, (16, 4)).astype(np.float32))
    path = tmp_path / "mlp.onnx"
    onnx.save(q, str(path))
    from_path, from_bytes = import_onnx(path), import_onnx(q.SerializeToString())
    assert from_path.source == "mlp.onnx"
    assert [l.name for l in from_path.layers] == [l.name for l in from_bytes.layers]
    assert import_onnx(q, name="given").source == "given"
    external = tmp_path / "external.onnx"
    onnx.save_model(q, str(external), save_as_external_data=True, location="weights.bin",
                    size_threshold=0)
    assert (tmp_path / "weights.bin").exists()
    from_external = import_onnx(external)
    assert all(np.array_equal(a.weight, b.weight)
               for a, b in zip(from_external.layers, from_path.layers))


# Bad models -----------------------------------------------------------------------------

def one_line_error(kind, model, *words):
    with pytest.raises(kind) as info:
        import_onnx(model)
    message = str(info.value)
    assert isinstance(info.value, CompileError) and "\n" not in message, message
    for word in words:
        assert word in message, message
    return message


def test_float_model_is_refused():
    one_line_error(ModelError, zoo.mlp([4, 3]), "not quantized", "quantize_static")


def test_truncated_and_random_files(tmp_path):
    q = quantized(zoo.mlp([16, 8, 4]), np.random.default_rng(0).normal(0, 1, (8, 16))
                  .astype(np.float32))
    data = q.SerializeToString()
    rng = np.random.default_rng(base_seed())
    for i, blob in enumerate([data[:len(data) // 2], data[:-7], rng.bytes(300), b""]):
        path = tmp_path / f"bad{i}.onnx"
        path.write_bytes(blob)
        one_line_error(ModelError, path, f"bad{i}.onnx")
    one_line_error(ModelError, tmp_path / "missing.onnx", "missing.onnx")


def _quantized_with(nodes, inits, in_shape, form="qdq"):
    model = float_model(nodes, inits, in_shape)
    calibration = np.random.default_rng(0).normal(0, 1, (8, *in_shape)).astype(np.float32)
    return quantized(model, calibration, form)


@pytest.mark.parametrize("form", ["qdq", "qoperator"])
def test_group_and_dilated_convs_are_refused(form):
    rng = np.random.default_rng(0)
    grouped = [helper.make_node("Conv", ["x", "w"], ["y"], name="grouped", group=2)]
    q = _quantized_with(grouped, {"w": weights(rng, 4, 2, 3, 3)}, [4, 6, 6], form)
    one_line_error(UnsupportedModel, q, "grouped", "Conv", "group=2")
    dilated = [helper.make_node("Conv", ["x", "w"], ["y"], name="dilated", dilations=[2, 2])]
    q = _quantized_with(dilated, {"w": weights(rng, 4, 4, 3, 3)}, [4, 8, 8], form)
    one_line_error(UnsupportedModel, q, "dilated", "dilations")


@pytest.mark.parametrize("form", ["qdq", "qoperator"])
def test_grouped_convs_other_than_depthwise_are_refused(form):
    rng = np.random.default_rng(0)
    grouped = [helper.make_node("Conv", ["x", "w"], ["y"], name="grouped", group=2)]
    q = _quantized_with(grouped, {"w": weights(rng, 6, 3, 3, 3)}, [6, 6, 6], form)
    one_line_error(UnsupportedModel, q, "grouped", "Conv", "group=2 over 6 input channels",
                   "depthwise")


def test_unsupported_operators_are_named():
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("Gemm", ["x", "w"], ["h"], name="fc", transB=1),
             helper.make_node("Exp", ["h"], ["e"], name="the_exp"),
             helper.make_node("Gemm", ["e", "w2"], ["y"], name="fc2", transB=1)]
    q = _quantized_with(nodes, {"w": weights(rng, 4, 4), "w2": weights(rng, 3, 4)}, [4])
    one_line_error(UnsupportedModel, q, "the_exp", "Exp", "QLinearConv")
    leaky = [helper.make_node("Gemm", ["x", "w"], ["h"], name="fc", transB=1),
             helper.make_node("LeakyRelu", ["h"], ["y"], name="leaky")]
    q = _quantized_with(leaky, {"w": weights(rng, 4, 4)}, [4], "qoperator")
    assert any(n.op_type == "QLinearLeakyRelu" for n in q.graph.node)
    one_line_error(UnsupportedModel, q, "leaky", "LeakyRelu")


def test_dynamic_quantization_is_refused(tmp_path):
    from onnxruntime.quantization import quantize_dynamic
    src, dst = tmp_path / "f.onnx", tmp_path / "d.onnx"
    onnx.save(zoo.mlp([4, 3]), str(src))
    with zoo._quiet():
        quantize_dynamic(str(src), str(dst))
    one_line_error(UnsupportedModel, dst, "DynamicQuantizeLinear", "quantize_static")


def test_pool_modes_and_asymmetric_weights_are_refused():
    rng = np.random.default_rng(0)
    pool = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
            helper.make_node("MaxPool", ["c"], ["y"], name="ceil", kernel_shape=[2, 2],
                             strides=[2, 2], ceil_mode=1)]
    q = _quantized_with(pool, {"w": weights(rng, 2, 2, 1, 1)}, [2, 5, 5])
    one_line_error(UnsupportedModel, q, "ceil", "ceil_mode")
    # (count_include_pad=1 is a summing convolution over zero-point padding,
    # tests/test_pools_on_chip.py)
    nodes = [helper.make_node("Gemm", ["x", "w"], ["y"], name="positive", transB=1)]
    model = float_model(nodes, {"w": np.abs(weights(rng, 4, 6)) + 0.1}, [6])
    q = quantized(model, rng.normal(0, 1, (8, 6)).astype(np.float32), WeightSymmetric=False)
    one_line_error(UnsupportedModel, q, "positive", "symmetric")


# On the chip ----------------------------------------------------------------------------

@pytest.mark.parametrize("which", ["pools", "bias_add", "padded_average"])
def test_imported_forms_run_on_the_golden_chip(which):
    """The layers the front end makes of ONNX forms (summing convolutions for
    average pools that requantize, identity layers for constant adds and
    requantizations, a fixed tanh output) compile and run on the golden chip
    equal to the reference."""
    from tpu.compiler.session import InferenceSession
    seed = base_seed()
    print("seed", seed)
    rng = np.random.default_rng(seed)
    model, shape, form = {
        "pools": (zoo.conv_net((None, 2, 9, 9), [
            zoo.conv(6, k=3, pad=1), zoo.maxpool(3, stride=2, pad=1), zoo.avgpool(3, stride=1),
            zoo.global_avg_pool(), zoo.flatten()], seed=seed % 1000), (2, 9, 9), "qoperator"),
        "bias_add": (zoo.mlp([12, 20, 9], op="matmul", final_activation="tanh",
                             seed=seed % 1000), (12,), "qdq"),
        "padded_average": (zoo.conv_net((None, 2, 8, 8), [
            zoo.conv(4, k=3, pad=1), zoo.avgpool(2, stride=1, pad=(0, 0, 1, 1)), zoo.flatten(),
            zoo.dense(5, act=None)], seed=seed % 1000), (2, 8, 8), "qoperator"),
    }[which]
    q = quantized(model, rng.normal(0, 1, (32, *shape)).astype(np.float32), form, "uint8", True)
    graph = import_onnx(q)
    (gin,), (gout,) = graph.inputs, graph.outputs
    x = rng.normal(0, 1, (5, *shape)).astype(np.float32)
    in_q, out_q = graph.tensor(gin.tensor).quant, graph.tensor(gout.tensor).quant
    expected = reference.run(graph, {gin.tensor: reference.quantize(to_ir(x, gin.layout), in_q)},
                             outputs_only=True)[gout.tensor]
    (y,) = InferenceSession(q, backend="golden").run(None, {gin.model_name: x})
    assert np.array_equal(reference.quantize(y, out_q), from_ir(expected, gout.layout))


@pytest.mark.parametrize("form", ["qdq", "qoperator"])
def test_attributes_beyond_one_instruction_run(form):
    """Legal attributes beyond one chip instruction are lowered, split or run
    on the host, never refused: a 7x7 kernel over 13 channels (K tiles of
    taps and channel blocks, channels not a multiple of the array), a 6x6
    max pool (the activation unit pools windows up to 4), a padded max pool,
    a non-square max pool, a 5x5 average pool, and weights beyond weight
    memory. On the golden chip the outputs equal the reference bit for bit
    and ONNX Runtime's in at least 99%, none more than a step off."""
    from tpu import TPUConfig
    from tpu.compiler.session import InferenceSession
    seed = base_seed()
    print("seed", seed)
    rng = np.random.default_rng(seed)
    model = zoo.conv_net((None, 3, 17, 15), [
        zoo.conv(13, k=7, pad=3), zoo.maxpool(6, stride=1), zoo.conv(11, k=3, pad=1),
        zoo.maxpool(3, stride=2, pad=1), zoo.avgpool(5, stride=1, pad=2),
        zoo.conv(9, k=(2, 3), stride=(1, 2), act="relu6"), zoo.flatten(), zoo.dense(7, act=None)],
        seed=seed % 1000)
    shape = (3, 17, 15)
    q = quantized(model, rng.normal(0, 1, (32, *shape)).astype(np.float32), form, "int8", True)
    graph = import_onnx(q)
    (gin,), (gout,) = graph.inputs, graph.outputs
    x = rng.normal(0, 1, (6, *shape)).astype(np.float32)
    in_q, out_q = graph.tensor(gin.tensor).quant, graph.tensor(gout.tensor).quant
    expected = reference.run(graph, {gin.tensor: reference.quantize(to_ir(x, gin.layout), in_q)},
                             outputs_only=True)[gout.tensor]
    config = TPUConfig(weight_mem_tiles=24)         # the 7x7 conv alone needs 3 x 49 tiles
    (y,) = InferenceSession(q, backend="golden", config=config).run(None, {gin.model_name: x})
    ours = reference.quantize(y, out_q).astype(int)
    assert np.array_equal(ours, from_ir(expected, gout.layout))
    theirs = reference.quantize(zoo.ort_run(q, x)[0], out_q).astype(int)
    diff = np.abs(ours - theirs)
    assert diff.max() <= 1 and (diff == 0).mean() >= 0.99, (diff == 0).mean()


# Forms quantize_static writes only with other options, or other tools ------------------

def test_symmetric_activations():
    """ActivationSymmetric=True: int8 zero points 0 and the Relus stay."""
    seed = base_seed()
    print("seed", seed)
    rng = np.random.default_rng(seed)
    model = zoo.conv_net((None, 2, 6, 6), [zoo.conv(4, k=3, pad=1), zoo.maxpool(2),
                                           zoo.flatten(), zoo.dense(5)], seed=seed % 1000)
    calibration = rng.normal(0, 1, (32, 2, 6, 6)).astype(np.float32)
    x = rng.normal(0, 1, (SAMPLES, 2, 6, 6)).astype(np.float32)
    for form in ("qdq", "qoperator"):
        q = quantized(model, calibration, form, ActivationSymmetric=True)
        graph, [(ours, theirs)] = run_both(q, x)
        check_layers(q, graph, x, 0.99, f"seed {seed}, {form}")
        assert np.abs(ours - theirs).max() <= 1 and (ours == theirs).mean() >= 0.99
        assert all(t.quant.zero_point == 0 for t in graph.tensors.values())


def test_activation_between_float_op_and_its_q():
    """A hand-written QDQ model with the Clip between the Gemm and its Q (no
    Q/DQ pair in between): fused into the Dense's activation."""
    seed = base_seed()
    print("seed", seed)
    rng = np.random.default_rng(seed)
    w = rng.integers(-127, 128, (6, 10)).astype(np.int8)
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"], name="q_in"),
             helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"], name="dq_in"),
             helper.make_node("DequantizeLinear", ["w", "ws"], ["wd"], name="dq_w", axis=0),
             helper.make_node("Gemm", ["xd", "wd"], ["h"], name="fc", transB=1),
             helper.make_node("Clip", ["h", "lo", "hi"], ["c"], name="clip"),
             helper.make_node("QuantizeLinear", ["c", "ys", "yz"], ["cq"], name="q_out"),
             helper.make_node("DequantizeLinear", ["cq", "ys", "yz"], ["y"], name="dq_out")]
    inits = {"xs": np.float32(0.03), "xz": np.int8(-3), "w": w,
             "ws": rng.uniform(0.002, 0.01, 6).astype(np.float32), "lo": np.float32(-0.5),
             "hi": np.float32(1.5), "ys": np.float32(0.02), "yz": np.int8(-10)}
    model = float_model(nodes, inits, [10])
    x = rng.normal(0, 1, (SAMPLES, 10)).astype(np.float32)
    graph, [(ours, theirs)] = run_both(model, x)
    (dense,) = graph.layers
    assert dense.activation.kind == ir.ActivationKind.CLAMP
    assert (dense.activation.clamp_min, dense.activation.clamp_max) == (-35, 65)
    assert np.abs(ours - theirs).max() <= 1 and (ours == theirs).mean() >= 0.99


def test_identity_and_dropout_between_layers():
    seed = base_seed()
    print("seed", seed)
    rng = np.random.default_rng(seed)
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Identity", ["c1"], ["i"], name="identity"),
             helper.make_node("Dropout", ["i"], ["d"], name="dropout"),
             helper.make_node("Conv", ["d", "w2"], ["c2"], name="conv2"),
             helper.make_node("Reshape", ["c2", "shape"], ["y"], name="reshape")]
    inits = {"w1": weights(rng, 4, 3, 3, 3), "w2": weights(rng, 2, 4, 1, 1),
             "shape": np.array([-1, 2 * 5 * 5], np.int64)}
    model = float_model(nodes, inits, [3, 5, 5])
    for graph in check(model, (3, 5, 5), seed, [FORMS[0], FORMS[6]]):
        convs = layers(graph, ir.Conv2D)
        assert convs[0].name.startswith("conv1") and convs[-1].weight.shape == (1, 1, 4, 2)
        (reshape,) = layers(graph, ir.Reshape)
        assert reshape.order == "chw" and graph.tensor(reshape.output).shape == (50,)


@pytest.mark.parametrize("form", ["qdq", "qoperator"])
def test_constant_added_per_channel_to_an_image(form):
    seed = base_seed()
    print("seed", seed)
    rng = np.random.default_rng(seed)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["c", "k"], ["y"], name="add_k")]
    inits = {"w": weights(rng, 4, 3, 3, 3), "k": rng.normal(0, 0.5, (4, 1, 1)).astype(np.float32)}
    model = float_model(nodes, inits, [3, 5, 5])
    (graph,) = check(model, (3, 5, 5), seed, [(form, "int8", False)])
    assert [type(l).__name__ for l in graph.layers] == ["Conv2D", "HostOp"]
    # (C,) broadcasts along the width, not the channels
    inits["k"] = rng.normal(0, 0.5, (5,)).astype(np.float32)
    q = _quantized_with(nodes, inits, [3, 5, 5], form)
    one_line_error(UnsupportedModel, q, "add_k", "per channel")


@pytest.mark.parametrize("form", ["qdq", "qoperator"])
def test_two_outputs(form):
    """A hidden tensor that is also a model output stays a tensor of its own
    (no activation is fused across it)."""
    seed = base_seed()
    print("seed", seed)
    rng = np.random.default_rng(seed)
    nodes = [helper.make_node("Gemm", ["x", "w1"], ["h"], name="fc1", transB=1),
             helper.make_node("Sigmoid", ["h"], ["s"], name="sigmoid"),
             helper.make_node("Gemm", ["s", "w2"], ["y"], name="fc2", transB=1)]
    model = float_model(nodes, {"w1": weights(rng, 6, 8), "w2": weights(rng, 3, 6)}, [8],
                        outputs=("y", "h"))
    calibration = rng.normal(0, 1, (32, 8)).astype(np.float32)
    x = rng.normal(0, 1, (SAMPLES, 8)).astype(np.float32)
    q = quantized(model, calibration, form)
    graph, pairs = run_both(q, x)
    assert [o.model_name for o in graph.outputs] == ["y", "h"]
    assert layers(graph, ir.Dense)[0].activation.kind == ir.ActivationKind.NONE
    check_layers(q, graph, x, 0.99, f"seed {seed}")
    for ours, theirs in pairs:
        assert np.abs(ours - theirs).max() <= 1 and (ours == theirs).mean() >= 0.99


def test_softmax_before_opset_13():
    """Softmax's default axis is 1 before opset 13 (the tensor flattened from
    it): over the channels of a vector, as from 13 on."""
    seed = base_seed()
    print("seed", seed)
    rng = np.random.default_rng(seed)
    nodes = [helper.make_node("Gemm", ["x", "w"], ["h"], name="fc", transB=1),
             helper.make_node("Softmax", ["h"], ["y"], name="softmax")]
    model = float_model(nodes, {"w": weights(rng, 7, 10) * 3}, [10], opset=11)
    for graph in check(model, (10,), seed, [FORMS[0], FORMS[4]]):
        (host,) = layers(graph, ir.HostOp)
        assert host.attrs == {"axis": -1}
