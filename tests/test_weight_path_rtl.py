"""Weight memory and weight FIFO RTL under both simulators."""

import pytest
from amaranth.back import verilog

from conftest import base_seed
from tpu import TPUConfig
from tpu.sim.harness import run
from tpu.sim.tops.weight_path_top import WeightPathTop


CONFIGS = [
    TPUConfig(rows=1, cols=1, weight_mem_tiles=8, weight_fifo_tiles=1, weight_mem_latency=0,
              weight_mem_bytes_per_cycle=1),
    TPUConfig(rows=4, cols=8, weight_mem_tiles=16, weight_fifo_tiles=4, weight_mem_latency=7,
              weight_mem_bytes_per_cycle=3),
    TPUConfig(rows=8, cols=8, weight_mem_tiles=16, weight_fifo_tiles=4, weight_mem_latency=20,
              weight_mem_bytes_per_cycle=8),
    # Too shallow to hide the latency: only order and content are checked.
    TPUConfig(rows=8, cols=4, weight_mem_tiles=16, weight_fifo_tiles=1, weight_mem_latency=30,
              weight_mem_bytes_per_cycle=4),
]
TOP = "tpu_weight_path"


@pytest.mark.rtl
@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: f"{c.name}-bpc{c.weight_mem_bytes_per_cycle}")
@pytest.mark.parametrize("testcase", ["random_loads", "bandwidth"])
def test_weight_path(simulator, config, testcase):
    seed = base_seed()
    print(f"seed {seed}: replay with TPU_SEED={seed}")
    source = verilog.convert(WeightPathTop(config), name=TOP, emit_src=False)
    tests, failures = run(config, simulator, "tpu.sim.testbenches.tb_weight_path", testcase=testcase,
                          seed=seed, toplevel=TOP, verilog_source=source)
    assert tests == 1 and failures == 0, f"{testcase} failed with seed {seed}"
