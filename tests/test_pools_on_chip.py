"""Pooling beyond one ACT of the activation unit runs on the chip: padded max
pools (the input padded with the type's lowest value), max windows wider
than the unit's (two passes, max of maxes), average windows wider than the
unit's or non-square (a summing convolution on the matrix unit), padded
averages with ``count_include_pad=1`` (a summing convolution over zero-point
padding) and averages over the whole image (a global pool). Each compiled
model equals the reference bit for bit on the golden chip and ONNX Runtime
in at least 99% of the outputs, none more than a step off, where a summing
convolution pools: ONNX Runtime's only where an exact average is a tie
(`_summing_pool_equals_onnxruntime_but_at_ties`); random shapes, seeds
printed."""

import numpy as np
import pytest

from tpu.compiler import ir, reference, zoo
from tpu.compiler.artifact import HostStep
from tpu.compiler.onnx_frontend import import_onnx
from tpu.compiler.session import InferenceSession

from conftest import base_seed
from test_onnx_frontend import from_ir, quantized, to_ir


def _pools(rng, case):
    """The pooling layer spec of `case` and an image side that fits it."""
    if case == "padded max":
        k = int(rng.integers(2, 5))
        return zoo.maxpool(k, stride=int(rng.integers(1, 3)), pad=int(rng.integers(1, k))), 0
    if case == "wide max":
        k = int(rng.integers(5, 8))
        return zoo.maxpool(k, stride=int(rng.integers(1, 4)), pad=int(rng.integers(0, 3))), k
    if case == "wide average":
        return zoo.avgpool(5, stride=int(rng.integers(1, 3))), 5
    if case == "non-square average":
        return zoo.avgpool((3, 5), stride=(1, 2)), 5
    if case == "counting pads":
        return zoo.avgpool(3, stride=int(rng.integers(1, 3)), pad=1, count_include_pad=1), 0
    return None, 0      # "whole image": an average of the whole image, below


CASES = ["padded max", "wide max", "wide average", "non-square average", "counting pads",
         "whole image"]


@pytest.mark.parametrize("form", [("qdq", "int8"), ("qoperator", "uint8")], ids="-".join)
@pytest.mark.parametrize("case", CASES)
def test_pool_runs_on_the_chip(case, form):
    seed = base_seed()
    rng = np.random.default_rng(seed)
    pool, side = _pools(rng, case)
    h, w = (int(v) for v in rng.integers(max(side, 5), max(side, 5) + 4, 2))
    print(f"seed {seed}: {case} {pool} over a {h}x{w} image, {form}")
    channels = int(rng.integers(2, 10))
    if pool is None:    # (an odd number of pixels: an even one ties, on the host)
        h, w = h | 1, w | 1
        pool = zoo.avgpool((h, w))
    model = zoo.conv_net((None, 2, h, w), [zoo.conv(channels, k=3, pad=1), pool, zoo.flatten(),
                                            zoo.dense(5, act=None)], seed=seed % 1000)
    shape = (2, h, w)
    q = quantized(model, rng.normal(0, 1, (32, *shape)).astype(np.float32), form[0], form[1])
    graph = import_onnx(q)
    session = InferenceSession(q, backend="golden")
    hosted = [s.layer for s in session.compiled.steps if isinstance(s, HostStep)]
    assert not hosted, f"host steps: {hosted}"
    (gin,), (gout,) = graph.inputs, graph.outputs
    x = rng.normal(0, 1, (20, *shape)).astype(np.float32)
    in_q, out_q = graph.tensor(gin.tensor).quant, graph.tensor(gout.tensor).quant
    expected = reference.run(graph, {gin.tensor: reference.quantize(to_ir(x, gin.layout), in_q)},
                             outputs_only=True)[gout.tensor]
    (y,) = session.run(None, {gin.model_name: x})
    ours = reference.quantize(y, out_q).astype(int)
    assert np.array_equal(ours, from_ir(expected, gout.layout))
    if isinstance(graph.layers[1], ir.Conv2D):
        # A summing convolution: ONNX Runtime's own float32 sums differ
        # from its exact ones at ties, and one such value reaches every
        # output of the dense layer after it.
        _summing_pool_equals_onnxruntime_but_at_ties(q, x, f"seed {seed}: {case}, {form}")
        return
    theirs = reference.quantize(zoo.ort_run(q, x)[0], out_q).astype(int)
    diff = np.abs(ours - theirs)
    assert diff.max() <= 1 and (diff == 0).mean() >= 0.99, (diff.max(), (diff == 0).mean())


