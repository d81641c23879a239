"""cocotb testbench: the whole core against the golden chip model.

A program runs on the RTL with a host-memory model behind its DMA ports
(random delays on every stream) and on `ChipModel`; afterwards the unified
buffer, the accumulators, host memory, the fault status and the interrupts
must be identical. Programs come from ``TPU_PROGRAM`` (a file of encoded
instructions) or from the random generator with ``TPU_SEED``.
"""

import os
import random

import cocotb
import numpy as np
from cocotb.triggers import ReadOnly, RisingEdge

from ..hdl.core import COUNTERS
from ..isa import Fault, INSTRUCTION_BYTES
from .chip_model import ChipModel
from .harness import config_from_env
from .program_generator import FAULT_KINDS, HOST_INPUT, random_program
from .streams import CycleLoop, StreamSource, pack_array, start_clock_and_reset, unpack_array


class HostModel:
    """Serves the core's host DMA ports from a byte dictionary, with random
    waits on every stream."""

    def __init__(self, dut, config, rng, *, stall):
        self.dut, self.cfg, self.rng, self.stall = dut, config, rng, stall
        self.memory = {}
        self.reads = []          # [addr, rows left, next row]
        self.writes = []
        for prefix in ("host_read_req", "host_write_req", "host_write_data"):
            getattr(dut, f"{prefix}__ready").value = 0
        dut.host_read_data__valid.value = 0
        self._offered = None

    def drive(self, cycle):
        dut = self.dut
        for prefix in ("host_read_req", "host_write_req", "host_write_data"):
            getattr(dut, f"{prefix}__ready").value = int(self.rng.random() >= self.stall)
        if self._offered is None and self.reads and self.rng.random() >= self.stall:
            addr, left, row = self.reads[0]
            base = addr + row * self.cfg.rows
            data = [self.memory.get(base + i, 0) for i in range(self.cfg.rows)]
            self._offered = True
            dut.host_read_data__payload.value = pack_array(data, 8)
        dut.host_read_data__valid.value = int(self._offered is not None)

    def sample(self, cycle):
        dut = self.dut
        R = self.cfg.rows
        if int(dut.host_read_req__valid.value) and int(dut.host_read_req__ready.value):
            word = dut.host_read_req__payload.value.to_unsigned()
            self.reads.append([word & ((1 << 64) - 1), word >> 64, 0])
        if self._offered is not None and int(dut.host_read_data__ready.value):
            self._offered = None
            self.reads[0][2] += 1
            if self.reads[0][2] == self.reads[0][1]:
                self.reads.pop(0)
        if int(dut.host_write_req__valid.value) and int(dut.host_write_req__ready.value):
            word = dut.host_write_req__payload.value.to_unsigned()
            self.writes.append([word & ((1 << 64) - 1), word >> 64, 0])
        if int(dut.host_write_data__valid.value) and int(dut.host_write_data__ready.value):
            assert self.writes, "host write data without a request"
            addr, left, row = self.writes[0]
            word = dut.host_write_data__payload.value.to_unsigned()
            data = unpack_array(word, 8, R, signed=False)
            for i, b in enumerate(data):
                self.memory[addr + row * R + i] = b
            self.writes[0][2] += 1
            if self.writes[0][2] == left:
                self.writes.pop(0)


