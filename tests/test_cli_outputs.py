"""Every command that writes a file follows `tpu.output_files`: an output
that is one of its inputs (by name, through ``./``, a symbolic link or a
hard link) or another of its outputs is refused with exit status 2, one
line, and nothing written; the file written is exactly the one named;
missing parent directories are created."""

import os

import numpy as np
import onnx
import pytest

from tpu import cli
from tpu.compiler import zoo


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """A directory of inputs every command can read: an MLP, its input, a
    program in assembly and binary, data for it."""
    d = tmp_path_factory.mktemp("inputs")
    rng = np.random.default_rng(5)
    x = rng.normal(size=(8, 12)).astype(np.float32)
    onnx.save(zoo.quantize(zoo.mlp([12, 16, 5], seed=3), x), str(d / "mlp.onnx"))
    np.save(d / "x.npy", x[:2])
    (d / "prog.s").write_text("rhm ub=0, rows=2, host=0x0\nwhm ub=0, rows=2, host=0x40\nhalt\n")
    assert cli.main(["asm", str(d / "prog.s"), "-o", str(d / "prog.bin")]) == 0
    (d / "data.in").write_bytes(bytes(range(16)))
    assert cli.main(["compile", str(d / "mlp.onnx"), "-o", str(d / "mlp.tpu")]) == 0
    return d


#: command -> (argv writing OUT from the inputs in D, the input OUT may alias)
COMMANDS = {
    "asm": (["asm", "{D}/prog.s", "-o", "{OUT}"], "prog.s"),
    "disasm": (["disasm", "{D}/prog.bin", "-o", "{OUT}"], "prog.bin"),
    "disasm model": (["disasm", "{D}/mlp.tpu", "-o", "{OUT}"], "mlp.tpu"),
    "exec --output": (["exec", "{D}/prog.s", "--input", "0={D}/data.in",
                       "--output", "0x40:16={OUT}"], "data.in"),
    "exec --output (program)": (["exec", "{D}/prog.s", "--input", "0={D}/data.in",
                                 "--output", "0x40:16={OUT}"], "prog.s"),
    "compile": (["compile", "{D}/mlp.onnx", "-o", "{OUT}"], "mlp.onnx"),
    "run --output": (["run", "{D}/mlp.tpu", "--input", "{D}/x.npy", "--output", "{OUT}"], "x.npy"),
    "run --output (model)": (["run", "{D}/mlp.tpu", "--input", "{D}/x.npy", "--output", "{OUT}"],
                             "mlp.tpu"),
    "run --json": (["run", "{D}/mlp.tpu", "--input", "{D}/x.npy", "--json", "{OUT}"], "x.npy"),
    "run --trace": (["run", "{D}/mlp.tpu", "--input", "{D}/x.npy", "--trace", "{OUT}"], "mlp.tpu"),
}


def _argv(template, d, out):
    return [part.replace("{D}", str(d)).replace("{OUT}", str(out)) for part in template]


def _snapshot(d):
    return {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in d.iterdir() if p.is_file()}


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("alias", ["same", "dot", "symlink", "hardlink"])
def test_an_output_that_is_an_input_is_refused(inputs, tmp_path, capsys, command, alias):
    template, victim = COMMANDS[command]
    d = tmp_path / "d"
    d.mkdir()
    for p in inputs.iterdir():
        (d / p.name).write_bytes(p.read_bytes())
    if alias == "same":
        out = d / victim
    elif alias == "dot":
        out = d / "." / ".." / "d" / victim
    elif alias == "symlink":
        out = d / "link"
        out.symlink_to(d / victim)
    else:
        out = d / "hard"
        os.link(d / victim, out)
    before = _snapshot(d)
    status = cli.main(_argv(template, d, out))
    err = capsys.readouterr().err
    assert status == 2, (command, alias, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tpu: error: ") and "overwrite" in lines[0], err
    assert _snapshot(d) == before, f"{command}: a refused command changed the files"


@pytest.mark.parametrize("command", ["asm", "disasm", "exec --output", "run --output",
                                     "run --json", "compile", "disasm model"])
def test_writes_exactly_the_named_path_creating_directories(inputs, tmp_path, capsys, command):
    template, _ = COMMANDS[command]
    out = tmp_path / "new" / "dir" / "y.txt"
    assert cli.main(_argv(template, inputs, out)) == 0, capsys.readouterr()
    assert out.is_file() and out.stat().st_size > 0
    assert sorted(p.name for p in out.parent.iterdir()) == ["y.txt"]
    assert f"wrote {out}" in "".join(capsys.readouterr()) or command in ("disasm", "disasm model",
                                                                         "run --json")


def test_run_output_y_txt_is_npy_data_in_y_txt(inputs, tmp_path, capsys):
    out = tmp_path / "y.txt"
    assert cli.main(["run", str(inputs / "mlp.tpu"), "--input", str(inputs / "x.npy"),
                     "--output", str(out)]) == 0
    assert np.load(out, allow_pickle=False).shape == (2, 5)
    assert not (tmp_path / "y.txt.npy").exists()


def test_two_outputs_that_are_one_file_are_refused(inputs, tmp_path, capsys):
    d = tmp_path
    out = d / "same.bin"
    status = cli.main(["exec", str(inputs / "prog.s"), "--input", f"0={inputs / 'data.in'}",
                       "--output", f"0:16={out}", "--output", f"0x40:16={d / '.' / 'same.bin'}"])
    assert status == 2 and not out.exists()
    status = cli.main(["run", str(inputs / "mlp.tpu"), "--input", str(inputs / "x.npy"),
                       "--output", str(out), "--json", str(out)])
    assert status == 2 and not out.exists()
    # tpu verilog's port map is its output with suffix .ports.
    status = cli.main(["verilog", "--rows", "2", "--cols", "2", "-o", str(d / "chip.ports")])
    assert status == 2 and not (d / "chip.ports").exists()
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3 and all(line.startswith("tpu: error: ") for line in err), err


def test_a_device_is_written_in_place(inputs, capsys):
    """/dev/null stays a device: an output that is no regular file is not replaced."""
    assert cli.main(["asm", str(inputs / "prog.s"), "-o", os.devnull]) == 0
    assert not os.path.isfile(os.devnull) and os.path.exists(os.devnull)
