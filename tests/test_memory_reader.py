# amaranth: UnusedElaboratable=no
"""`MemoryReader`: what it reads comes out in order, whatever the stalls on
either side, with and without its first bits kept in flip-flops
(``head_bits``), and the two forms are the same cycle for cycle (Amaranth's
simulator, random addresses, valid and ready); with one entry (``depth``
1, the small activation unit's) what it reads comes out in order too, and a
consumer that takes a row at most every 4 cycles takes each in the same
cycle as from three entries."""

import random

import pytest
from amaranth import *
from amaranth.lib.memory import Memory
from amaranth.sim import Simulator

from conftest import base_seed
from tpu.hdl.memory_reader import MemoryReader


WIDTH = 40
DEPTH = 16


def _run(head_bits, seed, count=300, depth=MemoryReader.DEPTH, spacing=1, always_valid=False):
    """(cycle, data, side) of each output taken, for `count` random reads;
    the consumer takes one at most every `spacing` cycles; the addresses
    come with gaps, or with `always_valid` one every cycle (the activation
    unit's, which offers every row of an ACT at once)."""
    rng = random.Random(seed)
    contents = [rng.getrandbits(WIDTH) for _ in range(DEPTH)]
    m = Module()
    m.submodules.mem = mem = Memory(shape=WIDTH, depth=DEPTH, init=contents)
    m.submodules.reader = reader = MemoryReader(addr_shape=range(DEPTH), data_shape=WIDTH, side_shape=1,
                                                head_bits=head_bits, depth=depth)
    port = mem.read_port()
    m.d.comb += [port.en.eq(reader.port.en), port.addr.eq(reader.port.addr),
                 reader.port.data.eq(port.data)]
    requests = [(rng.randrange(DEPTH), rng.getrandbits(1)) for _ in range(count)]
    # Bursts of valid and of ready, and gaps, so that the queue fills and empties.
    valid = [always_valid or rng.random() < 0.7 for _ in range(8 * count)]
    ready = [rng.random() < (0.3 if (k // 40) % 2 else 0.9) for k in range(8 * count)]
    taken = []

    async def testbench(ctx):
        sent = 0
        for cycle in range(8 * spacing * count):
            offer = sent < count and valid[cycle % len(valid)]
            ctx.set(reader.i.valid, offer)
            if offer:
                ctx.set(reader.i.payload.addr, requests[sent][0])
                ctx.set(reader.i.payload.side, requests[sent][1])
            want = ready[cycle % len(ready)] and (not taken or cycle - taken[-1][0] >= spacing)
            ctx.set(reader.o.ready, want)
            await ctx.delay(1e-9)
            if offer and ctx.get(reader.i.ready):
                sent += 1
            if want and ctx.get(reader.o.valid):
                taken.append((cycle, ctx.get(reader.o.payload.data), ctx.get(reader.o.payload.side)))
            await ctx.tick()
            if len(taken) == count:
                break

    sim = Simulator(m)
    sim.add_clock(1e-8)
    sim.add_testbench(testbench)
    sim.run()
    want = [(contents[addr], side) for addr, side in requests]
    return taken, want


@pytest.mark.parametrize("head_bits", [0, 1, 32, WIDTH])
def test_reads_in_order_under_stalls(head_bits):
    seed = base_seed()
    print(f"seed {seed}: replay with TPU_SEED={seed}")
    taken, want = _run(head_bits, seed)
    assert [(data, side) for _, data, side in taken] == want, f"seed {seed}"
    if head_bits:
        plain, _ = _run(0, seed)
        assert [cycle for cycle, _, _ in taken] == [cycle for cycle, _, _ in plain], f"seed {seed}"


def test_one_entry_in_order_and_in_time():
    seed = base_seed()
    print(f"seed {seed}: replay with TPU_SEED={seed}")
    taken, want = _run(0, seed, depth=1)
    assert [(data, side) for _, data, side in taken] == want, f"seed {seed}"
    for spacing in (4, 8):
        one, _ = _run(0, seed, depth=1, spacing=spacing, always_valid=True)
        three, _ = _run(0, seed, spacing=spacing, always_valid=True)
        assert one == three, f"seed {seed}, a row at most every {spacing} cycles"


def test_depth_checked():
    with pytest.raises(ValueError):
        MemoryReader(addr_shape=range(DEPTH), data_shape=WIDTH, depth=0)
    with pytest.raises(ValueError):
        MemoryReader(addr_shape=range(DEPTH), data_shape=WIDTH, head_bits=8, depth=1)
