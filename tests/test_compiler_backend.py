"""The compiler's back end: IR graphs compiled and run on the golden chip
(through the host driver) equal `tpu.compiler.reference` bit for bit."""

import dataclasses
import json

import numpy as np
import pytest

from tpu import TPUConfig
from tpu.compiler import ir
from tpu.compiler.artifact import FORMAT_VERSION, ChipStep, CompiledModel, HostStep
from tpu.compiler.backend import compile_graph
from tpu.compiler.errors import CompileError, ModelError
from tpu.compiler.execute import execute
from tpu.compiler import reference
from tpu.driver import run

from conftest import base_seed, long_only


SMALL = TPUConfig(rows=8, cols=8, acc_rows=64, ub_rows=4096, weight_mem_tiles=64,
                  pool_max_width=16)


# Graph building ------------------------------------------------------------------------

class Builder:
    """Random quantized layers into an `ir.Graph`."""

    def __init__(self, rng, name="test"):
        self.rng = rng
        self.tensors, self.layers, self.inputs, self.outputs = {}, [], [], []
        self.name = name

    def quant(self, unsigned=None):
        unsigned = bool(self.rng.integers(2)) if unsigned is None else unsigned
        zero = int(self.rng.integers(0, 256) if unsigned else self.rng.integers(-128, 128))
        return ir.QuantType(float(self.rng.uniform(0.01, 0.1)), zero, unsigned)

    def tensor(self, name, shape, quant=None):
        self.tensors[name] = ir.Tensor(name, shape, quant or self.quant())
        return name

    def input(self, shape, name="x", quant=None):
        self.tensor(name, shape, quant)
        self.inputs.append(ir.GraphInput(name, name, (None, *shape), np.float32, "nhwc"))
        return name

    def _scales(self, n, k):
        return self.rng.uniform(0.5, 2.0, size=n) / (k * 64)

    def activation(self, kind, q):
        if kind == "clamp":
            lo = int(self.rng.integers(q.range[0], q.zero_point + 1))
            return ir.Activation("clamp", lo, int(self.rng.integers(lo, q.range[1] + 1)))
        if kind in ("sigmoid", "tanh"):
            pre = ir.QuantType(float(self.rng.uniform(0.02, 0.08)),
                               int(self.rng.integers(100, 156) if q.unsigned
                                   else self.rng.integers(-28, 28)), q.unsigned)
            return ir.Activation(kind, pre=pre)
        return ir.Activation(kind)

    def dense(self, x, n, act="none", name=None):
        name = name or f"dense{len(self.layers)}"
        k = self.tensors[x].size
        out = self.tensor(f"{name}_out", (n,))
        w = self.rng.integers(-127, 128, size=(k, n)).astype(np.int8)
        self.layers.append(ir.Dense(name, x, out, w, self._scales(n, k),
                                    self.rng.integers(-3000, 3000, size=n),
                                    self.activation(act, self.tensors[out].quant)))
        return out

    def conv(self, x, cout, kernel, stride=(1, 1), padding=(0, 0, 0, 0), act="none", name=None):
        name = name or f"conv{len(self.layers)}"
        h, w, cin = self.tensors[x].shape
        kh, kw = kernel
        oh = (h + padding[0] + padding[2] - kh) // stride[0] + 1
        ow = (w + padding[1] + padding[3] - kw) // stride[1] + 1
        out = self.tensor(f"{name}_out", (oh, ow, cout))
        wt = self.rng.integers(-127, 128, size=(kh, kw, cin, cout)).astype(np.int8)
        self.layers.append(ir.Conv2D(name, x, out, wt, self._scales(cout, kh * kw * cin),
                                     self.rng.integers(-3000, 3000, size=cout), stride, padding,
                                     self.activation(act, self.tensors[out].quant)))
        return out

    def pool(self, x, kind, k, s, padding=(0, 0, 0, 0), same_quant=True, name=None):
        name = name or f"pool{len(self.layers)}"
        h, w, c = self.tensors[x].shape
        oh = (h + padding[0] + padding[2] - k) // s + 1
        ow = (w + padding[1] + padding[3] - k) // s + 1
        out = self.tensor(f"{name}_out", (oh, ow, c), self.tensors[x].quant if same_quant else None)
        self.layers.append(ir.Pool2D(name, x, out, kind, (k, k), (s, s), padding))
        return out

    def global_pool(self, x, name=None):
        name = name or f"gap{len(self.layers)}"
        out = self.tensor(f"{name}_out", (1, 1, self.tensors[x].shape[2]), self.tensors[x].quant)
        self.layers.append(ir.GlobalAvgPool(name, x, out))
        return out

    def reshape(self, x, order="hwc", name=None):
        name = name or f"reshape{len(self.layers)}"
        out = self.tensor(f"{name}_out", (self.tensors[x].size,), self.tensors[x].quant)
        self.layers.append(ir.Reshape(name, x, out, order))
        return out

    def add(self, a, b, name=None):
        name = name or f"add{len(self.layers)}"
        out = self.tensor(f"{name}_out", self.tensors[a].shape)
        self.layers.append(ir.Add(name, a, b, out))
        return out

    def elementwise(self, x, act, name=None):
        name = name or f"act{len(self.layers)}"
        out = self.tensor(f"{name}_out", self.tensors[x].shape)
        self.layers.append(ir.Elementwise(name, x, out,
                                          self.activation(act, self.tensors[out].quant)))
        return out

    def graph(self, *outputs):
        outs = [ir.GraphOutput(o, o, (None, *self.tensors[o].shape), np.float32, "nhwc")
                for o in outputs]
        return ir.Graph(dict(self.tensors), list(self.layers), list(self.inputs), outs,
                        self.name).validate()


