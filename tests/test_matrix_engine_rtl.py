"""The matrix engine RTL, bit for bit against the golden model, on every
configuration and under every simulator."""

import pytest

from conftest import rtl_configs, run_testcases
from tpu import TPUConfig


TB = "tpu.sim.testbenches.tb_matrix_engine"
TESTCASES = ["random_operations", "extreme_values", "accumulate_chain",
             "back_to_back_timing", "heavy_idle"]


@pytest.mark.rtl
@pytest.mark.parametrize("config", rtl_configs(), ids=lambda c: c.name)
def test_matrix_engine(simulator, config):
    """Every testcase in one simulation of the configuration (each starts
    from a known state, whatever ran before it)."""
    run_testcases(config, simulator, TB, TESTCASES)


#: Three-cycle PE multipliers (`pe_multiplier_latency` 3): every row stored
#: one cycle later (`TPUConfig.matrix_latency`, which the testbench checks
#: for every row), on a square and a non-square array.
PIPELINED_CONFIGS = [TPUConfig(rows=r, cols=c, acc_rows=64, pe_multiplier_latency=3)
                     for r, c in ((3, 5), (8, 8))]


@pytest.mark.rtl
@pytest.mark.parametrize("config", PIPELINED_CONFIGS, ids=lambda c: f"{c.name}-pe3")
def test_matrix_engine_three_cycle_multipliers(simulator, config):
    run_testcases(config, simulator, TB, ["random_operations", "back_to_back_timing", "heavy_idle"])
