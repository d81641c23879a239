"""BAR0 on its own, cycle by cycle (Amaranth's simulator): the two races the
chip-level tests cannot time, an IRQ_STATUS write-1-to-clear in the very
cycle a new interrupt is raised, and a STATUS read right behind a START;
completion tags; counter _LO/_HI pairs with values no simulation of the
chip reaches; and what the narrow host side's narrowed registers read back."""

import random

import pytest
from amaranth.sim import Simulator

from conftest import base_seed
from tpu import TPUConfig
from tpu.hdl.bar0 import Bar0
from tpu.hdl.tlp import FmtType
from tpu.config import UP5K_PROFILE
from tpu.host_registers import (COUNTER_NAMES, Control, Irq, Status, kept_value, register_overflow_bits,
                                registers)


def _offset(name, config):
    return next(r.offset for r in registers(config) if r.name == name)


async def _send(ctx, dut, fmt_type, address, value=0, tag=0):
    """Offer a one-word request; return the cycle count it waited for ready."""
    beat = dut.request.payload
    ctx.set(beat.header.fmt_type, fmt_type)
    ctx.set(beat.header.length, 1)
    ctx.set(beat.header.first_be, 0xF)
    ctx.set(beat.header.address, address)
    ctx.set(beat.header.tag, tag)
    ctx.set(beat.data, value)
    ctx.set(beat.words, 1 if fmt_type == FmtType.MWR_32 else 0)
    ctx.set(beat.last, 1)
    ctx.set(dut.request.valid, 1)
    waited = 0
    while not ctx.get(dut.request.ready):
        await ctx.tick()
        waited += 1
    await ctx.tick()
    ctx.set(dut.request.valid, 0)
    return waited


def _simulate(dut, testbench):
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(testbench)
    sim.run()


@pytest.mark.parametrize("delay", [-2, -1, 0, 1, 2])
def test_irq_clear_races_a_raise(delay):
    """A write of 1 to IRQ_STATUS's INT bit clears only what was raised before
    it: an INT raised in the cycle the write takes effect (`delay` 0) or later
    stays set, one raised earlier is cleared."""
    config = TPUConfig(link_dw=1)
    dut = Bar0(config)
    address = _offset("IRQ_STATUS", config)
    seen = {}

    async def testbench(ctx):
        ctx.set(dut.completion.ready, 1)
        beat = dut.request.payload
        ctx.set(beat.header.fmt_type, FmtType.MWR_32)
        ctx.set(beat.header.length, 1)
        ctx.set(beat.header.first_be, 0xF)
        ctx.set(beat.header.address, address)
        ctx.set(beat.data, int(Irq.INT))
        ctx.set(beat.words, 1)
        ctx.set(beat.last, 1)
        for cycle in range(-4, 5):
            # The write is taken at cycle 0 (BAR0 is idle and ready).
            ctx.set(dut.request.valid, int(cycle == 0))
            ctx.set(dut.irq_raise, int(Irq.INT) if cycle == delay else 0)
            if cycle == 0:
                assert ctx.get(dut.request.ready)
            await ctx.tick()
        seen["irq"] = ctx.get(dut.irq_status)

    _simulate(dut, testbench)
    expected = int(Irq.INT) if delay >= 0 else 0
    assert seen["irq"] == expected, (f"INT raised {delay} cycles after the clearing write: "
                                     f"IRQ_STATUS 0x{seen['irq']:x}, expected 0x{expected:x}")