def test_pool_layers_as_compiled():
    """What each form becomes: a padded max pool an identity layer over a
    min-padded input, a 7x7 max pool a 4x4 and a 4x4 pass, a whole-image
    average a global pool, a 5x5 average a summing convolution."""
    from tpu import TPUConfig
    from tpu.compiler.fuse import plan_layers
    from tpu.compiler.pools import split_pools
    rng = np.random.default_rng(0)
    q = quantized(zoo.conv_net((None, 1, 13, 13), [     # 13 -> 7 -> 7 -> 3 -> 1
        zoo.conv(4, k=3, pad=1), zoo.maxpool(3, stride=2, pad=1), zoo.maxpool(7, stride=1, pad=3),
        zoo.avgpool(5, stride=1), zoo.avgpool(3), zoo.flatten()]),
        rng.normal(0, 1, (32, 1, 13, 13)).astype(np.float32), "qdq", "int8")
    graph = import_onnx(q)
    assert [type(l).__name__ for l in graph.layers][:5] == ["Conv2D", "Pool2D", "Pool2D",
                                                            "Conv2D", "Pool2D"]
    split = split_pools(graph)
    assert [(l.kind, l.size, l.padding) for l in split.layers if isinstance(l, ir.Pool2D)] == [
        ("max", (3, 3), (1, 1, 1, 1)), ("max", (4, 4), (3, 3, 3, 3)), ("max", (4, 4), (0,) * 4)]
    assert isinstance(split.layers[5], ir.GlobalAvgPool)
    plan, _ = plan_layers(split, TPUConfig())
    padded = [c for c in plan if getattr(c, "in_fill", None) is not None]
    assert [c.in_fill for c in padded] == [-128, -128]


def test_even_window_counting_pads_equals_onnxruntime():
    """count_include_pad=1 over an even window ties (ONNX Runtime rounds them
    to even in float32): a host step, equal to ONNX Runtime's, unless the
    pool changes the quantization (then a summing convolution, as for every
    average that requantizes, which differs from ONNX Runtime's float32 sum
    only within about 2**-24 of a tie: checked as such, below)."""
    from test_onnx_frontend import FORMS, check
    seed = base_seed()
    print("seed", seed)
    model = zoo.conv_net((None, 2, 7, 6), [
        zoo.conv(4, k=3, pad=1), zoo.avgpool(2, stride=1, pad=(1, 1, 0, 0), count_include_pad=1),
        zoo.flatten(), zoo.dense(5, act=None)], seed=seed % 1000)
    (graph,) = check(model, (2, 7, 6), seed, [FORMS[0]])
    pool = graph.layers[1]
    assert isinstance(pool, ir.HostOp)
    assert pool.op == "qlinear_average_pool" and pool.attrs["count_include_pad"]
    from test_onnx_frontend import SAMPLES
    rng = np.random.default_rng(seed)
    calibration = rng.normal(0, 1, (32, 2, 7, 6)).astype(np.float32)
    x = rng.normal(0, 1, (SAMPLES, 2, 7, 6)).astype(np.float32)
    graph = _summing_pool_equals_onnxruntime_but_at_ties(
        quantized(model, calibration, *FORMS[6]), x, f"seed {seed}, {FORMS[6]}")
    pool = graph.layers[1]
    assert isinstance(pool, ir.Conv2D) and pool.padding == (1, 1, 0, 0)
    assert graph.tensor(pool.input).quant != graph.tensor(pool.output).quant


