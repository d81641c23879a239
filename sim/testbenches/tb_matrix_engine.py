"""cocotb testbench: the matrix engine RTL against its numpy golden model.

Launched by `tpu.sim.harness.run` with the configuration in ``TPU_CONFIG``
and the seed in ``TPU_SEED``; every failure message carries the seed.
"""

import os
import random

import cocotb
import numpy as np
from cocotb.triggers import ReadOnly, RisingEdge

from ...hdl.matrix_engine import ActivationRow
from ..harness import config_from_env
from ...models.matrix_engine_model import MatMul, MatrixEngineModel, ideal_schedule
from ..host.streams import (CycleLoop, StreamSource, pack_array, pack_fields, start_clock_and_reset,
                      unpack_array)


class TB:
    """Drives the engine's two input streams and records every accumulator write."""

    def __init__(self, dut, *, act_idle=0.0, weight_idle=0.0):
        self.dut = dut
        self.config = config_from_env()
        self.seed = int(os.environ.get("TPU_SEED", "0"))
        self.rng = np.random.default_rng(self.seed)
        dut._log.info("config %s, seed %d (replay with TPU_SEED=%d)",
                      self.config, self.seed, self.seed)
        self.model = MatrixEngineModel(self.config)
        self.row_layout = ActivationRow(self.config)
        pyrng = random.Random(self.seed)
        self.act = StreamSource(dut, "act", idle=act_idle, rng=pyrng)
        self.weights = StreamSource(dut, "weights", idle=weight_idle, rng=pyrng)
        self.writes = []          # (cycle, addr, accumulate, sums)
        self.expected = []        # (addr, value) in order
        self.ops = []
        self.loop = CycleLoop(dut.clk, sources=[self.act, self.weights], monitors=[self._monitor])
        dut.acc_read__en.value = 0
        dut.acc_read__addr.value = 0

    def _monitor(self, cycle):
        if int(self.dut.written__valid.value):
            word = self.dut.written__data.value.to_unsigned()
            self.writes.append((cycle, int(self.dut.written__addr.value),
                                int(self.dut.written__accumulate.value),
                                np.array(unpack_array(word, 32, self.config.cols, signed=True))))

    def fail(self, message):
        raise AssertionError(f"{message} [config {self.config.name}, seed {self.seed}]")

    async def reset(self):
        """Reset, then read every accumulator row into the model: the
        accumulator memory keeps its contents through reset, so a testcase
        that follows another starts from what that one left."""
        await start_clock_and_reset(self.dut)
        for addr in range(self.config.acc_rows):
            self.model.acc[addr] = await self.read_acc(addr)

    # Stimulus ------------------------------------------------------------

    def push_tile(self, w):
        self.model.push_tile(w)
        for k in range(self.config.rows):
            self.weights.send(pack_array(w[k], 8))

    def matmul(self, op):
        before = self.model.acc.copy()
        self.model.matmul(op)
        addrs = op.addresses(self.config.acc_rows)
        # Expected value of every write, in order, replaying the op row by row.
        acc = before
        sums = np.asarray(op.x, dtype=np.int64) @ self.model.weights
        for b, addr in enumerate(addrs):
            old = acc[addr].astype(np.int64) if op.accumulate else 0
            acc[addr] = ((old + sums[b] + (1 << 31)) % (1 << 32)) - (1 << 31)
            self.expected.append((addr, acc[addr].astype(np.int64).copy()))
            self.act.send(pack_fields(self.row_layout, {
                "data": pack_array(op.x[b], 8),
                "acc_addr": addr,
                "accumulate": int(op.accumulate),
                "unsigned": int(op.unsigned),
                "switch": int(op.switch and b == 0),
            }))
        self.ops.append(op)

    # Checking ------------------------------------------------------------

    async def finish(self, *, timeout=None):
        rows_total = sum(len(op.x) for op in self.ops)
        if timeout is None:
            timeout = 20 * (rows_total + len(self.weights.queue) + self.config.rows
                            + self.config.cols + 50)
        await self.loop.run_until(
            lambda: self.act.done and self.weights.done and len(self.writes) >= rows_total,
            timeout=timeout, what="all rows to be written")
        for _ in range(4):
            await self.loop.step()
        if int(self.dut.busy.value):
            self.fail("busy still high after the last write")
        self.check_writes()
        await self.check_memory()

    def check_writes(self):
        if len(self.writes) != len(self.expected):
            self.fail(f"{len(self.writes)} accumulator writes, expected {len(self.expected)}")
        for i, ((cycle, addr, _, got), (want_addr, want)) in enumerate(zip(self.writes, self.expected)):
            if addr != want_addr or not np.array_equal(got, want):
                self.fail(f"write {i} (cycle {cycle}): got acc[{addr}] = {got.tolist()}, "
                          f"expected acc[{want_addr}] = {want.tolist()}")

    async def read_acc(self, addr):
        """Read one accumulator row through the read port."""
        await RisingEdge(self.dut.clk)
        self.dut.acc_read__en.value = 1
        self.dut.acc_read__addr.value = addr
        await RisingEdge(self.dut.clk)
        self.dut.acc_read__en.value = 0
        await ReadOnly()
        word = self.dut.acc_read__data.value.to_unsigned()
        return np.array(unpack_array(word, 32, self.config.cols, signed=True))

    async def check_memory(self):
        touched = sorted({addr for addr, _ in self.expected})
        for addr in touched:
            got = await self.read_acc(addr)
            if not np.array_equal(got, self.model.acc[addr]):
                self.fail(f"read port: acc[{addr}] = {got.tolist()}, "
                          f"expected {self.model.acc[addr].tolist()}")

    def check_timing(self):
        """Rows accepted exactly as the ideal schedule says, each written
        exactly `latency` cycles later."""
        cfg = self.config
        latency = cfg.matrix_latency
        ideal = [c for op in ideal_schedule(cfg, self.ops) for c in op]
        start = self.act.accepted[0] - ideal[0]
        got = [c - start for c in self.act.accepted]
        if got != ideal:
            first = next(i for i, (a, b) in enumerate(zip(got, ideal)) if a != b)
            self.fail(f"row {first} accepted in cycle {got[first]}, ideal schedule says "
                      f"{ideal[first]}; accepted {got[:first + 3]}..., ideal {ideal[:first + 3]}...")
        for i, ((cycle, *_), taken) in enumerate(zip(self.writes, self.act.accepted)):
            if cycle - taken != latency:
                self.fail(f"row {i} written {cycle - taken} cycles after it was accepted, "
                          f"latency is {latency}")

    # Random data ---------------------------------------------------------

    def random_tile(self, kind="random"):
        shape = (self.config.rows, self.config.cols)
        if kind == "min":
            return np.full(shape, -128)
        if kind == "max":
            return np.full(shape, 127)
        if kind == "extreme":
            return self.rng.choice([-128, 127, 0, -1, 1], size=shape)
        return self.rng.integers(-128, 128, size=shape)

    def random_rows(self, count, unsigned, kind="random"):
        low, high = (0, 255) if unsigned else (-128, 127)
        shape = (count, self.config.rows)
        if kind == "max":
            return np.full(shape, low if not unsigned else high)
        if kind == "extreme":
            return self.rng.choice([low, high, 0, 1], size=shape)
        return self.rng.integers(low, high + 1, size=shape)