def random_inputs(rng, graph, batch):
    out = {}
    for i in graph.inputs:
        t = graph.tensor(i.tensor)
        low, high = t.quant.range
        out[i.tensor] = rng.integers(low, high + 1, size=(batch, *t.shape))
    return out


async def _main(device, compiled, inputs):
    return await execute(device, compiled, inputs)


def run_compiled(compiled, inputs, config):
    arena = max(1 << 20, 4 * compiled.host_size + compiled.weights.nbytes + (1 << 16))
    return run(lambda device: _main(device, compiled, inputs), backend="golden", config=config,
               open={"arena_bytes": arena})


def check(graph, config, batch, rng):
    """Compile, run on the golden chip, compare with the reference."""
    compiled = compile_graph(graph, config, batch)
    inputs = random_inputs(rng, graph, batch)
    outputs, profile = run_compiled(compiled, inputs, config)
    expected = reference.run(graph, inputs, outputs_only=True)
    for name, value in expected.items():
        got = outputs[name]
        assert got.dtype == value.dtype and got.shape == value.shape, name
        if not np.array_equal(got, value):
            bad = np.argwhere(got != value)
            raise AssertionError(f"{name}: {len(bad)} of {value.size} values differ, first at "
                                 f"{bad[0].tolist()}: chip {got[tuple(bad[0])]} reference "
                                 f"{value[tuple(bad[0])]}\n{compiled.describe()}")
    return compiled, profile


@pytest.fixture
def rng():
    seed = base_seed()
    print(f"seed {seed} (TPU_SEED={seed} replays)")
    return np.random.default_rng(seed)


# Tests ---------------------------------------------------------------------------------

@pytest.mark.parametrize("batch", [1, 5, 40])
def test_dense_chain(rng, batch):
    b = Builder(rng)
    x = b.input((int(rng.integers(3, 30)),))
    h = b.dense(x, int(rng.integers(3, 20)), "relu")
    y = b.dense(h, int(rng.integers(1, 20)))
    check(b.graph(y), SMALL, batch, rng)


@pytest.mark.parametrize("kernel, stride, padding, shape", [
    ((1, 1), (1, 1), (0, 0, 0, 0), (5, 7, 11)),
    ((3, 3), (1, 1), (1, 1, 1, 1), (6, 9, 10)),
    ((3, 3), (2, 2), (0, 1, 1, 0), (9, 7, 3)),
    ((5, 5), (1, 2), (2, 2, 2, 2), (7, 8, 9)),
    ((7, 7), (3, 3), (3, 3, 3, 3), (11, 10, 2)),
    ((2, 4), (2, 1), (0, 1, 2, 0), (6, 6, 17)),
])
def test_conv(rng, kernel, stride, padding, shape):
    b = Builder(rng)
    x = b.input(shape)
    y = b.conv(x, int(rng.integers(1, 20)), kernel, stride, padding,
               act=["none", "relu", "clamp"][int(rng.integers(3))])
    check(b.graph(y), SMALL, int(rng.integers(1, 4)), rng)


