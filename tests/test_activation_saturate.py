"""The small activation unit's saturations from the bits (CFG's int32 value
to -256..255, LDQ's shift byte to -32..31) against the comparisons of the
other forms and the clamp they define, at every edge of the ranges."""

import random

import pytest
from amaranth import Module, Signal, signed
from amaranth.sim import Simulator

from tpu.hdl.activation_settings import SHIFT_WIDTH, VALUE_WIDTH
from tpu.hdl.activation_unit import _saturate, _saturate_bits


def _values(in_width, out_width):
    if in_width <= 12:
        return list(range(-(1 << (in_width - 1)), 1 << (in_width - 1)))
    rng = random.Random(in_width * 1000 + out_width)
    edges = [-(1 << (in_width - 1)), (1 << (in_width - 1)) - 1]
    # Every single bit set or clear above the kept ones, either sign.
    for bit in range(out_width - 1, in_width - 1):
        edges += [1 << bit, (1 << bit) - 1, -(1 << bit), -(1 << bit) - 1,
                  (1 << (in_width - 1)) - 1 - (1 << bit), -(1 << (in_width - 1)) + (1 << bit)]
    near = range(-(1 << out_width) - 3, (1 << out_width) + 3)
    spread = [rng.randrange(-(1 << (in_width - 1)), 1 << (in_width - 1)) for _ in range(500)]
    return edges + list(near) + spread


@pytest.mark.parametrize("in_width, out_width", [(32, VALUE_WIDTH), (8, SHIFT_WIDTH)])
def test_saturate_bits_is_the_clamp(in_width, out_width):
    m = Module()
    value = Signal(signed(in_width))
    compared = Signal(signed(out_width))
    from_bits = Signal(signed(out_width))
    m.d.comb += [compared.eq(_saturate(value, out_width)), from_bits.eq(_saturate_bits(value, out_width))]
    low, high = -(1 << (out_width - 1)), (1 << (out_width - 1)) - 1
    wrong = []

    async def bench(ctx):
        for x in _values(in_width, out_width):
            ctx.set(value, x)
            expected = max(low, min(high, x))
            if (ctx.get(compared), ctx.get(from_bits)) != (expected, expected):
                wrong.append((x, ctx.get(compared), ctx.get(from_bits), expected))

    sim = Simulator(m)
    sim.add_testbench(bench)
    sim.run()
    assert not wrong, f"value, compared, from the bits, expected: {wrong[:8]}"
