"""cocotb testbench: weight memory and weight FIFO against a list of tiles.

Checks every tile row arrives in command order, exactly once, under random
idle on the command stream and random back-pressure on the output, and that
the memory's bandwidth and latency hold: with no back-pressure, N tiles
stream in ``latency + N * rows * ceil(cols / bytes_per_cycle)`` cycles
give or take the fixed pipeline depth.
"""

import os
import random

import cocotb
import numpy as np
from cocotb.triggers import RisingEdge

from ...hdl.weight_fifo import WeightLoad
from ..harness import config_from_env
from ..host.streams import CycleLoop, StreamSource, pack_array, pack_fields, start_clock_and_reset, unpack_array


class Sink:
    """Takes rows from ``o``, not ready with probability `stall`."""

    def __init__(self, dut, cols, stall, rng):
        self.dut, self.cols, self.stall, self.rng = dut, cols, stall, rng
        self.rows = []
        self.cycles = []
        dut.o__ready.value = 0

    def drive(self, cycle):
        self.dut.o__ready.value = int(self.rng.random() >= self.stall)

    def sample(self, cycle):
        if int(self.dut.o__valid.value) and int(self.dut.o__ready.value):
            self.rows.append(unpack_array(self.dut.o__payload.value.to_unsigned(), 8, self.cols, signed=True))
            self.cycles.append(cycle)


async def _setup(dut, stall, idle):
    cfg = config_from_env()
    seed = int(os.environ.get("TPU_SEED", "0"))
    dut._log.info("config %s, seed %d", cfg, seed)
    rng = np.random.default_rng(seed)
    pyrng = random.Random(seed)
    dut.fill__en.value = 0
    await start_clock_and_reset(dut)
    memory = rng.integers(-128, 128, size=(cfg.weight_mem_tiles, cfg.rows, cfg.cols))
    for t in range(cfg.weight_mem_tiles):
        for k in range(cfg.rows):
            await RisingEdge(dut.clk)
            dut.fill__en.value = 1
            dut.fill__addr.value = t * cfg.rows + k
            dut.fill__data.value = pack_array(memory[t, k], 8)
    await RisingEdge(dut.clk)
    dut.fill__en.value = 0
    source = StreamSource(dut, "load", idle=idle, rng=pyrng)
    sink = Sink(dut, cfg.cols, stall, pyrng)
    loop = CycleLoop(dut.clk, sources=[source, sink])
    return cfg, seed, rng, memory, source, sink, loop


def check_refill_latency(cfg, sink, seed):
    """A tile is requested only once the FIFO has room for all of it: when
    the last row of the tile ``weight_fifo_tiles`` earlier has left. So its
    first row leaves at least the memory latency (plus the 5 cycles of the
    request queue, the read and the FIFOs) after that row, however long it
    had to wait; a FIFO that requested early would hide the latency."""
    depth, latency = cfg.weight_fifo_tiles, max(cfg.weight_mem_latency, 1) + 5
    for tile in range(depth, len(sink.cycles) // cfg.rows):
        made_room = sink.cycles[(tile - depth + 1) * cfg.rows - 1]
        first = sink.cycles[tile * cfg.rows]
        assert first - made_room >= latency, (
            f"tile {tile} of the stream: first row {first - made_room} cycles after the last row of "
            f"tile {tile - depth} made room for it, expected at least {latency} [seed {seed}]")


@cocotb.test()
async def random_loads(dut):
    """Random commands, random idle and back-pressure; every row in order."""
    seed_rng = random.Random(int(os.environ.get("TPU_SEED", "0")))
    cfg, seed, rng, memory, source, sink, loop = await _setup(
        dut, stall=seed_rng.choice([0.0, 0.3, 0.7]), idle=seed_rng.choice([0.0, 0.5]))
    layout = WeightLoad(cfg)
    expected = []
    for _ in range(int(rng.integers(3, 8))):
        count = int(rng.integers(0, min(6, cfg.weight_mem_tiles) + 1))
        tile = int(rng.integers(0, cfg.weight_mem_tiles - count + 1))
        source.send(pack_fields(layout, {"tile": tile, "count": count}))
        expected.extend(memory[tile:tile + count].reshape(-1, cfg.cols).tolist())
    await loop.run_until(lambda: source.done and len(sink.rows) >= len(expected),
                         timeout=200 * (len(expected) + 10) * (cfg.weight_mem_latency + 4),
                         what=f"{len(expected)} weight rows")
    for _ in range(cfg.weight_mem_latency + 10):
        await loop.step()
    assert len(sink.rows) == len(expected), \
        f"{len(sink.rows)} rows, expected {len(expected)} [seed {seed}]"
    for i, (got, want) in enumerate(zip(sink.rows, expected)):
        assert got == want, f"row {i}: {got} != {want} [seed {seed}]"
    check_refill_latency(cfg, sink, seed)
    assert int(dut.idle.value) == 1


@cocotb.test()
async def bandwidth(dut):
    """Without back-pressure, rows flow at the configured bytes per cycle."""
    cfg, seed, rng, memory, source, sink, loop = await _setup(dut, stall=0.0, idle=0.0)
    tiles = min(cfg.weight_mem_tiles, 8)
    source.send(pack_fields(WeightLoad(cfg), {"tile": 0, "count": tiles}))
    await loop.run_until(lambda: len(sink.rows) >= tiles * cfg.rows, timeout=100000,
                         what="the tiles")
    start = source.accepted[0]
    first = sink.cycles[0] - start
    per_row = -(-cfg.cols // min(cfg.weight_mem_bytes_per_cycle, cfg.cols))
    span = sink.cycles[-1] - sink.cycles[0]
    dut._log.info("first row %d cycles after the command, %d rows in %d cycles",
                  first, len(sink.rows), span + 1)
    check_refill_latency(cfg, sink, seed)
    # The memory answers `latency` cycles (at least one) after a request,
    # plus 5 cycles through the request queue, the memory read and the FIFOs.
    assert first == max(cfg.weight_mem_latency, 1) + 5, f"first row after {first} cycles"
    ideal = (tiles * cfg.rows - 1) * per_row
    if cfg.weight_fifo_tiles * cfg.rows >= cfg.weight_mem_latency + 2 * cfg.rows:
        # Deep enough to cover the latency: the memory's bandwidth is the limit.
        assert span == ideal, f"{tiles * cfg.rows} rows took {span + 1} cycles, ideal {ideal + 1}"
    else:
        assert span >= ideal, f"{tiles * cfg.rows} rows took {span + 1} cycles, faster than the bandwidth"