@pytest.mark.parametrize("act", ["relu", "clamp", "sigmoid", "tanh"])
def test_fused_activations(rng, act):
    b = Builder(rng)
    x = b.input((4, 5, 9))
    h = b.conv(x, 10, (3, 3), padding=(1, 1, 1, 1), act=act)
    y = b.dense(h, 7, act)
    check(b.graph(y), SMALL, 3, rng)


@pytest.mark.parametrize("kind, k, s", [("max", 2, 2), ("avg", 2, 2), ("max", 3, 1),
                                        ("avg", 3, 2), ("max", 4, 4)])
def test_fused_pooling(rng, kind, k, s):
    b = Builder(rng)
    x = b.input((9, 8, 6))
    h = b.conv(x, 12, (3, 3), padding=(1, 1, 1, 1), act="relu")
    p = b.pool(h, kind, k, s)
    y = b.conv(p, 5, (3, 3), padding=(1, 1, 1, 1))
    compiled, _ = check(b.graph(y), SMALL, 2, rng)
    assert any(len(s.layers) == 2 for s in compiled.chip_steps), "the pooling was not fused"


@pytest.mark.parametrize("kind", ["max", "avg"])
def test_pooling_several_images_per_act(rng, kind):
    """Unpadded pooled outputs of several images in one accumulator tile: one ACT."""
    b = Builder(rng)
    x = b.input((4, 4, 5))
    h = b.conv(x, 7, (3, 3), padding=(1, 1, 1, 1), act="relu")
    p = b.pool(h, kind, 2, 2)
    compiled, _ = check(b.graph(p), SMALL, 5, rng)
    program = compiled.disassemble()
    assert program.count(f"pool={kind}") == 3, program      # tiles of 2, 2 and 1 images


def test_global_pool_and_dense_head(rng):
    b = Builder(rng)
    x = b.input((5, 5, 3))
    h = b.conv(x, 16, (3, 3), padding=(1, 1, 1, 1), act="relu")
    g = b.global_pool(h)
    f = b.reshape(g)
    y = b.dense(f, 10)
    compiled, _ = check(b.graph(y), SMALL, 4, rng)
    assert not any(isinstance(s, HostStep) for s in compiled.steps)


def test_host_steps(rng):
    """Add, a padded average pool and a softmax run on the host between chip parts."""
    b = Builder(rng)
    x = b.input((6, 7, 5))
    h = b.conv(x, 6, (3, 3), padding=(1, 1, 1, 1), act="relu")
    r = b.conv(h, 6, (1, 1))
    a = b.add(h, r)
    p = b.pool(a, "avg", 3, 2, padding=(1, 1, 1, 1))
    f = b.reshape(p, "chw")
    d = b.dense(f, 9)
    out = b.tensor("probs", (9,), ir.QuantType(1 / 256, -128))
    b.layers.append(ir.HostOp("softmax", "softmax", [d], [out], {"axis": -1}))
    compiled, profile = check(b.graph(out), SMALL, 3, rng)
    hosts = [s.layer for s in compiled.steps if isinstance(s, HostStep)]
    assert hosts == ["add2", "pool3", "softmax"], "the chw flatten should cost nothing"
    assert [p["kind"] for p in profile].count("chip") == 3


@pytest.mark.parametrize("act", ["relu", "sigmoid", "tanh", "clamp"])
def test_standalone_elementwise_and_pooling(rng, act):
    """Standalone activations and pooling run as identity matrix layers."""
    b = Builder(rng)
    x = b.input((6, 6, 10))
    e = b.elementwise(x, act)
    p = b.pool(e, ["max", "avg"][int(rng.integers(2))], 2, 2, same_quant=False)
    g = b.global_pool(p)
    v = b.input((11,), name="v")
    w = b.elementwise(v, act)
    compiled, _ = check(b.graph(g, w), SMALL, 3, rng)
    assert not any(isinstance(s, HostStep) for s in compiled.steps)


def test_batch_beyond_accumulators(rng):
    """Batches spanning several accumulator tiles, and a convolution split in bands."""
    cfg = SMALL.replace(acc_rows=32)
    b = Builder(rng)
    x = b.input((7, 5, 4))
    h = b.conv(x, 9, (3, 3), padding=(1, 1, 1, 1), act="relu")
    p = b.pool(h, "max", 2, 2)
    f = b.reshape(p)
    y = b.dense(f, 13, "relu")
    check(b.graph(y), cfg, 20, rng)
    b = Builder(rng)
    x = b.input((21,))
    y = b.dense(x, 13, "relu")
    z = b.dense(y, 5)
    check(b.graph(z), cfg, 37, rng)