@cocotb.test()
async def random_operations(dut):
    """Random tiles, shapes, flags, addresses and idle cycles."""
    seed_rng = np.random.default_rng(int(os.environ.get("TPU_SEED", "0")))
    tb = TB(dut, act_idle=float(seed_rng.choice([0.0, 0.2, 0.5])),
            weight_idle=float(seed_rng.choice([0.0, 0.3, 0.6])))
    await tb.reset()
    cfg = tb.config
    for i in range(int(tb.rng.integers(6, 14))):
        switch = i == 0 or bool(tb.rng.random() < 0.6)
        if switch:
            tb.push_tile(tb.random_tile(str(tb.rng.choice(["random", "random", "extreme"]))))
        count = int(tb.rng.integers(1, 3 * cfg.rows + 2))
        unsigned = bool(tb.rng.random() < 0.5)
        if tb.rng.random() < 0.3:
            # Explicit, possibly repeated, addresses.
            addr = tb.rng.integers(0, min(cfg.acc_rows, 8), size=count)
        else:
            addr = int(tb.rng.integers(0, cfg.acc_rows))
        tb.matmul(MatMul(tb.random_rows(count, unsigned, str(tb.rng.choice(["random", "extreme"]))),
                         addr, accumulate=bool(tb.rng.random() < 0.5), unsigned=unsigned,
                         switch=switch))
    await tb.finish()


