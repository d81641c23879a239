"""The matrix engine RTL, bit for bit against the golden model, on every
configuration and under every simulator."""

import pytest

from conftest import base_seed, rtl_configs
from tpu import TPUConfig
from tpu.sim.harness import run


TESTCASES = ["random_operations", "extreme_values", "accumulate_chain",
             "back_to_back_timing", "heavy_idle"]


@pytest.mark.rtl
@pytest.mark.parametrize("config", rtl_configs(), ids=lambda c: c.name)
@pytest.mark.parametrize("testcase", TESTCASES)
def test_matrix_engine(simulator, config, testcase):
    _run_testcase(simulator, config, testcase)


def _run_testcase(simulator, config, testcase):
    seed = base_seed()
    print(f"seed {seed}: replay with TPU_SEED={seed}")
    tests, failures = run(config, simulator, "tpu.sim.testbenches.tb_matrix_engine",
                          testcase=testcase, seed=seed)
    assert tests == 1, f"{testcase} did not run (see the simulation log)"
    assert failures == 0, f"{testcase} failed with seed {seed} (replay with TPU_SEED={seed})"


#: Three-cycle PE multipliers (`pe_multiplier_latency` 3): every row stored
#: one cycle later (`TPUConfig.matrix_latency`, which the testbench checks
#: for every row), on a square and a non-square array.
PIPELINED_CONFIGS = [TPUConfig(rows=r, cols=c, acc_rows=64, pe_multiplier_latency=3)
                     for r, c in ((3, 5), (8, 8))]


@pytest.mark.rtl
@pytest.mark.parametrize("config", PIPELINED_CONFIGS, ids=lambda c: f"{c.name}-pe3")
@pytest.mark.parametrize("testcase", ["random_operations", "back_to_back_timing", "heavy_idle"])
def test_matrix_engine_three_cycle_multipliers(simulator, config, testcase):
    _run_testcase(simulator, config, testcase)
