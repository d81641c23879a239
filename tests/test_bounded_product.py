"""`bounded_product`: exact below its bound, at least the bound above it
(Amaranth's simulator, every corner and random operands)."""

import numpy as np
import pytest
from amaranth import *
from amaranth.sim import Simulator

from conftest import base_seed
from tpu.hdl.bounded_product import bounded_product


@pytest.mark.parametrize("a_width, b_width, bits", [(24, 16, 9), (16, 8, 9), (24, 24, 6), (4, 4, 9)])
def test_bounded_product(a_width, b_width, bits):
    seed = base_seed()
    print(f"seed {seed}: replay with TPU_SEED={seed}")
    rng = np.random.default_rng(seed)
    limit = 1 << bits
    a, b = Signal(a_width), Signal(b_width)
    m = Module()
    p = Signal(2 * bits + 2)
    m.d.comb += p.eq(bounded_product(a, b, bits))
    corners_a = sorted({0, 1, limit - 1, limit, limit + 1, (1 << a_width) - 1} & set(range(1 << a_width)))
    corners_b = sorted({0, 1, limit - 1, limit, limit + 1, (1 << b_width) - 1} & set(range(1 << b_width)))
    pairs = [(x, y) for x in corners_a for y in corners_b]
    # Random pairs around the bound, where the two behaviours meet.
    for _ in range(400):
        x = int(rng.integers(0, min(1 << a_width, 4 * limit)))
        y = int(rng.integers(0, min(1 << b_width, 4 * limit)))
        pairs.append((x, y))
    wrong = []

    async def testbench(ctx):
        for x, y in pairs:
            ctx.set(a, x)
            ctx.set(b, y)
            got = ctx.get(p)
            if (x * y < limit and got != x * y) or (x * y >= limit and got < limit):
                wrong.append((x, y, got))

    sim = Simulator(m)
    sim.add_testbench(testbench)
    sim.run()
    assert not wrong, f"(a, b, product) wrong for {wrong[:5]} (seed {seed})"


def test_bounded_product_has_no_multiply():
    from amaranth.back import rtlil
    m = Module()
    a, b, p = Signal(24), Signal(16), Signal(20)
    m.d.comb += p.eq(bounded_product(a, b, 9))
    assert "$mul" not in rtlil.convert(m, ports=[a, b, p])
