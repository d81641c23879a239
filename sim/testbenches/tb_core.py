"""cocotb testbench: the whole core against the golden chip model.

A program runs on the RTL with a host-memory model behind its DMA ports
(random delays on every stream) and on `ChipModel`; afterwards the unified
buffer, the accumulators, host memory, the fault status and the interrupts
must be identical. Programs come from ``TPU_PROGRAM`` (a file of encoded
instructions) or from the random generator with ``TPU_SEED``; the random
programs run against random DMA windows (`random_windows`), so some fault
with HOST_RANGE.
"""

import json
import os
import random

import cocotb
import numpy as np
from cocotb.triggers import ReadOnly, RisingEdge

from ...hdl.core import COUNTERS
from ...isa import Fault, INSTRUCTION_BYTES
from ...models.chip_model import ChipModel
from ..harness import config_from_env
from ..stimulus.coverage import program_bins
from ..stimulus.program_generator import (FAULT_KINDS, HOST_INPUT, open_window, random_program, random_windows,
                                          seeded_program)
from ..host.streams import CycleLoop, StreamSource, pack_array, start_clock_and_reset, unpack_array


def counter_values(word, config):
    """{counter name: value} of the core's ``counters`` port value `word`
    (``config.counter_bits`` bits each, in `COUNTERS` order)."""
    width = config.counter_bits
    return {name: (word >> (width * i)) & ((1 << width) - 1) for i, name in enumerate(COUNTERS)}


class CounterMirror:
    """The values of the core's counters cycle by cycle, counted from its
    ``counter_events`` (``ram_counters``, whose counters are read at most
    every other cycle), from 0 at the first cycle it is called in: call it
    once a cycle; `word` is the ``counters`` port's value in that cycle."""

    def __init__(self, dut, config):
        self.dut, self.cfg = dut, config
        self.values = [0] * len(COUNTERS)
        self.increments = [config.rows * config.cols if name == "useful_macs" else 1 for name in COUNTERS]

    def word(self):
        width = self.cfg.counter_bits
        return sum((value % (1 << width)) << (width * i) for i, value in enumerate(self.values))

    def __call__(self, cycle):
        events = self.dut.counter_events.value.to_unsigned()
        self.values = [value + inc * (events >> i & 1)
                       for i, (value, inc) in enumerate(zip(self.values, self.increments))]


