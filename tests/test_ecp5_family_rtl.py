"""The core's blocks as built for an ECP5 (`generate_verilog(...,
family="ecp5")` with `TPUConfig.dsp_multipliers`: the first PEs on
MULT18X18D, the rest multiplying on hand-instantiated CCU2C carry chains;
or with `TPUConfig.dsp_bands`: bands of rows on MULT18X18D at fixed sites,
and the decoder's products in logic),
simulated as RTL with
the behavioural model of the MULT18X18D (fpga/models/MULT18X18D.v) and
Yosys's models of the carry cells (`tpu.fpga.gate_level`), bit for bit
and cycle for cycle against the golden models under both simulators."""

import re

import pytest

from conftest import base_seed
from tpu import TPUConfig
from tpu.fpga.gate_level import ecp5_primitive_models
from tpu.hdl.verilog import CORE_NAME, ENGINE_NAME, generate_verilog
from tpu.sim.harness import run


#: 3x3 with 4 PEs on DSP blocks: a row of hard multipliers, a mixed row
#: (one hard, two soft) and a row in logic, each its own row module.
ENGINE_CONFIG = TPUConfig(rows=3, cols=3, acc_rows=64, dsp_multipliers=4)


def _with_model(text):
    return text + ecp5_primitive_models(text)


def test_ecp5_engine_puts_the_first_pes_on_mult18x18d():
    text = generate_verilog(ENGINE_CONFIG, top="engine", family="ecp5")
    rows = re.findall(r"^module \\?(tpu_systolic_row\w+) ?\(.*?^endmodule", text, re.M | re.S)
    assert len(rows) == 3, f"expected 3 distinct row modules, got {rows}"
    # 3 + 1 instances, each defined once; no `*` left for synthesis to map.
    assert text.count("MULT18X18D #(") == 4
    assert not re.search(r" \* ", text)
    # 6 chains of CCU2C per soft PE (2 + 3 in the modules), 5 to 8 cells each.
    assert 6 * 5 * 5 <= len(re.findall(r"^\s*CCU2C ", text, re.M)) <= 6 * 8 * 5
    assert "MULT18X18D" not in generate_verilog(ENGINE_CONFIG, top="engine")
    # Without a budget the ECP5 build leaves every `*` to synthesis.
    plain = generate_verilog(ENGINE_CONFIG.replace(dsp_multipliers=0), top="engine", family="ecp5")
    assert "MULT18X18D" not in plain and re.search(r" \* ", plain)


#: 4x3 in bands: rows 0, 1 and 3 on the three lines of DSP blocks, row 2
#: in logic.
BANDED_ENGINE_CONFIG = TPUConfig(rows=4, cols=3, acc_rows=64, dsp_bands=1)


def test_ecp5_banded_engine_places_its_bands():
    from tpu.fpga.ecp5_floorplan import band_sites
    text = generate_verilog(BANDED_ENGINE_CONFIG, top="engine", family="ecp5")
    sites = re.findall(r'\(\* BEL = "([^"]+)" \*\)\s*MULT18X18D #\(', text)
    assert sorted(sites) == sorted(band_sites(4, 3).values()) and len(set(sites)) == 9
    assert {row for row, _ in band_sites(4, 3)} == {0, 1, 3}
    assert not re.search(r" \* ", text)
    assert "MULT18X18D" not in generate_verilog(BANDED_ENGINE_CONFIG, top="engine")


#: The same bands with three-cycle PEs (`pe_multiplier_latency` 3): band3's
#: multipliers, MULT18X18D with a product register in logic on the band
#: sites, PipelinedLUTMultiplier elsewhere.
BANDED3_ENGINE_CONFIG = BANDED_ENGINE_CONFIG.replace(pe_multiplier_latency=3)


def test_ecp5_three_cycle_bands_take_band3_multipliers():
    from tpu.fpga.ecp5_floorplan import band_sites
    text = generate_verilog(BANDED3_ENGINE_CONFIG, top="engine", family="ecp5")
    sites = re.findall(r'\(\* BEL = "([^"]+)" \*\)\s*MULT18X18D #\(', text)
    assert sorted(sites) == sorted(band_sites(4, 3).values())
    # No multiplier on carry chains of its own (ECP5CarryChainMultiplier),
    # none left to synthesis; the row in logic has PipelinedLUTMultiplier's
    # registered quarters.
    assert "CCU2C" not in text and not re.search(r" \* ", text)
    assert len(re.findall(r"reg \[10:0\] q3 = ", text)) == 3
    two = generate_verilog(BANDED_ENGINE_CONFIG, top="engine", family="ecp5")
    assert "CCU2C" in two and not re.search(r"\bq3\b", two)
    # In simulation the same config multiplies with plain `*` over three cycles.
    plain = generate_verilog(BANDED3_ENGINE_CONFIG, top="engine")
    assert "MULT18X18D" not in plain and re.search(r" \* ", plain)


@pytest.mark.rtl
@pytest.mark.parametrize("config, testcase", [
    (ENGINE_CONFIG, "random_operations"), (ENGINE_CONFIG, "extreme_values"),
    (BANDED_ENGINE_CONFIG, "random_operations"), (BANDED3_ENGINE_CONFIG, "random_operations"),
], ids=["random", "extreme", "bands-random", "bands3-random"])
def test_ecp5_matrix_engine(simulator, config, testcase):
    seed = base_seed()
    print(f"seed {seed}: replay with TPU_SEED={seed}")
    source = _with_model(generate_verilog(config, top="engine", family="ecp5"))
    tests, failures = run(config, simulator, "tpu.sim.testbenches.tb_matrix_engine",
                          testcase=testcase, seed=seed, toplevel=ENGINE_NAME, verilog_source=source)
    assert tests == 1, f"{testcase} did not run (see the simulation log)"
    assert failures == 0, f"{testcase} failed with seed {seed} (replay with TPU_SEED={seed})"


