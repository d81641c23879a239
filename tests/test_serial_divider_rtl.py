"""`SerialDivider` against Python's ``divmod`` and its exact latency
(`divider_cycles`), under every simulator, at the decoder's width (24), 34
bits, the activation unit's (34 by a 13-bit divisor) and the smallest; with
a fixed dividend length, the small activation unit's (33 bits); and the
small decoder's (24 by 16 bits, the divisor given as its complement) with
and without a fixed length (24 cycles, any dividend)."""

import pytest
from amaranth.back import verilog

from conftest import base_seed
from tpu import TPUConfig
from tpu.hdl.serial_divider import SerialDivider, divider_cycles
from tpu.sim.harness import run


TOPLEVEL = "tpu_serial_divider"
TEST_MODULE = "tpu.sim.testbenches.tb_serial_divider"


@pytest.mark.rtl
@pytest.mark.parametrize("width, divisor_width, length, complemented",
                         [(1, 1, None, False), (24, 24, None, False), (34, 34, None, False),
                          (34, 13, None, False), (34, 13, 33, False), (24, 16, None, True),
                          (24, 16, 24, True)],
                         ids=["1", "24", "34", "34by13", "34by13_length33", "24by16_complemented",
                              "24by16_length24_complemented"])
def test_serial_divider(simulator, width, divisor_width, length, complemented):
    seed = base_seed() + width + divisor_width + (length or 0)
    print(f"seed {seed}: replay with TPU_SEED={base_seed()}")
    source = verilog.convert(SerialDivider(width, divisor_width=divisor_width, length=length,
                                           complemented=complemented),
                             name=TOPLEVEL, emit_src=False)
    fixed = {"TPU_DIVIDER_LENGTH": str(length)} if length else {}
    tests, failures = run(TPUConfig(), simulator, TEST_MODULE, seed=seed, toplevel=TOPLEVEL,
                          verilog_source=source,
                          extra_env={"TPU_DIVIDER_WIDTH": str(width),
                                     "TPU_DIVISOR_WIDTH": str(divisor_width), **fixed,
                                     "TPU_DIVIDER_COMPLEMENTED": str(int(complemented))},
                          run_name=f"width{width}by{divisor_width}" + (f"length{length}" if length else "")
                          + ("complemented" if complemented else ""))
    assert tests == 1, "the testbench did not run (see the simulation log)"
    assert failures == 0, f"failed with seed {seed} (replay with TPU_SEED={base_seed()})"


def test_divider_cycles():
    """As many cycles as the dividend has bits, at least one; with a
    `length`, that many."""
    assert [divider_cycles(a) for a in (0, 1, 2, 3, 4, 15, 16, 2**23, 2**24 - 1)] == \
        [1, 1, 2, 2, 3, 4, 5, 24, 24]
    assert [divider_cycles(a, 24) for a in (0, 1, 2**23, 2**24 - 1)] == [24] * 4