def test_weights_exceed_weight_memory(rng):
    """Parts whose weights do not fit weight memory together: refills between
    parts, and one layer split into parts by output channels."""
    cfg = SMALL.replace(weight_mem_tiles=6)
    b = Builder(rng)
    x = b.input((30,))
    h = b.dense(x, 40, "relu")
    y = b.dense(h, 20)
    compiled, profile = check(b.graph(y), cfg, 3, rng)
    assert len(compiled.weights) > cfg.weight_mem_tiles
    assert len(compiled.chip_steps) > 2
    assert sum(p["weights_loaded"] > 0 for p in profile) >= 3
    # One block of output channels needs more tiles than weight memory
    # holds: K split into parts, the sums kept in the accumulators.
    cfg = SMALL.replace(weight_mem_tiles=3)
    b = Builder(rng)
    x = b.input((3, 3, 10))
    f = b.reshape(x, "chw")
    y = b.dense(f, 11, "relu")
    compiled, profile = check(b.graph(y), cfg, 40, rng)
    assert len(compiled.chip_steps) == 2 * 6        # 18 K tiles in 3s, 2 N tiles


def test_conv_split_by_k_beyond_weight_memory(rng):
    """A convolution whose one block of output channels needs more weight
    tiles than weight memory holds is split by K tiles into parts that add
    into the sums the accumulators keep, with a refill between them."""
    cfg = SMALL.replace(weight_mem_tiles=4)
    b = Builder(rng)
    x = b.input((6, 5, 3))
    h = b.conv(x, 12, (3, 3), padding=(1, 1, 1, 1), act="relu")   # im2col: 27 rows, 4 K tiles
    y = b.conv(h, 5, (3, 3), padding=(1, 0, 1, 0), act="clamp")     # 9 taps x 2 blocks: 18
    compiled, profile = check(b.graph(y), cfg, 2, rng)       # 2 x 30 output rows: 2 M tiles
    names = [s.name for s in compiled.chip_steps]
    assert len(names) == 2 * 1 + 5                           # (4 | 4) K x 2 N; 18 = 4+4+4+4+2
    assert sum(p["weights_loaded"] > 0 for p in profile) >= 5
    # the sums of 3 samples (54 rows) fit the accumulators; those of 4 (72)
    # do not: its M tiles run as many at a time as fit, 3 then 1
    # (tests/test_compiler_bands.py)
    compiled, _ = check(b.graph(y), cfg, 3, rng)
    assert len(compiled.chip_steps) == 2 * 1 + 5
    compiled, _ = check(b.graph(y), cfg, 4, rng)
    assert len(compiled.chip_steps) == 2 * 1 + 2 * 5


def test_all_zero_weight_tiles_are_skipped(rng):
    """All-zero weight tiles are neither loaded nor multiplied. The first kept
    K tile overwrites the accumulators (also when it starts a later part of
    a K-split layer), and an N tile whose weights are all zero keeps one MMC
    so that its outputs are the bias alone."""
    b = Builder(rng)
    x = b.input((5, 5, 16))
    y = b.conv(x, 24, (3, 3), padding=(1, 1, 1, 1))
    w = b.layers[-1].weight.copy()
    # N tile 1 (after N tile 0 has left sums in both accumulator halves):
    # every tap's second channel block zero, and the first tap's first.
    w[:, :, 8:, 8:16] = 0
    w[0, 0, :8, 8:16] = 0
    w[:, :, :, 16:] = 0         # N tile 2: nothing but the bias
    b.layers[-1] = dataclasses.replace(b.layers[-1], weight=w)
    compiled, _ = check(b.graph(y), SMALL, 2, rng)
    assert len(compiled.weights) == 18 + 8 + 1          # of 3 N x 18 K tiles
    # A K-split dense layer (3 K tiles per part) whose first part has
    # nothing to multiply for N tile 1, and an all-zero N tile 2.
    cfg = SMALL.replace(weight_mem_tiles=3)
    b = Builder(rng)
    x = b.input((3, 3, 10))
    f = b.reshape(x, "chw")
    y = b.dense(f, 20, "relu")
    w = b.layers[-1].weight.copy()
    w[[c * 9 for c in range(10)] + [c * 9 + 1 for c in range(8)], 8:16] = 0
    w[:, 16:] = 0
    b.layers[-1] = dataclasses.replace(b.layers[-1], weight=w)
    compiled, _ = check(b.graph(y), cfg, 5, rng)
    assert len(compiled.weights) == 18 + 15 + 1


