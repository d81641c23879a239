"""The LFSR cycle timer (`tpu.hdl.lfsr`): its polynomials are primitive and
it meets its last state exactly `cycles - 1` steps after its start."""

import pytest
from amaranth import Module, Signal
from amaranth.sim import Simulator

from tpu.hdl.lfsr import PRIMITIVE_TAPS, LfsrTimer, _mulmod


def _power_of_x(k, poly, n):
    result, base = 1, 2
    while k:
        if k & 1:
            result = _mulmod(result, base, poly, n)
        base = _mulmod(base, base, poly, n)
        k >>= 1
    return result


def _prime_factors(value):
    factors, d = set(), 2
    while d * d <= value:
        while value % d == 0:
            factors.add(d)
            value //= d
        d += 1
    if value > 1:
        factors.add(value)
    return factors


@pytest.mark.parametrize("n", sorted(PRIMITIVE_TAPS))
def test_polynomials_are_primitive(n):
    poly = (1 << n) | sum(1 << e for e in PRIMITIVE_TAPS[n])
    order = (1 << n) - 1
    assert _power_of_x(order, poly, n) == 1
    for q in _prime_factors(order):
        assert _power_of_x(order // q, poly, n) != 1, (n, q)


def test_every_cpl_timeout_has_a_timer():
    # TPUConfig.cpl_timeout takes 16 .. 2**24.
    for cycles in (16, 17, 2**12 - 1, 2**12, 16_000_000, 2**24):
        timer = LfsrTimer(cycles)
        assert (1 << timer.width) - 1 >= cycles
    with pytest.raises(ValueError, match="at least one state"):
        LfsrTimer(0)


@pytest.mark.parametrize("cycles", [1, 2, 16, 37, 1500])
def test_last_state_after_exactly_cycles_minus_one_steps(cycles):
    timer = LfsrTimer(cycles)
    m = Module()
    state = Signal(timer.width, init=timer.start)
    m.d.sync += state.eq(timer.step(state))
    seen = []

    async def bench(ctx):
        for _ in range(cycles + 5):
            seen.append(ctx.get(state))
            await ctx.tick()

    sim = Simulator(m)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    assert seen[0] == timer.start
    assert seen.index(timer.last) == cycles - 1
    assert len(set(seen[:cycles])) == cycles
