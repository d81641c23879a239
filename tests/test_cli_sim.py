"""`tpu sim` end to end, under both simulators: every testcase of the matrix
engine on two configurations, one testcase each of the core and the chip,
and what it says when a testcase fails.

The configurations are those of the RTL tests (test_matrix_engine_rtl,
test_core_rtl, test_host_interface_rtl), so the simulator models are built
once per test session and reused here.
"""

import json
import re
from pathlib import Path

import pytest

from conftest import base_seed, long_only
from tpu.cli import main
from tpu.sim import suites
from tpu.sim.harness import missing_simulator


def _options(config):
    """`config` as command-line options."""
    return [arg for name, value in config.to_dict().items()
            for arg in (f"--{name.replace('_', '-')}", str(value))]


def _sim(capsys, *args):
    status = main(["sim", *args])
    out, err = capsys.readouterr()
    return status, out, err


ENGINE_CONFIGS = ["2x2", pytest.param("4x8", marks=pytest.mark.long(
    "test_matrix_engine_rtl runs every engine testcase on 4x8; the command's path is the 2x2's"))]


@pytest.mark.rtl
@pytest.mark.parametrize("shape", ENGINE_CONFIGS)
def test_engine_every_testcase(simulator, capsys, shape):
    """All five matrix-engine testcases in one command: each starts from a
    known state, whatever ran before it."""
    rows, cols = shape.split("x")
    seed = base_seed()
    status, out, err = _sim(capsys, "--top", "engine", "--rows", rows, "--cols", cols,
                            "--acc-rows", "64", "--sim", simulator, "--seed", str(seed))
    assert status == 0, f"seed {seed}: {out}{err}"
    assert "5 passed, 0 failed" in out
    assert len(re.findall(r"^pass  ", out, re.M)) == 5


@pytest.mark.rtl
def test_core_and_chip_testcases(simulator, capsys):
    if simulator == "icarus":
        long_only("two minutes under Icarus; the command runs the same under both simulators, "
                  "and Icarus runs these testcases in test_core_rtl and test_host_interface_rtl")
    from test_core_rtl import CONFIGS
    from test_host_interface_rtl import NARROW
    seed = base_seed()
    status, out, err = _sim(capsys, "--top", "core", *_options(CONFIGS[0]), "--sim", simulator,
                            "--seed", str(seed), "--testcase", "host_windows",
                            "--testcase", "fault_ub_range")
    assert status == 0 and "2 passed, 0 failed" in out, f"seed {seed}: {out}{err}"
    status, out, err = _sim(capsys, *_options(NARROW), "--sim", simulator, "--seed", str(seed),
                            "--testcase", "registers")
    assert status == 0 and "1 passed, 0 failed" in out, f"seed {seed}: {out}{err}"
    assert out.startswith("chip (tpu_chip) of 4x4")


#: `tpu sim` testcases of the chip on a 2x2 array (the up5k profile's; the build
#: test_host_interface_rtl shares) and a rectangular 3x5 one. The whole list
#: passes on both (but what `NOT_FOR` names); these run the MLP with its hidden layer through ACT's
#: min(rows, cols) channels (after an ABORT on 2x2), the faults, and weights at
#: the far end of weight memory. (test_host_interface_rtl runs more checks on 2x2.)
SMALL_AND_RECTANGULAR = {"2x2": ("UP5K_HOST", ["check_abort"]),
                         "3x5": ("RECTANGULAR", ["check_mlp", "check_faults", "check_weights_at_tile"])}
#: The testcases `tpu sim --list` marks as not for each (the up5k profile's
#: 16 weight tiles are fewer than dma_faults_wfill's fills need).
NOT_FOR = {"2x2": ["dma_faults_wfill"], "3x5": []}


@pytest.mark.rtl
@pytest.mark.parametrize("shape", sorted(SMALL_AND_RECTANGULAR))
def test_chip_testcases_on_small_and_rectangular_arrays(simulator, capsys, shape):
    import test_host_interface_rtl
    name, cases = SMALL_AND_RECTANGULAR[shape]
    config = getattr(test_host_interface_rtl, name)
    assert config.name == shape
    seed = base_seed()
    status, out, err = _sim(capsys, *_options(config), "--sim", simulator, "--seed", str(seed),
                            *(arg for case in cases for arg in ("--testcase", case)))
    assert status == 0 and f"{len(cases)} passed, 0 failed" in out, f"seed {seed}: {out}{err}"
    status, out, err = _sim(capsys, *_options(config), "--list")
    unfit = [line.split()[0] for line in out.splitlines() if "not for this configuration" in line]
    assert status == 0 and unfit == NOT_FOR[shape], out


