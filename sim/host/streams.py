"""Cycle-driven valid/ready stream drivers for cocotb testbenches.

Every testbench clocks one loop: at each falling edge it lets every source
drive its stream, then, in the read-only phase of that moment, samples every
handshake; the next rising edge completes the transfers it saw. Driving half
a cycle away from the rising edge keeps stimulus out of any race with the
flip-flops, so the result is the same under every simulator.
"""

import random

import cocotb
from cocotb.clock import Clock
from cocotb.simtime import get_sim_time
from cocotb.triggers import FallingEdge, ReadOnly, RisingEdge


__all__ = ["StreamSource", "CycleLoop", "pack_fields", "pack_array", "unpack_array",
           "start_clock_and_reset"]


def pack_array(values, width):
    """Pack integers into one word, element 0 in the lowest `width` bits."""
    word = 0
    mask = (1 << width) - 1
    for i, v in enumerate(values):
        word |= (int(v) & mask) << (width * i)
    return word


def unpack_array(word, width, count, *, signed):
    """The `count` elements of `width` bits in `word`, element 0 lowest."""
    out = []
    mask = (1 << width) - 1
    for i in range(count):
        v = (word >> (width * i)) & mask
        if signed and v >> (width - 1):
            v -= 1 << width
        out.append(v)
    return out


async def start_clock_and_reset(dut, cycles=3):
    """Start a 100 MHz clock on ``dut.clk`` and hold ``dut.rst`` for `cycles`."""
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    dut.rst.value = 1
    for _ in range(cycles):
        await RisingEdge(dut.clk)
    dut.rst.value = 0


def pack_fields(layout, values):
    """Pack a dict of integers into the bits of an Amaranth StructLayout."""
    word = 0
    for name, field in layout:
        value = values.get(name, 0)
        word |= (int(value) & ((1 << field.width) - 1)) << field.offset
    return word


class StreamSource:
    """Drives ``<prefix>__valid`` / ``__payload`` and watches ``__ready``.

    Items are presented in order; between items the source stays idle for a
    cycle with probability `idle`. Once valid, an item is held until taken.
    `accepted` lists the cycle in which each item was taken.
    """

    def __init__(self, dut, prefix, *, idle=0.0, rng=None):
        self.valid = getattr(dut, f"{prefix}__valid")
        self.ready = getattr(dut, f"{prefix}__ready")
        self.payload = getattr(dut, f"{prefix}__payload")
        self.idle = idle
        self.rng = rng or random.Random(0)
        self.queue = []
        self.accepted = []
        self._current = None
        self.valid.value = 0

    def send(self, payload):
        self.queue.append(payload)

    @property
    def done(self):
        return self._current is None and not self.queue

    def drive(self, cycle):
        if self._current is None and self.queue and self.rng.random() >= self.idle:
            self._current = self.queue.pop(0)
            self.payload.value = self._current
        self.valid.value = int(self._current is not None)

    def sample(self, cycle):
        if self._current is not None and int(self.ready.value):
            self.accepted.append(cycle)
            self._current = None


class CycleLoop:
    """Runs sources and monitors cycle by cycle; fails instead of hanging."""

    def __init__(self, clk, *, sources=(), monitors=()):
        self.clk = clk
        self.sources = list(sources)
        self.monitors = list(monitors)
        self.cycle = -1
        self._sampled_at = None

    async def step(self):
        # Still in the read-only phase where the last step sampled, the next
        # falling edge is the one after the next rising edge: one trigger
        # fewer per cycle, which is a third of a busy loop's Python time.
        if get_sim_time("step") != self._sampled_at:
            await RisingEdge(self.clk)
        self.cycle += 1
        await FallingEdge(self.clk)
        for source in self.sources:
            source.drive(self.cycle)
        await ReadOnly()
        for source in self.sources:
            source.sample(self.cycle)
        for monitor in self.monitors:
            monitor(self.cycle)
        self._sampled_at = get_sim_time("step")

    async def run_until(self, condition, *, timeout, what):
        """Step until `condition()` holds; raise after `timeout` cycles."""
        start = self.cycle
        while not condition():
            if self.cycle - start > timeout:
                raise AssertionError(f"timed out after {timeout} cycles waiting for {what}")
            await self.step()
