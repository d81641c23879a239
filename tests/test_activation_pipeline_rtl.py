"""The activation pipeline RTL, bit for bit against the golden model, for
several column counts and under every simulator.

Each configuration's Verilog is generated once per test run and each
simulator model built once (and reused while the Verilog is unchanged); one
simulation per (simulator, configuration) runs every testcase of
``tpu.sim.testbenches.tb_activation_pipeline``.
"""

from functools import lru_cache

import pytest
from amaranth.back import verilog

from conftest import base_seed
from tpu import TPUConfig
from tpu.config import UP5K_PROFILE
from tpu.hdl.activation_pipeline import ActivationPipeline
from tpu.sim.harness import cached_verilog, run


TOPLEVEL = "tpu_activation_pipeline"
TEST_MODULE = "tpu.sim.testbenches.tb_activation_pipeline"
TESTCASES = ["random_operations", "channel_write_then_row", "requantization_edges", "mlas_ties",
             "function_tables", "pooling_shapes",
             "global_average_extremes", "timing_and_interlock", "stalled_output"]
# The CI run (conftest.py) runs every configuration under Verilator, the first
# and the UP5K profile's two forms (marked `icarus`) under Icarus, where the
# others take 1 to 8 minutes each.
CONFIGS = [TPUConfig(rows=c, cols=c, acc_rows=64) for c in (1, 4, 8)] + [
    pytest.param(TPUConfig(rows=16, cols=16, acc_rows=64), marks=pytest.mark.long(
        "the widest plain form, a 3.6 MB design; cols8 runs the form with more than one table copy")),
    # Shared requantizers: one for 4 columns, and 3 for 8 (a short last group).
    TPUConfig(rows=4, cols=4, acc_rows=64, requantizers=1),
    TPUConfig(rows=8, cols=8, acc_rows=64, requantizers=3),
    # Products in 16 cycles on 8 x 8-bit multipliers, one per column; and the
    # UP5K profile: one requantizer, products in 4 cycles, in the small form
    # (`serial_act`), and the same in the fast form.
    TPUConfig(rows=3, cols=3, acc_rows=64, requantizer_multiplier_width=8),
    pytest.param(UP5K_PROFILE, marks=pytest.mark.icarus),
    pytest.param(UP5K_PROFILE.replace(serial_act=0), marks=pytest.mark.icarus),
    # The ulx3s16 profile's lane (one requantizer a group, products in 4
    # cycles) with two lanes and a short last group.
    TPUConfig(rows=5, cols=5, acc_rows=64, requantizers=2, requantizer_multiplier_width=16),
    # The small form with a lane per column (the pooling unit's groups of one).
    TPUConfig(rows=3, cols=3, acc_rows=64, requantizer_multiplier_width=8, serial_act=1),
]


def _config_id(config):
    shared = f"_requantizers{config.requantizers}" if config.requantizers else ""
    narrow = (f"_multiplier{config.requantizer_multiplier_width}"
              if config.requantizer_multiplier_width != 32 else "")
    small = "_serial" if config.serial_act else ""
    return f"cols{config.cols}{shared}{narrow}{small}"


@lru_cache(maxsize=None)
def verilog_source(config):
    return cached_verilog(f"{TOPLEVEL}\0ActivationPipeline\0{config.to_dict()}",
                          lambda: verilog.convert(ActivationPipeline(config), name=TOPLEVEL,
                                                  emit_src=False))


@pytest.mark.rtl
@pytest.mark.parametrize("config", CONFIGS, ids=_config_id)
def test_activation_pipeline(simulator, config):
    seed = base_seed()
    print(f"seed {seed}: replay with TPU_SEED={seed}")
    tests, failures = run(config, simulator, TEST_MODULE, seed=seed, toplevel=TOPLEVEL,
                          verilog_source=verilog_source(config))
    assert tests == len(TESTCASES), f"{len(TESTCASES) - tests} testcases did not run"
    assert failures == 0, f"{failures} testcases failed with seed {seed} (replay with TPU_SEED={seed})"


def test_elaborates_for_every_width():
    """The smallest and the largest column counts elaborate, and the default chip."""
    from amaranth.hdl import Fragment
    for config in (TPUConfig(rows=8, cols=1), TPUConfig(rows=8, cols=256), TPUConfig()):
        Fragment.get(ActivationPipeline(config), None)


def test_function_table_copies():
    """The function table has a copy for every 4 lanes (each at most 4 read
    ports, all written alike): a 16-port memory took Yosys's memory_libmap
    past the 4 GiB of its WebAssembly build."""
    import re
    from amaranth.back import rtlil
    for cols, copies in ((1, 1), (4, 1), (5, 2), (16, 4)):
        text = rtlil.convert(ActivationPipeline(TPUConfig(rows=cols, cols=cols, acc_rows=64)))
        ports = re.findall(r"cell \$mem(rd|wr)_v2 \S+\n\s*parameter \\MEMID \"\\\\(table\d*)\"", text)
        reads = [sum(1 for kind, memory in ports if kind == "rd" and memory == name)
                 for name in sorted({memory for _, memory in ports})]
        writes = [sum(1 for kind, memory in ports if kind == "wr" and memory == name)
                  for name in sorted({memory for _, memory in ports})]
        assert sorted(reads, reverse=True) == [min(4, cols - 4 * k) for k in range(copies)]
        assert writes == [1] * copies
