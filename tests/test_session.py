"""InferenceSession: feeds checked like onnxruntime, float inputs quantized,
NCHW turned into the IR's layout, batches cut into compiled-batch chunks, and
the outputs equal to the reference interpreter."""

from dataclasses import dataclass

import numpy as np
import pytest

from tpu import TPUConfig
from tpu.compiler import chunks as chunks_module, ir, reference, session as session_module
from tpu.compiler.session import InferenceSession, from_ir_layout, to_ir_layout

from test_compiler_reference import small_graph


def float_images(rng, n):
    return rng.uniform(-6, 6, (n, 2, 6, 6)).astype(np.float32)


def expected(graph, images):
    """What the session must return: quantize, NCHW -> HWC, reference, dequantize."""
    x = reference.quantize(images, graph.tensor("x").quant).transpose(0, 2, 3, 1)
    out = reference.run(graph, {"x": x}, outputs_only=True)["s"]
    return reference.dequantize(out, graph.tensor("s").quant)


# A stand-in back end: records the chunks and computes them with the reference.

@dataclass
class StubCompiled:
    graph: ir.Graph
    config: TPUConfig
    batch: int


@pytest.fixture
def stub_backend(monkeypatch):
    calls = []

    def compile_graph(graph, config, batch):
        return StubCompiled(graph, config, batch or 1)

    async def execute(device, compiled, inputs, profile=True):
        assert device.config == compiled.config
        calls.append({k: v.copy() for k, v in inputs.items()})
        outs = reference.run(compiled.graph, inputs, outputs_only=True)
        return outs, [{"part": "all", "counters": {"cycles": 100}}]

    monkeypatch.setattr(session_module, "_compile", compile_graph)
    monkeypatch.setattr(chunks_module, "_execute", execute)
    return calls


def test_describes_inputs_and_outputs():
    s = InferenceSession(small_graph(), backend="reference")
    (i,), (o,) = s.get_inputs(), s.get_outputs()
    assert (i.name, i.shape, i.type) == ("input", [None, 2, 6, 6], "tensor(float)")
    assert (o.name, o.shape, o.type) == ("prob", [None, 4], "tensor(float)")


def test_undeclared_model_shape_is_the_ir_shape():
    graph = small_graph()
    graph.inputs[0].model_shape = None
    graph.inputs[0].layout = "nhwc"
    s = InferenceSession(graph, backend="reference")
    assert s.get_inputs()[0].shape == [None, 6, 6, 2]
    (probs,) = s.run(None, {"input": np.zeros((2, 6, 6, 2), np.float32)})
    assert probs.shape == (2, 4)
    with pytest.raises(ValueError, match=r"expects \(N, 6, 6, 2\)"):
        s.run(None, {"input": np.zeros((2, 2, 6, 6), np.float32)})


def test_reference_backend_quantizes_and_converts_layout():
    graph = small_graph()
    images = float_images(np.random.default_rng(1), 5)
    (probs,) = InferenceSession(graph, backend="reference").run(None, {"input": images})
    assert probs.dtype == np.float32 and probs.shape == (5, 4)
    assert (probs == expected(graph, images)).all()
    # Softmax outputs are probabilities, near 1 in sum.
    assert np.allclose(probs.sum(axis=1), 1, atol=0.05)


