"""`tpu.sim.harness`: models found again without generating their Verilog,
Verilator models with only the top level's ports public, and waveforms on
demand."""

import gzip
import os
import re
import struct

import pytest

from conftest import replay_command
from tpu import TPUConfig
from tpu.hdl import verilog
from tpu.sim import harness


# The smallest engine of the RTL tests: its plain models are built anyway.
SMALL = TPUConfig(rows=1, cols=1, acc_rows=64)
ENGINE_TB = "tpu.sim.testbenches.tb_matrix_engine"


def test_generated_model_is_found_without_generating_it(monkeypatch):
    if harness.missing_simulator("icarus"):
        pytest.skip(harness.missing_simulator("icarus"))
    first = harness.build(SMALL, "icarus", top="engine")

    def refuse(*args, **kwargs):
        raise AssertionError("the Verilog was generated again")
    monkeypatch.setattr(verilog, "generate_verilog", refuse)
    assert harness.build(SMALL, "icarus", top="engine") == first


def test_generated_and_given_verilog_share_one_model():
    """A test that passes the Verilog text and `tpu sim` naming the top level
    use the same model: a session builds it once."""
    if harness.missing_simulator("icarus"):
        pytest.skip(harness.missing_simulator("icarus"))
    text = verilog.generate_verilog(SMALL, top="engine")
    given = harness.build(SMALL, "icarus", verilog_source=text)
    generated = harness.build(SMALL, "icarus", top="engine")
    assert generated.resolve() == given.resolve()
    assert (given / "built.stamp").exists()


def test_verilog_is_generated_once_per_design_and_sources(tmp_path, monkeypatch):
    """`cached_verilog` generates a design's Verilog once and reads it
    back for the same key and hdl/ sources; another key, or another digest
    of the sources, generates again."""
    monkeypatch.setattr(harness, "BUILD_ROOT", tmp_path)
    made = []

    def generate(text):
        made.append(text)
        return text
    assert harness.cached_verilog("a", lambda: generate("module a;")) == "module a;"
    assert harness.cached_verilog("a", lambda: generate("module other;")) == "module a;"
    assert harness.cached_verilog("b", lambda: generate("module b;")) == "module b;"
    monkeypatch.setattr(harness, "_DESIGN_DIGEST", "changed sources")
    assert harness.cached_verilog("a", lambda: generate("module a2;")) == "module a2;"
    assert made == ["module a;", "module b;", "module a2;"]
    assert not list(tmp_path.rglob("*.tmp"))


def test_generated_design_verilog_is_kept_for_other_builds(monkeypatch):
    """A generated design's Verilog is kept: another build of it (the other
    simulator's, or this one's again once its model is gone) reads it
    rather than generating it again."""
    import shutil
    if harness.missing_simulator("icarus"):
        pytest.skip(harness.missing_simulator("icarus"))
    config = SMALL.replace(acc_rows=65)     # a design no other test builds
    first = harness.build(config, "icarus", top="engine")
    shutil.rmtree(first.resolve())
    first.unlink()

    def refuse(*args, **kwargs):
        raise AssertionError("the Verilog was generated again")
    monkeypatch.setattr(verilog, "generate_verilog", refuse)
    again = harness.build(config, "icarus", top="engine")
    assert (again / "built.stamp").exists()


def test_verilator_fst_needs_lz4_else_vcd(monkeypatch):
    monkeypatch.setattr(harness, "_FST_BUILDABLE", False)
    assert harness.trace_format("verilator") == "vcd"
    assert harness.trace_format("verilator", "run.vcd") == "vcd"
    with pytest.raises(harness.SimulationError, match="lz4 headers.*name a .vcd file"):
        harness.trace_format("verilator", "run.fst")
    assert harness.trace_format("icarus", "run.fst") == "fst"
    monkeypatch.setattr(harness, "_FST_BUILDABLE", True)
    assert harness.trace_format("verilator") == "fst"


def test_unknown_top_is_refused():
    with pytest.raises(ValueError, match="unknown top 'nope'"):
        harness.build(SMALL, "icarus", top="nope")


def test_ports_control_file_lists_the_top_level_ports(tmp_path):
    text = "module sub(a, b);\nendmodule\nmodule top(clk, rst, x__valid, y);\nendmodule\n"
    path = harness._ports_control_file(text, "top", tmp_path)
    lines = path.read_text().splitlines()
    assert lines[0] == "`verilator_config"
    assert lines[1:] == [f'public_flat_rw -module "top" -var "{port}"'
                         for port in ("clk", "rst", "x__valid", "y")]
    with pytest.raises(harness.SimulationError, match="no 'module other"):
        harness._ports_control_file(text, "other", tmp_path)


