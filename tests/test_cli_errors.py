"""Every `tpu` command against a table of bad input: a one-line error and
exit status 2, never a traceback, and nothing written; a chip fault is
exit status 1."""

import re

import pytest

from tpu.cli import main


PROGRAM = "rhm ub=0, rows=2, host=0x0\nwhm ub=0, rows=2, host=0x100\nhalt\n"
# Generating any of these would take far more memory than any test machine has.
HUGE = ["--rows", "256", "--cols", "256", "--pool-max-width", "65535"]


@pytest.fixture
def files(tmp_path):
    """A scratch directory with good and bad inputs; paths by name."""
    made = {
        "prog.s": PROGRAM,
        "empty.s": "",
        "comments.s": "; nothing here\n\n",
        "absurd.s": "int code=" + "9" * 5000 + "\n",
        "absurd_hex.s": "int code=0x" + "f" * 5000 + "\n",
        "unknown.s": "frob ub=0\n",
        "text.bin": "abcdefghijklmno\n" * 2,      # a multiple of 16 bytes of text
        "odd.bin": b"\x00" * 20,
        "empty.bin": b"",
        "data.in": bytes(range(16)),
        "empty.in": b"",
        "weights.bin": bytes(63),                 # not a whole 8x8 tile
        "fault.s": "rhm ub=0, rows=1, host=0x10000000\nhalt\n",   # outside the DMA window
    }
    for name, content in made.items():
        path = tmp_path / name
        if isinstance(content, str):
            path.write_text(content)
        else:
            path.write_bytes(content)
    (tmp_path / "dir").mkdir()
    (tmp_path / "blocker").write_text("")
    from tpu.asm import assemble
    (tmp_path / "prog.bin").write_bytes(assemble(PROGRAM))
    return tmp_path


# (arguments with {placeholders} for paths in `files`, fragments of the message)
BAD = [
    # verilog
    (["verilog", "-o", ""], ["output path is empty"]),
    (["verilog", "-o", "{dir}"], ["is a directory"]),
    (["verilog", "--rows", "1", "--cols", "1", "--acc-rows", "16", "-o", "{blocker}/x.v"],
     ["cannot write"]),
    (["verilog", "--ports", "-o", "{dir}/x.v"], ["--ports prints the port map"]),
    (["verilog", *HUGE], ["would need about", "GiB of memory", "available"]),
    (["verilog", "--top", "board"], ["invalid choice: 'board'"]),
    (["verilog", "--rows", "0"], ["TPUConfig.rows = 0"]),
    (["verilog", "--profile", "up6k"], ["unknown board profile 'up6k'", "up5k"]),
    (["verilog", "--profile", "up5k", "--requantizers", "3"], ["requantizers = 3 is more than cols = 2"]),
    # sim
    (["sim", "--testcase", "nonexistent"], ["unknown testcase nonexistent", "registers, check_"]),
    (["sim", "--top", "engine", "--testcase", "nope"], ["random_operations, extreme_values"]),
    (["sim", "--seed", "-5"], ["seed -5 is out of range"]),
    (["sim", "--seed", "five"], ["invalid seed 'five'"]),
    (["sim", "--top", "core", "--testcase", "program_mlp"],
     ["program_mlp cannot run on 8x8", "--acc-rows 64"]),
    (["sim", "--sim", "modelsim"], ["invalid choice: 'modelsim'"]),
    (["sim", *HUGE], ["would need about"]),
    # exec
    (["exec", "{dir}/missing.s"], ["No such file or directory"]),
    (["exec", "{dir}"], ["Is a directory"]),
    (["exec", ""], ["program path is empty"]),
    (["exec", "{empty.s}"], ["is empty"]),
    (["exec", "{comments.s}"], ["holds no instructions"]),
    (["exec", "{unknown.s}"], ["unknown mnemonic 'frob'"]),
    (["exec", "{absurd.s}"], ["absurd.s"]),
    (["exec", "{odd.bin}"], ["20 bytes is not a whole number"]),
    (["exec", "{prog.s}", "--input", "0x10"], ["expected ADDR=FILE"]),
    (["exec", "{prog.s}", "--input", "zero={data.in}"], ["'zero' is not a number"]),
    (["exec", "{prog.s}", "--input", "0={dir}/none.in"], ["No such file or directory"]),
    (["exec", "{prog.s}", "--input", "0={empty.in}"], ["is empty"]),
    (["exec", "{prog.s}", "--input", "0x7ffffff0={data.in}"], ["bytes of host memory",
                                                              "arena holds 1048576"]),
    (["exec", "{prog.s}", "--output", "0x100=out.bin"], ["expected ADDR:NBYTES=FILE"]),
    (["exec", "{prog.s}", "--output", "0x100:0={dir}/o.bin"], ["NBYTES is 0"]),
    (["exec", "{prog.s}", "--output", "0x100:16={prog.s}"], ["would overwrite the input"]),
    (["exec", "{prog.s}", "--input", "0={data.in}", "--output", "0x100:16={data.in}"],
     ["would overwrite the input"]),
    (["exec", "{prog.s}", "--output", "0:16={dir}/o", "--output", "16:16={dir}/o"],
     ["name the same file"]),
    (["exec", "{prog.s}", "--output", "0:16={dir}"], ["is a directory"]),
    (["exec", "{prog.s}", "--weights", "{weights.bin}"], ["63 bytes, not a whole number of 8x8"]),
    (["exec", "{prog.s}", "--backend", "fpga"], ["invalid choice: 'fpga'"]),
    (["exec", "{prog.s}", "--timeout", "-1"], ["not in 0 < seconds"]),
    (["exec", "{prog.s}", "--backend", "icarus", *HUGE], ["would need about"]),
    (["exec", "{prog.s}", "--waves", "{dir}/w.fst"], ["--waves needs a simulation backend"]),
    # demo
    (["demo", "-o", ""], ["output path is empty"]),
    (["demo", "-o", "{dir}"], ["is a directory"]),
    (["demo", "--rows", "8", "--cols", "4"], ["does not fit --rows 8 --cols 4", "rows must equal cols"]),
    # Refused before the training, and before its output directory is made.
    (["demo", "--ub-rows", "16", "--out", "{dir}/demo"], ["does not fit --ub-rows 16"]),
    (["demo", *HUGE], ["would need about"]),
    # bench (compile, run: tests/test_cli_model.py; build, flash: tests/test_cli_fpga.py)
    (["bench", "--rows", "0"], ["TPUConfig.rows = 0"]),
    (["bench", "--out", ""], ["--out", "empty"]),
    (["bench", "--out", "{prog.s}"], ["not a directory"]),
    # asm
    (["asm", "{empty.s}"], ["is empty"]),
    (["asm", "{comments.s}"], ["holds no instructions"]),
    (["asm", "{dir}/missing.s"], ["No such file or directory"]),
    (["asm", "{dir}"], ["Is a directory"]),
    (["asm", "{prog.s}", "-o", "{prog.s}"], ["would overwrite the input"]),
    (["asm", "{prog.s}", "-o", ""], ["output path is empty"]),
    (["asm", "{prog.s}", "-o", "{dir}"], ["is a directory"]),
    (["asm", "{absurd.s}"], ["absurd.s"]),
    (["asm", "{absurd_hex.s}"], ["absurd_hex.s"]),
    # disasm
    (["disasm", "{empty.bin}"], ["is empty"]),
    (["disasm", "{text.bin}"], ["is text, not a binary program"]),
    (["disasm", "{odd.bin}"], ["20 bytes leave 4 over"]),
    (["disasm", "{prog.bin}", "-o", "{prog.bin}"], ["would overwrite the input"]),
    (["disasm", "{prog.bin}", "-o", ""], ["output path is empty"]),
    (["disasm", "{dir}/missing.bin"], ["No such file or directory"]),
    # no command, unknown command
    (["frobnicate"], ["invalid choice: 'frobnicate'"]),
]


