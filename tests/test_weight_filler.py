"""`WeightFiller` alone, in Amaranth's simulator: one read job per fill,
whatever the reader's readiness, and the tiles' rows written where asked."""

import random

import pytest
from amaranth.hdl import Value
from amaranth.sim import Simulator

from conftest import base_seed
from tpu import TPUConfig
from tpu.hdl.weight_filler import WeightFiller


@pytest.mark.parametrize("ready_only_while_valid", [True, False])
def test_one_job_per_fill(ready_only_while_valid):
    """Fills of random tiles, the reader taking the job after random stalls:
    each fill asks for exactly one job (its address and length), writes each
    of its rows once, in order, from its first tile, and pulses `done` once.
    `ready_only_while_valid` is how the host interface's arbiter drives
    `ready` (only for a source that shows `valid`)."""
    config = TPUConfig(rows=4, cols=4, link_dw=1, weight_mem_tiles=8)
    dut = WeightFiller(config)
    seed = base_seed()
    print(f"seed {seed}: replay with TPU_SEED={seed}")
    rng = random.Random(seed)
    fills = [(rng.randint(0, 5), rng.randint(1, 3), rng.getrandbits(32) & ~3) for _ in range(6)]
    seen = []

    async def testbench(ctx):
        ctx.set(dut.data.payload.count, 4)
        for tile, tiles, addr in fills:
            jobs, rows, done = [], [], 0
            ctx.set(dut.addr, addr)
            ctx.set(dut.tile, tile)
            ctx.set(dut.tiles, tiles)
            ctx.set(dut.start, 1)
            await ctx.tick()
            ctx.set(dut.start, 0)
            payload = [rng.getrandbits(8) for _ in range(tiles * config.tile_bytes)]
            sent = 0
            for _ in range(40 + 8 * len(payload)):
                offer = rng.random() < 0.4
                valid = ctx.get(dut.job.valid)
                ready = offer and (valid or not ready_only_while_valid)
                ctx.set(dut.job.ready, int(ready))
                if valid and ready:
                    jobs.append((ctx.get(dut.job.payload.addr), ctx.get(dut.job.payload.length)))
                # The job's bytes, four a beat, once it is taken.
                beat = jobs and sent < len(payload) and rng.random() < 0.7
                ctx.set(dut.data.valid, int(bool(beat)))
                if beat:
                    ctx.set(dut.data.payload.data, int.from_bytes(bytes(payload[sent:sent + 4]), "little"))
                if ctx.get(dut.fill.en):
                    rows.append((ctx.get(dut.fill.addr), ctx.get(Value.cast(dut.fill.data))))
                done += ctx.get(dut.done)
                await ctx.tick()
                if beat and ctx.get(dut.data.ready):
                    sent += 4
            ctx.set(dut.job.ready, 0)
            ctx.set(dut.data.valid, 0)
            seen.append((jobs, rows, done, payload, ctx.get(dut.busy)))

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(testbench)
    sim.run()
    for (tile, tiles, addr), (jobs, rows, done, payload, busy) in zip(fills, seen):
        what = f"fill of {tiles} tiles from tile {tile} (seed {seed})"
        assert jobs == [(addr, tiles * config.tile_bytes)], f"{what}: jobs {jobs}"
        expected = [(tile * config.rows + r, int.from_bytes(bytes(payload[4 * r:4 * r + 4]), "little"))
                    for r in range(tiles * config.rows)]
        assert rows == expected, f"{what}: rows written {rows}"
        assert done == 1 and not busy, f"{what}: done pulsed {done} times, busy {busy}"
