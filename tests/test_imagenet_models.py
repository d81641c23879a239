"""ResNet-18 and MobileNetV2 (`tpu.compiler.imagenet_models`) at 32x32, the
same architectures as at 224x224 on smaller feature maps: their QDQ forms
(uint8 activations, int8 weights) import (depthwise convolutions as
block-diagonal Conv2D, residual Adds), compile and run on the golden chip
equal to the reference interpreter and to ONNX Runtime, bit for bit: ONNX
Runtime fuses every layer of them (QLinearConv, QLinearAdd, QGemm), and the
front end gives each layer that arithmetic. With int8 activations ONNX
Runtime leaves some layers float32, and the front end knows which. At
224x224 they are a benchmark (scripts/bench_imagenet.py, docs/compiler.md):
minutes of golden-chip time on a small array."""

import numpy as np
import onnx
import pytest

from tpu import TPUConfig
from tpu.config import V1_PROFILE
from tpu.compiler import imagenet_models, ir, reference, zoo
from tpu.compiler.onnx_frontend import import_onnx
from tpu.compiler.session import InferenceSession

from conftest import base_seed, mlas_fma_missing


SIZE = 32
#: TPU v1's array, unified buffer and accumulators
V1 = V1_PROFILE


@pytest.fixture(scope="module")
def models():
    return {name: imagenet_models.quantized(name, SIZE) for name in imagenet_models.MODELS}


def test_architectures(models):
    resnet = import_onnx(models["resnet18"])
    convs = [layer for layer in resnet.layers if isinstance(layer, ir.Conv2D)]
    # 17 convolutions and 3 on the shortcuts (and the global average pool
    # when it requantizes: a summing convolution)
    assert len([n for n in models["resnet18"].graph.node if n.op_type == "Conv"]) == 20
    assert len(convs) >= 20 and len([a for a in resnet.layers if isinstance(a, ir.Add)]) == 8
    assert convs[0].weight.shape == (7, 7, 3, 64) and convs[0].stride == (2, 2)
    assert [d.weight.shape for d in resnet.layers if isinstance(d, ir.Dense)] == [(512, 1000)]
    mobile = import_onnx(models["mobilenet_v2"])
    depthwise = [c for c in mobile.layers if isinstance(c, ir.Conv2D) and c.weight.shape[0] == 3
                 and c.weight.shape[2] > 3]
    assert len(depthwise) == 17 and len([a for a in mobile.layers if isinstance(a, ir.Add)]) == 10
    for conv in depthwise:
        cin, cout = conv.weight.shape[2:]
        off = np.ones((cin, cout), bool)
        off[np.arange(cout), np.arange(cout)] = False
        assert cin == cout and not conv.weight[:, :, off].any()
    assert mobile.tensor(mobile.outputs[0].tensor).shape == (1000,)


@pytest.mark.parametrize("name, config", [
    ("resnet18", V1), ("mobilenet_v2", V1), ("mobilenet_v2", TPUConfig(rows=16, cols=16))],
    ids=["resnet18-256x256", "mobilenet_v2-256x256", "mobilenet_v2-16x16"])
def test_golden_chip_equals_onnxruntime(models, name, config):
    """A batch of two images: one fixed (rng 7), one random. The golden chip
    equals the reference interpreter and ONNX Runtime on both, bit for bit
    (where MLAS runs its x86-64 AVX2 kernels: `mlas_fma_missing`). Each
    layer is also held to design.md's contract given ONNX Runtime's own
    inputs in a graph whose quantized tensors are all graph outputs, where
    ONNX Runtime fuses no DQ-Conv-Q and a layer's value may be a step off
    (a float32 sum)."""
    seed = base_seed()
    print("seed", seed)
    fixed = np.random.default_rng(7).standard_normal((1, 3, SIZE, SIZE))
    drawn = np.random.default_rng(seed).standard_normal((1, 3, SIZE, SIZE))
    x = np.concatenate([fixed, drawn]).astype(np.float32)
    session = InferenceSession(models[name], backend="golden", config=config, batch=2)
    (ours,) = session.run(None, {"input": x})
    graph = session.graph
    (gin,), (gout,) = graph.inputs, graph.outputs
    in_q, out_q = graph.tensor(gin.tensor).quant, graph.tensor(gout.tensor).quant
    expected = reference.run(graph, {gin.tensor: reference.quantize(x.transpose(0, 2, 3, 1), in_q)},
                             outputs_only=True)[gout.tensor]
    assert np.array_equal(reference.quantize(ours, out_q), expected)
    (theirs,) = zoo.ort_run(models[name], x)
    assert ours.shape == theirs.shape == (2, 1000)
    if mlas_fma_missing() is None:
        assert np.array_equal(ours, theirs), \
            f"{np.mean(ours != theirs):.2%} of the outputs differ from ONNX Runtime's"
    _layers_within_one_step(models[name], x[1:], seed)
    # not a degenerate network: the classes' scores differ
    assert len(np.unique(theirs)) > 100