#: The core of tests/test_core_rtl.py with 6 of its 16 PEs on MULT18X18D.
CORE_CONFIG = TPUConfig(rows=4, cols=4, acc_rows=32, ub_rows=64, weight_mem_tiles=8, weight_fifo_tiles=2,
                        weight_mem_latency=3, weight_mem_bytes_per_cycle=4, pool_max_width=8,
                        dsp_multipliers=6)
#: The same core in bands (rows 0, 1 and 3 on DSP blocks), its decoder's
#: geometry products bounded in logic.
BANDED_CORE_CONFIG = CORE_CONFIG.replace(dsp_multipliers=0, dsp_bands=1)
#: The banded core with three-cycle PEs (band3's multipliers).
BANDED3_CORE_CONFIG = BANDED_CORE_CONFIG.replace(pe_multiplier_latency=3)
_CORE = {}


def _core_source(config):
    if config not in _CORE:
        _CORE[config] = _with_model(generate_verilog(config, top="core", family="ecp5"))
    return _CORE[config]


@pytest.mark.rtl
@pytest.mark.parametrize("config, testcase, env", [
    (CORE_CONFIG, "random_programs", {"TPU_LENGTH": "40"}),
    (CORE_CONFIG, "random_programs", {"TPU_LENGTH": "20", "TPU_FAULT": "ub_range"}),
    (CORE_CONFIG, "edge_programs", {}),
    (BANDED_CORE_CONFIG, "random_programs", {"TPU_LENGTH": "20", "TPU_FAULT": "ub_range"}),
    (BANDED_CORE_CONFIG, "edge_programs", {}),
    (BANDED3_CORE_CONFIG, "random_programs", {"TPU_LENGTH": "30"}),
], ids=["random", "ub_range", "edge", "bands-ub_range", "bands-edge", "bands3-random"])
def test_ecp5_core(simulator, config, testcase, env):
    """Random programs (convolution MMCs and pooling ACTs among them), UB
    range faults, and each opcode at the last UB row and one past it, with
    a mixed array inside the whole core; in bands, the UB's edges are
    where the decoder's bounded products must still be exact."""
    seed = base_seed()
    print(f"seed {seed}: replay with TPU_SEED={seed}")
    tests, failures = run(config, simulator, "tpu.sim.testbenches.tb_core", testcase=testcase,
                          seed=seed, toplevel=CORE_NAME, verilog_source=_core_source(config), extra_env=env)
    assert tests == 1 and failures == 0, f"{testcase} failed with seed {seed} (replay with TPU_SEED={seed})"


def test_ulx3s_board_build_takes_the_budget():
    """`tpu build --board ulx3s-85f` elaborates under the board's platform,
    not `generate_verilog`: its design has exactly `dsp_multipliers`
    MULT18X18D and the rest of the PEs on CCU2C chains."""
    pytest.importorskip("amaranth_boards")
    from amaranth_boards.ulx3s import ULX3S_85F_Platform
    from tpu.fpga.board_top import BoardChip

    config = TPUConfig(rows=2, cols=2, acc_rows=64, ub_rows=256, weight_mem_tiles=16, link_dw=1,
                       max_payload=128, max_read_request=128, read_tags=1, dma_windows=1,
                       dsp_multipliers=3)
    rtlil = ULX3S_85F_Platform().prepare(BoardChip("ulx3s-85f", config), "tpu_chip").files["tpu_chip.il"]
    assert len(re.findall(r"^\s*cell \\MULT18X18D ", rtlil, re.M)) == 3
    assert 5 * 6 <= len(re.findall(r"^\s*cell \\CCU2C ", rtlil, re.M)) <= 8 * 6


def test_ulx3s_board_build_places_the_bands():
    """With `dsp_bands` the board build's array takes exactly the band
    sites, each MULT18X18D carrying its BEL for nextpnr."""
    pytest.importorskip("amaranth_boards")
    from amaranth_boards.ulx3s import ULX3S_85F_Platform
    from tpu.fpga.board_top import BoardChip
    from tpu.fpga.ecp5_floorplan import band_sites

    config = TPUConfig(rows=4, cols=3, acc_rows=64, ub_rows=256, weight_mem_tiles=16, link_dw=1,
                       max_payload=128, max_read_request=128, read_tags=1, dma_windows=1,
                       dsp_bands=1)
    rtlil = ULX3S_85F_Platform().prepare(BoardChip("ulx3s-85f", config), "tpu_chip").files["tpu_chip.il"]
    sites = re.findall(r'attribute \\BEL "([^"]+)"\s*cell \\MULT18X18D ', rtlil)
    assert sorted(sites) == sorted(band_sites(4, 3).values())


def test_array_sites_are_for_the_ecp5_only():
    """`dsp_sites` place MULT18X18Ds on an ECP5; elaborated for no FPGA (a
    simulation), the same array multiplies with plain `*`."""
    from amaranth.back import rtlil
    from tpu.fpga.ecp5_floorplan import band_sites
    from tpu.hdl.systolic_array import SystolicArray
    text = rtlil.convert(SystolicArray(rows=4, cols=3, tag_width=1, dsp_sites=band_sites(4, 3)))
    assert "MULT18X18D" not in text and re.search(r"cell \$mul ", text)
