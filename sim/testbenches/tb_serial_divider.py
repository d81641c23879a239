"""cocotb testbench: `SerialDivider` against Python's ``divmod``, cycle by cycle.

Every division must give ``divmod(dividend, divisor)`` (all-ones quotient
and the dividend as remainder for a zero divisor), keep ``busy`` high for
exactly ``divider_cycles(dividend)`` cycles after its start, raise ``done``
for one cycle after them, ignore ``start`` while busy, and keep its result
until the next start. The width comes from ``TPU_DIVIDER_WIDTH``, the
divisor's from ``TPU_DIVISOR_WIDTH`` (the same unless set). With
``TPU_DIVIDER_LENGTH`` (the divider's `length`) the divisor holds still
while busy and every division takes that many cycles; below the width,
every dividend has that many bits and no divisor is zero (the small
activation unit's reciprocal), at the width any operands. With
``TPU_DIVIDER_COMPLEMENTED`` 1 the divisor is driven as its complement.
"""

import os
import random

import cocotb
from cocotb.triggers import FallingEdge

from ...hdl.serial_divider import divider_cycles
from ..host.streams import start_clock_and_reset


def _operands(rng, width, divisor_width, count):
    """Corners (zero, one, the largest, a zero divisor), then random pairs of
    every dividend length, with divisors below, around and above them (up to
    the largest divisor)."""
    top = (1 << width) - 1
    top_divisor = (1 << divisor_width) - 1
    corners = sorted({c for c in (0, 1, 2, 3, top - 1, top) if 0 <= c <= top})
    divisors = sorted({c for c in (0, 1, 2, 3, top_divisor - 1, top_divisor) if 0 <= c <= top_divisor})
    pairs = [(a, b) for a in corners for b in divisors]
    for _ in range(count):
        a = rng.getrandbits(rng.randint(0, width))
        b = rng.choice([rng.getrandbits(rng.randint(1, divisor_width)),
                        max(1, a >> rng.randint(0, 3)), a + 1 if a < top else a, rng.randint(0, 3)])
        pairs.append((a, min(b, top_divisor)))
    return pairs


def _fixed_operands(rng, length, divisor_width, count):
    """Dividends of `length` bits (the smallest, the largest, the activation
    unit's ``2**32 + c - 1``), divisors from 1 up to the largest."""
    low, top = 1 << (length - 1), (1 << length) - 1
    top_divisor = (1 << divisor_width) - 1
    divisors = sorted({c for c in (1, 2, 3, top_divisor - 1, top_divisor) if 1 <= c <= top_divisor})
    pairs = [(a, b) for a in (low, low + 1, top) for b in divisors]
    for _ in range(count):
        a = rng.choice([low | rng.getrandbits(length - 1), low + rng.getrandbits(divisor_width)])
        pairs.append((a, rng.randint(1, top_divisor)))
    return pairs


@cocotb.test()
async def divmod_and_latency(dut):
    width = int(os.environ["TPU_DIVIDER_WIDTH"])
    divisor_width = int(os.environ.get("TPU_DIVISOR_WIDTH", width))
    length = int(os.environ.get("TPU_DIVIDER_LENGTH", "0")) or None
    complemented = os.environ.get("TPU_DIVIDER_COMPLEMENTED", "0") == "1"
    as_driven = (lambda d: ~d & ((1 << divisor_width) - 1)) if complemented else (lambda d: d)
    seed = int(os.environ.get("TPU_SEED", "0"))
    dut._log.info("width %d, divisor width %d, seed %d", width, divisor_width, seed)
    rng = random.Random(seed)
    top = (1 << width) - 1
    dut.start.value = 0
    await start_clock_and_reset(dut)
    await FallingEdge(dut.clk)
    # At each falling edge the outputs of the last rising edge are read,
    # then the inputs for the next one are driven.
    operands = (_fixed_operands(rng, length, divisor_width, 400) if length and length < width
                else _operands(rng, width, divisor_width, 400))
    for dividend, divisor in operands:
        assert not int(dut.busy.value), "busy before the start"
        dut.start.value = 1
        dut.dividend.value = dividend
        dut.divisor.value = as_driven(divisor)
        busy = 0
        while True:
            await FallingEdge(dut.clk)
            if int(dut.done.value):
                break
            assert int(dut.busy.value), f"{dividend} / {divisor}: not busy and not done after {busy} cycles"
            busy += 1
            assert busy <= width, f"{dividend} / {divisor}: not done after {busy} cycles"
            # A start while busy, with other operands, must be ignored.
            dut.start.value = rng.random() < 0.5
            dut.dividend.value = rng.getrandbits(width)
            if not length:
                dut.divisor.value = rng.getrandbits(divisor_width)
        assert not int(dut.busy.value), f"{dividend} / {divisor}: busy and done together"
        # A zero divisor: all ones, and the dividend's bits the remainder holds.
        want = divmod(dividend, divisor) if divisor else (top, dividend % (1 << divisor_width))
        got = (int(dut.quotient.value), int(dut.remainder.value))
        assert got == want, f"{dividend} / {divisor}: (quotient, remainder) {got}, want {want}"
        assert busy == divider_cycles(dividend, length), (
            f"{dividend} / {divisor}: busy {busy} cycles, want {divider_cycles(dividend, length)}")
        # The next start comes in the done cycle (back to back) or after a
        # cycle or two idle, in which done drops and the result stays.
        if rng.random() < 0.5:
            continue
        dut.start.value = 0
        for _ in range(rng.randint(1, 2)):
            await FallingEdge(dut.clk)
            assert not int(dut.done.value) and not int(dut.busy.value), "done or busy while idle"
            got = (int(dut.quotient.value), int(dut.remainder.value))
            assert got == want, f"{dividend} / {divisor}: the result changed to {got} while idle"