def _layers_within_one_step(model, x, seed):
    """Every layer of ``model`` whose tensors ONNX Runtime also quantizes,
    run by the reference on ONNX Runtime's quantized inputs, is within one
    step of ONNX Runtime's output, and all but a few of its values (one in
    a thousand, or four) are equal (design.md section 4)."""
    exposed = onnx.ModelProto()
    exposed.CopyFrom(model)
    names = {o.name for o in exposed.graph.output}
    for node in exposed.graph.node:
        if node.op_type == "QuantizeLinear" and node.output[0] not in names:
            exposed.graph.output.append(onnx.helper.make_value_info(node.output[0], onnx.TypeProto()))
    session = zoo.ort_session(exposed)
    ort = dict(zip([o.name for o in session.get_outputs()], session.run(None, {"input": x})))
    graph = import_onnx(model)

    def value(name):
        v = ort[name]
        v = v.transpose(0, 2, 3, 1) if v.ndim == 4 else v
        tensor = graph.tensor(name)
        return v.reshape((v.shape[0], *tensor.shape)).astype(tensor.quant.dtype)

    checked = 0
    for layer in graph.layers:
        inputs = [n for n in (getattr(layer, a, None) for a in ("input", "a", "b")) if n]
        inputs += list(getattr(layer, "inputs", []))
        outputs = [layer.output] if hasattr(layer, "output") else list(layer.outputs)
        if not inputs or not all(n in ort for n in inputs + outputs):
            continue
        result = reference.run_layer(graph, layer, {n: value(n) for n in inputs})
        for out in outputs:
            diff = np.abs(result[out].astype(np.int64) - value(out).astype(np.int64))
            # ties are about one value in 10^5; a small layer may still hit a few
            assert diff.max() <= 1 and np.count_nonzero(diff) <= max(4, diff.size // 1000), \
                (f"seed {seed}: layer {layer.name!r}: {np.count_nonzero(diff)} of {diff.size} "
                 f"values differ from ONNX Runtime's, {diff.max()} steps off at most")
        checked += 1
    assert checked >= 20, f"only {checked} layers could be compared with ONNX Runtime's"


@pytest.mark.parametrize("act", ["uint8", "int8", "int8-dedicated"])
def test_layers_fused_as_onnxruntime_fuses_them(models, act):
    """The front end gives MLAS's arithmetic ("mlas" rounding, "qlinear_add")
    to exactly the layers ONNX Runtime fuses in its optimized graph: every
    one with uint8 activations; with int8 ones, on x86-64, those whose
    input and output tensors ONNX Runtime moves to uint8 (a QuantizeLinear
    -> DequantizeLinear pair that feeds one node), which leaves the
    residual blocks' first layers and every residual Add in float, also
    where the quantizer gives each reader its own pair (DedicatedQDQPair:
    ONNX Runtime merges them again)."""
    from test_onnx_frontend import _quantize_static
    x86 = mlas_fma_missing() is None
    for name in imagenet_models.MODELS:
        if act == "int8-dedicated":
            model = _quantize_static(imagenet_models.MODELS[name](SIZE),
                                     imagenet_models.calibration_images(SIZE), "qdq", "int8",
                                     True, {"DedicatedQDQPair": True})
        elif act == "uint8":
            model = models[name]
        else:
            model = imagenet_models.quantized(name, SIZE, activation_type=act)
        ops = [n.op_type for n in zoo.ort_optimized(model).graph.node]
        graph = import_onnx(model)
        matrix = [layer for layer in graph.layers if isinstance(layer, (ir.Conv2D, ir.Dense))
                  and layer.rounding in ("mlas", "float32")]
        mlas = sum(layer.rounding == "mlas" for layer in matrix)
        qlinear = sum(getattr(layer, "semantics", "").startswith("qlinear_add")
                      for layer in graph.layers)
        fused = ops.count("QLinearConv") + ops.count("QGemm")
        if act == "uint8":
            assert ops.count("Conv") == ops.count("Gemm") == ops.count("Add") == 0
            assert mlas == len(matrix) == fused and qlinear == ops.count("QLinearAdd")
        elif x86:
            assert 0 < fused < len(matrix) and ops.count("Conv") == len(matrix) - fused
            assert (mlas, qlinear) == (fused, ops.count("QLinearAdd")), name


@pytest.mark.skipif(mlas_fma_missing() is not None, reason=str(mlas_fma_missing()))
def test_reference_equals_onnxruntime_on_a_batch(models):
    """Eight random images through the reference interpreter (which the
    golden chip equals, above): every output equal to ONNX Runtime's."""
    seed = base_seed()
    x = np.random.default_rng(seed).standard_normal((8, 3, SIZE, SIZE)).astype(np.float32)
    for name in imagenet_models.MODELS:
        model = models[name]
        graph = import_onnx(model)
        (gin,), (gout,) = graph.inputs, graph.outputs
        in_q, out_q = graph.tensor(gin.tensor).quant, graph.tensor(gout.tensor).quant
        ours = reference.run(graph, {gin.tensor: reference.quantize(x.transpose(0, 2, 3, 1), in_q)},
                             outputs_only=True)[gout.tensor]
        (theirs,) = zoo.ort_run(model, x)
        theirs = reference.quantize(theirs, out_q)
        assert np.array_equal(ours, theirs), \
            f"seed {seed}: {name}: {np.mean(ours != theirs):.2%} of the outputs differ"


def test_sizes_are_checked():
    with pytest.raises(ValueError, match="multiple of 32"):
        imagenet_models.resnet18(48)
    with pytest.raises(ValueError, match="unknown model"):
        imagenet_models.quantized("vgg16")
