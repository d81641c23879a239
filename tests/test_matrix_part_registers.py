"""The matrix part's register bus driven directly, a request every cycle
(Amaranth's simulator): the host's `MatrixPart` driver reads STATUS at the
earliest cycle after each command and the accumulators at the earliest
cycle after each multiply, and every read must see the command done. Over
the UART (tests/test_matrix_part_rtl.py, both simulators) a read comes
thousands of cycles late, long after the engine has stored its rows, so a
read let through too early goes unseen there."""

import random

import numpy as np
import pytest
from amaranth.sim import Simulator

from conftest import base_seed
from tpu import TPUConfig
from tpu.driver.matrix_part import MatrixPart as MatrixPartDriver
from tpu.driver.matrix_part_registers import MatrixPartStatus
from tpu.hdl.matrix_part import MatrixPart

CONFIGS = {
    "4x4": TPUConfig(rows=4, cols=4, acc_rows=32, ub_rows=64, weight_mem_tiles=8, weight_fifo_tiles=2,
                     weight_mem_latency=3),
    "2x3": TPUConfig(rows=2, cols=3, acc_rows=16, ub_rows=32, weight_mem_tiles=4, weight_fifo_tiles=1,
                     weight_mem_latency=0),
}


class RegisterBus:
    """`read32`/`write32` of the driver's link, on the part's request stream:
    a request is presented in the cycle after the previous one was taken."""

    def __init__(self, ctx, dut):
        self.ctx, self.dut = ctx, dut
        self.cycles = 0

    async def _access(self, offset, write, value=0):
        ctx, request = self.ctx, self.dut.request
        ctx.set(request.payload.addr, offset >> 2)
        ctx.set(request.payload.write, write)
        ctx.set(request.payload.data, value)
        ctx.set(request.valid, 1)
        while True:
            ready = ctx.get(request.ready)
            await ctx.tick()
            self.cycles += 1
            if ready:
                break
        ctx.set(request.valid, 0)
        if not write:
            assert ctx.get(self.dut.read_data.valid), f"no answer the cycle after a read of {offset:#x}"
            return ctx.get(self.dut.read_data.payload)
        return None

    async def write32(self, offset, value):
        await self._access(int(offset), 1, value)

    async def read32(self, offset):
        return await self._access(int(offset), 0)


def _multiply(x, w, unsigned):
    x = x.astype(np.uint8 if unsigned else np.int8).astype(np.int64)
    return x @ w.astype(np.int64)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_reads_at_the_earliest_cycle(name):
    cfg = CONFIGS[name]
    seed = base_seed()
    print(f"seed {seed}: replay with TPU_SEED={seed}")
    rng = random.Random(seed)
    nprng = np.random.default_rng(seed)
    dut = MatrixPart(cfg)
    checked = []

    async def testbench(ctx):
        bus = RegisterBus(ctx, dut)
        part = MatrixPartDriver(bus, cfg)
        acc = np.zeros((cfg.acc_rows, cfg.cols), dtype=np.int64)
        tiles = nprng.integers(-128, 128, size=(cfg.weight_mem_tiles, cfg.rows, cfg.cols))
        for t, w in enumerate(tiles):
            await part.write_tile(t, w)
        queued, current = [], None
        for step in range(12):
            if not queued:
                count = rng.randint(1, cfg.weight_fifo_tiles + 2)
                first = rng.randrange(cfg.weight_mem_tiles - count + 1)
                await bus.write32(0x30, first | count << 16)        # LOAD
                status, in_queue = await part.status()               # the cycle after
                assert in_queue == count and not status & MatrixPartStatus.ERROR, (status, in_queue)
                queued = list(range(first, first + count))
            switch = current is None or rng.random() < 0.5
            if switch:
                current = queued.pop(0)
            rows = rng.randint(1, min(cfg.acc_rows, cfg.ub_rows, 12))
            ub = rng.randrange(cfg.ub_rows - rows + 1)
            at = rng.randrange(cfg.acc_rows - rows + 1)
            unsigned, accumulate = rng.random() < 0.5, rng.random() < 0.5
            x = nprng.integers(0, 256, size=(rows, cfg.rows))
            await part.write_rows(ub, x)
            # matmul reads STATUS the cycle after MM_GO; then the results, at once.
            await part.matmul(ub, rows, at, accumulate=accumulate, unsigned=unsigned, switch=switch)
            product = _multiply(x, tiles[current], unsigned)
            acc[at:at + rows] = (acc[at:at + rows] if accumulate else 0) + product
            acc = (acc + (1 << 31)) % (1 << 32) - (1 << 31)
            got = await part.read_accumulators(at, rows)
            checked.append(rows)
            assert (got == acc[at:at + rows]).all(), \
                f"step {step}: accumulators {at}.. read at once\n{got}\nexpected\n{acc[at:at + rows]}"
        status, _ = await part.status()
        assert not status & MatrixPartStatus.ERROR

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(testbench)
    sim.run()
    assert len(checked) == 12