def test_large_arrays_build_their_rows_as_hierarchical_blocks(tmp_path, monkeypatch):
    """From 128x128 on, Verilator compiles each row module once
    (--hierarchical, the row a hier_block); the multiplier modules inside a
    row and smaller arrays are left alone, and TPU_VERILATOR_HIER decides."""
    monkeypatch.delenv("TPU_VERILATOR_HIER", raising=False)
    assert "--hierarchical" in harness._build_args("verilator", None, TPUConfig(rows=128, cols=128))
    assert "--hierarchical" not in harness._build_args("verilator", None, TPUConfig(rows=64, cols=128))
    assert "--hierarchical" not in harness._build_args("icarus", None, TPUConfig(rows=256, cols=256))
    monkeypatch.setenv("TPU_VERILATOR_HIER", "1")
    assert "--hierarchical" in harness._build_args("verilator", None, SMALL)
    monkeypatch.setenv("TPU_VERILATOR_HIER", "yes")
    with pytest.raises(ValueError, match="TPU_VERILATOR_HIER must be 0 or 1, not 'yes'"):
        harness._build_args("verilator", None, SMALL)
    text = ("module top(clk);\nendmodule\nmodule tpu_systolic_row_4x17(clk, act);\nendmodule\n"
            "module \\tpu_systolic_row_4x17.pe_0.mul (a, b);\nendmodule\n")
    lines = harness._ports_control_file(text, "top", tmp_path, hierarchical=True).read_text()
    assert lines.splitlines()[1:] == ['public_flat_rw -module "top" -var "clk"',
                                      'hier_block -module "tpu_systolic_row_4x17"']
    assert "hier_block" not in harness._ports_control_file(text, "top", tmp_path).read_text()


def _fst_hierarchy(data):
    """The decompressed hierarchy block of an FST file (scope and signal
    names), or None if it has none this reader knows."""
    offset = 0
    while offset + 9 <= len(data):
        kind = data[offset]
        length, = struct.unpack(">Q", data[offset + 1:offset + 9])
        body = data[offset + 9:offset + 1 + length]
        if kind == 4:       # FST_BL_HIER: uncompressed length, then gzip
            return gzip.decompress(body[8:])
        if kind == 6:       # FST_BL_HIER_LZ4DUO / LZ4: not readable here
            return None
        offset += 1 + length
    return None


@pytest.mark.rtl
def test_waves_file_keeps_the_hierarchy(simulator, tmp_path, capsys):
    """A trace of a testcase holds the top module and its submodules' scopes
    and signals, by name."""
    # Verilator writes FST only where the lz4 headers are installed.
    fst = simulator == "verilator" and harness.trace_format("verilator") == "fst"
    waves = tmp_path / ("engine.fst" if fst else "engine.vcd")
    outcomes = harness.run_outcomes(SMALL, simulator, ENGINE_TB, testcase="extreme_values",
                                    top="engine", waves=str(waves))
    assert [o.passed for o in outcomes] == [True], outcomes
    assert f"waves: {waves}" in capsys.readouterr().out
    data = waves.read_bytes()
    if not fst:
        text = data.decode()
        assert "$scope module tpu_matrix_engine $end" in text
        assert "$scope module array $end" in text and "$scope module accumulators $end" in text
        assert re.search(r" act__valid (\[0\] )?\$end", text), "no act__valid signal"
        return
    assert data[0] == 0, "not an FST file (no header block first)"
    hierarchy = _fst_hierarchy(data)
    if hierarchy is not None:
        for name in (b"tpu_matrix_engine", b"array", b"accumulators", b"act__valid"):
            assert name in hierarchy, name


@pytest.mark.rtl
def test_waves_environment_writes_next_to_the_log(monkeypatch, capsys):
    """WAVES=1, as for any test: waves.fst beside sim.log."""
    if harness.missing_simulator("icarus"):
        pytest.skip(harness.missing_simulator("icarus"))
    monkeypatch.setenv("WAVES", "1")
    outcomes = harness.run_outcomes(SMALL, "icarus", ENGINE_TB, testcase="extreme_values",
                                    top="engine", run_name="waves_environment")
    assert [o.passed for o in outcomes] == [True], outcomes
    waves = outcomes[0].log.with_name("waves.fst")
    assert f"waves: {waves}" in capsys.readouterr().out
    assert waves.stat().st_size > 0
    assert "-waves-" in str(waves), "the traced run did not use the model built for tracing"


def test_replay_command_names_the_seed_and_waves(request):
    command = replay_command(request.node)
    assert command.startswith(f"TPU_SEED={os.environ['TPU_SEED']} ")
    assert "WAVES=1" not in command     # not an RTL test
    assert command.endswith(f"-m pytest '{request.node.nodeid}'")


@pytest.mark.parametrize("simulator", ["icarus"])
def test_replay_command_of_an_rtl_test_turns_waves_on(request, simulator):
    assert " WAVES=1 " in replay_command(request.node)
