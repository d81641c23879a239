"""`ByteAligner` against `ByteGearbox(n, n)`, cycle by cycle, on the streams
the DMA reader makes: within a job every beat is full but the first (its
bytes from any lane) and the last. The gearbox gets each beat's bytes
shifted down to lane 0, the aligner the beat as read, garbage around them."""

import random

import pytest
from amaranth import Elaboratable, Module
from amaranth.sim import Simulator

from conftest import base_seed
from tpu.hdl.byte_gearbox import ByteAligner, ByteGearbox


class _Pair(Elaboratable):
    def __init__(self, n):
        self.gearbox, self.aligner = ByteGearbox(n, n), ByteAligner(n)

    def elaborate(self, platform):
        m = Module()
        m.submodules.gearbox, m.submodules.aligner = self.gearbox, self.aligner
        return m


def _jobs(rng, n, count):
    """Jobs as lists of (data, lane, count, last) beats: the job's bytes at
    lanes ``lane .. lane + count - 1`` of `data`, garbage in the others."""
    jobs = []
    for _ in range(count):
        lane = rng.randrange(n)
        middle = rng.choice([0, 0, 1, rng.randint(2, 12)])
        last = [rng.randint(1, n)] if middle or rng.random() < 0.8 else []
        if not middle and not last:
            counts = [rng.randint(1, n - lane)]            # a one-beat job
        else:
            counts = [n - lane] + [n] * middle + last
        beats = []
        for k, c in enumerate(counts):
            first = lane if k == 0 else 0
            beats.append((rng.getrandbits(8 * n), first, c, k == len(counts) - 1))
        jobs.append(beats)
    return jobs


def _bytes_of(data, count):
    return data & ((1 << 8 * count) - 1)


@pytest.mark.parametrize("n", [1, 2, 4, 8])
def test_aligner_matches_the_gearbox(n):
    seed = base_seed() + n
    print(f"seed {seed}: replay with TPU_SEED={base_seed()}")
    rng = random.Random(seed)
    pair = _Pair(n)
    gearbox, aligner = pair.gearbox, pair.aligner
    beats = [beat for job in _jobs(rng, n, 60) for beat in job]
    idle, stall = rng.choice([0, 0.3, 0.7]), rng.choice([0, 0.3, 0.7])
    compared = []

    async def testbench(ctx):
        sent = 0
        offered = None
        for cycle in range(20 * len(beats) + 100):
            if offered is None and sent < len(beats) and rng.random() >= idle:
                offered = beats[sent]
            ready = int(rng.random() >= stall)
            for box in (gearbox, aligner):
                ctx.set(box.i.valid, offered is not None)
                if offered is not None:
                    data, lane, count, last = offered
                    ctx.set(box.i.payload.data, data if box is aligner else data >> (8 * lane))
                    ctx.set(box.i.payload.count, count)
                    ctx.set(box.i.payload.last, last)
                ctx.set(box.o.ready, ready)
            if offered is not None:
                ctx.set(aligner.i.payload.lane, offered[1])
            state = []
            for box in (gearbox, aligner):
                valid = ctx.get(box.o.valid)
                count = ctx.get(box.o.payload.count)
                state.append((ctx.get(box.i.ready), valid, ctx.get(box.idle),
                              (_bytes_of(ctx.get(box.o.payload.data), count), count,
                               ctx.get(box.o.payload.last)) if valid else None))
            assert state[0] == state[1], \
                f"cycle {cycle}: ByteGearbox {state[0]}, ByteAligner {state[1]} [seed {seed}]"
            if state[0][1] and ready:
                compared.append(state[0][3])
            if offered is not None and state[0][0]:
                sent += 1
                offered = None
            await ctx.tick()
        assert sent == len(beats), f"{sent} of {len(beats)} beats went in [seed {seed}]"

    sim = Simulator(pair)
    sim.add_clock(1e-6)
    sim.add_testbench(testbench)
    sim.run()
    assert sum(count for _, count, _ in compared) == sum(count for _, _, count, _ in beats)
