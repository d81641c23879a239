"""TFLite front end: the MLPerf Tiny reference models imported into the IR
compute, in the reference interpreter and on the golden chip, exactly the
bytes the TFLite interpreter's reference kernels compute."""

import dataclasses

import numpy as np
import pytest

from tpu import TPUConfig
from tpu.compiler import ir, reference
from tpu.compiler.artifact import HostStep
from tpu.compiler.errors import ModelError
from tpu.compiler.mlperf_tiny import MODELS, missing_reason, model_path
from tpu.compiler.session import InferenceSession
from tpu.compiler.tflite_frontend import import_tflite

from conftest import base_seed


litert = pytest.importorskip("ai_edge_litert.interpreter")

#: random inputs per model compared with the TFLite interpreter
REFERENCE_SAMPLES = 100
#: the unified buffer the convolution models need without spatial tiling
UB_ROWS = 8192


def tflite_run(model, inputs):
    """The TFLite interpreter's reference kernels on a batch of int8 inputs, one at a time."""
    interpreter = litert.Interpreter(
        model_path=str(model) if not isinstance(model, bytes) else None,
        model_content=model if isinstance(model, bytes) else None,
        experimental_op_resolver_type=litert.OpResolverType.BUILTIN_REF)
    interpreter.allocate_tensors()
    (inp,), (out,) = interpreter.get_input_details(), interpreter.get_output_details()
    results = []
    for x in inputs:
        interpreter.set_tensor(inp["index"], x[None])
        interpreter.invoke()
        results.append(interpreter.get_tensor(out["index"])[0].copy())
    return np.array(results)


def random_inputs(graph, n, seed):
    spec = graph.inputs[0]
    rng = np.random.default_rng(seed)
    return rng.integers(-128, 128, size=(n, *spec.model_shape[1:]), dtype=np.int8)


def reference_run(graph, x):
    spec = graph.inputs[0]
    values = reference.run(graph, {spec.tensor: x.reshape(len(x), *graph.tensor(spec.tensor).shape)},
                           outputs_only=True)
    return values[graph.outputs[0].tensor].reshape(len(x), -1)


def tiny_model(name):
    reason = missing_reason(name)
    if reason:
        pytest.skip(reason)
    return model_path(name)


@pytest.mark.parametrize("name", list(MODELS))
def test_reference_equals_tflite_on_random_inputs(name):
    path = tiny_model(name)
    graph = import_tflite(path)
    seed = base_seed()
    print(f"seed {seed}")
    x = random_inputs(graph, REFERENCE_SAMPLES, seed)
    want = tflite_run(path, x).reshape(len(x), -1)
    got = reference_run(graph, x)
    assert got.dtype == want.dtype == np.int8
    mismatched = np.nonzero((got != want).any(axis=1))[0]
    assert mismatched.size == 0, f"{mismatched.size} of {len(x)} inputs differ, first {mismatched[:5]}"


def test_models_map_onto_the_ir():
    kws = import_tflite(tiny_model("kws_ref_model"))
    convs = [layer for layer in kws.layers if isinstance(layer, ir.Conv2D)]
    assert len(convs) == 9
    first = convs[0]
    assert first.weight.shape == (10, 4, 1, 64) and first.stride == (2, 2)
    assert first.padding == (4, 1, 5, 1)            # SAME: the odd pixel goes after
    depthwise = [c for c in convs if c.name.startswith("depthwise")]
    assert len(depthwise) == 4
    w = depthwise[0].weight
    assert w.shape == (3, 3, 64, 64)
    off_diagonal = w.copy()
    for c in range(64):
        off_diagonal[:, :, c, c] = 0
    assert not off_diagonal.any() and w[:, :, 5, 5].any()
    assert isinstance(kws.layers[9], ir.GlobalAvgPool)
    assert kws.layers[-1].op == "softmax_tflite"
    assert kws.inputs[0].model_shape == (None, 49, 10, 1) and kws.inputs[0].layout == "nhwc"
    resnet = import_tflite(tiny_model("pretrainedResnet_quant"))
    adds = [layer for layer in resnet.layers if isinstance(layer, ir.Add)]
    assert len(adds) == 3 and all(a.semantics == "tflite" for a in adds)
    assert all(a.activation.kind == ir.ActivationKind.RELU for a in adds)
    ad = import_tflite(tiny_model("ad01_int8").read_bytes(), name="ad01")
    assert [type(layer) for layer in ad.layers] == [ir.Dense] * 10
    assert all(d.rounding == "single" for d in ad.layers)
    assert ad.source == "ad01"


