"""Gate-level simulation of the matrix part (docs/fpga.md, "What fits the
UP5K"): the part generated for the iCE40 (its array on dual 8 x 8
SB_MAC16s), as yosys synthesises it (``synth_ice40 -dsp``), simulated with
yosys's own cell models, runs random multiplies over its UART through the
host's `MatrixPart`, bit-exact with the matrix engine's golden model
(`tpu.fpga.gate_level`, the testbench of tests/test_matrix_part_rtl.py).

The suite synthesises the netlist (about 1.5 minutes, cached in
``build/gate_level``) and checks what it is made of; simulating it is
opt-in (``TPU_GATE_ALL=1``): every byte crosses the UART, 40 cycles
apiece, and Icarus runs this netlist at tens of cycles a second.
"""

import os

import pytest

from conftest import base_seed
from test_matrix_part_rtl import PART
from tpu.fpga.gate_level import gate_level_source
from tpu.hdl.serial_matrix_part import MATRIX_PART_NAME, generate_matrix_part_verilog
from tpu.sim.harness import BUILD_ROOT, run


_SOURCES = {}


def _netlist():
    if "part" not in _SOURCES:
        _SOURCES["part"] = gate_level_source(generate_matrix_part_verilog(PART, family="ice40"),
                                             MATRIX_PART_NAME, BUILD_ROOT / "gate_level")
    return _SOURCES["part"]


def test_netlist_is_made_of_ice40_cells():
    """No behavioural memory or multiply is left; the array's PEs are in
    SB_MAC16s in the dual 8 x 8 mode, two PEs to a block; the UB (32-bit
    rows) in two SPRAMs."""
    text = _netlist()
    netlist = text[:text.index("module SB_IO")] if "module SB_IO" in text else text
    netlist = netlist[:netlist.index("`define NO_ICE40_DEFAULT_ASSIGNMENTS")]
    assert "SB_LUT4" in netlist and "SB_RAM40_4K" in netlist
    assert " * " not in netlist and "reg [" not in netlist.replace("output reg", "")
    assert netlist.count(".MODE_8x8(1'h1)") == PART.rows * PART.cols // 2
    assert netlist.count("SB_SPRAM256KA ") == 2, "the UB is not in two SPRAMs"


@pytest.mark.rtl
def test_random_matmuls_on_the_netlist(simulator):
    if not os.environ.get("TPU_GATE_ALL"):
        pytest.skip("the netlist simulates at tens of cycles a second and a run through the UART "
                    "is about 150,000 cycles (an hour under Icarus, docs/fpga.md): set TPU_GATE_ALL=1")
    seed = base_seed()
    print(f"seed {seed}: replay with TPU_SEED={seed}")
    tests, failures = run(PART, simulator, "tpu.sim.testbenches.tb_matrix_part", testcase="random_matmuls",
                          seed=seed, toplevel=MATRIX_PART_NAME, verilog_source=_netlist(),
                          extra_env={"TPU_PART_OPS": "2"})
    assert tests == 1 and failures == 0, f"the multiplies failed on the netlist with seed {seed}"