class TB:
    def __init__(self, dut):
        self.dut = dut
        self.cfg = config_from_env()
        self.seed = int(os.environ.get("TPU_SEED", "0"))
        self.rng = random.Random(self.seed)
        self.np_rng = np.random.default_rng(self.seed)
        dut._log.info("config %s, seed %d (replay with TPU_SEED=%d)", self.cfg, self.seed, self.seed)
        self.model = ChipModel(self.cfg)
        stall = self.rng.choice([0.0, 0.3, 0.6])
        self.host = HostModel(dut, self.cfg, self.rng, stall=stall)
        self.instr = StreamSource(dut, "instr", idle=self.rng.choice([0.0, 0.2, 0.6]), rng=self.rng)
        self.interrupts = []
        self.loop = CycleLoop(dut.clk, sources=[self.instr, self.host], monitors=[self._monitor])
        # Every input defined from the start: X must not leak in from here.
        for name in ("wmem_fill__en", "wmem_fill__addr", "wmem_fill__data", "debug_ub__en",
                     "debug_ub__addr", "debug_acc__en", "debug_acc__addr", "instr__payload",
                     "host_read_data__payload"):
            getattr(dut, name).value = 0

    def _monitor(self, cycle):
        if int(self.dut.irq.value):
            self.interrupts.append((cycle, int(self.dut.irq_code.value)))

    def fail(self, message):
        raise AssertionError(f"{message} [config {self.cfg.name}, seed {self.seed}]")

    async def reset(self):
        await start_clock_and_reset(self.dut)

    async def load_memories(self):
        """Random weights in weight memory, random bytes in host memory."""
        cfg = self.cfg
        tiles = self.np_rng.integers(-128, 128, size=(cfg.weight_mem_tiles, cfg.rows, cfg.cols))
        await self.fill_weights(tiles)
        data = self.np_rng.integers(0, 256, size=64 * cfg.rows, dtype=np.uint8)
        # Some structure so LDQ tables hold plausible multipliers and shifts.
        self.model.host.write(HOST_INPUT, data.tobytes())
        for i, b in enumerate(data):
            self.host.memory[HOST_INPUT + i] = int(b)

    async def fill_weights(self, tiles, numbers=None):
        """Write `tiles` into weight memory (as tile `numbers`, by default
        0, 1, ...), in the RTL and in the golden model."""
        numbers = range(len(tiles)) if numbers is None else numbers
        for t, tile in zip(numbers, tiles):
            self.model.weight_memory[t] = tile
            for k in range(self.cfg.rows):
                await RisingEdge(self.dut.clk)
                self.dut.wmem_fill__en.value = 1
                self.dut.wmem_fill__addr.value = t * self.cfg.rows + k
                self.dut.wmem_fill__data.value = pack_array(tile[k], 8)
        await RisingEdge(self.dut.clk)
        self.dut.wmem_fill__en.value = 0

    async def run_program(self, program, *, timeout=None):
        self.model.run(program)
        for i in range(len(program) // INSTRUCTION_BYTES):
            self.instr.send(int.from_bytes(program[i * 16:(i + 1) * 16], "little"))
        timeout = timeout or 4000 + 400 * (len(program) // 16) * self.cfg.rows
        await self.loop.run_until(lambda: int(self.dut.halted.value) and not int(self.dut.busy.value)
                                  or (int(self.dut.halted.value) and self.dut.fault.value != 0),
                                  timeout=timeout, what="the core to halt")
        # Let the last writes land.
        for _ in range(self.cfg.rows + self.cfg.cols + 40):
            await self.loop.step()

    async def _read(self, prefix, addr, width, count, signed):
        await RisingEdge(self.dut.clk)
        getattr(self.dut, f"{prefix}__en").value = 1
        getattr(self.dut, f"{prefix}__addr").value = addr
        await RisingEdge(self.dut.clk)
        getattr(self.dut, f"{prefix}__en").value = 0
        await ReadOnly()
        word = getattr(self.dut, f"{prefix}__data").value.to_unsigned()
        return unpack_array(word, width, count, signed=signed)

    async def check(self):
        cfg, model = self.cfg, self.model
        fault = int(self.dut.fault.value)
        if fault != model.fault:
            self.fail(f"fault {Fault(fault).name} at instruction {int(self.dut.fault_index.value)}, "
                      f"golden model {model.fault.name} at {model.fault_index}")
        if fault and int(self.dut.fault_index.value) != model.fault_index:
            self.fail(f"fault at instruction {int(self.dut.fault_index.value)}, "
                      f"golden model {model.fault_index}")
        codes = [code for _, code in self.interrupts]
        expected = list(model.interrupts) + [0]   # the halt or fault interrupt
        if codes != expected:
            self.fail(f"interrupts {codes}, expected {expected}")
        for row in range(cfg.ub_rows):
            got = await self._read("debug_ub", row, 8, cfg.rows, False)
            if got != model.ub[row].tolist():
                self.fail(f"UB row {row} = {got}, expected {model.ub[row].tolist()}")
        for row in range(cfg.acc_rows):
            got = await self._read("debug_acc", row, 32, cfg.cols, True)
            if got != model.acc[row].tolist():
                self.fail(f"accumulator row {row} = {got}, expected {model.acc[row].tolist()}")
        for addr, byte in model.host.bytes.items():
            if self.host.memory.get(addr, 0) != byte:
                self.fail(f"host byte 0x{addr:x} = {self.host.memory.get(addr, 0)}, expected {byte}")
        extra = set(self.host.memory) - set(model.host.bytes)
        if extra:
            self.fail(f"host bytes written that the model did not write, e.g. 0x{min(extra):x}")
        self.check_counters()

    def check_counters(self):
        cfg, model = self.cfg, self.model
        counters = self.dut.counters.value.to_unsigned()
        got = {name: (counters >> (64 * i)) & ((1 << 64) - 1) for i, name in enumerate(COUNTERS)}
        # Tiles shift in ahead of use: all that were switched to, plus the
        # ones waiting in the transit and shadow registers.
        shifted = min(model.tiles_requested, model.tiles_switched + 2)
        expected = {
            "mxu_active": model.matrix_rows,
            "useful_macs": model.matrix_rows * cfg.rows * cfg.cols,
            "weight_shift": shifted * cfg.rows,
        }
        for name, value in expected.items():
            if got[name] != value:
                self.fail(f"counter {name} = {got[name]}, expected {value}")
        if got["mxu_active"] + got["non_matrix"] != got["cycles"]:
            self.fail(f"mxu_active + non_matrix = {got['mxu_active'] + got['non_matrix']}, "
                      f"cycles = {got['cycles']}")
        self.dut._log.info("counters: %s", got)


@cocotb.test()
async def random_programs(dut):
    """A random legal program, or one that faults, against the golden model."""
    tb = TB(dut)
    await tb.reset()
    await tb.load_memories()
    path = os.environ.get("TPU_PROGRAM")
    if path:
        with open(path, "rb") as f:
            program = f.read()
    else:
        fault = os.environ.get("TPU_FAULT") or None
        if fault == "random":
            fault = tb.rng.choice(FAULT_KINDS)
        instructions, program = random_program(tb.cfg, tb.rng, fault=fault,
                                               length=int(os.environ.get("TPU_LENGTH", "40")))
        dut._log.info("program:\n%s", "\n".join(str(i) for i in instructions))
    await tb.run_program(program)
    await tb.check()