#: batch of the golden chip's program per model: ad01's program is as long at
#: any batch (one row per sample through each tile), so it takes all inputs at
#: once; the convolution models repeat a batch-1 program (their unified buffer
#: grows with the batch)
GOLDEN_BATCH = {"ad01_int8": REFERENCE_SAMPLES}
#: unified-buffer rows for that batch
GOLDEN_UB_ROWS = {"ad01_int8": 32768}


@pytest.mark.parametrize("rows", [8, 16])
@pytest.mark.parametrize("name", ["kws_ref_model", "pretrainedResnet_quant", "ad01_int8"])
def test_golden_chip_equals_tflite_on_random_inputs(name, rows):
    """On 100 random inputs the golden chip equals the TFLite interpreter (and
    the reference interpreter), with every FULLY_CONNECTED and CONV_2D on the
    chip and the host steps listed with their share of the work."""
    path = tiny_model(name)
    graph = import_tflite(path)
    seed = base_seed()
    print(f"seed {seed}")
    x = random_inputs(graph, REFERENCE_SAMPLES, seed)
    batch = GOLDEN_BATCH.get(name, 1)
    config = TPUConfig(rows=rows, cols=rows, ub_rows=GOLDEN_UB_ROWS.get(name, UB_ROWS))
    session = InferenceSession(graph, backend="golden", config=config, batch=batch)
    host = [layer for layer in graph.layers
            if layer.name in {s.layer for s in session.compiled.steps if isinstance(s, HostStep)}]
    assert not [layer.name for layer in host if isinstance(layer, (ir.Dense, ir.Conv2D))]
    (got,) = session.run(None, {graph.inputs[0].model_name: x})
    got = got.reshape(len(x), -1)
    want = tflite_run(path, x).reshape(len(x), -1)
    mismatched = np.nonzero((got != want).any(axis=1))[0]
    assert mismatched.size == 0, f"{mismatched.size} of {len(x)} inputs differ, first {mismatched[:5]}"
    np.testing.assert_array_equal(got, reference_run(graph, x))
    listed = session.report().host_operators()
    assert [h["name"] for h in listed] == [s.name for s in session.compiled.steps
                                           if isinstance(s, HostStep)]
    assert all(0 < h["share"] < 0.01 for h in listed)


def test_kws_on_a_up5k_sized_chip_within_a_million_cycles():
    """KWS on the array and memories the UP5K's hard blocks hold (the matrix
    part's 4x4 array and memories, the up5k profile's activation unit):
    bit-exact, and its cycles pinned (the golden chip's counts are the cycle
    model's, so they change only when the schedule or the compiler does;
    docs/tflite.md)."""
    from tpu.bench.tflite import UP5K_SIZED
    assert (UP5K_SIZED.rows, UP5K_SIZED.cols, UP5K_SIZED.ub_rows, UP5K_SIZED.acc_rows,
            UP5K_SIZED.weight_mem_tiles) == (4, 4, 16384, 256, 64)
    assert (UP5K_SIZED.requantizers, UP5K_SIZED.requantizer_multiplier_width) == (1, 16)
    path = tiny_model("kws_ref_model")
    graph = import_tflite(path)
    seed = base_seed()
    print(f"seed {seed}")
    x = random_inputs(graph, 1, seed)
    session = InferenceSession(graph, backend="golden", config=UP5K_SIZED, batch=1)
    (got,) = session.run(None, {graph.inputs[0].model_name: x})
    np.testing.assert_array_equal(got.reshape(1, -1), tflite_run(path, x).reshape(1, -1))
    # 64 weight tiles at a time, counting only the kept ones (a depthwise
    # layer's block-diagonal weights: a tile a tap per block of 4 channels)
    assert len(session.compiled.chip_steps) == 32
    counters = session.report().total.counters
    # The profile's sequencer issues to one unit at a time (no MMC beside an
    # ACT), its decoder multiplies a bit a cycle and divides in 24 cycles,
    # and its small activation pipeline writes each ACT's results as late
    # as the parallel one: 577,335 cycles (576,043 with divisions as long
    # as their dividends), where the parallel forms take 405,368.
    assert session.report().cycles_per_inference == counters["cycles"] == 577_335
    assert counters["mxu_active"] == 220_048
    parallel = InferenceSession(graph, backend="golden", batch=1,
                                config=UP5K_SIZED.replace(serial_issue=0, serial_decode=0, serial_act=0))
    parallel.run(None, {graph.inputs[0].model_name: x})
    assert parallel.report().cycles_per_inference == 405_368
    assert 2_656_768 // 16 < counters["mxu_active"]         # the 4x4 array's MAC bound


