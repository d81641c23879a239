"""Gate-level simulation: the core of the smallest iCE40 chip, generated for
the iCE40 (`generate_verilog(..., family="ice40")`), as yosys synthesises it
(``synth_ice40 -dsp``: LUTs, carries, flip-flops, EBRs and SB_MAC16s, the
array's in their dual 8 x 8 mode), simulated with yosys's own cell models,
runs a two-layer MLP bit-exact with the golden model (`tpu.fpga.gate_level`).

The testbench is the core's program testbench (`tb_core_programs`), which
drives the core's ports only; it checks the host memory, UB and accumulator
rows the program leaves against the golden model's.

Synthesis takes minutes (once per source, cached in ``build/gate_level``)
and Icarus builds and runs the netlist in about two; Verilator's build of the
12,000-LUT netlist (some 260 C++ files) takes over half an hour, so it runs
with ``TPU_GATE_ALL=1``.
"""

import os

import pytest

from conftest import base_seed
from tpu import TPUConfig
from tpu.fpga.gate_level import gate_level_source
from tpu.hdl.verilog import CORE_NAME, generate_verilog
from tpu.sim.harness import BUILD_ROOT, run
from tpu.sim.stimulus.programs import mlp_program


#: The smallest chip the programs run on: a 2x2 array, small memories.
GATE_CONFIG = TPUConfig(rows=2, cols=2, acc_rows=64, ub_rows=256, weight_mem_tiles=16,
                        weight_fifo_tiles=2, pool_max_width=8)

_SOURCES = {}


def _netlist():
    if "core" not in _SOURCES:
        _SOURCES["core"] = gate_level_source(generate_verilog(GATE_CONFIG, top="core", family="ice40"),
                                             CORE_NAME, BUILD_ROOT / "gate_level")
    return _SOURCES["core"]


def test_netlist_is_made_of_ice40_cells():
    """The netlist is synthesised: no behavioural memories or multiplies are
    left, the requantizer's multiplies went into SB_MAC16s and the array's
    PEs into SB_MAC16s in the dual 8 x 8 mode."""
    text = _netlist()
    netlist = text[:text.index("module SB_IO")]
    assert "SB_LUT4" in netlist and "SB_MAC16" in netlist and "SB_RAM40_4K" in netlist
    assert " * " not in netlist and "reg [" not in netlist.replace("output reg", "")
    assert ".MODE_8x8(1'h1)" in netlist


@pytest.mark.rtl
def test_mlp_on_the_netlist(simulator, tmp_path):
    if simulator == "verilator" and not os.environ.get("TPU_GATE_ALL"):
        pytest.skip("Verilator's build of the netlist takes longer than the suite can afford; "
                    "Icarus runs this test, and TPU_GATE_ALL=1 runs it under Verilator too")
    seed = base_seed()
    print(f"seed {seed}: replay with TPU_SEED={seed}")
    path = tmp_path / "mlp.npz"
    mlp_program(batch=4, k1=4, n1=4, n2=2, config=GATE_CONFIG).save(path)
    tests, failures = run(GATE_CONFIG, simulator, "tpu.sim.testbenches.tb_core_programs",
                          testcase="mlp", seed=seed, toplevel=CORE_NAME,
                          verilog_source=_netlist(), extra_env={"TPU_PROGRAM_CASE": str(path)})
    assert tests == 1 and failures == 0, f"the MLP failed on the netlist with seed {seed}"
