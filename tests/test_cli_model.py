"""The model commands: tpu compile, tpu run, tpu disasm of a compiled model,
through `tpu.cli.main`."""

import json

import numpy as np
import onnx
import pytest

from tpu import cli
from tpu.compiler import zoo


@pytest.fixture(scope="module")
def model_file(tmp_path_factory):
    """A quantized 12-16-5 MLP and a calibration/input set."""
    rng = np.random.default_rng(5)
    x = rng.normal(size=(40, 12)).astype(np.float32)
    model = zoo.quantize(zoo.mlp([12, 16, 5], seed=3), x)
    path = tmp_path_factory.mktemp("models") / "mlp.onnx"
    onnx.save(model, str(path))
    data = path.parent / "x.npy"
    np.save(data, x[:7])
    return path, data, x[:7]


def has_backend():
    try:
        import tpu.compiler.backend       # noqa: F401
        import tpu.compiler.execute       # noqa: F401
    except ImportError:
        return False
    return True


needs_backend = pytest.mark.skipif(not has_backend(), reason="the back end is not built yet")


def test_run_reference_writes_outputs_and_json(model_file, tmp_path, capsys):
    path, data, x = model_file
    out, report = tmp_path / "y.npy", tmp_path / "r.json"
    assert cli.main(["run", str(path), "--input", str(data), "--output", str(out),
                           "--backend", "reference", "--json", str(report)]) == 0
    y = np.load(out)
    (want,) = zoo.ort_run(onnx.load(str(path)), x)
    assert y.shape == want.shape == (7, 5) and y.dtype == np.float32
    # The chip's integer arithmetic is within a step of ONNX Runtime's.
    step = np.abs(np.diff(np.unique(want))).min() if np.unique(want).size > 1 else 1
    assert np.abs(y - want).max() <= step * 1.01
    assert json.loads(report.read_text())["samples"] == 7
    assert "7 inferences on the reference interpreter" in capsys.readouterr().out


def test_run_accepts_float64_and_a_single_sample(model_file, tmp_path):
    path, _, x = model_file
    one = tmp_path / "one.npy"
    np.save(one, x[0].astype(np.float64))
    out = tmp_path / "y.npy"
    assert cli.main(["run", str(path), "--input", str(one), "--output", str(out),
                           "--backend", "reference"]) == 0
    assert np.load(out).shape == (1, 5)


