"""The performance counters in a block RAM (`TPUConfig.ram_counters`), cycle
by cycle in Amaranth's simulator: `CounterRam` against flip-flop counters
(reads, clears and events in any cycle, narrow counters that wrap), and
BAR0's counter reads through it in both host forms."""

import random

import pytest
from amaranth import Elaboratable, Module
from amaranth.lib import wiring
from amaranth.sim import Simulator

from conftest import base_seed
from tpu import TPUConfig
from tpu.config import UP5K_PROFILE
from tpu.hdl.bar0 import Bar0
from tpu.hdl.counter_ram import CounterRam
from tpu.hdl.tlp import FmtType
from tpu.host_registers import COUNTER_NAMES, counter_offset


def _simulate(dut, testbench):
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(testbench)
    sim.run()


class _Counters:
    """Flip-flop counters: the values `CounterRam` must read."""

    def __init__(self, increments, bits):
        self.increments, self.mask = increments, (1 << bits) - 1
        self.values = [0] * len(increments)

    def step(self, events, clear):
        if clear:
            self.values = [0] * len(self.values)
        else:
            self.values = [(v + inc * (events >> i & 1)) & self.mask
                           for i, (v, inc) in enumerate(zip(self.values, self.increments))]


@pytest.mark.parametrize("kind", ["random", "busiest"])
def test_counter_ram_reads_as_flip_flop_counters(kind):
    """Every read answers the value flip-flop counters have in the cycle of
    the read, with events, clears and reads in any cycle (reads at most every
    other cycle) and 8-bit counters that wrap; no word is read in the cycle
    it is written. ``busiest``: every event in
    every cycle and a read every other cycle, the most a pending count
    holds between two flushes."""
    increments = [1, 1, 9, 1, 1, 1, 1, 1]
    bits = 8
    dut = CounterRam(increments, bits)
    model = _Counters(increments, bits)
    seed = base_seed()
    print(f"seed {seed}: replay with TPU_SEED={seed}")
    rng = random.Random(seed)
    wrong = []

    async def testbench(ctx):
        asked = None
        ram_read, ram_write = dut._ram_ports
        for cycle in range(3000):
            if asked is not None:
                got = ctx.get(dut.read.data)
                if got != asked[1]:
                    wrong.append(f"cycle {cycle - 1}: counter {asked[0]} read {got}, expected {asked[1]}")
            busiest = kind == "busiest"
            events = 0xFF if busiest else rng.getrandbits(8) & rng.getrandbits(8)
            clear = not busiest and rng.random() < 0.01
            read = (asked is None) and (busiest or rng.random() < 0.3)
            index = rng.randrange(8)
            ctx.set(dut.events, events)
            ctx.set(dut.clear, clear)
            ctx.set(dut.read.en, read)
            ctx.set(dut.read.addr, index)
            asked = (index, model.values[index]) if read else None
            # Its RAM is built for no read of a word in the cycle it is written.
            if ctx.get(ram_write.en) and ctx.get(ram_read.en) and \
                    ctx.get(ram_write.addr) == ctx.get(ram_read.addr):
                wrong.append(f"cycle {cycle}: word {ctx.get(ram_read.addr)} read as it is written")
            await ctx.tick()
            model.step(events, clear)

    _simulate(dut, testbench)
    assert not wrong, f"seed {seed}: " + "; ".join(wrong[:5])


class _Bar0WithCounters(Elaboratable):
    def __init__(self, config):
        self.bar0 = Bar0(config)
        self.counters = CounterRam([config.rows * config.cols if name == "useful_macs" else 1
                                    for name in COUNTER_NAMES], config.counter_bits)

    def elaborate(self, platform):
        m = Module()
        m.submodules.bar0 = self.bar0
        m.submodules.counters = self.counters
        wiring.connect(m, self.bar0.counter_read, self.counters.read)
        return m


@pytest.mark.parametrize("form", ["narrow", "tlp", "tlp_64_bit"])
def test_bar0_reads_counters_in_their_ram(form):
    """A counter's _LO read through BAR0 answers the value it had in the
    cycle the read was taken, a cycle later than other registers, in the
    narrow form (`narrow_host`) and in TLPs; its _HI reads the upper half
    then (64-bit counters: 0 here), and a register read after it is not
    held up."""
    config = UP5K_PROFILE if form == "narrow" else UP5K_PROFILE.replace(narrow_host=0)
    if form == "tlp_64_bit":
        config = config.replace(counter_bits=64)
    top = _Bar0WithCounters(config)
    dut, counters = top.bar0, top.counters
    increments = [config.rows * config.cols if name == "useful_macs" else 1 for name in COUNTER_NAMES]
    model = _Counters(increments, config.counter_bits)
    seed = base_seed()
    print(f"seed {seed}: replay with TPU_SEED={seed}")
    rng = random.Random(seed)
    expected, got = [], []
    narrow = config.narrow_host
    request = dut.access if narrow else dut.request
    answer = dut.answer if narrow else dut.completion

    def offer(ctx, offset):
        if narrow:
            ctx.set(dut.access.payload.write, 0)
            ctx.set(dut.access.payload.offset, offset >> 2)
        else:
            beat = dut.request.payload
            ctx.set(beat.header.fmt_type, FmtType.MRD_32)
            ctx.set(beat.header.length, 1)
            ctx.set(beat.header.first_be, 0xF)
            ctx.set(beat.header.address, offset)
            ctx.set(beat.words, 0)
            ctx.set(beat.last, 1)
        ctx.set(request.valid, 1)

    async def testbench(ctx):
        offered = None
        latched = 0
        ctx.set(answer.ready, 1)
        for cycle in range(2510):
            events = rng.getrandbits(8)
            clear = rng.random() < 0.005
            ctx.set(counters.events, events)
            ctx.set(counters.clear, clear)
            # The last cycles answer the reads already taken.
            if offered is None and cycle < 2500 and rng.random() < 0.5:
                i = rng.randrange(len(COUNTER_NAMES))
                name, half = ("ID", None) if rng.random() < 0.1 else \
                    (COUNTER_NAMES[i], "HI" if rng.random() < 0.25 else "LO")
                offset = 0 if half is None else counter_offset(i) + (4 if half == "HI" else 0)
                offered = (name, half)
                offer(ctx, offset)
            taken = offered is not None and ctx.get(request.ready)
            if taken:
                name, half = offered
                value = model.values[COUNTER_NAMES.index(name)] if half else 0x54505531
                if half == "LO":
                    latched = value >> 32
                    value &= 0xFFFFFFFF
                elif half == "HI":
                    value = latched
                expected.append((cycle, f"{name}_{half}", value))
            if ctx.get(answer.valid):
                got.append(ctx.get(answer.payload if narrow else answer.payload.data) & 0xFFFFFFFF)
            await ctx.tick()
            if taken:
                ctx.set(request.valid, 0)
                offered = None
            model.step(events, clear)

    _simulate(top, testbench)
    assert len(got) == len(expected) > 300
    wrong = [f"{name} taken at cycle {cycle}: 0x{value:x}, read 0x{seen:x}"
             for (cycle, name, value), seen in zip(expected, got) if seen != value]
    assert not wrong, f"seed {seed}: " + "; ".join(wrong[:5])
