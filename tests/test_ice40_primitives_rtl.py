"""The core's blocks as built for an iCE40 (`generate_verilog(...,
family="ice40")`: the array's PEs two to an SB_MAC16 in its dual 8 x 8 mode,
the decoder's geometry products bounded and in logic), simulated as RTL with
yosys's models of the primitives, bit for bit and cycle for cycle against
the golden models under both simulators."""

import pytest

from conftest import base_seed
from tpu import TPUConfig
from tpu.fpga.gate_level import ice40_primitive_models
from tpu.hdl.verilog import CORE_NAME, ENGINE_NAME, generate_verilog
from tpu.sim.harness import run


#: 2x2 pairs every PE; 3x3 leaves a PE alone on a block in each row.
ENGINE_CONFIGS = [TPUConfig(rows=2, cols=2, acc_rows=64), TPUConfig(rows=3, cols=3, acc_rows=64),
                  # Three-cycle PEs: each SB_MAC16 half with a register after it.
                  TPUConfig(rows=3, cols=3, acc_rows=64, pe_multiplier_latency=3)]


def _engine_source(config):
    text = generate_verilog(config, top="engine", family="ice40")
    return text + ice40_primitive_models(text)


def test_ice40_engine_instantiates_dual_8x8_sb_mac16():
    """Two PEs to a block, and no `*` left for yosys to map to whole ones:
    a row of 3 (one module, the Verilog holds it once) has 2 blocks."""
    text = generate_verilog(ENGINE_CONFIGS[1], top="engine", family="ice40")
    assert text.count("SB_MAC16 #(") == 2
    assert ".MODE_8x8(1'h1)" in text and " * " not in text
    assert "SB_MAC16" not in generate_verilog(ENGINE_CONFIGS[1], top="engine")
    # Three-cycle PEs: the same blocks, each half's product registered once
    # more in the fabric, and still no `*`.
    three = generate_verilog(ENGINE_CONFIGS[2], top="engine", family="ice40")
    assert three.count("SB_MAC16 #(") == 2 and " * " not in three


@pytest.mark.rtl
@pytest.mark.parametrize("config", ENGINE_CONFIGS,
                         ids=lambda c: f"{c.rows}x{c.cols}-pe{c.pe_multiplier_latency}")
@pytest.mark.parametrize("testcase", ["random_operations", "extreme_values"])
def test_ice40_matrix_engine(simulator, config, testcase):
    seed = base_seed()
    print(f"seed {seed}: replay with TPU_SEED={seed}")
    tests, failures = run(config, simulator, "tpu.sim.testbenches.tb_matrix_engine",
                          testcase=testcase, seed=seed, toplevel=ENGINE_NAME,
                          verilog_source=_engine_source(config))
    assert tests == 1, f"{testcase} did not run (see the simulation log)"
    assert failures == 0, f"{testcase} failed with seed {seed} (replay with TPU_SEED={seed})"


#: The core of tests/test_core_rtl.py: a 4x4 array (8 SB_MAC16), a 64-row UB.
CORE_CONFIG = TPUConfig(rows=4, cols=4, acc_rows=32, ub_rows=64, weight_mem_tiles=8, weight_fifo_tiles=2,
                        weight_mem_latency=3, weight_mem_bytes_per_cycle=4, pool_max_width=8)
_CORE = {}


def _core_source():
    if not _CORE:
        text = generate_verilog(CORE_CONFIG, top="core", family="ice40")
        _CORE["text"] = text + ice40_primitive_models(text)
    return _CORE["text"]


@pytest.mark.rtl
@pytest.mark.parametrize("testcase, env", [
    ("random_programs", {"TPU_LENGTH": "40"}),
    ("random_programs", {"TPU_LENGTH": "20", "TPU_FAULT": "ub_range"}),
    ("edge_programs", {}),
], ids=["random", "ub_range", "edge"])
def test_ice40_core(simulator, testcase, env):
    """Random programs (convolution MMCs and pooling ACTs among them), UB
    range faults, and each opcode at the last UB row and one past it: the
    bounded products must fault exactly where the exact ones do."""
    seed = base_seed()
    print(f"seed {seed}: replay with TPU_SEED={seed}")
    tests, failures = run(CORE_CONFIG, simulator, "tpu.sim.testbenches.tb_core", testcase=testcase,
                          seed=seed, toplevel=CORE_NAME, verilog_source=_core_source(), extra_env=env)
    assert tests == 1 and failures == 0, f"{testcase} failed with seed {seed} (replay with TPU_SEED={seed})"