def test_status_read_right_behind_start():
    """A STATUS read sent in the cycle after a START write is answered with
    BUSY: BAR0 holds it until the CONTROL pulse has taken effect (here, as in
    the host interface, STATUS says BUSY from the cycle after the pulse)."""
    config = TPUConfig(link_dw=1)
    dut = Bar0(config)
    data = {}

    async def chip(ctx):
        busy = False
        async for _, _, control in ctx.tick().sample(dut.control):
            ctx.set(dut.status, int(Status.BUSY) if busy else 0)
            busy = busy or bool(control & Control.START)

    async def testbench(ctx):
        ctx.set(dut.completion.ready, 1)
        await _send(ctx, dut, FmtType.MWR_32, _offset("CONTROL", config), int(Control.START))
        await _send(ctx, dut, FmtType.MRD_32, _offset("STATUS", config), tag=7)
        for _ in range(20):
            if ctx.get(dut.completion.valid):
                data["status"] = ctx.get(dut.completion.payload.data)
                break
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_process(chip)
    sim.add_testbench(testbench)
    sim.run_until(1e-6)
    assert "status" in data, "no completion for the STATUS read"
    assert data["status"] & Status.BUSY, f"STATUS read right after START is 0x{data['status']:x}, not BUSY"


@pytest.mark.parametrize("link_dw", [1, 2])
def test_each_completion_carries_its_reads_tag(link_dw):
    """Reads back to back, each with its own tag and requester: each
    completion answers with the tag and requester of the read it completes
    (a host matches completions to reads by them)."""
    config = TPUConfig(link_dw=link_dw)
    dut = Bar0(config)
    reads = [(tag, 0x100 + 17 * tag) for tag in (3, 0, 7, 1, 6, 6, 2)]
    got = []

    async def testbench(ctx):
        ctx.set(dut.completion.ready, 1)
        beat = dut.request.payload
        for tag, requester in reads:
            ctx.set(beat.header.requester_id, requester)
            await _send(ctx, dut, FmtType.MRD_32, _offset("STATUS", config), tag=tag)
            for _ in range(20):
                if ctx.get(dut.completion.valid):
                    header = dut.completion.payload.header
                    got.append((ctx.get(header.tag), ctx.get(header.requester_id)))
                    await ctx.tick().until(dut.completion.payload.last)
                    break
                await ctx.tick()

    _simulate(dut, testbench)
    assert got == reads, f"(tag, requester) of the completions {got}, of the reads {reads}"


@pytest.mark.parametrize("link_dw", [1, 2])
def test_completion_held_while_the_next_request_waits(link_dw):
    """A completion held back by the link keeps its header while the next
    request waits on BAR0 (the header is loaded only while none is
    pending), and the next read is then answered with its own tag."""
    config = TPUConfig(link_dw=link_dw)
    dut = Bar0(config)
    seen = []

    async def testbench(ctx):
        beat = dut.request.payload
        ctx.set(dut.completion.ready, 0)
        ctx.set(beat.header.requester_id, 0x111)
        await _send(ctx, dut, FmtType.MRD_32, _offset("STATUS", config), tag=3)
        # The next read, offered at once with another tag and requester.
        ctx.set(beat.header.requester_id, 0x222)
        ctx.set(beat.header.tag, 9)
        ctx.set(beat.header.address, _offset("ID", config))
        ctx.set(dut.request.valid, 1)
        for _ in range(8):
            await ctx.tick()
            assert ctx.get(dut.completion.valid)
            header = dut.completion.payload.header
            seen.append((ctx.get(header.tag), ctx.get(header.requester_id)))
        ctx.set(dut.completion.ready, 1)
        await ctx.tick().until(dut.completion.payload.last)
        while not ctx.get(dut.request.ready):
            await ctx.tick()
        await ctx.tick()
        ctx.set(dut.request.valid, 0)
        for _ in range(20):
            if ctx.get(dut.completion.valid):
                header = dut.completion.payload.header
                seen.append((ctx.get(header.tag), ctx.get(header.requester_id)))
                break
            await ctx.tick()

    _simulate(dut, testbench)
    assert seen == [(3, 0x111)] * 8 + [(9, 0x222)], f"(tag, requester) of the completions: {seen}"