@pytest.mark.parametrize("samples, batch", [(1, 4), (4, 4), (7, 3), (9, 2)])
def test_batches_split_into_compiled_chunks(stub_backend, samples, batch):
    graph = small_graph()
    images = float_images(np.random.default_rng(samples), samples)
    s = InferenceSession(graph, backend="golden", batch=batch)
    (probs,) = s.run(["prob"], {"input": images})
    assert probs.shape == (samples, 4)
    assert (probs == expected(graph, images)).all()
    chunks = [c["x"] for c in stub_backend]
    assert len(chunks) == -(-samples // batch)
    assert all(c.shape == (batch, 6, 6, 2) for c in chunks)
    # The padding of the last chunk is the input's zero point.
    pad = len(chunks) * batch - samples
    if pad:
        assert (chunks[-1][batch - pad:] == graph.tensor("x").quant.zero_point).all()
    assert len(s.last_profile) == len(chunks)
    heard = []
    s.progress = lambda done, total: heard.append((done, total))
    s.run(None, {"input": images})
    assert heard == [(i + 1, len(chunks)) for i in range(len(chunks))]


def test_quantized_inputs_and_outputs(stub_backend):
    graph = small_graph()
    graph.inputs[0].model_dtype = np.dtype(np.int8)
    graph.outputs[0].model_dtype = np.dtype(np.int8)
    x = np.random.default_rng(2).integers(-128, 128, (3, 2, 6, 6)).astype(np.int8)
    (out,) = InferenceSession(graph, backend="golden", batch=2).run(None, {"input": x})
    want = reference.run(graph, {"x": x.transpose(0, 2, 3, 1)}, outputs_only=True)["s"]
    assert out.dtype == np.int8 and (out == want).all()
    with pytest.raises(ValueError, match="input 'input': dtype float32 where the model expects int8"):
        InferenceSession(graph, backend="reference").run(None, {"input": x.astype(np.float32)})


@pytest.mark.parametrize("feeds, message", [
    ({"image": np.zeros((1, 2, 6, 6), np.float32)}, "unknown input 'image'; the model's inputs are 'input'"),
    ({}, "missing input 'input'"),
    ({"input": np.zeros((1, 2, 6, 5), np.float32)},
     r"input 'input': shape \(1, 2, 6, 5\) where the model expects \(N, 2, 6, 6\)"),
    ({"input": np.zeros((2, 6, 6), np.float32)}, "shape"),
    ({"input": np.zeros((1, 2, 6, 6), np.float64)}, "dtype float64 where the model expects float32"),
    ({"input": np.full((1, 2, 6, 6), np.nan, np.float32)}, "NaN"),
    ({"input": np.zeros((0, 2, 6, 6), np.float32)}, "no samples"),
])
def test_bad_feeds_are_one_line_errors(feeds, message):
    s = InferenceSession(small_graph(), backend="reference")
    with pytest.raises(ValueError, match=message) as error:
        s.run(None, feeds)
    assert "\n" not in str(error.value)


def test_bad_output_names_and_arguments(tmp_path):
    s = InferenceSession(small_graph(), backend="reference")
    with pytest.raises(ValueError, match="unknown output 'probs'; the model's outputs are 'prob'"):
        s.run(["probs"], {"input": np.zeros((1, 2, 6, 6), np.float32)})
    with pytest.raises(TypeError, match="run_options"):
        s.run(None, {"input": np.zeros((1, 2, 6, 6), np.float32)}, run_options=object())
    with pytest.raises(ValueError, match="unknown backend 'fpga'"):
        InferenceSession(small_graph(), backend="fpga")
    with pytest.raises(ValueError, match="batch must be a positive integer"):
        InferenceSession(small_graph(), backend="reference", batch=0)
    with pytest.raises(FileNotFoundError, match="no such model file"):
        InferenceSession(tmp_path / "missing.onnx")
    (tmp_path / "model.txt").write_text("")
    with pytest.raises(ValueError, match="an .onnx or .tflite file or a compiled .tpu file"):
        InferenceSession(tmp_path / "model.txt")
    with pytest.raises(TypeError, match="not int"):
        InferenceSession(3)


def test_layout_round_trip():
    x = np.arange(2 * 3 * 4 * 5).reshape(2, 3, 4, 5)
    hwc = to_ir_layout(x, "nchw", (4, 5, 3))
    assert hwc[1, 2, 3, 0] == x[1, 0, 2, 3]
    assert (from_ir_layout(hwc, "nchw", (None, 3, 4, 5)) == x).all()
    assert (to_ir_layout(x, "nhwc", (3, 4, 5)) == x).all()
    v = np.arange(6).reshape(2, 3)
    assert (from_ir_layout(v, "nc", (1, 3)) == v).all()


def test_simulation_job_round_trip(tmp_path, monkeypatch):
    """The job a simulation process reads is what the session wrote."""
    saved = {}

    class Saving(StubCompiled):
        def save(self, path):
            saved[str(path)] = self
            open(path, "wb").close()

    monkeypatch.setattr(session_module, "_load_compiled", lambda path: saved[str(path)])
    compiled = Saving(small_graph(), TPUConfig(), 2)
    rng = np.random.default_rng(0)
    chunks = [{"x": rng.integers(-128, 128, (2, 6, 6, 2)).astype(np.int8)} for _ in range(3)]
    session_module.write_job(tmp_path, compiled, chunks)
    got_compiled, got_chunks = session_module.read_job(tmp_path)
    assert got_compiled is compiled
    assert len(got_chunks) == 3
    assert all((a["x"] == b["x"]).all() and a["x"].dtype == np.int8
               for a, b in zip(chunks, got_chunks))


def test_simulated_main_needs_its_job(monkeypatch):
    import asyncio
    monkeypatch.delenv(session_module.JOB_VARIABLE, raising=False)
    with pytest.raises(RuntimeError, match="TPU_COMPILER_JOB is not set"):
        asyncio.run(session_module.simulated_main(None))


# The real back end ------------------------------------------------------------------------

def has_backend():
    try:
        import tpu.compiler.backend       # noqa: F401
        import tpu.compiler.execute       # noqa: F401
    except ImportError:
        return False
    return True


needs_backend = pytest.mark.skipif(not has_backend(), reason="the back end is not built yet")


@needs_backend
@pytest.mark.parametrize("samples, batch", [(1, 1), (5, 2), (3, 4)])
def test_golden_chip_equals_reference(samples, batch):
    graph = small_graph()
    images = float_images(np.random.default_rng(10 + samples), samples)
    s = InferenceSession(graph, backend="golden", batch=batch)
    (probs,) = s.run(None, {"input": images})
    assert (probs == expected(graph, images)).all()
    assert len(s.last_profile) == -(-samples // batch)
    r = s.report()
    chip = [row for row in r.rows if row.where == "chip"]
    assert chip and all(row.cycles > 0 and row.counters["mxu_active"] > 0 for row in chip)
    # MACs of the real samples only: 36 pixels x 9 taps x 2 x 3 for the conv, 27 x 4 for fc.
    assert sum(row.macs for row in r.rows) == samples * (36 * 9 * 2 * 3 + 27 * 4)
    assert r.total.weight_tiles_loaded >= len(s.compiled.weights)
    assert r.total.cycles == sum(p["counters"]["cycles"] for chunk in s.last_profile
                                 for p in chunk if p["kind"] == "chip")


@needs_backend
def test_compiled_model_file_round_trip(tmp_path):
    graph = small_graph()
    compiled = InferenceSession(graph, batch=3).compiled
    compiled.save(tmp_path / "m.tpu")
    s = InferenceSession(tmp_path / "m.tpu")
    assert s.batch == 3 and [i.name for i in s.get_inputs()] == ["input"]
    images = float_images(np.random.default_rng(4), 4)
    (probs,) = s.run(["prob"], {"input": images})
    assert (probs == expected(graph, images)).all()
    with pytest.raises(ValueError, match="compiled for batch 3, not 2"):
        InferenceSession(tmp_path / "m.tpu", batch=2)
    with pytest.raises(ValueError, match="compiled for a chip with rows=8, cols=8, "
                                         "not rows=4, cols=4: compile"):
        InferenceSession(tmp_path / "m.tpu", config=TPUConfig(rows=4, cols=4))
    with pytest.raises(ValueError, match="reference backend runs the model's graph"):
        InferenceSession(tmp_path / "m.tpu", backend="reference")


@needs_backend
def test_onnx_model_proto_and_large_host_memory():
    """A ModelProto is imported; a chunk needing more than the driver's default
    1 MiB of host memory gets a larger arena on the golden backend."""
    from tpu.compiler import zoo
    rng = np.random.default_rng(6)
    x = rng.normal(size=(300, 256)).astype(np.float32)
    model = zoo.quantize(zoo.mlp([256, 4], seed=1), x[:40])
    s = InferenceSession(model, batch=4096, config=TPUConfig(rows=16, cols=16, ub_rows=1 << 17,
                                                             acc_rows=1 << 13))
    assert session_module.host_bytes(s.compiled) > session_module.DEFAULT_ARENA_BYTES
    (y,) = s.run(None, {"x": x})
    (want,) = InferenceSession(model, backend="reference").run(None, {"x": x})
    assert y.shape == (300, 4) and (y == want).all()


def test_errors_inside_a_simulation_come_back(tmp_path, monkeypatch):
    """`simulated_main` returns an error as a picklable result; the session
    raises it again with its own words (a chip fault stays a TpuError)."""
    import asyncio
    import pickle
    from tpu.driver import ChipFault, TpuError
    from tpu.isa import Fault

    async def faulting(device, compiled, inputs, profile=True):
        raise ChipFault(Fault.UB_RANGE, 3, "act acc=0, ub=9999, rows=1")

    chunks = [{"x": np.zeros((2, 6, 6, 2), np.int8)}]
    monkeypatch.setattr(session_module, "read_job", lambda directory: (None, chunks))
    monkeypatch.setattr(chunks_module, "_execute", faulting)
    monkeypatch.setenv(session_module.JOB_VARIABLE, str(tmp_path))
    result = pickle.loads(pickle.dumps(asyncio.run(session_module.simulated_main(None))))
    with pytest.raises(TpuError, match="ChipFault in the simulation: .*UB_RANGE"):
        session_module.raise_remote_error(result)

    async def bad_input(device, compiled, inputs, profile=True):
        raise ValueError("input 'x': shape (2, 6, 6, 2) is not (3, 6, 6, 2)")

    monkeypatch.setattr(chunks_module, "_execute", bad_input)
    result = asyncio.run(session_module.simulated_main(None))
    with pytest.raises(ValueError, match="ValueError in the simulation: input 'x'"):
        session_module.raise_remote_error(result)
    assert session_module.raise_remote_error([1, 2]) == [1, 2]
