"""The matrix engine RTL, bit for bit against the golden model, on every
configuration and under every simulator."""

import pytest

from conftest import base_seed, rtl_configs
from tpu import TPUConfig
from tpu.sim.harness import run_outcomes


TESTCASES = ["random_operations", "extreme_values", "accumulate_chain",
             "back_to_back_timing", "heavy_idle"]


@pytest.mark.rtl
@pytest.mark.parametrize("config", rtl_configs(), ids=lambda c: c.name)
def test_matrix_engine(simulator, config):
    """Every testcase in one simulation of the configuration (each starts
    from a known state, whatever ran before it)."""
    _run_testcases(simulator, config, TESTCASES)


def _run_testcases(simulator, config, testcases):
    seed = base_seed()
    print(f"seed {seed}: replay with TPU_SEED={seed}")
    outcomes = run_outcomes(config, simulator, "tpu.sim.testbenches.tb_matrix_engine",
                            testcase=testcases, seed=seed, run_name="testcases")
    assert sorted(o.name for o in outcomes) == sorted(testcases), \
        f"ran {[o.name for o in outcomes]}, not {testcases} (see the simulation log)"
    failed = [o.name for o in outcomes if not o.passed]
    assert not failed, f"{', '.join(failed)} failed with seed {seed} (replay with TPU_SEED={seed})"


#: Three-cycle PE multipliers (`pe_multiplier_latency` 3): every row stored
#: one cycle later (`TPUConfig.matrix_latency`, which the testbench checks
#: for every row), on a square and a non-square array.
PIPELINED_CONFIGS = [TPUConfig(rows=r, cols=c, acc_rows=64, pe_multiplier_latency=3)
                     for r, c in ((3, 5), (8, 8))]


@pytest.mark.rtl
@pytest.mark.parametrize("config", PIPELINED_CONFIGS, ids=lambda c: f"{c.name}-pe3")
def test_matrix_engine_three_cycle_multipliers(simulator, config):
    _run_testcases(simulator, config, ["random_operations", "back_to_back_timing", "heavy_idle"])