def test_spill_to_host(rng):
    """A tensor kept for a later layer does not fit the unified buffer with
    the layers between: it goes to host memory and back."""
    b = Builder(rng)
    x = b.input((8, 8, 8))
    a = b.conv(x, 8, (3, 3), padding=(1, 1, 1, 1), act="relu")
    c = b.conv(a, 8, (3, 3), padding=(1, 1, 1, 1), act="relu")
    d = b.conv(c, 8, (3, 3), padding=(1, 1, 1, 1))
    e = b.conv(a, 8, (1, 1))
    g = b.graph(d, e)
    cfg = SMALL.replace(ub_rows=450)
    compiled, _ = check(g, cfg, 2, rng)
    assert compiled.notes and "spilled" in compiled.notes[0]


def test_first_layer_im2col(rng):
    b = Builder(rng)
    x = b.input((9, 9, 1))
    h = b.conv(x, 8, (3, 3), padding=(1, 1, 1, 1), act="relu")
    y = b.conv(h, 4, (3, 3), stride=(2, 2))
    compiled, _ = check(b.graph(y), SMALL, 2, rng)
    assert compiled.inputs[0].im2col is not None
    assert compiled.chip_steps[0].weights[1] == 2        # 9 taps x 1 channel in two tiles
    # patches of 2 kernel rows (6 lanes): one stored row a position, 10 x 9 of them
    assert compiled.inputs[0].im2col["rows"] == 2
    assert compiled.inputs[0].storage.rows == 2 * 10 * 9


@pytest.mark.parametrize("shape, kernel, stride, rows", [
    ((7, 6, 2), (3, 3), (1, 1), 1),      # 6 lanes a kernel row: 3 taps of one block
    ((6, 9, 1), (3, 3), (1, 2), 2),      # strided across
    ((8, 7, 1), (5, 5), (1, 1), 5),      # 25 lanes: whole patches need the fewest tiles
    ((9, 8, 1), (3, 3), (2, 1), 3),      # strided down: whole patches
])
def test_first_layer_patches_of_fewer_kernel_rows(rng, shape, kernel, stride, rows):
    """Host-made patches of `rows` kernel rows, finished by a (kh - rows + 1)
    x 1 convolution on the chip, equal the reference."""
    b = Builder(rng)
    x = b.input(shape)
    h = b.conv(x, 5, kernel, stride=stride, padding=(1, 1, 1, 1), act="relu")
    compiled, _ = check(b.graph(h), SMALL, 3, rng)
    assert compiled.inputs[0].im2col.get("rows", kernel[0]) == rows


def test_save_load_describe(rng, tmp_path):
    b = Builder(rng)
    x = b.input((5, 6, 3))
    h = b.conv(x, 6, (3, 3), padding=(1, 1, 1, 1), act="tanh")
    a = b.add(h, h)
    f = b.reshape(a)
    y = b.dense(f, 4)
    g = b.graph(y)
    compiled = compile_graph(g, SMALL, 2)
    path = tmp_path / "model.tpu"
    compiled.save(path)
    loaded = CompiledModel.load(path)
    assert loaded.describe() == compiled.describe()
    assert loaded.disassemble() == compiled.disassemble()
    assert "mmc" in loaded.disassemble() and "host step" in loaded.disassemble()
    inputs = random_inputs(rng, g, 2)
    outputs, _ = run_compiled(loaded, inputs, SMALL)
    expected = reference.run(g, inputs, outputs_only=True)
    assert np.array_equal(outputs[y], expected[y])