@pytest.mark.rtl
def test_a_failing_testcase_names_its_log(capsys, monkeypatch):
    """A testcase that breaks says how, and where its log is; exit status 1."""
    if suites_missing := __import__("tpu.sim.harness", fromlist=["x"]).missing_simulator("icarus"):
        pytest.skip(suites_missing)
    wrong = json.dumps({"rows": 3, "cols": 2, "acc_rows": 64})     # not the built 2x2 engine
    broken = suites.Testcase("broken", "tpu.sim.testbenches.tb_matrix_engine", "random_operations",
                             "a testbench told the wrong configuration", {"TPU_CONFIG": wrong})
    monkeypatch.setattr(suites, "testcases", lambda top: [broken])
    status, out, err = _sim(capsys, "--top", "engine", "--rows", "2", "--cols", "2",
                            "--acc-rows", "64", "--seed", "1")
    assert status == 1
    assert re.search(r"^(FAIL |ERROR) broken \(", out, re.M), out
    log = re.search(r"^      log: (\S+sim\.log)$", out, re.M)
    assert log and Path(log.group(1)).read_text(), out
    assert "0 passed, 1 failed" in out


def test_list_names_every_testcase(capsys):
    for top in suites.TOPS:
        assert main(["sim", "--top", top, "--list"]) == 0
        out = capsys.readouterr().out
        names = [line.split()[0] for line in out.splitlines()]
        assert names == [case.name for case in suites.testcases(top)]
    assert {"random_operations", "heavy_idle"} <= {c.name for c in suites.testcases("engine")}
    assert {"check_mlp", "dma_faults_wfill", "bad_tlps"} <= {c.name for c in suites.testcases("chip")}


def test_every_testbench_test_is_a_testcase():
    """No cocotb test of a top level's testbenches is left out of `tpu sim`."""
    import ast
    from pathlib import Path
    root = Path(__file__).resolve().parent.parent / "sim" / "testbenches"
    for top, modules in {"engine": ["tb_matrix_engine"], "core": ["tb_core"],
                         "chip": ["tb_host"]}.items():
        covered = {case.test for case in suites.testcases(top)}
        for module in modules:
            tree = ast.parse((root / f"{module}.py").read_text())
            tests = {node.name for node in ast.walk(tree)
                     if isinstance(node, ast.AsyncFunctionDef)
                     and any("cocotb.test" in ast.unparse(d) for d in node.decorator_list)}
            assert tests <= covered, f"{top}: {sorted(tests - covered)} not run by tpu sim"


@pytest.mark.rtl
def test_exec_on_the_rtl(simulator, capsys, tmp_path):
    """`tpu exec` runs a program through the driver on the chip's RTL: the
    bytes come back, and a fault is exit status 1 with its name."""
    from test_host_interface_rtl import NARROW
    program = tmp_path / "copy.s"
    program.write_text("rhm ub=0, rows=4, host=0x0\nwhm ub=0, rows=4, host=0x40\nhalt\n")
    data = tmp_path / "in.bin"
    data.write_bytes(bytes(range(100, 116)))
    out = tmp_path / "out.bin"
    status = main(["exec", str(program), "--backend", simulator, *_options(NARROW),
                   "--input", f"0={data}", "--output", f"0x40:16={out}"])
    printed = capsys.readouterr().out
    assert status == 0, printed
    assert "status: halted" in printed and "counters: cycles" in printed
    assert out.read_bytes() == data.read_bytes()
    program.write_text("rhm ub=0, rows=1, host=0x10000000\nhalt\n")
    status = main(["exec", str(program), "--backend", simulator, *_options(NARROW)])
    printed = capsys.readouterr().out
    assert status == 1 and "HOST_RANGE" in printed, printed
    from test_cli_errors import _counters
    golden = main(["exec", str(program), *_options(NARROW)]), _counters(capsys.readouterr().out)
    # The halted core's counters on both, by the same definitions.
    for counters in (_counters(printed), golden[1]):
        assert counters["non_matrix"] == counters["cycles"] - counters["mxu_active"] > 0, printed
    assert golden[0] == 1


def test_a_model_that_does_not_build_is_one_line(capsys, monkeypatch):
    from tpu.sim import harness
    if harness.missing_simulator("icarus"):
        pytest.skip(harness.missing_simulator("icarus"))

    def broken(config, simulator, **options):
        raise harness.SimulationError("the icarus build of tpu_matrix_engine (1x1) failed "
                                      "(Command failed with return code: 2); see build.log")
    monkeypatch.setattr(harness, "build", broken)
    status = main(["sim", "--top", "engine", "--rows", "1", "--cols", "1", "--seed", "1"])
    out, err = capsys.readouterr()
    assert status == 1
    assert err.strip().splitlines() == ["tpu: error: the icarus build of tpu_matrix_engine (1x1) "
                                        "failed (Command failed with return code: 2); see build.log"]


@pytest.mark.rtl
def test_waves_option_writes_one_trace_per_testcase(capsys, tmp_path):
    """--waves FILE: a trace per testcase when several run, named after it.
    (tests/test_harness.py traces under Verilator too.)"""
    if missing_simulator("icarus"):
        pytest.skip(missing_simulator("icarus"))
    waves = tmp_path / "engine.vcd"
    status, out, err = _sim(capsys, "--top", "engine", "--rows", "2", "--cols", "2", "--acc-rows", "64",
                            "--sim", "icarus", "--seed", "1", "--testcase", "extreme_values",
                            "--testcase", "heavy_idle", "--waves", str(waves))
    assert status == 0 and "2 passed, 0 failed" in out, out + err
    for name in ("extreme_values", "heavy_idle"):
        trace = tmp_path / f"engine-{name}.vcd"
        assert "$scope module tpu_matrix_engine $end" in trace.read_text(), name
