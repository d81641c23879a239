"""ONNX Runtime's QLinearAdd (com.microsoft), as MLAS runs it on x86-64
(float32 scale ratios, a fixed term, fused multiply-adds, ties to even):
`reference_onnxruntime.qlinear_add`, used by ``ir.Add(semantics="qlinear_add")``
and the host op "qlinear_add_constant", must equal ONNX Runtime on every
value: standalone nodes over random scales (several decades, ratios near
ties), zero points and shapes, and the Adds of quantized residual models
imported by the ONNX front end, fed ONNX Runtime's values of their inputs."""

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from tpu.compiler import ir, reference, zoo
from tpu.compiler.onnx_frontend import import_onnx
from tpu.compiler.reference_onnxruntime import fma32, qlinear_add

from conftest import base_seed, mlas_fma_missing
from test_onnx_frontend import check, layers, ort_tensors, quantized, run_both

pytestmark = pytest.mark.skipif(mlas_fma_missing() is not None, reason=str(mlas_fma_missing()))


def _session(unsigned, shape_a, shape_b, scales, zero_points):
    T = TensorProto.UINT8 if unsigned else TensorProto.INT8
    dtype = np.uint8 if unsigned else np.int8
    inits = [helper.make_tensor(f"s{n}", TensorProto.FLOAT, [], [float(s)])
             for n, s in zip("abc", scales)]
    inits += [helper.make_tensor(f"z{n}", T, [], [int(z)]) for n, z in zip("abc", zero_points)]
    node = helper.make_node("QLinearAdd", ["a", "sa", "za", "b", "sb", "zb", "sc", "zc"], ["c"],
                            domain="com.microsoft")
    graph = helper.make_graph([node], "qladd", [helper.make_tensor_value_info("a", T, shape_a),
                                                helper.make_tensor_value_info("b", T, shape_b)],
                              [helper.make_tensor_value_info("c", T, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13),
                                                    helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = zoo.IR_VERSION
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]), dtype


def _random_quants(rng, unsigned):
    low, high = (0, 255) if unsigned else (-128, 127)
    sc = np.float32(10 ** rng.uniform(-4, 1))
    # ratios over several decades, and small-integer or half-integer ratios
    # (sums land on ties)
    pick = lambda: np.float32(sc * (10 ** rng.uniform(-2, 2) if rng.random() < 0.5
                                    else rng.choice([0.5, 1, 1.5, 2, 0.25, 3, 0.75])))
    quants = [ir.QuantType(float(s), int(rng.integers(low, high + 1)), unsigned)
              for s in (pick(), pick(), sc)]
    return quants


def _old_add(a, b, qa, qb, qc):
    """The QDQ Add's dequantize-add-quantize, the arithmetic QLinearAdd had before."""
    total = reference.dequantize(a, qa) + reference.dequantize(b, qb)
    low, high = qc.range
    return np.clip(np.rint(total / np.float32(qc.scale)) + qc.zero_point, low, high)


@pytest.mark.parametrize("unsigned", [False, True], ids=["int8", "uint8"])
@pytest.mark.parametrize("scalar_b", [False, True], ids=["tensors", "single_b"])
def test_qlinear_add_equals_onnxruntime(unsigned, scalar_b):
    seed = base_seed()
    print("seed", seed)
    rng = np.random.default_rng(seed)
    values = old_wrong = 0
    for trial in range(200):
        qa, qb, qc = _random_quants(rng, unsigned)
        shape = [int(rng.integers(1, 4)), *(int(d) for d in rng.integers(1, 9, rng.integers(1, 4)))]
        shape_b = [1] if scalar_b else shape
        session, dtype = _session(unsigned, shape, shape_b, [q.scale for q in (qa, qb, qc)],
                                  [q.zero_point for q in (qa, qb, qc)])
        info = np.iinfo(dtype)
        a = rng.integers(info.min, info.max + 1, shape).astype(dtype)
        b = rng.integers(info.min, info.max + 1, shape_b).astype(dtype)
        (theirs,) = session.run(None, {"a": a, "b": b})
        if scalar_b:
            # ONNX Runtime hands a one-value first input over as the single
            # value: spans of one value when a's last dimension is 1
            ours = qlinear_add(b, a, qb, qa, qc) if shape[-1] == 1 else qlinear_add(a, b, qa, qb, qc)
        else:
            layer = ir.Add("add", "a", "b", "c", semantics="qlinear_add")
            ours = reference.add(layer, a, b, qa, qb, qc)
            assert ours.dtype == dtype
        what = f"seed {seed} trial {trial}: {qa} {qb} {qc}"
        assert np.array_equal(ours.astype(int), theirs.astype(int)), what
        values += theirs.size
        old = _old_add(a, np.broadcast_to(b, a.shape), qa, qb, qc)
        old_wrong += int((old != theirs.astype(int)).sum())
    print(f"{values} values equal; the dequantize-add-quantize differs in {old_wrong}")


