"""Gate-level simulation on the ECP5: the core of the smallest chip,
generated for the ECP5 (`generate_verilog(..., family="ecp5")`) and
synthesised as the ULX3S build does (``synth_ecp5``: LUT4s, PFU muxes, CCU2C
carries, TRELLIS_FFs, distributed RAM, DP16KD block RAMs, and the
requantizer's and decoder's multiplies in MULT18X18Ds), simulated with
yosys's cell models and ours of MULT18X18D and DP16KD, runs a two-layer MLP
bit-exact with the golden model (`tpu.fpga.gate_level.ecp5_gate_level_source`).

The hand-instantiated MULT18X18Ds get the same: the matrix engine of a 3x3
array whose first five PEs multiply on a MULT18X18D with its registers in use
(`ECP5Multiplier`, or `ECP5PipelinedMultiplier` with its product registered
once more in logic) and the other four in logic, as `tpu build`'s ``mix`` and
``mix3`` arrays do, runs random matrix operations and the extreme operands
on its synth_ecp5 netlist bit for bit and cycle for cycle against the golden
model (`tb_matrix_engine`).

The core's netlist and the MLP run are `gate_level_mlp`'s, shared with the
iCE40 test. Synthesis takes about a
minute (cached in ``build/gate_level``); the MLP then takes 1.6 to 3.5 minutes
under Icarus on a busy machine and 7 under Verilator, so it runs with
``TPU_GATE_ALL=1`` only, while the engines below run in the suite under
Icarus (a minute) and with ``TPU_GATE_ALL=1`` under Verilator (4 minutes);
docs/fpga.md has the times.
"""

import os
from functools import partial
from unittest import mock

import pytest
from amaranth import Elaboratable, Module, Signal

from conftest import base_seed
from gate_level_mlp import check_mlp, core_netlist
from tpu import TPUConfig
from tpu.fpga.gate_level import ecp5_gate_level_source, ecp5_synth_commands
from tpu.hdl import multiplier
from tpu.hdl.systolic_array import SystolicArray
from tpu.hdl.verilog import ENGINE_NAME, generate_verilog
from tpu.sim.harness import BUILD_ROOT, run


#: The engine's array: 3x3, the first five PEs on MULT18X18Ds (row 1 mixes both).
ENGINE_CONFIG = TPUConfig(rows=3, cols=3, acc_rows=64)
HARD_PES = 5

#: The multiplier mixes of `tpu build` (`tpu.fpga.build`): hard, soft.
MIXES = {
    "mix": (multiplier.ECP5Multiplier, multiplier.SplitLUTMultiplier),
    "mix3": (multiplier.ECP5PipelinedMultiplier, multiplier.PipelinedLUTMultiplier),
}

_SOURCES = {}


def _engine_config(mix):
    """`ENGINE_CONFIG` with the PE latency of `mix`'s multipliers."""
    return ENGINE_CONFIG.replace(pe_multiplier_latency=MIXES[mix][0].latency)


def _engine_netlist(mix):
    """The netlist of the engine whose array multiplies with `mix`. The
    engine makes its array itself, so the array class it sees is given the
    multipliers while its Verilog is generated."""
    if mix not in _SOURCES:
        hard, soft = MIXES[mix]
        multipliers = multiplier.multiplier_mix(HARD_PES, cols=ENGINE_CONFIG.cols,
                                                hard_multiplier=hard, soft_multiplier=soft)
        with mock.patch("tpu.hdl.matrix_engine.SystolicArray",
                        partial(SystolicArray, multiplier=multipliers)):
            text = generate_verilog(_engine_config(mix), top="engine", family="ecp5")
        assert text.count("MULT18X18D #(") == HARD_PES, "the engine's array did not take the mix"
        _SOURCES[mix] = ecp5_gate_level_source(text, ENGINE_NAME, BUILD_ROOT / "gate_level")
    return _SOURCES[mix]


class _Counter(Elaboratable):
    def elaborate(self, platform):
        m = Module()
        count = Signal(4)
        m.d.sync += count.eq(count + 1)
        return m


def test_synthesis_is_the_ulx3s_builds():
    """The netlist's yosys commands are those between reading the design and
    writing its JSON in the script `tpu build` has Amaranth write for the ULX3S."""
    pytest.importorskip("amaranth_boards")
    from tpu.fpga.build import BOARDS, _platform, synth_overrides

    overrides = synth_overrides("ulx3s-85f", "counter")
    plan = _platform(BOARDS["ulx3s-85f"]).prepare(_Counter(), "counter", **overrides)
    script = [line.strip() for line in plan.files["counter.ys"].splitlines()
              if line.strip() and not line.startswith("#")]
    assert script[0].startswith("read_rtlil") and script[-1].startswith("write_json")
    assert script[1:-1] == ecp5_synth_commands("counter")


def test_netlist_is_made_of_ecp5_cells():
    """The netlist is synthesised: no behavioural memories or multiplies are
    left; memories went into DP16KDs and distributed RAM, multiplies into
    MULT18X18Ds."""
    text = core_netlist("ecp5")
    netlist = text[:text.index("module LUT4")]
    for cell in ("LUT4", "CCU2C", "TRELLIS_FF", "DP16KD", "TRELLIS_DPR16X4", "MULT18X18D"):
        assert f"\n  {cell} " in netlist, f"no {cell} in the netlist"
    assert " * " not in netlist and "reg [" not in netlist.replace("output reg", "")


@pytest.mark.rtl
def test_mlp_on_the_ecp5_netlist(simulator, tmp_path):
    if not os.environ.get("TPU_GATE_ALL"):
        pytest.skip("the MLP on the 11,500-LUT netlist takes 1.6 to 3.5 minutes under Icarus and 7 "
                    "under Verilator, more than the suite can afford; TPU_GATE_ALL=1 runs it")
    check_mlp(simulator, "ecp5", tmp_path)


@pytest.mark.parametrize("mix", MIXES)
def test_engine_netlist_keeps_the_instantiated_multipliers(mix):
    """synth_ecp5 keeps the five MULT18X18Ds as instantiated, registers in
    use, and maps nothing else to a DSP block."""
    text = _engine_netlist(mix)
    netlist = text[:text.index("module LUT4")]
    assert netlist.count("\n  MULT18X18D ") == HARD_PES
    for register in ("INPUTA", "INPUTB", "OUTPUT"):
        assert netlist.count(f'.REG_{register}_CLK("CLK0")') == HARD_PES


@pytest.mark.rtl
@pytest.mark.icarus_every_case      # Verilator leaves them to TPU_GATE_ALL=1
@pytest.mark.parametrize("mix", MIXES)
@pytest.mark.parametrize("testcase", ["random_operations", "extreme_values"])
def test_engine_on_the_ecp5_netlist(simulator, mix, testcase):
    if simulator == "verilator" and not os.environ.get("TPU_GATE_ALL"):
        pytest.skip("Verilator builds each engine netlist in about 2 minutes, more than the suite "
                    "can afford; Icarus runs this test, and TPU_GATE_ALL=1 runs it under Verilator too")
    seed = base_seed()
    print(f"seed {seed}: replay with TPU_SEED={seed}")
    tests, failures = run(_engine_config(mix), simulator, "tpu.sim.testbenches.tb_matrix_engine",
                          testcase=testcase, seed=seed, toplevel=ENGINE_NAME,
                          verilog_source=_engine_netlist(mix))
    assert tests == 1, f"{testcase} did not run (see the simulation log)"
    assert failures == 0, f"{testcase} on the {mix} engine netlist failed with seed {seed}"