@pytest.mark.parametrize("link_dw", [1, 2])
def test_counter_lo_latches_its_own_hi(link_dw):
    """Each counter read as its _LO then its _HI gives that counter's 64-bit
    value at the _LO read, though every counter changes between the two
    reads: the _HI read answers from the half the _LO read latched, and from
    the right counter. (In a simulation no counter passes 2**32; on a board
    `cycles` does in under a minute, so the values are set here.)"""
    config = TPUConfig(link_dw=link_dw)
    dut = Bar0(config)
    seed = base_seed()
    print(f"seed {seed}: replay with TPU_SEED={seed}")
    rng = random.Random(seed)
    bits = config.counter_bits
    order = list(range(len(COUNTER_NAMES)))
    rng.shuffle(order)
    got = []

    async def read(ctx, name):
        await _send(ctx, dut, FmtType.MRD_32, _offset(name, config))
        for _ in range(20):
            if ctx.get(dut.completion.valid):
                value = ctx.get(dut.completion.payload.data) & 0xFFFFFFFF
                await ctx.tick().until(dut.completion.payload.last)
                return value
            await ctx.tick()
        raise AssertionError(f"no completion for the {name} read")

    def set_counters(ctx):
        values = {name: rng.getrandbits(bits) | (1 << (bits - 1)) for name in COUNTER_NAMES}
        for name, value in values.items():
            ctx.set(getattr(dut.counters, name), value)
        return values

    async def testbench(ctx):
        ctx.set(dut.completion.ready, 1)
        for i in order:
            name = COUNTER_NAMES[i].upper()
            values = set_counters(ctx)
            lo = await read(ctx, f"{name}_LO")
            set_counters(ctx)
            hi = await read(ctx, f"{name}_HI")
            got.append((COUNTER_NAMES[i], values[COUNTER_NAMES[i]], hi << 32 | lo))

    _simulate(dut, testbench)
    wrong = [f"{name}: 0x{seen:x}, expected 0x{value:x}" for name, value, seen in got if seen != value]
    assert not wrong, f"counters read as _LO then _HI (seed {seed}): {'; '.join(wrong)}"


def test_narrow_registers_read_back():
    """With ``narrow_host`` WFILL_TILE, WFILL_TILES and PROG_LEN keep the bits
    the chip can use and one for a value past them (`kept_value`): a value
    that fits reads back as written, one past them reads at least ``2**n``
    (so a WFILL or START with it is still refused), on the ``rw`` port too."""
    config = UP5K_PROFILE
    overflow = register_overflow_bits(config)
    assert set(overflow) == {"WFILL_TILE", "WFILL_TILES", "PROG_LEN"}
    dut = Bar0(config)
    rng = random.Random(base_seed())
    values = [0, 1, 0xFFFFFFFF, 0xA5A55A5A]
    for n in set(overflow.values()):
        values += [(1 << n) - 1, 1 << n, (1 << n) + 1, 1 << 31, (1 << 31) | ((1 << n) - 1),
                   rng.getrandbits(n), rng.getrandbits(32)]
    got = []

    async def access(ctx, write, offset, value=0):
        ctx.set(dut.access.payload.write, write)
        ctx.set(dut.access.payload.offset, offset >> 2)
        ctx.set(dut.access.payload.value, value)
        ctx.set(dut.access.valid, 1)
        while not ctx.get(dut.access.ready):
            await ctx.tick()
        await ctx.tick()
        ctx.set(dut.access.valid, 0)
        if write:
            return None
        while not ctx.get(dut.answer.valid):
            await ctx.tick()
        answer = ctx.get(dut.answer.payload)
        await ctx.tick()
        return answer

    async def testbench(ctx):
        ctx.set(dut.answer.ready, 1)
        for name in overflow:
            for value in values:
                await access(ctx, 1, _offset(name, config), value)
                read = await access(ctx, 0, _offset(name, config))
                got.append((name, value, read, ctx.get(dut.rw[name])))

    _simulate(dut, testbench)
    for name, value, read, port in got:
        kept = kept_value(config, name, value)
        assert read == kept == port, (f"{name} written 0x{value:x} reads 0x{read:x}, rw port 0x{port:x}, "
                                      f"not 0x{kept:x}")
        n = overflow[name]
        assert (read == value) if value < 1 << n else read >= 1 << n, (name, value, read)