def test_fma32_rounds_once():
    """fma32 against exact rational arithmetic, ties included."""
    from fractions import Fraction
    rng = np.random.default_rng(base_seed())
    a = rng.integers(-255, 256, 4000).astype(np.float32)
    b = (10 ** rng.uniform(-5, 3, 4000)).astype(np.float32)
    c = (rng.normal(0, 1, 4000) * 10 ** rng.uniform(-3, 4, 4000)).astype(np.float32)
    # exact ties: c = -a*b + half an ulp of a float32 near it
    c[:500] = (np.float32(0.5) - a[:500] * b[:500]).astype(np.float32)
    ours = fma32(a, b, c)
    for x, y, z, r in zip(a, b, c, ours):
        exact = Fraction(float(x)) * Fraction(float(y)) + Fraction(float(z))
        near = np.float32(float(exact))
        candidates = [np.nextafter(near, np.float32(-np.inf)), near,
                      np.nextafter(near, np.float32(np.inf))]
        dist = [abs(Fraction(float(v)) - exact) for v in candidates]
        best = [v for v, d in zip(candidates, dist) if d == min(dist)]
        if len(best) > 1:
            best = [v for v in best if int(np.float32(v).view(np.int32)) % 2 == 0]
        assert r == best[0], (x, y, z)


@pytest.mark.parametrize("act", ["int8", "uint8"])
def test_imported_qlinear_adds_equal_onnxruntime(act):
    """A QOperator residual model: its QLinearAdd becomes an Add of
    "qlinear_add" semantics that, fed ONNX Runtime's inputs, gives ONNX
    Runtime's output on every value; a following layer uses it, and a
    second model ends in it."""
    seed = base_seed()
    print("seed", seed)
    rng = np.random.default_rng(seed)
    inner = zoo.residual([zoo.conv(6, k=3, pad=1), zoo.conv(6, k=3, pad=1, act=None)])
    models = [(zoo.conv_net((None, 6, 7, 7), [zoo.conv(6, k=3, pad=1), inner, zoo.conv(4, k=1)],
                            seed=seed % 1000), (6, 7, 7)),
              (zoo.conv_net((None, 6, 5, 5), [zoo.conv(6, k=3, pad=1), inner], seed=seed % 1000),
               (6, 5, 5))]
    for model, shape in models:
        calibration = rng.normal(0, 1, (32, *shape)).astype(np.float32)
        x = rng.normal(0, 1, (32, *shape)).astype(np.float32)
        q = quantized(model, calibration, "qoperator", act)
        assert any(n.op_type == "QLinearAdd" for n in q.graph.node)
        check(model, shape, seed, [("qoperator", act, False)])
        graph = import_onnx(q)
        (add,) = layers(graph, ir.Add)
        assert add.semantics == "qlinear_add"
        theirs = ort_tensors(q, graph, x)
        ours = reference.run_layer(graph, add, theirs)[add.output]
        assert np.array_equal(ours.astype(int), theirs[add.output].astype(int)), f"seed {seed}"


def _qlinear_model(rng, unsigned, shape, output):
    """x -> QuantizeLinear -> a; c = QLinearAdd(a, k1) (a constant per
    channel, second or first at random); d = QLinearAdd(c, a) (two tensors of different
    quantizations); e = QLinearAdd(k2, d) (a single-value constant, first);
    DequantizeLinear of `output` ("d" or "e") is the model output. Returns
    the model and its quantizations."""
    T = TensorProto.UINT8 if unsigned else TensorProto.INT8
    dtype = np.uint8 if unsigned else np.int8
    low, high = (0, 255) if unsigned else (-128, 127)
    inits = []

    def quant(name, scale):
        zero_point = int(rng.integers(low, high + 1))
        inits.append(helper.make_tensor(f"{name}_s", TensorProto.FLOAT, [], [float(scale)]))
        inits.append(helper.make_tensor(f"{name}_z", T, [], [zero_point]))
        return [f"{name}_s", f"{name}_z"]

    def constant(name, values):
        inits.append(helper.make_tensor(name, T, list(values.shape), values.ravel().tolist()))
        return name

    s = np.float32(10 ** rng.uniform(-3, 0))
    ratio = lambda: np.float32(s * (10 ** rng.uniform(-1.5, 1.5) if rng.random() < 0.5
                                    else rng.choice([0.5, 1, 2, 0.25, 1.5, 4])))
    channels = shape[0]
    k1_shape = (channels,) if len(shape) == 1 else (channels, 1, 1)
    k1 = constant("k1", rng.integers(low, high + 1, k1_shape).astype(dtype))
    k2 = constant("k2", rng.integers(low, high + 1, (1,)).astype(dtype))
    qa, qk1, qc, qd, qk2, qe = (quant(n, ratio()) for n in ("a", "k1", "c", "d", "k2", "e"))
    k1_first = bool(rng.random() < 0.5)
    nodes = [
        helper.make_node("QuantizeLinear", ["x", *qa], ["a"]),
        helper.make_node("QLinearAdd", [k1, *qk1, "a", *qa, *qc] if k1_first
                         else ["a", *qa, k1, *qk1, *qc], ["c"], name="add_k1",
                         domain="com.microsoft"),
        helper.make_node("QLinearAdd", ["c", *qc, "a", *qa, *qd], ["d"], name="add_ca",
                         domain="com.microsoft"),
        helper.make_node("QLinearAdd", [k2, *qk2, "d", *qd, *qe], ["e"], name="add_k2",
                         domain="com.microsoft"),
        helper.make_node("DequantizeLinear", [output, *(qd if output == "d" else qe)], ["y"])]
    if output == "d":
        nodes = nodes[:3] + nodes[4:]
    graph = helper.make_graph(
        nodes, "qladd", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", *shape])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", *shape])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13),
                                                    helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = zoo.IR_VERSION
    return model, s