def _summing_pool_equals_onnxruntime_but_at_ties(q, x, what):
    """`test_onnx_frontend.check` of quantized model `q` on float input `x`
    for a model whose second layer is an average pool the front end makes a
    summing convolution: each layer within a step of ONNX Runtime's and
    equal in 99% of its values; every value of the pool that differs from
    ONNX Runtime's (where its graph keeps the pool's input and output) an
    exact average within 2**-20 of a tie (ONNX Runtime's float32 sum of
    float32 terms lands on either side of it; the chip rounds the exact
    sum); and end to end no output more than a step off, and every sample
    whose pool has no such tie equal. (One differing pool value feeds every
    output of a dense layer after it, so the fraction of equal outputs
    alone says nothing here.) Returns the graph."""
    from test_onnx_frontend import check_layers, ort_tensors, run_both
    graph, ((ours, theirs),) = run_both(q, x)
    check_layers(q, graph, x, 0.99, what)
    pool = graph.layers[1]
    in_q, out_q = graph.tensor(pool.input).quant, graph.tensor(pool.output).quant
    (gin,) = graph.inputs
    mine = reference.run(graph, {gin.tensor: reference.quantize(
        to_ir(x, gin.layout), graph.tensor(gin.tensor).quant)})

    def near_ties(pool_input):
        """Whether each pooled value's exact average is within 2**-20 of a tie."""
        (kh, kw), (sh, sw) = pool.weight.shape[:2], pool.stride
        top, left, bottom, right = pool.padding
        centred = pool_input.astype(np.int64) - int(in_q.zero_point)
        centred = np.pad(centred, ((0, 0), (top, bottom), (left, right), (0, 0)))
        _, oh, ow, _ = mine[pool.output].shape
        total = np.stack([np.stack([centred[:, y * sh:y * sh + kh, x_ * sw:x_ * sw + kw].sum(axis=(1, 2))
                                    for x_ in range(ow)], axis=1) for y in range(oh)], axis=1)
        exact = total * in_q.scale / (kh * kw * out_q.scale) + int(out_q.zero_point)
        return np.abs(exact - np.floor(exact) - 0.5) <= 2 ** -20 * np.maximum(np.abs(exact), 1), exact

    values = ort_tensors(q, graph, x)
    if pool.input in values and pool.output in values:
        pooled = reference.run_layer(graph, pool, values)[pool.output].astype(int)
        expected = values[pool.output].reshape(pooled.shape).astype(int)
        tie, exact = near_ties(values[pool.input])
        for where in map(tuple, np.argwhere((pooled != expected) & ~tie).tolist()):
            raise AssertionError(f"{what}: pool value {where} is {pooled[where]}, ONNX Runtime's "
                                 f"{expected[where]}, and its exact average {float(exact[where])!r} is no tie")
    tied = near_ties(mine[pool.input])[0].any(axis=(1, 2, 3))
    print(f"{int(tied.sum())} samples with a pooled value at a tie")
    assert np.array_equal(ours[~tied], theirs[~tied]), what
    assert np.abs(ours - theirs).max() <= 1, what
    return graph


@pytest.mark.rtl
def test_padded_max_pool_on_rtl(simulator, tmp_path, monkeypatch):
    """A padded 3x3 stride-2 max pool (ResNet's stem form) as the chip runs
    it, over an input padded with the type's lowest value: the whole chip's
    RTL equals the reference."""
    from tpu import TPUConfig
    from tpu.compiler.backend import compile_graph
    from tpu.driver import run
    from test_compiler_backend import _JOB, Builder, random_inputs, run_job
    seed = base_seed()
    print("seed", seed)
    rng = np.random.default_rng(seed)
    config = TPUConfig()
    b = Builder(rng)
    x = b.input((5, 6, 4))
    h = b.conv(x, 6, (3, 3), padding=(1, 1, 1, 1), act="relu")
    p = b.pool(h, "max", 3, 2, padding=(1, 1, 1, 1))
    y = b.dense(b.reshape(p), 5)
    graph = b.graph(y)
    compiled = compile_graph(graph, config, 2)
    assert not [s for s in compiled.steps if isinstance(s, HostStep)]
    inputs = random_inputs(rng, graph, 2)
    compiled.save(tmp_path / "model.tpu")
    np.savez(tmp_path / "inputs.npz", **inputs)
    monkeypatch.setenv(_JOB, str(tmp_path))
    outputs, _ = run(run_job, backend=simulator, config=config)
    assert np.array_equal(outputs[y], reference.run(graph, inputs, outputs_only=True)[y])