def test_not_a_tflite_file(tmp_path):
    path = tmp_path / "model.tflite"
    path.write_bytes(b"\x00" * 64)
    with pytest.raises(ModelError, match="not a TFLite model"):
        import_tflite(path)
    with pytest.raises(ModelError, match="cannot read"):
        import_tflite(tmp_path / "missing.tflite")


def test_truncated_file():
    data = tiny_model("kws_ref_model").read_bytes()
    with pytest.raises(ModelError):
        import_tflite(data[:4096])


# Small models written with the flatbuffer builders: every operator form ------------------

from tflite_builder import ModelBuilder  # noqa: E402

from tpu.compiler.errors import UnsupportedModel  # noqa: E402

SAME, VALID = 0, 1
NONE, RELU, RELU_N1_TO_1, RELU6, TANH = 0, 1, 2, 3, 4


def tflite_outputs(data, feeds):
    """Interpreter (reference kernels) outputs by name for `feeds` (name -> batch array)."""
    interpreter = litert.Interpreter(model_content=data,
                                     experimental_op_resolver_type=litert.OpResolverType.BUILTIN_REF)
    interpreter.allocate_tensors()
    n = len(next(iter(feeds.values())))
    results = {d["name"]: [] for d in interpreter.get_output_details()}
    for i in range(n):
        for d in interpreter.get_input_details():
            interpreter.set_tensor(d["index"], feeds[d["name"]][i][None])
        interpreter.invoke()
        for d in interpreter.get_output_details():
            results[d["name"]].append(interpreter.get_tensor(d["index"])[0].copy())
    return {name: np.array(v) for name, v in results.items()}


def assert_matches_tflite(data, samples=24, golden_config=None):
    """Random int8 feeds: reference.run of the import equals the interpreter
    (and, with `golden_config`, so does the golden chip)."""
    graph = import_tflite(data)
    seed = base_seed()
    rng = np.random.default_rng(seed)
    print(f"seed {seed}")
    feeds = {i.model_name: rng.integers(-128, 128, size=(samples, *i.model_shape[1:]),
                                         dtype=np.int8) for i in graph.inputs}
    want = tflite_outputs(data, feeds)
    values = reference.run(graph, {i.tensor: feeds[i.model_name].reshape(
        samples, *graph.tensor(i.tensor).shape) for i in graph.inputs})
    for o in graph.outputs:
        got = values[o.tensor].reshape(want[o.model_name].shape)
        np.testing.assert_array_equal(got, want[o.model_name])
    if golden_config is not None:
        session = InferenceSession(graph, backend="golden", config=golden_config, batch=4)
        chip = session.run(None, feeds)
        for o, got in zip(graph.outputs, chip):
            np.testing.assert_array_equal(got.reshape(want[o.model_name].shape), want[o.model_name])
    return graph