def _ids(case):
    return " ".join(case[0])[:60]


@pytest.mark.parametrize("args, fragments", BAD, ids=[_ids(case) for case in BAD])
def test_bad_input(files, capsys, args, fragments):
    before = {path: path.stat().st_mtime_ns for path in files.rglob("*")}
    argv = [re.sub(r"\{([^}]+)\}", lambda m: str(files / m.group(1)), arg) for arg in args]
    status = main(argv)
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert status == 2, (status, out, err)
    assert len(lines) == 1 and lines[0].startswith("tpu: error: "), err
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    after = {path: path.stat().st_mtime_ns for path in files.rglob("*")}
    assert after == before, "a refused command changed the files"


def test_no_command_prints_help(capsys):
    assert main([]) == 2
    assert "COMMAND" in capsys.readouterr().out


def test_chip_fault_is_status_1(files, capsys):
    status = main(["exec", str(files / "fault.s")])
    out, err = capsys.readouterr()
    assert status == 1, (out, err)
    assert "status: error: chip stopped with HOST_RANGE (7) at instruction 0" in out
    counters = _counters(out)
    # The counters of the halted core, not of the one the driver aborted after.
    assert counters["non_matrix"] == counters["cycles"] - counters["mxu_active"] > 0, out


def _counters(printed):
    """The counters `tpu exec` printed."""
    line, = [line for line in printed.splitlines() if line.startswith("counters: ")]
    return {name: int(value) for name, value in
            (item.split() for item in line[len("counters: "):].split(", "))}


def test_exec_copies_through_host_memory(files, capsys):
    out_file = files / "out" / "copy.bin"
    status = main(["exec", str(files / "prog.bin"), "--input", f"0={files / 'data.in'}",
                   "--output", f"0x100:16={out_file}"])
    out, err = capsys.readouterr()
    assert status == 0, (out, err)
    assert "status: halted" in out and "counters: cycles" in out
    assert out_file.read_bytes() == bytes(range(16))


def test_exec_with_weights(files, capsys):
    """A matmul with an identity tile: the output is the input."""
    import numpy as np
    (files / "eye.bin").write_bytes(np.eye(8, dtype=np.int8).tobytes())
    (files / "mm.s").write_text("rw tile=0, count=1\nrhm ub=0, rows=2, host=0\n"
                                "mmc ub=0, rows=2, acc=0, switch\nhalt\n")
    status = main(["exec", str(files / "mm.s"), "--weights", str(files / "eye.bin"),
                   "--input", f"0={files / 'data.in'}"])
    out, _ = capsys.readouterr()
    assert status == 0, out
    assert "useful_macs 128" in out and "weight_shift 8" in out


@pytest.mark.parametrize("top, sizes, measured_mib", [
    ("chip", {}, 241), ("chip", {"weight_mem_tiles": 16384}, 352),
    ("chip", {"ub_rows": 65536}, 249), ("chip", {"acc_rows": 16384}, 252),
    ("chip", {"rows": 256, "cols": 256, "acc_rows": 4096, "ub_rows": 98304,
              "weight_mem_tiles": 64}, 3887),
])
def test_memory_estimate_against_measurements(top, sizes, measured_mib):
    """The estimate (docs/verilog.md) is never below what was measured, and
    not wildly above it."""
    from tpu import TPUConfig
    from tpu.estimate import elaboration_memory
    estimate = elaboration_memory(TPUConfig(**sizes), top) / (1 << 20)
    assert measured_mib <= estimate <= 2 * measured_mib
