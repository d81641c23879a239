"""The banded array of the 70 GOPS build (`band3`) computes what the golden
model does: a matrix engine whose 7x4 array has its DSP PEs in three bands
(rows 0-1, 2-3 and 4-5 on sites of the three DSP lines) and row 6 in logic,
as RTL with the MULT18X18D model, bit for bit and cycle for cycle under both
simulators. The sites are attributes for nextpnr; they change no logic."""

from functools import partial
from unittest import mock

import pytest

from conftest import base_seed
from tpu import TPUConfig
from tpu.fpga.ecp5_floorplan import band_rows, banded_multipliers
from tpu.fpga.gate_level import ecp5_primitive_models
from tpu.hdl.systolic_array import SystolicArray
from tpu.hdl.verilog import ENGINE_NAME, generate_verilog
from tpu.sim.harness import run


# band3's multipliers take three cycles: so does the engine's config.
ENGINE_CONFIG = TPUConfig(rows=7, cols=4, acc_rows=64, pe_multiplier_latency=3)
_SOURCE = {}


def _source():
    if not _SOURCE:
        # The engine makes its array itself: the class it sees is given the multipliers.
        with mock.patch("tpu.hdl.matrix_engine.SystolicArray",
                        partial(SystolicArray,
                                multiplier=banded_multipliers(ENGINE_CONFIG.rows,
                                                              ENGINE_CONFIG.cols))):
            text = generate_verilog(ENGINE_CONFIG, top="engine", family="ecp5")
        _SOURCE["text"] = text + ecp5_primitive_models(text)
    return _SOURCE["text"]


def test_band_layout_of_the_engine():
    assert band_rows(ENGINE_CONFIG.rows, ENGINE_CONFIG.cols) == [[0, 1], [2, 3], [4, 5]]
    text = _source()
    assert text.count("MULT18X18D #(") == 6 * 4
    assert text.count('(* BEL = "X') == 6 * 4


@pytest.mark.rtl
@pytest.mark.parametrize("testcase", ["random_operations", "extreme_values"])
def test_banded_matrix_engine(simulator, testcase):
    seed = base_seed()
    print(f"seed {seed}: replay with TPU_SEED={seed}")
    tests, failures = run(ENGINE_CONFIG, simulator, "tpu.sim.testbenches.tb_matrix_engine",
                          testcase=testcase, seed=seed, toplevel=ENGINE_NAME,
                          verilog_source=_source())
    assert tests == 1, f"{testcase} did not run (see the simulation log)"
    assert failures == 0, f"{testcase} failed with seed {seed} (replay with TPU_SEED={seed})"