@cocotb.test()
async def extreme_values(dut):
    """The largest sums in both directions, and every extreme operand pairing."""
    tb = TB(dut)
    await tb.reset()
    rows = tb.config.rows
    cases = [
        ("min", "max", True),    # -128 * 255: the most negative sum
        ("min", "max", False),   # -128 * -128: the most positive signed sum
        ("max", "max", True),    # 127 * 255
        ("max", "max", False),   # 127 * -128
        ("extreme", "extreme", True),
        ("extreme", "extreme", False),
    ]
    for i, (wkind, xkind, unsigned) in enumerate(cases):
        tb.push_tile(tb.random_tile(wkind))
        tb.matmul(MatMul(tb.random_rows(rows, unsigned, xkind), i * rows,
                         unsigned=unsigned, switch=True))
    # Zero activations, and uint8 0/255 alternating.
    tb.matmul(MatMul(np.zeros((2, rows), dtype=int), 0, accumulate=True, unsigned=True))
    tb.matmul(MatMul(np.resize([0, 255], (3, rows)), 2, accumulate=True, unsigned=True))
    await tb.finish()
    extremes = {int(v) for _, vals in tb.expected for v in vals}
    if -128 * 255 * rows not in extremes or 128 * 128 * rows not in extremes:
        tb.fail("extreme sums were not exercised")


@cocotb.test()
async def accumulate_chain(dut):
    """A K = 32 * rows matmul as 32 tiles accumulated into the same rows,
    checked against one numpy matmul."""
    tb = TB(dut)
    await tb.reset()
    cfg = tb.config
    tiles = 32
    batch = max(1, min(cfg.rows, cfg.acc_rows))
    x = tb.rng.integers(0, 256, size=(batch, tiles * cfg.rows))
    w = tb.rng.integers(-128, 128, size=(tiles * cfg.rows, cfg.cols))
    for t in range(tiles):
        tb.push_tile(w[t * cfg.rows:(t + 1) * cfg.rows])
        tb.matmul(MatMul(x[:, t * cfg.rows:(t + 1) * cfg.rows], 0,
                         accumulate=t > 0, unsigned=True, switch=True))
    await tb.finish()
    reference = x.astype(np.int64) @ w.astype(np.int64)
    if not np.array_equal(tb.model.acc[:batch], reference):
        tb.fail("accumulated tiles differ from the full matmul")


@cocotb.test()
async def back_to_back_timing(dut):
    """Tile switches back to back: exact cycle of every row, no idle cycles
    between operations of at least `rows` rows."""
    tb = TB(dut)
    await tb.reset()
    cfg = tb.config
    rows = cfg.rows
    sizes = [rows, rows, 2 * rows, rows + 1, 4 * rows, rows, max(1, rows // 2), 1, rows, 3]
    for i, count in enumerate(sizes):
        switch = i != 8           # one op reuses its predecessor's tile
        if switch:
            tb.push_tile(tb.random_tile())
        tb.matmul(MatMul(tb.random_rows(count, i % 2 == 0), (i * 7) % cfg.acc_rows,
                         accumulate=i % 3 == 0, unsigned=i % 2 == 0, switch=switch))
    await tb.finish()
    tb.check_timing()
    # With every op at least `rows` long, the whole run has zero bubbles.
    accepted = tb.act.accepted
    full = sum(sizes[:6])
    if accepted[full - 1] - accepted[0] != full - 1:
        tb.fail(f"{full} rows of full-size ops took {accepted[full - 1] - accepted[0] + 1} cycles")
    dut._log.info("latency %d cycles; %d rows in %d cycles", cfg.matrix_latency,
                  len(accepted), accepted[-1] - accepted[0] + 1)


@cocotb.test()
async def heavy_idle(dut):
    """Both input streams idle most of the time."""
    tb = TB(dut, act_idle=0.7, weight_idle=0.7)
    await tb.reset()
    cfg = tb.config
    for i in range(6):
        tb.push_tile(tb.random_tile())
        tb.matmul(MatMul(tb.random_rows(int(tb.rng.integers(1, 2 * cfg.rows + 1)), i % 2 == 1),
                         int(tb.rng.integers(0, cfg.acc_rows)), accumulate=i % 2 == 0,
                         unsigned=i % 2 == 1, switch=True))
    await tb.finish()