def conv_model(rng, activation=RELU6, padding=SAME, stride=2, in_shape=(7, 7, 3), cout=4,
               kernel=(3, 3), act_kind="INT8"):
    m = ModelBuilder()
    h, w, c = in_shape
    x = m.tensor("x", [1, h, w, c], act_kind, 0.05, 3)
    ws = rng.uniform(0.002, 0.01, cout)
    wt = m.tensor("w", [cout, *kernel, c], "INT8", ws, 0, axis=0,
                  data=rng.integers(-127, 128, (cout, *kernel, c)))
    b = m.tensor("b", [cout], "INT32", 0.05 * ws, 0, data=rng.integers(-500, 500, cout))
    if padding == SAME:
        oh, ow = -(-h // stride), -(-w // stride)
    else:
        oh, ow = (h - kernel[0]) // stride + 1, (w - kernel[1]) // stride + 1
    y = m.tensor("y", [1, oh, ow, cout], act_kind, 0.02, -5)
    m.operator("CONV_2D", [x, wt, b], [y], "Conv2DOptions", Padding=padding, StrideW=stride,
               StrideH=stride, FusedActivationFunction=activation, DilationWFactor=1,
               DilationHFactor=1)
    return m.build([x], [y])


@pytest.mark.parametrize("activation", [NONE, RELU, RELU_N1_TO_1, RELU6])
@pytest.mark.parametrize("padding, stride", [(SAME, 2), (SAME, 1), (VALID, 2)])
def test_conv_2d(activation, padding, stride):
    graph = assert_matches_tflite(conv_model(np.random.default_rng(activation * 7 + stride),
                                             activation, padding, stride))
    layer = graph.layers[0]
    assert layer.stride == (stride, stride) and layer.weight.shape == (3, 3, 3, 4)


def test_depthwise_conv_2d_with_depth_multiplier():
    rng = np.random.default_rng(5)
    m = ModelBuilder()
    x = m.tensor("x", [1, 6, 5, 3], "INT8", 0.04, -2)
    ws = rng.uniform(0.003, 0.02, 6)
    w = m.tensor("w", [1, 3, 3, 6], "INT8", ws, 0, axis=3, data=rng.integers(-127, 128, (1, 3, 3, 6)))
    b = m.tensor("b", [6], "INT32", 0.04 * ws, 0, data=rng.integers(-300, 300, 6))
    y = m.tensor("y", [1, 6, 5, 6], "INT8", 0.03, -128)
    m.operator("DEPTHWISE_CONV_2D", [x, w, b], [y], "DepthwiseConv2DOptions", Padding=SAME,
               StrideW=1, StrideH=1, DepthMultiplier=2, FusedActivationFunction=RELU,
               DilationWFactor=1, DilationHFactor=1)
    graph = assert_matches_tflite(m.build([x], [y]),
                                  golden_config=TPUConfig(rows=8, cols=8, ub_rows=UB_ROWS))
    weight = graph.layers[0].weight
    assert weight.shape == (3, 3, 3, 6)
    assert not weight[:, :, 0, 2:].any() and not weight[:, :, 1, [0, 1, 4, 5]].any()


@pytest.mark.parametrize("op", ["MAX_POOL_2D", "AVERAGE_POOL_2D"])
@pytest.mark.parametrize("padding, activation", [(SAME, NONE), (VALID, NONE), (SAME, RELU)])
def test_pools(op, padding, activation):
    m = ModelBuilder()
    x = m.tensor("x", [1, 7, 6, 4], "INT8", 0.1, 7)
    out = (4, 3) if padding == SAME else (3, 2)
    y = m.tensor("y", [1, *out, 4], "INT8", 0.1, 7)
    m.operator(op, [x], [y], "Pool2DOptions", Padding=padding, StrideW=2, StrideH=2,
               FilterWidth=3, FilterHeight=3, FusedActivationFunction=activation)
    graph = assert_matches_tflite(m.build([x], [y]))
    if op == "MAX_POOL_2D":
        # padded too: on the chip, over an input padded with the lowest int8
        from tpu.compiler.artifact import HostStep
        from tpu.compiler.backend import compile_graph
        compiled = compile_graph(graph, TPUConfig(), 2)
        assert not [s.layer for s in compiled.steps if isinstance(s, HostStep)]


@pytest.mark.parametrize("op, out_quant", [("LOGISTIC", (1 / 256, -128)), ("TANH", (1 / 128, 0))])
def test_logistic_and_tanh(op, out_quant):
    m = ModelBuilder()
    x = m.tensor("x", [1, 64], "INT8", 0.06, 2)
    y = m.tensor("y", [1, 64], "INT8", *out_quant)
    m.operator(op, [x], [y])
    graph = assert_matches_tflite(m.build([x], [y]), samples=64)
    assert isinstance(graph.layers[0], ir.Elementwise)


@pytest.mark.parametrize("scales", [(0.05, 0.11, 0.08), (0.3, 0.01, 0.2), (0.02, 0.02, 0.5)])
@pytest.mark.parametrize("activation", [NONE, RELU, RELU6])
def test_add(scales, activation):
    m = ModelBuilder()
    a = m.tensor("a", [1, 4, 4, 8], "INT8", scales[0], -3)
    b = m.tensor("b", [1, 4, 4, 8], "INT8", scales[1], 10)
    y = m.tensor("y", [1, 4, 4, 8], "INT8", scales[2], -20)
    m.operator("ADD", [a, b], [y], "AddOptions", FusedActivationFunction=activation)
    graph = assert_matches_tflite(m.build([a, b], [y]))
    assert graph.layers[0].semantics == "tflite"


@pytest.mark.parametrize("scale, beta", [(0.15, 1.0), (0.6, 1.0), (0.05, 1.0), (0.3, 0.5)])
def test_softmax(scale, beta):
    m = ModelBuilder()
    x = m.tensor("x", [1, 30], "INT8", scale, 4)
    y = m.tensor("y", [1, 30], "INT8", 1 / 256, -128)
    m.operator("SOFTMAX", [x], [y], "SoftmaxOptions", Beta=beta)
    assert_matches_tflite(m.build([x], [y]), samples=64)


def fc_model(rng, quantize_edges=False, requantize=False):
    """A FULLY_CONNECTED of an image input (flattened in NHWC order), optionally
    with float QUANTIZE/DEQUANTIZE edges or an int8 -> int8 QUANTIZE after it."""
    m = ModelBuilder()
    x = m.tensor("x", [1, 2, 2, 3], "INT8", 0.07, -4)
    w = m.tensor("w", [5, 12], "INT8", 0.01, 0, data=rng.integers(-127, 128, (5, 12)))
    b = m.tensor("b", [5], "INT32", 0.07 * 0.01, 0, data=rng.integers(-900, 900, 5))
    y = m.tensor("y", [1, 5], "INT8", 0.04, 6)
    inputs, outputs = [x], [y]
    if quantize_edges:
        xf = m.tensor("x_float", [1, 2, 2, 3], "FLOAT32")
        m.operator("QUANTIZE", [xf], [x])
        inputs = [xf]
    m.operator("FULLY_CONNECTED", [x, w, b], [y], "FullyConnectedOptions",
               FusedActivationFunction=RELU)
    if requantize:
        z = m.tensor("z", [1, 5], "INT8", 0.013, -9)
        m.operator("QUANTIZE", [y], [z])
        outputs = [z]
    if quantize_edges:
        yf = m.tensor("y_float", [1, 5], "FLOAT32")
        m.operator("DEQUANTIZE", [outputs[0]], [yf])
        outputs = [yf]
    return m.build(inputs, outputs)


def test_fully_connected_and_requantize():
    rng = np.random.default_rng(11)
    assert_matches_tflite(fc_model(rng))
    graph = assert_matches_tflite(fc_model(rng, requantize=True))
    assert isinstance(graph.layers[1], ir.Elementwise)


def test_float_edges_quantize_and_dequantize():
    data = fc_model(np.random.default_rng(12), quantize_edges=True)
    graph = import_tflite(data)
    (i,), (o,) = graph.inputs, graph.outputs
    assert (i.model_name, i.model_dtype, i.tensor) == ("x_float", np.float32, "x")
    assert (o.model_name, o.model_dtype, o.tensor) == ("y_float", np.float32, "y")
    assert [type(layer) for layer in graph.layers] == [ir.Dense]
    rng = np.random.default_rng(base_seed())
    # Values away from rounding ties: TFLite rounds half away from zero, the session half to even.
    x = ((rng.integers(-100, 100, (16, 2, 2, 3)) + 0.25) * np.float32(0.07)).astype(np.float32)
    want = tflite_outputs(data, {"x_float": x})["y_float"]
    (got,) = InferenceSession(graph, backend="reference").run(None, {"x_float": x})
    np.testing.assert_array_equal(got, want)


# Unsupported models: errors name the operator -------------------------------------------

def test_unsupported_operator():
    m = ModelBuilder()
    a = m.tensor("a", [1, 8], "INT8", 0.1, 0)
    y = m.tensor("y", [1, 8], "INT8", 0.1, 0)
    m.operator("ABS", [a], [y])
    with pytest.raises(UnsupportedModel, match=r"operator 0 \(ABS\): operator ABS is not "
                                               r"supported; supported: FULLY_CONNECTED"):
        import_tflite(m.build([a], [y]))


def test_unsupported_fused_activation():
    with pytest.raises(UnsupportedModel, match=r"operator 0 \(CONV_2D\): fused activation TANH"):
        import_tflite(conv_model(np.random.default_rng(1), activation=TANH))


def test_int16_activations():
    with pytest.raises(UnsupportedModel, match=r"operator 0 \(CONV_2D\): .* is int16"):
        import_tflite(conv_model(np.random.default_rng(1), act_kind="INT16"))


def test_float_layer_inside_the_model():
    m = ModelBuilder()
    a = m.tensor("a", [1, 8], "INT8", 0.1, 0)
    af = m.tensor("a_float", [1, 8], "FLOAT32")
    y = m.tensor("y", [1, 8], "FLOAT32")
    m.operator("DEQUANTIZE", [a], [af])
    m.operator("ADD", [af, af], [y], "AddOptions", FusedActivationFunction=NONE)
    with pytest.raises(UnsupportedModel, match=r"operator 0 \(DEQUANTIZE\): .*float layers "
                                               r"inside the model"):
        import_tflite(m.build([a], [y]))


@pytest.mark.parametrize("config, message", [
    (TPUConfig(ub_rows=64), r"^operator 0 \(CONV_2D\), layer 'conv_2d_0': streamed in bands of "
                            r"one output row, .* need \d+ unified-buffer rows; the unified buffer "
                            r"has 64: compile with --ub-rows \d+ or more"),
    # (one weight tile at a time now compiles: split by K, two M tiles at a
    # time, tests/test_compiler_bands.py)
])
def test_layer_too_large_for_the_chip(config, message):
    """A layer the configuration cannot hold is named by the TFLite
    operator it comes from (index and name), then by its IR layer."""
    from tpu.compiler.errors import CompileError
    graph = import_tflite(conv_model(np.random.default_rng(1), in_shape=(32, 32, 3)))
    with pytest.raises(CompileError, match=message):
        InferenceSession(graph, backend="golden", config=config, batch=1)


def test_layer_too_large_names_a_later_operator():
    """The second of two FULLY_CONNECTEDs is the one too large (64 outputs
    and their tables in a unified buffer of 20 rows, where the first's 4
    fit): the error names operator 1, not the first layer."""
    from tpu.compiler.errors import CompileError
    rng = np.random.default_rng(2)
    m = ModelBuilder()
    x = m.tensor("x", [1, 4], "INT8", 0.05, 0)
    h = m.tensor("h", [1, 4], "INT8", 0.05, 0)
    y = m.tensor("y", [1, 64], "INT8", 0.05, 0)
    for src, dst, (n, k) in ((x, h, (4, 4)), (h, y, (64, 4))):
        w = m.tensor(f"w{n}x{k}", [n, k], "INT8", 0.01, 0, data=rng.integers(-127, 128, (n, k)))
        b = m.tensor(f"b{n}x{k}", [n], "INT32", 0.05 * 0.01, 0, data=np.zeros(n))
        m.operator("FULLY_CONNECTED", [src, w, b], [dst], "FullyConnectedOptions",
                   FusedActivationFunction=NONE)
    graph = import_tflite(m.build([x], [y]))
    config = TPUConfig(rows=4, cols=4, ub_rows=20)
    with pytest.raises(CompileError, match=r"^operator 1 \(FULLY_CONNECTED\), layer "
                                           r"'fully_connected_1': its input, output and tables "
                                           r"need \d+ unified-buffer rows"):
        InferenceSession(graph, backend="golden", config=config, batch=5)
    # A graph with no recorded operators (as the ONNX front end builds) names the layer alone.
    graph.origins = {}
    with pytest.raises(CompileError, match=r"^layer 'fully_connected_1': its input"):
        InferenceSession(graph, backend="golden", config=config, batch=5)


def test_fully_connected_rounding():
    """FULLY_CONNECTED's multiplier is the float64 product of the scales and it
    rounds once: biases (at input 0) where a float32 product or two roundings
    would give other outputs."""
    si, sw, so = np.float32(0.017708424), np.float32(0.0015656473), np.float32(0.4105735)
    # One rounding vs two differ at the first two; float32 vs float64 products at the rest.
    biases = [-1873301, -1858492, -1828875, -1177292, 1177292, 1828875]
    m = ModelBuilder()
    x = m.tensor("x", [1, 1], "INT8", si, 0)
    w = m.tensor("w", [6, 1], "INT8", sw, 0, data=np.ones((6, 1)))
    b = m.tensor("b", [6], "INT32", si * sw, 0, data=biases)
    y = m.tensor("y", [1, 6], "INT8", so, 0)
    m.operator("FULLY_CONNECTED", [x, w, b], [y], "FullyConnectedOptions",
               FusedActivationFunction=NONE)
    data = m.build([x], [y])
    graph = import_tflite(data)
    zero = np.zeros((1, 1), dtype=np.int8)
    want = tflite_outputs(data, {"x": zero})["y"]
    np.testing.assert_array_equal(reference.run(graph, {"x": zero})["y"], want)
    session = InferenceSession(graph, backend="golden", config=TPUConfig(rows=4, cols=4), batch=1)
    assert not any(isinstance(step, HostStep) for step in session.compiled.steps)
    (chip,) = session.run(None, {"x": zero})
    np.testing.assert_array_equal(chip.reshape(want.shape), want)
    layer = graph.layers[0]
    twice = dataclasses.replace(layer, rounding="double")
    assert (reference.dense(twice, zero, graph.tensor("x").quant, graph.tensor("y").quant)
            != want).any()


def test_tpu_run_lists_host_operators_with_their_share(tmp_path, capsys):
    """`tpu run` of a FULLY_CONNECTED + SOFTMAX model: the softmax is a host
    operator, in the per-layer table and the JSON, with its share of the work
    (the elements it reads against the model's MACs plus those elements)."""
    import json

    from tpu import cli
    rng = np.random.default_rng(13)
    m = ModelBuilder()
    x = m.tensor("x", [1, 16], "INT8", 0.05, 1)
    w = m.tensor("w", [10, 16], "INT8", 0.01, 0, data=rng.integers(-127, 128, (10, 16)))
    b = m.tensor("b", [10], "INT32", 0.05 * 0.01, 0, data=rng.integers(-900, 900, 10))
    y = m.tensor("y", [1, 10], "INT8", 0.2, 3)
    p = m.tensor("p", [1, 10], "INT8", 1 / 256, -128)
    m.operator("FULLY_CONNECTED", [x, w, b], [y], "FullyConnectedOptions",
               FusedActivationFunction=NONE)
    m.operator("SOFTMAX", [y], [p], "SoftmaxOptions", Beta=1.0)
    path = tmp_path / "fc_softmax.tflite"
    path.write_bytes(m.build([x], [p]))
    np.save(tmp_path / "x.npy", rng.integers(-128, 128, (3, 16), dtype=np.int8))
    capsys.readouterr()
    assert cli.main(["run", str(path), "--input", str(tmp_path / "x.npy"), "--rows", "4",
                     "--cols", "4", "--json", str(tmp_path / "r.json")]) == 0
    lines = capsys.readouterr().out.splitlines()
    share = 10 / (16 * 10 + 10)             # softmax reads 10 elements; the layer does 160 MACs
    row = next(line.split() for line in lines if line.startswith("softmax_1"))
    assert row[:6] == ["softmax_1", "host", "-", "-", "30", "ops"]
    assert row[6:8] == ["-", "-"]                 # performed, skipped: no array work
    assert row[8] == f"{100 * share:.2f}%"
    assert f"host operators: softmax_1 (softmax_tflite) {100 * share:.2f}% of the work" in lines[-1]
    data = json.loads((tmp_path / "r.json").read_text())
    (host,) = data["host_operators"]
    assert (host["name"], host["op"], host["ops"]) == ("softmax_1", "softmax_tflite", 30)
    assert host["share"] == pytest.approx(share)
    assert [r["where"] for r in data["layers"]] == ["chip", "host"]


def test_tpu_run_host_share_counts_depthwise_real_taps(tmp_path, capsys):
    """A DEPTHWISE_CONV_2D (depth multiplier 2, block-diagonal on the chip)
    then SOFTMAX: the report counts the depthwise layer's real taps (3x3 x 6
    output channels per pixel), not its block-diagonal weights' zeros (3x3 x
    3 x 6), both in its MACs and in the softmax's share of the work."""
    import json

    from tpu import cli
    from tpu.compiler.report import conv_macs_per_pixel
    rng = np.random.default_rng(17)
    m = ModelBuilder()
    x = m.tensor("x", [1, 4, 4, 3], "INT8", 0.04, -2)
    ws = rng.uniform(0.003, 0.02, 6)
    w = m.tensor("w", [1, 3, 3, 6], "INT8", ws, 0, axis=3, data=rng.integers(1, 128, (1, 3, 3, 6)))
    b = m.tensor("b", [6], "INT32", 0.04 * ws, 0, data=rng.integers(-300, 300, 6))
    y = m.tensor("y", [1, 4, 4, 6], "INT8", 0.03, -128)
    p = m.tensor("p", [1, 4, 4, 6], "INT8", 1 / 256, -128)
    m.operator("DEPTHWISE_CONV_2D", [x, w, b], [y], "DepthwiseConv2DOptions", Padding=SAME,
               StrideW=1, StrideH=1, DepthMultiplier=2, FusedActivationFunction=RELU,
               DilationWFactor=1, DilationHFactor=1)
    m.operator("SOFTMAX", [y], [p], "SoftmaxOptions", Beta=1.0)
    path = tmp_path / "dw_softmax.tflite"
    path.write_bytes(m.build([x], [p]))
    np.save(tmp_path / "x.npy", rng.integers(-128, 128, (2, 4, 4, 3), dtype=np.int8))
    capsys.readouterr()
    assert cli.main(["run", str(path), "--input", str(tmp_path / "x.npy"), "--rows", "4",
                     "--cols", "4", "--json", str(tmp_path / "r.json")]) == 0
    data = json.loads((tmp_path / "r.json").read_text())
    macs = 16 * 9 * 6                       # per sample: 16 pixels, 9 taps, 6 output channels
    assert data["layers"][0]["macs"] == 2 * macs
    (host,) = data["host_operators"]
    assert host["ops"] == 2 * 16 * 6
    assert host["share"] == pytest.approx(16 * 6 / (macs + 16 * 6))
    # The rule itself: block-diagonal weights count their diagonal, others all.
    weight = import_tflite(path.read_bytes()).layers[0].weight
    assert conv_macs_per_pixel(weight) == 9 * 6
    dense = weight.copy()
    dense[0, 0, 0, 5] = 1                  # one tap off the diagonal: an ordinary convolution
    assert conv_macs_per_pixel(dense) == 9 * 3 * 6