def test_load_refuses_another_format_version(rng, tmp_path):
    """A file of another format version is refused by name (version 1's
    Adds rounded otherwise), and so is a file that is not a compiled model."""
    b = Builder(rng)
    x = b.input((20,))
    compiled = compile_graph(b.graph(b.dense(x, 8)), SMALL, 1)
    path = tmp_path / "model.tpu"
    compiled.save(path)
    with np.load(path, allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    manifest = json.loads(str(arrays["manifest"]))
    manifest["version"] = FORMAT_VERSION - 1
    arrays["manifest"] = np.array(json.dumps(manifest))
    with open(path, "wb") as f:
        np.savez(f, **arrays)
    with pytest.raises(ModelError, match=f"format version {FORMAT_VERSION - 1}, this tpu reads "
                                         f"version {FORMAT_VERSION}: compile the model again"):
        CompiledModel.load(path)
    path.write_bytes(b"not a model")
    with pytest.raises(ModelError, match="not a compiled model file"):
        CompiledModel.load(path)


def test_compile_errors(rng):
    b = Builder(rng)
    x = b.input((20,))
    y = b.dense(x, 8)
    g = b.graph(y)
    with pytest.raises(CompileError, match="square"):
        compile_graph(g, TPUConfig(rows=8, cols=4), 1)
    with pytest.raises(CompileError, match="dense.*unified buffer has 8"):
        compile_graph(g, SMALL.replace(ub_rows=8), 1)
    with pytest.raises(CompileError, match="batch"):
        compile_graph(g, SMALL, 0)


# The RTL, through the driver's simulation backends -------------------------------------

_JOB = "TPU_BACKEND_TEST_JOB"


async def run_job(device):
    """Simulation-side `main`: the compiled model and inputs saved under $TPU_BACKEND_TEST_JOB."""
    import os
    from pathlib import Path
    job = Path(os.environ[_JOB])
    compiled = CompiledModel.load(job / "model.tpu")
    with np.load(job / "inputs.npz") as z:
        inputs = {k: z[k] for k in z.files}
    return await execute(device, compiled, inputs)


@pytest.mark.rtl
def test_two_layers_on_rtl(simulator, rng, tmp_path, monkeypatch):
    """A compiled CNN (im2col first layer, fused pooling padded through host
    memory, a second conv, a dense head) on the whole chip's RTL equals the
    reference and the golden chip (the same counters where the golden model
    is exact)."""
    if simulator == "icarus":
        long_only("two minutes under Icarus; the compiler's output is simulator-independent, and "
                  "Icarus runs the chip's programs in test_host_interface_rtl")
    config = TPUConfig()
    b = Builder(rng)
    x = b.input((6, 4, 3))
    h = b.conv(x, 6, (3, 3), padding=(1, 1, 1, 1), act="relu")
    p = b.pool(h, "max", 2, 2)
    c = b.conv(p, 5, (3, 3), padding=(1, 1, 1, 1), act="relu")
    f = b.reshape(c)
    y = b.dense(f, 5)
    graph = b.graph(y)
    compiled = compile_graph(graph, config, 2)
    inputs = random_inputs(rng, graph, 2)
    compiled.save(tmp_path / "model.tpu")
    np.savez(tmp_path / "inputs.npz", **inputs)
    monkeypatch.setenv(_JOB, str(tmp_path))
    outputs, profile = run(run_job, backend=simulator, config=config)
    expected = reference.run(graph, inputs, outputs_only=True)
    assert np.array_equal(outputs[y], expected[y])
    golden, golden_profile = run_compiled(compiled, inputs, config)
    assert len(profile) == len(golden_profile) == 3
    for part, gold in zip(profile, golden_profile):
        for name in ("mxu_active", "weight_shift"):
            assert part["counters"][name] == gold["counters"][name], (part["name"], name)


def test_streaming_beyond_unified_buffer(rng):
    """Inputs and outputs far larger than the unified buffer stream through
    rings of a few accumulator tiles' samples."""
    cfg = SMALL.replace(acc_rows=128, ub_rows=700)
    b = Builder(rng)
    x = b.input((6, 6, 12))
    y = b.conv(x, 10, (3, 3), padding=(1, 1, 1, 1), act="relu")
    g = b.graph(y)
    compiled, _ = check(g, cfg, 24, rng)
    assert compiled.inputs[0].storage.rows > cfg.ub_rows
    assert any("streamed" in note for note in compiled.notes)
    b = Builder(rng)
    v = b.input((20,))
    w = b.dense(v, 12, "relu")
    check(b.graph(w), SMALL.replace(acc_rows=16, ub_rows=150), 300, rng)


@pytest.mark.parametrize("kind, k, s", [("max", 2, 2), ("avg", 3, 2), ("max", 3, 1)])
def test_wide_images_in_column_chunks(rng, kind, k, s):
    """Images wider than pool_max_width, or than an accumulator region, run
    in chunks of columns on the chip."""
    cfg = SMALL.replace(pool_max_width=7, acc_rows=32)
    b = Builder(rng)
    x = b.input((5, 19, 3))
    h = b.conv(x, 6, (3, 3), padding=(1, 1, 1, 1), act="relu")
    p = b.pool(h, kind, k, s)
    w = b.conv(p, 4, (1, 3), padding=(0, 1, 0, 1))
    v = b.conv(x, 5, (1, 1))
    compiled, _ = check(b.graph(w, v), cfg, 2, rng)
    assert not any(isinstance(s, HostStep) for s in compiled.steps)


def test_execute_refuses_bad_inputs(rng):
    b = Builder(rng)
    x = b.input((6,), quant=ir.QuantType(0.1, 3))
    y = b.dense(x, 4)
    compiled = compile_graph(b.graph(y), SMALL, 2)
    for inputs, message in [({"x": np.zeros((3, 6), dtype=np.int64)}, r"shape \(3, 6\) is not \(2, 6\)"),
                            ({"x": np.full((2, 6), 300)}, r"values outside int8"),
                            ({"z": np.zeros((2, 6))}, "do not match")]:
        with pytest.raises(ValueError, match=message):
            run_compiled(compiled, inputs, SMALL)
    with pytest.raises(ValueError, match="compiled for 8x8"):
        run_compiled(compiled, {"x": np.zeros((2, 6), dtype=np.int64)}, SMALL.replace(ub_rows=512))


def test_tensor_read_by_conv_and_dense(rng):
    """A tensor stored padded for one reader is read in place by the others
    (a dense layer through a flatten, a convolution with other padding)."""
    b = Builder(rng)
    x = b.input((5, 6, 10))
    h = b.conv(x, 9, (3, 3), padding=(1, 2, 1, 0), act="relu")
    c = b.conv(h, 4, (3, 3), padding=(2, 1, 0, 1))
    d = b.dense(b.reshape(h, "chw"), 7)
    e = b.dense(b.reshape(x), 3)
    check(b.graph(c, d, e), SMALL, 3, rng)


def test_compute_bound_gemm_schedule():
    """A compute-bound GEMM (M = 64 x rows) keeps the array busy: the first
    M tile's input is read block by block just ahead of its MMCs (the next M
    tile's only once those are out), the next M tile's while the current one
    runs all its N tiles, and the DMAs are spread so none stops the MMCs
    behind it; the tables are read after the first tile's input; the last
    tile runs in row pieces, smaller towards the end, whose ACTs and WHMs
    drain beside the array. Exact cycles of the cycle model (the golden
    chip's counters): 98.8% MXU utilisation over the whole program (95.6%
    when the next tile's reads went among the first tile's, 88.5% when all of
    a tile's reads were issued at once)."""
    from tpu.bench.common import dense_graph
    from tpu.isa import decode_program
    from tpu.models.cycle_model import estimate_cycles
    config = TPUConfig(ub_rows=1 << 17)
    compiled = compile_graph(dense_graph(64, 64), config, 512)
    (step,) = compiled.chip_steps
    estimate = estimate_cycles(config, decode_program(step.program))
    ideal = 512 * 8 * 8
    assert estimate["counters"]["mxu_active"] == ideal
    assert estimate["cycles"] == 33179
    assert ideal / estimate["cycles"] > 0.985
    assert estimate["matrix_phase"]["first_row"] < 300        # after one block of input
    assert estimate["cycles"] - estimate["matrix_phase"]["last_row"] < 100   # drained beside it


def test_gemm_of_eight_array_rows_reaches_95_percent():
    """M = 8 x rows (64x64x64 on 8x8): one M tile, so nothing hides the first
    tile's reads and the last tile's drain; the drain runs in pieces of 38,
    16 and 10 rows, and the activation unit's LDQs and ACTs go as soon as it
    is free. Exact cycles of the cycle model: 95.7% (93.5% when the last
    tile drained whole after the array)."""
    from tpu.bench.common import dense_graph
    from tpu.models.cycle_model import estimate_cycles
    config = TPUConfig()
    compiled = compile_graph(dense_graph(64, 64), config, 64)
    (step,) = compiled.chip_steps
    estimate = estimate_cycles(config, step.program)
    assert estimate["counters"]["mxu_active"] == 64 * 8 * 8
    assert estimate["counters"]["weight_stall"] == 0
    assert estimate["cycles"] == 4282
    assert estimate["counters"]["mxu_active"] / estimate["cycles"] >= 0.95
    assert estimate["cycles"] - estimate["matrix_phase"]["last_row"] < 70


@pytest.mark.parametrize("m, k, n", [(16, 32, 10), (24, 32, 16), (5, 20, 32), (100, 64, 10)])
def test_dense_tiles_without_pieces_write_every_output(rng, m, k, n):
    """Dense layers whose last tile is not cut into pieces: the WHMs of the
    tile before, waiting for its ACTs, still go out (16x32x10 lost them)."""
    from tpu.bench.common import dense_graph
    check(dense_graph(k, n, seed=int(rng.integers(1 << 16))), TPUConfig(), m, rng)


@pytest.mark.parametrize("m", [8, 11, 64, 69, 512])
def test_no_weight_stalls_once_the_batch_fills_the_array(m):
    """With weight bandwidth of `cols` bytes a cycle and a batch of at least
    `rows`, no MMC waits for its weight tile (the GEMMs of `tpu bench
    --quick`): a part's first RWs go at its start, and the last tile's
    pieces are never shorter than a tile's load."""
    from tpu.bench.common import dense_graph
    from tpu.models.cycle_model import estimate_cycles
    config = TPUConfig(ub_rows=1 << 17)
    for k in (8, 29, 64):
        for n in (8, 64):
            compiled = compile_graph(dense_graph(k, n), config, m)
            for step in compiled.chip_steps:
                counters = estimate_cycles(config, step.program)["counters"]
                assert counters["weight_stall"] == 0, (m, k, n, step.name)


@pytest.mark.rtl
def test_gemm_of_eight_array_rows_on_rtl(simulator, rng, tmp_path, monkeypatch):
    """The 64x64x64 GEMM's schedule (pieces of the last tile, RWs at the
    start) on the whole chip's RTL: outputs equal the reference and the
    golden chip, the array does the same work, and no MMC waits for its
    weights there either (the RTL's host link only adds host and RAW stalls)."""
    if simulator == "icarus":
        long_only("two minutes under Icarus; the compiler's output is simulator-independent, and "
                  "Icarus runs the chip's programs in test_host_interface_rtl")
    from tpu.bench.common import dense_graph
    config = TPUConfig()
    graph = dense_graph(64, 64, seed=int(rng.integers(1 << 16)))
    compiled = compile_graph(graph, config, 64)
    inputs = random_inputs(rng, graph, 64)
    compiled.save(tmp_path / "model.tpu")
    np.savez(tmp_path / "inputs.npz", **inputs)
    monkeypatch.setenv(_JOB, str(tmp_path))
    outputs, profile = run(run_job, backend=simulator, config=config)
    golden, golden_profile = run_compiled(compiled, inputs, config)
    assert np.array_equal(outputs["y"], reference.run(graph, inputs, outputs_only=True)["y"])
    assert np.array_equal(outputs["y"], golden["y"])
    [part], [gold] = profile, golden_profile
    for name in ("mxu_active", "weight_shift", "weight_stall"):
        assert part["counters"][name] == gold["counters"][name], name
    assert part["counters"]["weight_stall"] == 0
    print(f"{simulator}: {part['counters']['cycles']} cycles, golden {gold['counters']['cycles']}")


@pytest.mark.parametrize("pool", [True, False])
def test_first_layer_reads_several_tiles_at_a_time(rng, pool):
    """A first convolution over host-made patches, whose input streams
    through the unified buffer, reads two or three accumulator tiles' patches
    per RHM (`lower._paced_reads`: one host-link round trip per read) and
    still equals the reference; random image sizes and batches."""
    from tpu.isa import Rhm, decode_program
    cfg = SMALL.replace(acc_rows=128, ub_rows=900)
    h, w = (int(v) for v in rng.integers(4, 8, 2))
    # Enough images that the input does not fit the unified buffer and streams
    # through it (a resident input is read a tile at a time).
    batch = int(rng.integers(48, 72))
    b = Builder(rng)
    x = b.input((h, w, 1))
    y = b.conv(x, int(rng.integers(3, 9)), (3, 3), padding=(1, 1, 1, 1), act="relu")
    if pool:     # (pooled into an unpadded stage, padded through host memory)
        y = b.pool(y, "max", 2, 2)
        z = b.conv(y, 4, (3, 3), padding=(1, 1, 1, 1))
    else:        # (the output needs no padding rows filled)
        z = b.conv(y, 4, (1, 1))
    print(f"{h}x{w} image, batch {batch}, pool {pool}")
    compiled, _ = check(b.graph(z), cfg, batch, rng)
    first = compiled.chip_steps[0]
    rows = compiled.inputs[0].storage.sample_stride
    region = cfg.acc_rows // 2
    per_tile = max(1, region // (h * w))
    reads = [i.rows for i in decode_program(first.program) if isinstance(i, Rhm)]
    assert any(n >= 2 * per_tile * rows for n in reads), (reads, per_tile * rows)
