"""The matrix engine RTL, bit for bit against the golden model, on every
configuration and under every simulator."""

import pytest

from conftest import base_seed, rtl_configs
from tpu.sim.harness import run


TESTCASES = ["random_operations", "extreme_values", "accumulate_chain",
             "back_to_back_timing", "heavy_idle"]


@pytest.mark.rtl
@pytest.mark.parametrize("config", rtl_configs(), ids=lambda c: c.name)
@pytest.mark.parametrize("testcase", TESTCASES)
def test_matrix_engine(simulator, config, testcase):
    seed = base_seed()
    print(f"seed {seed}: replay with TPU_SEED={seed}")
    tests, failures = run(config, simulator, "tpu.sim.testbenches.tb_matrix_engine",
                          testcase=testcase, seed=seed)
    assert tests == 1, f"{testcase} did not run (see the simulation log)"
    assert failures == 0, f"{testcase} failed with seed {seed} (replay with TPU_SEED={seed})"
