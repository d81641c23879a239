"""The `tpu` command line: output, and one-line errors for bad input."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tpu import TPUConfig
from tpu.sim import harness


def tpu(*args, env=None):
    return subprocess.run([sys.executable, "-m", "tpu.cli", *args], capture_output=True,
                          text=True, env=env, timeout=600)


def assert_one_line_error(result, *fragments):
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("tpu: error: ")
    for fragment in fragments:
        assert fragment in lines[0]
    assert "Traceback" not in result.stderr


def test_verilog_to_file(tmp_path):
    out = tmp_path / "sub" / "engine.v"
    result = tpu("verilog", "--top", "engine", "--rows", "4", "--cols", "8", "-o", str(out))
    assert result.returncode == 0, result.stderr
    text = out.read_text()
    assert "module tpu_matrix_engine(" in text
    # 4 activation bytes per row, 8 weights per tile row, 8 int32 sums.
    assert "input [63:0] weights__payload;" in text
    assert "output [255:0] written__data;" in text


def test_verilog_of_the_core_to_stdout():
    result = tpu("verilog", "--top", "core", "--rows", "2", "--cols", "2")
    assert result.returncode == 0
    assert "module tpu_core(" in result.stdout
    assert "input [127:0] instr__payload;" in result.stdout


def test_verilog_of_the_serial_chip(tmp_path):
    """--top serial: the chip behind its UART link, with its pins and LED outputs."""
    out = tmp_path / "serial.v"
    result = tpu("verilog", "--top", "serial", "--rows", "2", "--cols", "2", "--acc-rows", "16",
                 "--link-dw", "1", "--max-payload", "128", "-o", str(out))
    assert result.returncode == 0, result.stderr
    text = out.read_text()
    assert "module tpu_serial_chip(" in text
    for port in ("input rx;", "output tx;", "output busy;", "output halted;", "output error;",
                 "output link_error;"):
        assert port in text, port
    ports = out.with_suffix(".ports").read_text()
    assert "rx input" in ports and "link_error output" in ports
    # The serial chip has no testbenches of its own in tpu sim.
    assert_one_line_error(tpu("sim", "--top", "serial", "--list"), "invalid choice", "serial")


def test_verilog_default_is_the_chip_with_its_port_map(tmp_path):
    out = tmp_path / "tpu_chip.v"
    result = tpu("verilog", "--rows", "2", "--cols", "2", "--acc-rows", "16", "-o", str(out))
    assert result.returncode == 0, result.stderr
    assert "module tpu_chip(" in out.read_text()
    ports = out.with_suffix(".ports").read_text()
    assert "rx__payload [" in ports and "= keep (" in ports
    result = tpu("verilog", "--top", "core", "--rows", "2", "--cols", "2", "--ports")
    assert result.returncode == 0
    assert "  counters[63:0] = cycles (unsigned(64))" in result.stdout
    assert "module" not in result.stdout.replace("// ports of module tpu_core", "")


@pytest.fixture(scope="module")
def trained_demo(tmp_path_factory):
    """The demo's networks trained once for the module (tests/test_demo.py
    tests the training): a demo run given a copy loads them."""
    from tpu.compiler import demo_models
    directory = tmp_path_factory.mktemp("trained_demo")
    demo_models.demo_models(directory)
    return directory


def test_demo(tmp_path, trained_demo):
    out = tmp_path / "demo.v"
    shutil.copytree(trained_demo, tmp_path / "demo")
    result = tpu("demo", "--backend", "golden", "--quick", "--out", str(tmp_path / "demo"),
                 "-o", str(out))
    assert result.returncode == 0, result.stderr
    assert "module tpu_chip (the chip)" in result.stdout
    assert "8x8" in result.stdout
    assert out.exists() and out.with_suffix(".ports").exists()
    assert (tmp_path / "demo" / "demo.png").exists()


def test_demo_honours_the_configuration(tmp_path, trained_demo):
    """Every part of the demo runs on the configuration it is given."""
    shutil.copytree(trained_demo, tmp_path / "demo")
    result = tpu("demo", "--rows", "4", "--cols", "4", "--backend", "golden", "--quick",
                 "--out", str(tmp_path / "demo"), "-o", str(tmp_path / "d.v"))
    assert result.returncode == 0, result.stderr
    assert "compiled for a 4x4 array" in result.stdout
    assert "compiled for a 8x8 array" not in result.stdout
    lines = result.stdout.strip().splitlines()
    # One short configuration line first (no TPUConfig dump), the total last.
    assert lines[0].startswith("configuration: 4x4 array, ") and len(lines[0]) < 120, lines[0]
    assert "TPUConfig(" not in result.stdout
    assert lines[-1].startswith("the demo took ") and lines[-1].endswith(" s"), lines[-1]
    # --quick: the golden model's accuracy also on the images the chip ran.
    assert "the chip ran: golden model" in result.stdout


@pytest.mark.parametrize("args, fragments", [
    (["verilog", "--rows", "0"], ["TPUConfig.rows = 0", "1..256"]),
    (["verilog", "--cols", "257"], ["TPUConfig.cols = 257"]),
    (["verilog", "--acc-rows", "0"], ["TPUConfig.acc_rows"]),
    (["verilog", "--rows", "eight"], ["--rows", "invalid int value"]),
    (["verilog", "--bogus"], ["unrecognized arguments: --bogus"]),
    (["frobnicate"], ["invalid choice: 'frobnicate'"]),
    (["sim", "--sim", "modelsim"], ["invalid choice: 'modelsim'"]),
])
def test_bad_input_is_one_line(args, fragments):
    assert_one_line_error(tpu(*args), *fragments)


def test_unwritable_output_is_one_line(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert_one_line_error(tpu("verilog", "-o", str(blocker / "x.v")), "cannot write")


def _path_without(tool):
    keep = [p for p in os.environ["PATH"].split(os.pathsep)
            if not (Path(p) / tool).exists()]
    return os.pathsep.join(keep)


def test_missing_icarus_is_one_line():
    env = {**os.environ, "PATH": _path_without("iverilog")}
    assert_one_line_error(tpu("sim", "--sim", "icarus", "--rows", "2", "--cols", "2", env=env),
                          "Icarus Verilog is not installed")


def test_missing_simulator_is_reported(monkeypatch):
    monkeypatch.setenv("PATH", _path_without("iverilog"))
    assert "iverilog" in harness.missing_simulator("icarus")
    with pytest.raises(harness.SimulatorMissing, match="Icarus"):
        harness.build(TPUConfig(rows=1, cols=1), "icarus")
    assert "unknown simulator" in harness.missing_simulator("xsim")