@pytest.mark.parametrize("argv, message", [
    (["run", "{model}", "--input", "{missing}", "--backend", "reference"], "cannot read"),
    (["run", "{bad_shape}", "--input", "{data}", "--backend", "reference"], "expected a .onnx, .tflite, .tpu"),
    (["run", "{model}", "--input", "{wrong}", "--backend", "reference"],
     r"input 'x': shape \(7, 11\) where the model expects \(N, 12\)"),
    (["run", "{model}", "--input", "{data}", "--backend", "fpga"], "invalid choice"),
    (["run", "{model}", "--input", "{data}", "--batch", "0"], "positive integer"),
    (["run", "{model}", "--input", "{data}", "--clock-mhz", "-1"], "positive number"),
    (["run", "{model}", "--input", "{data}", "--rows", "0"], "rows"),
    (["run", "{garbage}", "--input", "{data}", "--backend", "reference"], "garbage.onnx"),
    (["run", "{model}", "--input", "{data}", "--backend", "reference", "--trace", "{missing}"],
     "--trace: the reference backend runs no chip program"),
    (["run", "{model}", "--input", "{data}", "--backend", "serial"], "--backend serial needs --port"),
    (["run", "{model}", "--input", "{data}", "--backend", "serial", "--port", "{missing}"],
     r"serial port \S*nothing.npy does not exist"),
    (["run", "{model}", "--input", "{data}", "--port", "/dev/ttyUSB1"],
     "--port /dev/ttyUSB1 is for --backend serial, not --backend golden"),
    (["run", "{model}", "--input", "{data}", "--backend", "serial", "--port", "loop://",
      "--baud", "0"], "positive integer"),
    (["compile", "{data}"], "expected a .onnx, .tflite model file"),
    (["disasm", "{missing}"], "(?i)no such file"),
])
def test_bad_input_exits_2_with_one_line(model_file, tmp_path, capsys, argv, message):
    path, data, x = model_file
    np.save(tmp_path / "wrong.npy", x[:, :11])
    (tmp_path / "garbage.onnx").write_bytes(b"not a model")
    names = {"model": path, "data": data, "missing": tmp_path / "nothing.npy",
             "bad_shape": tmp_path / "m.txt", "wrong": tmp_path / "wrong.npy",
             "garbage": tmp_path / "garbage.onnx"}
    (tmp_path / "m.txt").write_text("")
    assert cli.main([a.format(**names) for a in argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("tpu: error:") and "\n" not in err
    assert __import__("re").search(message, err), err


@needs_backend
def test_compile_then_run_and_disasm(model_file, tmp_path, capsys):
    path, data, x = model_file
    compiled = tmp_path / "mlp.tpu"
    assert cli.main(["compile", str(path), "-o", str(compiled), "--batch", "4"]) == 0
    assert compiled.exists()
    assert "batch 4 (as asked with --batch)" in capsys.readouterr().err
    out_chip, out_ref = tmp_path / "chip.npy", tmp_path / "ref.npy"
    report = tmp_path / "r.json"
    assert cli.main(["run", str(compiled), "--input", str(data), "--output", str(out_chip),
                           "--json", str(report)]) == 0
    table = capsys.readouterr().out
    assert "inferences/s at 100 MHz" in table and "util" in table
    assert cli.main(["run", str(path), "--input", str(data), "--output", str(out_ref),
                           "--backend", "reference"]) == 0
    assert (np.load(out_chip) == np.load(out_ref)).all()
    data_json = json.loads(report.read_text())
    assert data_json["samples"] == 7 and data_json["total"]["cycles"] > 0
    capsys.readouterr()
    assert cli.main(["disasm", str(compiled)]) == 0
    text = capsys.readouterr().out
    assert "mmc" in text and "halt" in text
    # A compiled model keeps its chip: other options are an error.
    assert cli.main(["run", str(compiled), "--input", str(data), "--rows", "4",
                           "--cols", "4"]) == 2
    assert "compiled for" in capsys.readouterr().err


@needs_backend
def test_run_trace_is_a_perfetto_timeline_of_the_units(model_file, tmp_path, capsys):
    from tpu.bench.trace import TRACKS
    path, data, x = model_file
    trace = tmp_path / "mlp.trace.json"
    assert cli.main(["run", str(path), "--input", str(data), "--batch", "8",
                     "--trace", str(trace)]) == 0
    assert "Perfetto" in capsys.readouterr().err
    events = json.loads(trace.read_text())["traceEvents"]
    names = {e["args"]["name"] for e in events if e["name"] == "thread_name"}
    assert names == set(TRACKS)
    for e in events:             # the trace-event format: complete events have ts and dur
        assert e["ph"] in ("M", "X") and e["pid"] == 1
        if e["ph"] == "X":
            assert isinstance(e["ts"], int) and e["ts"] >= 0 and e["dur"] >= 1 and e["name"]
    tracks = {e["tid"] for e in events if e["ph"] == "X"}
    for unit in ("parts", "instruction issue", "RHM (host -> UB)", "WHM (UB -> host)",
                 "RW (weight commands)", "MMC (matrix unit)", "ACT (activation unit)",
                 "weight FIFO (tile request -> capture)", "array (rows of each MMC)",
                 "stall: host (RHM waits for data)"):
        assert TRACKS.index(unit) in tracks, unit
    # the parts follow each other, and the array's rows fill its MMC slices
    parts = sorted((e for e in events if e.get("tid") == 0 and e["ph"] == "X"),
                   key=lambda e: e["ts"])
    assert len(parts) == 2 and parts[1]["ts"] == parts[0]["ts"] + parts[0]["dur"]
    rows = sum(e["dur"] for e in events
               if e["ph"] == "X" and e["tid"] == TRACKS.index("array (rows of each MMC)"))
    assert rows == sum(p["args"]["mxu_active"] for p in parts)


@needs_backend
def test_chip_fault_exits_1_with_one_line(model_file, monkeypatch, capsys):
    from tpu.compiler import chunks
    from tpu.driver import ChipFault
    from tpu.isa import Fault

    async def faulting(device, compiled, inputs, profile=True):
        raise ChipFault(Fault.UB_RANGE, 3, "act acc=0, ub=9999, rows=1")

    monkeypatch.setattr(chunks, "_execute", faulting)
    path, data, _ = model_file
    assert cli.main(["run", str(path), "--input", str(data)]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("tpu: error:") and "UB_RANGE" in err and "\n" not in err


def two_input_graph():
    from tpu.compiler import ir
    from tpu.compiler.ir import QuantType
    rng = np.random.default_rng(8)
    q = QuantType(0.05, 2)
    tensors = {n: ir.Tensor(n, (6,), q) for n in ("a", "b", "h", "y")}
    layers = [ir.Dense("fc", "a", "h", rng.integers(-60, 60, (6, 6)).astype(np.int8), 0.02),
              ir.Add("sum", "h", "b", "y", ir.Activation("relu"))]
    inputs = [ir.GraphInput(n, n.upper(), (None, 6), np.dtype(np.float32), "nc") for n in "ab"]
    outputs = [ir.GraphOutput("y", "Y", (None, 6), np.dtype(np.float32), "nc"),
               ir.GraphOutput("h", "H", (None, 6), np.dtype(np.int8), "nc")]
    return ir.Graph(tensors, layers, inputs, outputs, "two").validate()


@needs_backend
def test_several_inputs_and_outputs_through_npz(tmp_path, capsys):
    from tpu.compiler.session import InferenceSession
    graph = two_input_graph()
    InferenceSession(graph, batch=2).compiled.save(tmp_path / "two.tpu")
    rng = np.random.default_rng(1)
    feeds = {"A": rng.normal(size=(3, 6)), "B": rng.normal(size=(3, 6))}
    np.savez(tmp_path / "in.npz", **feeds)
    assert cli.main(["run", str(tmp_path / "two.tpu"), "--input", str(tmp_path / "in.npz"),
                           "--output", str(tmp_path / "out.npz")]) == 0
    with np.load(tmp_path / "out.npz") as out:
        got = {k: out[k] for k in out.files}
    want = InferenceSession(graph, backend="reference").run(
        None, {k: v.astype(np.float32) for k, v in feeds.items()})
    assert sorted(got) == ["H", "Y"] and got["H"].dtype == np.int8
    assert (got["Y"] == want[0]).all() and (got["H"] == want[1]).all()
    # One .npy cannot hold two inputs or two outputs.
    np.save(tmp_path / "a.npy", feeds["A"])
    assert cli.main(["run", str(tmp_path / "two.tpu"), "--input",
                           str(tmp_path / "a.npy")]) == 2
    assert "give them in an .npz file" in capsys.readouterr().err
    assert cli.main(["run", str(tmp_path / "two.tpu"), "--input", str(tmp_path / "in.npz"),
                           "--output", str(tmp_path / "out.npy")]) == 2
    assert "write them to an .npz file" in capsys.readouterr().err


@needs_backend
def test_tflite_model_compiles_and_runs(tmp_path):
    pytest.importorskip("tflite")
    from test_tflite_frontend import fc_model
    path = tmp_path / "fc.tflite"
    path.write_bytes(fc_model(np.random.default_rng(3), quantize_edges=True))
    x = np.random.default_rng(4).normal(size=(5, 2, 2, 3)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    assert cli.main(["compile", str(path), "-o", str(tmp_path / "fc.tpu"),
                           "--batch", "2"]) == 0
    for model, backend, out in ((tmp_path / "fc.tpu", "golden", "chip.npy"),
                                (path, "reference", "ref.npy")):
        assert cli.main(["run", str(model), "--input", str(tmp_path / "x.npy"),
                               "--output", str(tmp_path / out), "--backend", backend]) == 0
    chip, ref = np.load(tmp_path / "chip.npy"), np.load(tmp_path / "ref.npy")
    assert chip.shape == (5, 5) and (chip == ref).all()


@needs_backend
def test_run_serial_without_a_chip_fails_in_one_line(model_file, capsys):
    """pyserial's loop:// port echoes the host's own frames back: no chip
    answers as one, and the run ends with a one-line chip error, not a hang."""
    path, data, _ = model_file
    assert cli.main(["run", str(path), "--input", str(data), "--backend", "serial",
                     "--port", "loop://", "--baud", "1000000", "--clock-mhz", "12"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("tpu: error:") and "on serial" in err and "\n" not in err, err


def test_a_long_simulation_is_announced(model_file, capsys):
    """Before a simulation of over a minute, tpu run says roughly how long."""
    from tpu.cli.model import _warn_if_long
    from tpu.compiler.session import InferenceSession
    path, _, _ = model_file
    session = InferenceSession(str(path), backend="golden")
    assert not _warn_if_long(session, "verilator", 1)
    assert capsys.readouterr().err == ""
    assert _warn_if_long(session, "icarus", 100_000)
    err = capsys.readouterr().err
    assert "under icarus: about" in err and "cycles/s" in err and len(err.splitlines()) == 1


@needs_backend
def test_a_long_golden_run_is_announced(model_file, monkeypatch, capsys):
    """tpu run on the golden backend says in one line before a run
    estimated beyond the threshold (lowered here rather than run long)
    how long it will roughly take, and says nothing before a short one."""
    import tpu.cli.model as cli_model
    path, data, _ = model_file
    assert cli.main(["run", str(path), "--input", str(data), "--backend", "golden"]) == 0
    assert "golden chip: about" not in capsys.readouterr().err
    monkeypatch.setattr(cli_model, "LONG_RUN_SECONDS", 0)
    assert cli.main(["run", str(path), "--input", str(data), "--backend", "golden"]) == 0
    lines = [line for line in capsys.readouterr().err.splitlines() if "golden chip: about" in line]
    assert len(lines) == 1 and "cycles/s" in lines[0] and "chunks of batch 1" in lines[0], lines


@needs_backend
def test_compile_says_which_batch_and_why(model_file, tmp_path, capsys):
    """A model of dynamic batch compiles at batch 1, and the command says
    what a larger --batch would give (the cycle model's cycles per
    inference at that batch)."""
    path, _, _ = model_file
    assert cli.main(["compile", str(path), "-o", str(tmp_path / "mlp.tpu")]) == 0
    err = capsys.readouterr().err
    assert "batch 1 (the model's batch is dynamic" in err
    assert "--batch " in err and "cycles per inference instead of" in err


@needs_backend
@pytest.mark.parametrize("command", ["compile", "run"])
def test_a_batch_beyond_memory_is_refused_before_compiling(model_file, tmp_path, monkeypatch,
                                                           capsys, command):
    """A --batch whose compilation would need more memory than the machine
    has is refused in one line naming the batch and the estimate, before any
    compiling, and nothing is written."""
    from tpu.compiler import session
    path, data, _ = model_file

    def never(*args):
        raise AssertionError("compiled although the batch was refused")
    monkeypatch.setattr(session, "_compile", never)
    out = tmp_path / ("big.tpu" if command == "compile" else "y.npy")
    argv = ["compile", str(path), "-o", str(out)] if command == "compile" else \
        ["run", str(path), "--input", str(data), "--output", str(out)]
    assert cli.main([*argv, "--batch", str(10 ** 9)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("tpu: error: batch 1000000000:") and err.count("\n") == 1, err
    assert "GiB of memory" in err and "is available" in err
    assert not out.exists()


@needs_backend
def test_a_long_compile_is_announced(model_file, tmp_path, monkeypatch, capsys):
    """Compiling at a batch estimated at over a minute says so before it
    starts; a short one says nothing of it."""
    from tpu import estimate
    path, _, _ = model_file
    assert cli.main(["compile", str(path), "-o", str(tmp_path / "a.tpu"), "--batch", "4"]) == 0
    assert "compiling at batch" not in capsys.readouterr().err
    monkeypatch.setattr(estimate, "SECONDS_PER_BATCH_ROW", 10.0)
    assert cli.main(["compile", str(path), "-o", str(tmp_path / "b.tpu"), "--batch", "4"]) == 0
    err = capsys.readouterr().err
    first = err.splitlines()[0]
    assert first.startswith("compiling at batch 4 takes about ") and "minutes" in first, err


def test_batch_estimate_counts_the_compilers_rows(model_file):
    """The estimate's rows per sample are the rows the back end's layout
    gives each tensor of one sample, and memory and time grow with the batch."""
    from tpu import TPUConfig, estimate
    from tpu.compiler.layout import Layout
    from tpu.compiler.onnx_frontend import import_onnx
    graph = import_onnx(onnx.load(str(model_file[0])))
    for config in (TPUConfig(), TPUConfig(rows=4, cols=4)):
        want = sum(Layout(*(t.shape if len(t.shape) == 3 else (1, 1, *t.shape)), config.rows,
                          1).rows for t in graph.tensors.values())
        assert estimate.sample_rows(graph, config) == want > 0
        small, large = (estimate.compile_estimate(graph, config, b) for b in (1, 1000))
        assert large[0] > small[0] and large[1] > small[1]
    with pytest.raises(estimate.MachineTooSmall, match="batch 1000000000: .* GiB of memory"):
        estimate.check_batch(graph, TPUConfig(), 10 ** 9)
