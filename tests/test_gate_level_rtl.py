"""Gate-level simulation: the core of the smallest iCE40 chip, generated for
the iCE40 (`generate_verilog(..., family="ice40")`), as yosys synthesises it
(``synth_ice40 -dsp``: LUTs, carries, flip-flops, EBRs and SB_MAC16s, the
array's in their dual 8 x 8 mode), simulated with yosys's own cell models,
runs a two-layer MLP bit-exact with the golden model (`tpu.fpga.gate_level`).

The netlist and the run are `gate_level_mlp`'s, shared with the ECP5 test.

Synthesis takes minutes (once per source, cached in ``build/gate_level``)
and Icarus builds and runs the netlist in about two; Verilator's build of the
12,000-LUT netlist (some 260 C++ files) takes over half an hour, so it runs
with ``TPU_GATE_ALL=1``.
"""

import os

import pytest

from gate_level_mlp import check_mlp, core_netlist


def test_netlist_is_made_of_ice40_cells():
    """The netlist is synthesised: no behavioural memories or multiplies are
    left, the requantizer's multiplies went into SB_MAC16s and the array's
    PEs into SB_MAC16s in the dual 8 x 8 mode."""
    text = core_netlist("ice40")
    netlist = text[:text.index("module SB_IO")]
    assert "SB_LUT4" in netlist and "SB_MAC16" in netlist and "SB_RAM40_4K" in netlist
    assert " * " not in netlist and "reg [" not in netlist.replace("output reg", "")
    assert ".MODE_8x8(1'h1)" in netlist


@pytest.mark.rtl
def test_mlp_on_the_netlist(simulator, tmp_path):
    if simulator == "verilator" and not os.environ.get("TPU_GATE_ALL"):
        pytest.skip("Verilator's build of the netlist takes longer than the suite can afford; "
                    "Icarus runs this test, and TPU_GATE_ALL=1 runs it under Verilator too")
    check_mlp(simulator, "ice40", tmp_path)