@pytest.mark.parametrize("unsigned", [False, True], ids=["int8", "uint8"])
def test_qlinear_add_models_equal_onnxruntime(unsigned):
    """Whole QOperator models of QLinearAdds (tensor + tensor, a constant per
    channel, a single-value constant first; the Add inside the model and as
    its output), images and vectors of random shapes: every output value
    equals ONNX Runtime's."""
    seed = base_seed()
    print("seed", seed)
    rng = np.random.default_rng(seed)
    for trial in range(24):
        shape = [int(rng.integers(1, 9))]
        if trial % 3:
            shape += [int(d) for d in rng.integers(1, 7, 2)]
        model, s = _qlinear_model(rng, unsigned, shape, "de"[trial % 2])
        x = (rng.normal(0, 1, (4, *shape)) * s * 60).astype(np.float32)
        graph, pairs = run_both(model, x)
        kinds = sorted(type(l).__name__ + (f" {l.op}" if isinstance(l, ir.HostOp) else "")
                       for l in graph.layers)
        assert kinds == ["Add"] + ["HostOp qlinear_add_constant"] * (1 + trial % 2)
        for ours, theirs in pairs:
            wrong = int((ours != theirs).sum())
            assert wrong == 0, f"seed {seed} trial {trial} {shape}: {wrong} of {ours.size} differ"


def test_extreme_scale_ratios():
    """Scale ratios from 1e-8 to 1e9: a sum beyond int32 converts to
    INT32_MIN (x86's cvtps2dq) and saturates to the type's minimum, as
    ONNX Runtime's does."""
    seed = base_seed()
    print("seed", seed)
    rng = np.random.default_rng(seed)
    wrapped = 0
    for trial in range(100):
        unsigned = bool(trial % 2)
        low, high = (0, 255) if unsigned else (-128, 127)
        sc = 10 ** rng.uniform(-6, 0)
        qa, qb = (ir.QuantType(float(np.float32(sc * 10 ** rng.uniform(-8, 9))),
                               int(rng.integers(low, high + 1)), unsigned) for _ in range(2))
        qc = ir.QuantType(float(np.float32(sc)), int(rng.integers(low, high + 1)), unsigned)
        session, dtype = _session(unsigned, [40], [40], [q.scale for q in (qa, qb, qc)],
                                  [q.zero_point for q in (qa, qb, qc)])
        a, b = (rng.integers(low, high + 1, [40]).astype(dtype) for _ in range(2))
        (theirs,) = session.run(None, {"a": a, "b": b})
        ours = qlinear_add(a, b, qa, qb, qc)
        assert np.array_equal(ours, theirs.astype(int)), f"seed {seed} trial {trial}"
        real = (qa.scale * (a.astype(float) - qa.zero_point)
                + qb.scale * (b.astype(float) - qb.zero_point)) / qc.scale
        wrapped += int((real > 2.0 ** 31).sum())
    assert wrapped > 0


