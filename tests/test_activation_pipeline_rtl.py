"""The activation pipeline RTL, bit for bit against the golden model, for
several column counts and under every simulator.

Each configuration's Verilog is generated once per test run and each
simulator model built once (and reused while the Verilog is unchanged); one
simulation per (simulator, configuration) runs every testcase of
``tpu.sim.tb_activation_pipeline``.
"""

import json
import os
import xml.etree.ElementTree as ElementTree
from functools import lru_cache

import pytest
from amaranth.back import verilog

from conftest import base_seed
from tpu import TPUConfig
from tpu.hdl.activation_pipeline import ActivationPipeline
from tpu.sim.harness import build


TOPLEVEL = "tpu_activation_pipeline"
TEST_MODULE = "tpu.sim.tb_activation_pipeline"
TESTCASES = ["random_operations", "requantization_edges", "function_tables", "pooling_shapes",
             "global_average_extremes", "timing_and_interlock"]
CONFIGS = [TPUConfig(rows=c, cols=c, acc_rows=64) for c in (1, 4, 8, 16)]


@lru_cache(maxsize=None)
def verilog_source(config):
    return verilog.convert(ActivationPipeline(config), name=TOPLEVEL, emit_src=False)


def run_all(config, simulator, seed):
    """Run every testcase in one simulation; return ({testcase: failure
    message or None}, log path)."""
    from cocotb_tools.runner import get_runner

    build_dir = build(config, simulator, verilog_source=verilog_source(config), toplevel=TOPLEVEL)
    test_dir = build_dir / "runs" / f"all-{seed}"
    test_dir.mkdir(parents=True, exist_ok=True)
    results = (test_dir / "results.xml").resolve()
    log = test_dir / "sim.log"
    try:
        get_runner(simulator).test(
            test_module=TEST_MODULE,
            hdl_toplevel=TOPLEVEL,
            hdl_toplevel_lang="verilog",
            seed=seed,
            build_dir=build_dir,
            test_dir=test_dir,
            extra_env={"TPU_CONFIG": json.dumps(config.to_dict()), "TPU_SEED": str(seed)},
            timescale=("1ns", "1ps") if simulator == "icarus" else None,
            results_xml=str(results),
            log_file=log,
        )
    except SystemExit:
        pass    # under pytest the runner exits when a testcase fails; the results stay
    if not results.exists():
        raise AssertionError(f"the simulation left no results (see {log})")
    outcome = {}
    for case in ElementTree.parse(results).getroot().iter("testcase"):
        failure = case.find("failure")
        if failure is None:
            failure = case.find("error")
        outcome[case.get("name")] = None if failure is None else (
            failure.get("message") or "failed")
    return outcome, log


@pytest.fixture
def quick_cxx(monkeypatch):
    """Compile Verilator models without C++ optimisation: the C++ compiler
    dominates these builds and the simulations are short. (The harness passes
    MAKEFLAGS on to Verilator's make; the setting is undone after the test.)"""
    flags = os.environ.get("MAKEFLAGS", "").split()
    flags += ["OPT_FAST=-O0", "OPT_SLOW=-O0", "OPT_GLOBAL=-O0"]
    monkeypatch.setenv("MAKEFLAGS", " ".join(flags))


@pytest.mark.rtl
@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: f"cols{c.cols}")
def test_activation_pipeline(simulator, config, quick_cxx):
    seed = base_seed()
    print(f"seed {seed}: replay with TPU_SEED={seed}")
    outcome, log = run_all(config, simulator, seed)
    missing = [name for name in TESTCASES if name not in outcome]
    assert not missing, f"{missing} did not run (see {log})"
    failed = {name: message for name, message in outcome.items() if message}
    assert not failed, (f"failed with seed {seed} (replay with TPU_SEED={seed}, log {log}): "
                        + "; ".join(f"{name}: {message}" for name, message in failed.items()))


def test_elaborates_for_every_width():
    """The smallest and the largest column counts elaborate, and the default chip."""
    from amaranth.hdl import Fragment
    for config in (TPUConfig(rows=8, cols=1), TPUConfig(rows=8, cols=256), TPUConfig()):
        Fragment.get(ActivationPipeline(config), None)