class HostModel:
    """Serves the core's host DMA ports from a byte dictionary, with random
    waits on every stream.

    Every cycle costs Python time in a simulation that is mostly waiting, so
    the model writes a signal only when its value changes and reads the
    design's side of a handshake only when its own side allows a transfer.
    """

    _READY = ("host_read_req", "host_write_req", "host_write_data")

    def __init__(self, dut, config, rng, *, stall):
        self.dut, self.cfg, self.rng, self.stall = dut, config, rng, stall
        self.memory = {}
        self.reads = []          # [addr, rows left, next row]
        self.writes = []
        self._ready_handles = [getattr(dut, f"{prefix}__ready") for prefix in self._READY]
        self._ready = [0, 0, 0]
        for handle in self._ready_handles:
            handle.value = 0
        dut.host_read_data__valid.value = 0
        self._valid = 0
        self._offered = None

    def drive(self, cycle):
        dut = self.dut
        for i, handle in enumerate(self._ready_handles):
            ready = int(self.rng.random() >= self.stall)
            if ready != self._ready[i]:
                handle.value = self._ready[i] = ready
        if self._offered is None and self.reads and self.rng.random() >= self.stall:
            addr, left, row = self.reads[0]
            base = addr + row * self.cfg.rows
            data = [self.memory.get(base + i, 0) for i in range(self.cfg.rows)]
            self._offered = True
            dut.host_read_data__payload.value = pack_array(data, 8)
        valid = int(self._offered is not None)
        if valid != self._valid:
            dut.host_read_data__valid.value = self._valid = valid

    def sample(self, cycle):
        dut = self.dut
        R = self.cfg.rows
        read_ready, write_ready, data_ready = self._ready
        if read_ready and int(dut.host_read_req__valid.value):
            word = dut.host_read_req__payload.value.to_unsigned()
            self.reads.append([word & ((1 << 64) - 1), word >> 64, 0])
        if self._offered is not None and int(dut.host_read_data__ready.value):
            self._offered = None
            self.reads[0][2] += 1
            if self.reads[0][2] == self.reads[0][1]:
                self.reads.pop(0)
        if write_ready and int(dut.host_write_req__valid.value):
            word = dut.host_write_req__payload.value.to_unsigned()
            self.writes.append([word & ((1 << 64) - 1), word >> 64, 0])
        if data_ready and int(dut.host_write_data__valid.value):
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
    def __init__(self, dut, seed=None):
        self.dut = dut
        self.cfg = config_from_env()
        self.seed = int(os.environ.get("TPU_SEED", "0")) if seed is None else seed
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
                     "host_read_data__payload", "dma_error", "clear"):
            getattr(dut, name).value = 0
        if self.cfg.ram_counters:
            dut.counter_read__en.value = 0
            dut.counter_read__addr.value = 0
        self.set_windows([open_window(self.cfg)])

    def set_windows(self, windows):
        """Open the DMA `windows` (``(base, size)`` pairs; the rest closed), in
        the RTL and in the golden model."""
        windows = list(windows) + [(0, 0)] * (self.cfg.dma_windows - len(windows))
        width = self.cfg.host_addr_bits
        self.dut.windows.value = pack_array([base | size << width for base, size in windows], 2 * width)
        self.model.windows = tuple(windows)

    def _monitor(self, cycle):
        if int(self.dut.irq.value):
            self.interrupts.append((cycle, int(self.dut.irq_code.value)))
        # Once the queue has filled, or the program has all gone in, there is
        # nothing left to learn: skip the reads.
        if (not self.queue_full and not self.instr.done and int(self.dut.instr__valid.value)
                and not int(self.dut.instr__ready.value)):
            self.queue_full = True

    queue_full = False

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
        await self.loop.run_until(lambda: int(self.dut.halted.value) and (
                                      not int(self.dut.busy.value) or self.dut.fault.value != 0),
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
        await self.check_counters()

    async def counters(self):
        """{counter name: value}: the ``counters`` port's, or with
        ``ram_counters`` each read through ``counter_read``."""
        if not self.cfg.ram_counters:
            return counter_values(self.dut.counters.value.to_unsigned(), self.cfg)
        return {name: (await self._read("counter_read", i, self.cfg.counter_bits, 1, False))[0]
                for i, name in enumerate(COUNTERS)}

    async def check_counters(self):
        cfg, model = self.cfg, self.model
        got = await self.counters()
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


def _random_program(tb, fault):
    """A random program for `tb` (its windows opened); ``random`` `fault`: a
    random fault kind."""
    if fault == "random":
        fault = tb.rng.choice(FAULT_KINDS)
    windows = random_windows(tb.cfg, tb.rng)
    tb.dut._log.info("DMA windows: %s", ", ".join(f"0x{b:x}+0x{s:x}" for b, s in windows))
    tb.set_windows(windows)
    instructions, program = random_program(tb.cfg, tb.rng, fault=fault, windows=windows,
                                           length=int(os.environ.get("TPU_LENGTH", "40")))
    tb.dut._log.info("program (seed %d):\n%s", tb.seed, "\n".join(str(i) for i in instructions))
    return program


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
        program = _random_program(tb, os.environ.get("TPU_FAULT") or None)
    await tb.run_program(program)
    await tb.check()


async def _next_testbench(dut, previous, **options):
    """A `TB` for the next program of a simulation that runs several: the
    first resets the chip; later ones reset it again but keep the memories,
    so the golden model starts from the previous program's (`previous`)."""
    if previous is not None:
        await RisingEdge(dut.clk)      # out of the read-only phase of the last check
    tb = TB(dut, **options)
    if previous is None:
        await tb.reset()
    else:
        await _reset(dut)
        tb.model.ub[:], tb.model.acc[:] = previous.ub, previous.acc
        tb.model.channels.lut = previous.channels.lut
    return tb


@cocotb.test()
async def edge_programs(dut):
    """The directed programs of `tpu.sim.stimulus.edge_programs` (interlocked
    pairs sharing one row or equal, RHM and WHM on the same host bytes, the
    last UB and accumulator rows and one row past them), each against the
    golden model, with a slow host so DMAs are still running when the next
    instruction is ready. With ``TPU_REPORT``, their coverage bins as in
    `random_batch`."""
    from ..stimulus.edge_programs import edge_programs as programs
    from ...isa import encode_program
    report = os.environ.get("TPU_REPORT")
    previous = None
    for name, instructions in programs(config_from_env()):
        tb = await _next_testbench(dut, previous)
        previous = tb.model
        tb.host.stall = 0.6
        tb.instr.idle = 0.0
        dut._log.info("edge program: %s", name)
        await tb.load_memories()
        program = encode_program(instructions)
        await tb.run_program(program)
        try:
            await tb.check()
        except AssertionError as error:
            raise AssertionError(f"{name}: {error}") from None
        if report:
            with open(report, "a") as f:
                f.write(json.dumps({"seed": None, "program": name, "passed": True, "failure": None,
                                    "fault": tb.model.fault.name,
                                    "bins": sorted(program_bins(tb.cfg, program, tb.model))}) + "\n")


@cocotb.test()
async def random_batch(dut):
    """``TPU_BATCH`` random programs with seeds ``TPU_SEED``, ``TPU_SEED + 1``,
    ... (or the seeds listed in ``TPU_SEEDS``, comma-separated) in one simulation (a reset between them), each against the golden
    model; half of them fault on purpose (`seeded_program`). A program starts from the UB,
    accumulators and lookup table the one before left (reset keeps memories).
    With ``TPU_REPORT``, appends one JSON line per program: its seed, whether
    it passed, the failure, and the coverage bins it hit (`program_bins`).
    Stops at the first failure."""
    first_seed = int(os.environ.get("TPU_SEED", "0"))
    seeds = range(first_seed, first_seed + int(os.environ.get("TPU_BATCH", "10")))
    if os.environ.get("TPU_SEEDS"):
        seeds = [int(seed) for seed in os.environ["TPU_SEEDS"].split(",")]
    count = len(seeds)
    report = os.environ.get("TPU_REPORT")
    previous = None
    for k, seed in enumerate(seeds):
        tb = await _next_testbench(dut, previous, seed=seed)
        previous = tb.model
        await tb.load_memories()
        instructions, program, windows = seeded_program(tb.cfg, tb.seed)
        tb.set_windows(windows)
        dut._log.info("program (seed %d), DMA windows %s:\n%s", tb.seed,
                      ", ".join(f"0x{b:x}+0x{s:x}" for b, s in windows),
                      "\n".join(str(i) for i in instructions))
        failure = None
        try:
            await tb.run_program(program)
            await tb.check()
        except AssertionError as error:
            failure = str(error)
        if report:
            bins = program_bins(tb.cfg, program, tb.model)
            if tb.queue_full:
                bins.add("fifo:instructions:full")
            with open(report, "a") as f:
                f.write(json.dumps({"seed": tb.seed, "passed": failure is None, "failure": failure,
                                    "fault": tb.model.fault.name, "bins": sorted(bins)}) + "\n")
        if failure:
            raise AssertionError(f"program {k + 1} of {count}: {failure}")


# Directed: DMA windows and DMA errors ------------------------------------------------

_AUX = (0x40000, 0x1000)        # a window for the DMAs around the one under test
_WIN = 0x10000                  # where the window under test opens


def _window_cases(config):
    """``(name, windows, the DMA at index 2, expected fault)``; the top of
    host memory is ``2**host_addr_bits``."""
    from ...isa import Rhm, Whm
    R, bits = config.rows, config.host_addr_bits
    top = 1 << bits
    n = 2 * R                    # bytes of a 2-row DMA
    return [
        ("crosses the end", [(_WIN, 16 * R)], Rhm(8, 2, _WIN + 16 * R - R), Fault.HOST_RANGE),
        ("crosses the start", [(_WIN, 16 * R)], Whm(0, 2, _WIN - 1), Fault.HOST_RANGE),
        ("fits exactly (RHM)", [(_WIN, n)], Rhm(8, 2, _WIN), Fault.NONE),
        ("fits exactly (WHM)", [(_WIN, n)], Whm(0, 2, _WIN), Fault.NONE),
        ("closed window", [(_WIN, 0)], Rhm(8, 1, _WIN), Fault.HOST_RANGE),
        ("two adjacent windows (RHM)", [(_WIN, R), (_WIN + R, R)], Rhm(8, 2, _WIN), Fault.HOST_RANGE),
        ("two adjacent windows (WHM)", [(_WIN + R, R), (_WIN, R)], Whm(0, 2, _WIN), Fault.HOST_RANGE),
        (f"window past 2**{bits}", [(top - n, top - 1)], Rhm(8, 2, top - n), Fault.NONE),
        (f"DMA past 2**{bits}", [(top - n, top - 1)], Rhm(8, 2, top - R), Fault.HOST_RANGE),
        ("no rows, no window", [], Rhm(8, 0, _WIN), Fault.NONE),
    ]


async def _reset(dut):
    dut.rst.value = 1
    for _ in range(3):
        await RisingEdge(dut.clk)
    dut.rst.value = 0


@cocotb.test()
async def host_windows(dut):
    """An RHM or WHM outside the DMA windows faults with HOST_RANGE before it
    starts, like the golden model: spans across either end of a window, a
    closed window, two adjacent windows that only together hold the span, a
    window ending beyond 2**host_addr_bits; and spans that fit exactly do not
    fault. A case needing more windows than the chip has is skipped; one
    leaving no window for the DMAs around the one under test has NOPs there."""
    from ...isa import Halt, Mmc, Nop, Rhm, Whm, encode_program
    cfg = config_from_env()
    first = True
    previous = None
    for name, windows, dma, fault in _window_cases(cfg):
        if len(windows) > cfg.dma_windows:
            dut._log.info("case %s: skipped (%d windows, the chip has %d)", name, len(windows),
                          cfg.dma_windows)
            continue
        aux = len(windows) < cfg.dma_windows
        if not first:
            await RisingEdge(dut.clk)      # out of the read-only phase of the last check
        tb = TB(dut)
        if previous:
            # Reset clears neither the UB nor the accumulators.
            tb.model.ub[:], tb.model.acc[:] = previous.ub, previous.acc
        previous = tb.model
        if first:
            await tb.reset()
            first = False
        else:
            await _reset(dut)
        dut._log.info("case %s: %s", name, dma)
        await tb.load_memories()
        tb.host.stall = 0.0
        tb.set_windows(([_AUX] if aux else []) + windows)
        before, after = (Rhm(0, 4, _AUX[0]), Whm(0, 4, _AUX[0] + 0x800)) if aux else (Nop(), Nop())
        program = encode_program([before, Mmc(0, 4, 0), dma, after, Halt()])
        await tb.run_program(program)
        if tb.model.fault != fault or (fault and tb.model.fault_index != 2):
            tb.fail(f"{name}: the golden model says {tb.model.fault.name} at "
                    f"{tb.model.fault_index}, expected {fault.name}")
        await tb.check()


class _Raise:
    """Raises ``dma_error`` at a cycle (or when `when()` holds) and keeps it high."""

    def __init__(self, dut, when):
        self.dut, self.when, self.cycle = dut, when, None

    def drive(self, cycle):
        if self.cycle is None and self.when(cycle):
            self.cycle = cycle
            self.dut.dma_error.value = 1

    def sample(self, cycle):
        pass


@cocotb.test()
async def dma_error(dut):
    """``dma_error`` halts the core at once with DMA_ERROR, the index of the RHM
    or WHM issued last and one interrupt; nothing issues after it."""
    from ...isa import Halt, Int, Mmc, Nop, Rhm, Whm, encode_program
    none = (1 << 32) - 1
    acc_rows = config_from_env().acc_rows
    cases = [
        # (name, program, host stalls, raise dma_error when, expected index or None)
        ("stuck RHM", [Nop(), Rhm(0, 4, 0x1000), Mmc(8, 2, 0), Int(5), Halt()], True, 40, 1),
        ("stuck WHM", [Nop(), Mmc(8, 2, 0), Whm(0, 4, 0x1000), Int(5), Halt()], True, 40, 2),
        ("behind a stuck RHM, a fault waits", [Rhm(0, 4, 0x1000), Mmc(0, 2, acc_rows - 1), Halt()],
         True, 40, 0),
        ("after the DMA completed", [Rhm(0, 2, 0x1000), Mmc(0, 2, 0), Nop(), Nop(), Nop(), Nop(),
                                     Whm(0, 1, 0x2000)] + [Nop()] * 40 + [Int(5), Halt()],
         False, "whm done", 6),
        ("before any DMA", [Mmc(0, 2, 0)] * 30 + [Halt()], False, 12, none),
        ("after HALT", [Nop(), Halt()], False, 60, None),
    ]
    first = True
    for name, instructions, stuck, when, index in cases:
        if not first:
            await RisingEdge(dut.clk)
        tb = TB(dut)
        if first:
            await tb.reset()
            first = False
        else:
            await _reset(dut)
        dut._log.info("case %s", name)
        tb.host.stall = 1.0 if stuck else 0.0
        tb.instr.idle = 0.0
        start = tb.loop.cycle + 1
        if when == "whm done":
            fired = []
            tb.loop.monitors.append(
                lambda c: fired.append(c) if int(dut.host_write_data__valid.value)
                and int(dut.host_write_data__ready.value) else None)
            trigger = _Raise(dut, lambda c: bool(fired) and c > fired[0] + 4)
        else:
            trigger = _Raise(dut, lambda c, t=when: c - start == t)
        tb.loop.sources.append(trigger)
        program = encode_program(instructions)
        for i in range(len(instructions)):
            tb.instr.send(int.from_bytes(program[16 * i:16 * (i + 1)], "little"))
        await tb.loop.run_until(lambda: trigger.cycle is not None and tb.loop.cycle > trigger.cycle + 30,
                                timeout=400, what="the DMA error")
        halted, fault, fault_index = (int(dut.halted.value), int(dut.fault.value),
                                      int(dut.fault_index.value))
        codes = [code for _, code in tb.interrupts]
        if index is None:
            if (halted, fault, codes) != (1, Fault.NONE, [0]):
                tb.fail(f"{name}: halted {halted}, fault {fault}, interrupts {codes}")
            continue
        if (halted, fault, fault_index) != (1, Fault.DMA_ERROR, index):
            tb.fail(f"{name}: halted {halted}, fault {fault} at {fault_index}, expected "
                    f"DMA_ERROR at {index}")
        # One interrupt (code 0), in the cycle after dma_error is first high;
        # the INT after the DMA never issued.
        if [c for c, _ in tb.interrupts if c > trigger.cycle] != [trigger.cycle + 1] or codes[-1] != 0:
            tb.fail(f"{name}: interrupts {tb.interrupts}, dma_error raised in {trigger.cycle}")
        if 5 in codes:
            tb.fail(f"{name}: the INT after the DMA error issued")