@pytest.mark.parametrize("unsigned", [False, True], ids=["int8", "uint8"])
def test_compiled_qlinear_adds_run_as_onnxruntime(unsigned, tmp_path):
    """The host steps of a compiled model, saved and loaded, run through the
    driver on the golden chip: ONNX Runtime's values."""
    from tpu import TPUConfig
    from tpu.compiler.artifact import CompiledModel
    from tpu.compiler.backend import compile_graph
    from test_compiler_backend import run_compiled
    seed = base_seed()
    print("seed", seed)
    rng = np.random.default_rng(seed)
    config = TPUConfig()
    for trial, shape in enumerate([[5, 4, 3], [7]]):
        model, s = _qlinear_model(rng, unsigned, shape, "de"[trial])
        x = (rng.normal(0, 1, (3, *shape)) * s * 60).astype(np.float32)
        graph = import_onnx(model)
        compiled = compile_graph(graph, config, 3)
        path = tmp_path / f"m{trial}.tpu"
        compiled.save(path)
        loaded = CompiledModel.load(path)
        assert any(layer.semantics == "qlinear_add" for layer in loaded.host_layers.values()
                   if isinstance(layer, ir.Add))
        (gin,), (gout,) = graph.inputs, graph.outputs
        in_q, out_q = graph.tensor(gin.tensor).quant, graph.tensor(gout.tensor).quant
        ir_x = x.transpose(0, 2, 3, 1) if x.ndim == 4 else x
        outputs, _ = run_compiled(loaded, {gin.tensor: reference.quantize(ir_x, in_q)}, config)
        ours = outputs[gout.tensor]
        ours = ours.transpose(0, 3, 1, 2) if ours.ndim == 4 else ours
        (theirs,) = zoo.ort_run(model, x)
        theirs = reference.quantize(theirs, out_q)
        assert np.array_equal(ours.astype(int), theirs.astype(int)), f"seed {seed} {shape}"


def test_qdq_adds_of_int8_tensors_moved_to_uint8():
    """A QDQ Add of int8 tensors that ONNX Runtime moves to uint8 first (on
    x86-64, each tensor a QuantizeLinear -> DequantizeLinear pair read by one
    node) and then fuses into a QLinearAdd: the front end's
    "qlinear_add_uint8" computes MLAS's arithmetic on the moved values
    (plus 128, zero points too), whose float32 roundings differ from those
    on the int8 values in a few sums. Two QLinearMatMuls (MLAS's rounding)
    of two inputs feed it, so the whole model equals ONNX Runtime's on
    every value."""
    import dataclasses
    from onnx import numpy_helper
    from test_onnx_frontend import weights
    seed = base_seed()
    print("seed", seed)
    rng = np.random.default_rng(seed)
    unmoved = total = 0
    for trial in range(12):
        nodes = [helper.make_node("MatMul", ["x1", "w1"], ["a"], name="mm1"),
                 helper.make_node("MatMul", ["x2", "w2"], ["b"], name="mm2"),
                 helper.make_node("Add", ["a", "b"], ["y"], name="add")]
        inits = {"w1": weights(rng, 16, 64), "w2": weights(rng, 16, 64) * 10 ** rng.uniform(-1, 1)}
        graph = helper.make_graph(
            nodes, "adds", [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["N", 16])
                            for n in ("x1", "x2")],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
            [numpy_helper.from_array(v, k) for k, v in inits.items()])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
        model.ir_version = zoo.IR_VERSION
        calibration = {n: rng.normal(0, 1, (32, 16)).astype(np.float32) for n in ("x1", "x2")}
        q = quantized(model, calibration, "qdq", "int8")
        ops = [n.op_type for n in zoo.ort_optimized(q).graph.node]
        assert ops.count("QLinearAdd") == 1 and ops.count("QLinearMatMul") == 2
        graph = import_onnx(q)
        (add,) = layers(graph, ir.Add)
        assert add.semantics == "qlinear_add_uint8"
        assert all(d.rounding == "mlas" for d in layers(graph, ir.Dense))
        x = {n: rng.normal(0, 1.5, (512, 16)).astype(np.float32) for n in ("x1", "x2")}
        feeds = {g.tensor: reference.quantize(x[g.model_name], graph.tensor(g.tensor).quant)
                 for g in graph.inputs}
        (gout,) = graph.outputs
        out_q = graph.tensor(gout.tensor).quant
        ours = reference.run(graph, feeds, outputs_only=True)[gout.tensor]
        (theirs,) = zoo.ort_run(q, x)
        theirs = reference.quantize(theirs, out_q)
        assert np.array_equal(ours, theirs), f"seed {seed}, model {trial}"
        plain = ir.Graph(graph.tensors, [dataclasses.replace(layer, semantics="qlinear_add")
                                         if layer is add else layer for layer in graph.layers],
                         graph.inputs, graph.outputs, graph.source)
        unmoved += int(np.count_nonzero(
            reference.run(plain, feeds, outputs_only=True)[gout.tensor] != theirs))
        total += theirs.size
    print(f"{total} values; on the int8 values MLAS's arithmetic differs in {unmoved}")
