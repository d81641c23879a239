"""The whole core RTL against the golden chip model, under both simulators:
random programs with every kind of hazard, and every fault kind."""

import pytest

from conftest import base_seed
from tpu import TPUConfig
from tpu.config import UP5K_PROFILE
from tpu.sim.harness import run
from tpu.sim.stimulus.program_generator import FAULT_KINDS


CONFIGS = [
    TPUConfig(rows=4, cols=4, acc_rows=32, ub_rows=64, weight_mem_tiles=8, weight_fifo_tiles=2,
              weight_mem_latency=3, weight_mem_bytes_per_cycle=4, pool_max_width=8),
    TPUConfig(rows=8, cols=4, acc_rows=32, ub_rows=48, weight_mem_tiles=8, weight_fifo_tiles=4,
              weight_mem_latency=9, weight_mem_bytes_per_cycle=2, pool_max_width=8),
]
def _run(simulator, config, seed, **env):
    print(f"seed {seed}: replay with TPU_SEED={seed}")
    tests, failures = run(config, simulator, "tpu.sim.testbenches.tb_core", testcase="random_programs",
                          seed=seed, top="core",
                          extra_env={k: str(v) for k, v in env.items()})
    assert tests == 1 and failures == 0, f"failed with seed {seed} (replay with TPU_SEED={seed})"


@pytest.mark.rtl
@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: c.name)
@pytest.mark.parametrize("n", range(4))
def test_random_program(simulator, config, n):
    _run(simulator, config, base_seed() + n, TPU_LENGTH=40)


@pytest.mark.rtl
@pytest.mark.parametrize("fault", FAULT_KINDS)
def test_fault(simulator, fault):
    _run(simulator, CONFIGS[0], base_seed(), TPU_FAULT=fault, TPU_LENGTH=20)


@pytest.mark.rtl
@pytest.mark.parametrize("testcase", ["host_windows", "dma_error", "edge_programs"])
def test_dma_windows_and_errors(simulator, testcase):
    """HOST_RANGE against the DMA windows (spans across a window's edges, an
    exact fit, a closed window, two adjacent windows that only together hold
    the span), DMA_ERROR (fault code, index, interrupt, halt), and the edge
    programs: every interlocked pair of units on ranges sharing exactly one
    row or equal, RHM and WHM on the same host bytes, each opcode at the last
    UB or accumulator row and one past it, CFG values above their range."""
    seed = base_seed()
    tests, failures = run(CONFIGS[0], simulator, "tpu.sim.testbenches.tb_core", testcase=testcase,
                          seed=seed, top="core")
    assert tests == 1 and failures == 0, f"failed with seed {seed} (replay with TPU_SEED={seed})"


@pytest.mark.rtl
@pytest.mark.parametrize("testcase", ["host_windows", "random_programs"])
def test_up5k_profile_32_bit_host(simulator, testcase):
    """The UP5K profile's core (32-bit windows and counters, one window):
    HOST_RANGE at the window's edges and past 2**32, and a random program
    that faults with HOST_RANGE, against the golden model."""
    seed = base_seed()
    print(f"seed {seed}: replay with TPU_SEED={seed}")
    tests, failures = run(UP5K_PROFILE, simulator, "tpu.sim.testbenches.tb_core", testcase=testcase,
                          seed=seed, top="core",
                          extra_env={"TPU_FAULT": "host_range", "TPU_LENGTH": "30"})
    assert tests == 1 and failures == 0, f"failed with seed {seed} (replay with TPU_SEED={seed})"
