"""`SerialDivider` against Python's ``divmod`` and its exact latency
(`divider_cycles`), under every simulator, at the decoder's width (24), the
activation unit's (34) and the smallest."""

import pytest
from amaranth.back import verilog

from conftest import base_seed
from tpu import TPUConfig
from tpu.hdl.serial_divider import SerialDivider, divider_cycles
from tpu.sim.harness import run


TOPLEVEL = "tpu_serial_divider"
TEST_MODULE = "tpu.sim.testbenches.tb_serial_divider"


@pytest.mark.rtl
@pytest.mark.parametrize("width", [1, 24, 34])
def test_serial_divider(simulator, width):
    seed = base_seed() + width
    print(f"seed {seed}: replay with TPU_SEED={base_seed()}")
    source = verilog.convert(SerialDivider(width), name=TOPLEVEL, emit_src=False)
    tests, failures = run(TPUConfig(), simulator, TEST_MODULE, seed=seed, toplevel=TOPLEVEL,
                          verilog_source=source, extra_env={"TPU_DIVIDER_WIDTH": str(width)},
                          run_name=f"width{width}")
    assert tests == 1, "the testbench did not run (see the simulation log)"
    assert failures == 0, f"failed with seed {seed} (replay with TPU_SEED={base_seed()})"


def test_divider_cycles():
    """As many cycles as the dividend has bits, at least one."""
    assert [divider_cycles(a) for a in (0, 1, 2, 3, 4, 15, 16, 2**23, 2**24 - 1)] == \
        [1, 1, 2, 2, 3, 4, 5, 24, 24]
