"""Golden model of the whole chip at instruction level (numpy).

The RTL core must leave exactly this state behind for any program: the same
unified buffer, accumulators, host memory, fault code and faulting
instruction, and the same interrupts.
"""

import functools

import numpy as np

from ..config import TPUConfig
from ..isa import (Act, Cfg, Fault, Halt, Int, Ldl, Ldq, Mmc, Nop, Reg, Rhm, Rw, Sync, Whm,
                   Pool, check, decode, ldl_rows, ldq_rows, ldq_sections,
                   INSTRUCTION_BYTES)
from ..hdl.activation_settings import SHIFT_WIDTH, VALUE_WIDTH
from .activation_model import ActivationSettings, run_operation
from .matrix_engine_model import wrap_int32


__all__ = ["ChipModel", "ChipFault", "ALL_HOST_MEMORY", "in_window"]

#: `ChipModel`'s default windows: one covering every host address. The
#: chip's window registers cannot hold it (their size is below 2**64).
ALL_HOST_MEMORY = ((0, 1 << 64),)


def _saturate(value, width):
    low, high = -(1 << (width - 1)), (1 << (width - 1)) - 1
    return max(low, min(high, int(value)))


def in_window(windows, host, nbytes, addr_bits=64):
    """Whether host bytes ``[host, host + nbytes)`` lie inside one of `windows`
    (``(base, size)`` pairs, bytes ``[base, base + size)``; size 0: closed).
    Addresses do not wrap, and no DMA reaches past ``2**addr_bits`` (the
    chip's ``host_addr_bits``), whatever a window says."""
    end = host + nbytes
    return end <= 1 << addr_bits and any(
        size and base <= host and end <= base + size for base, size in windows)


class ChipFault(Exception):
    """The chip stopped with `fault` at instruction `index`."""

    def __init__(self, fault, index, message=""):
        super().__init__(f"{Fault(fault).name} at instruction {index}: {message}")
        self.fault = Fault(fault)
        self.index = index


class HostMemory:
    """Sparse byte-addressed host memory."""

    def __init__(self):
        self.bytes = {}

    def write(self, addr, data):
        for i, b in enumerate(bytes(data)):
            self.bytes[addr + i] = b

    def read(self, addr, n):
        return bytes(self.bytes.get(addr + i, 0) for i in range(n))


@functools.lru_cache(maxsize=1 << 16)
def checked_decode(word, config):
    """``(fault, instruction)`` of a 16-byte `word` (the instruction None when
    it faults). Cached: a program repeats its words, and the runs of one
    compiled model repeat whole programs."""
    fault = check(word, config)
    return fault, (decode(word) if fault == Fault.NONE else None)


@functools.lru_cache(maxsize=1 << 14)
def _mmc_ub_rows(ins):
    """The UB rows MMC `ins` reads, in order (read-only)."""
    rows = np.array([ins.ub_row(b) for b in range(ins.rows)], dtype=np.int64)
    rows.flags.writeable = False
    return rows


class ChipModel:
    """The chip's memories and registers, and an instruction interpreter.

    `windows` are the DMA windows the driver has opened, as ``(base, size)``
    pairs (at most ``config.dma_windows``; the chip's registers hold
    ``0 <= base, size < 2**64``): an RHM or WHM with rows whose host bytes
    ``[host, host + rows * config.rows)`` are not all inside one window faults
    with HOST_RANGE, after the faults of `tpu.isa.check`. The default,
    `ALL_HOST_MEMORY`, lets every DMA through.
    """

    def __init__(self, config=TPUConfig(), windows=ALL_HOST_MEMORY):
        cfg = self.config = config
        self.windows = self._check_windows(windows)
        self.ub = np.zeros((cfg.ub_rows, cfg.rows), dtype=np.uint8)
        self.acc = np.zeros((cfg.acc_rows, cfg.cols), dtype=np.int32)
        self.weight_memory = np.zeros((cfg.weight_mem_tiles, cfg.rows, cfg.cols), dtype=np.int8)
        self.host = HostMemory()
        self.regs = {reg: 0 for reg in Reg}
        self.channels = ActivationSettings(cols=cfg.cols)
        self.tiles = []             # requested by RW, not yet switched to
        self.weights = None
        self.halted = False
        self.fault = Fault.NONE
        self.fault_index = 0
        self.interrupts = []        # INT codes, in order
        self.executed = 0
        # Activity, for the performance counters.
        self.matrix_rows = 0        # rows through the systolic array
        self.tiles_requested = 0
        self.tiles_switched = 0

    def _check_windows(self, windows):
        windows = tuple((int(base), int(size)) for base, size in windows)
        if len(windows) > self.config.dma_windows:
            raise ValueError(f"{len(windows)} windows, the chip has {self.config.dma_windows}")
        for base, size in windows:
            if not (0 <= base < 1 << 64 and 0 <= size <= 1 << 64):
                raise ValueError(f"window base 0x{base:x} size 0x{size:x} is not 64-bit")
        return windows

    # Program execution -----------------------------------------------------

    def run(self, program):
        """Execute `program` (bytes) until HALT, a fault or its end."""
        program = bytes(program)
        for index in range(len(program) // INSTRUCTION_BYTES):
            if self.halted:
                break
            word = program[index * INSTRUCTION_BYTES:(index + 1) * INSTRUCTION_BYTES]
            try:
                self.step(word, index)
            except ChipFault as fault:
                self.halted = True
                self.fault = fault.fault
                self.fault_index = fault.index
        return self

    def step(self, word, index):
        fault, instruction = checked_decode(bytes(word), self.config)
        if fault != Fault.NONE:
            raise ChipFault(fault, index)
        cfg = self.config
        if isinstance(instruction, (Rhm, Whm)) and instruction.rows and not in_window(
                self.windows, instruction.host, instruction.rows * cfg.rows, cfg.host_addr_bits):
            raise ChipFault(Fault.HOST_RANGE, index, "outside the DMA windows")
        match instruction:
            case Nop() | Sync():
                pass
            case Halt():
                self.halted = True
            case Int():
                self.interrupts.append(instruction.code)
            case Rhm():
                n = instruction.rows * cfg.rows
                data = np.frombuffer(self.host.read(instruction.host, n), dtype=np.uint8)
                self.ub[instruction.ub:instruction.ub + instruction.rows] = data.reshape(-1, cfg.rows)
            case Whm():
                rows = self.ub[instruction.ub:instruction.ub + instruction.rows]
                self.host.write(instruction.host, rows.tobytes())
            case Rw():
                if len(self.tiles) + instruction.count > cfg.weight_fifo_tiles + 2:
                    raise ChipFault(Fault.WEIGHT_FIFO_OVERFLOW, index)
                self.tiles.extend(range(instruction.tile, instruction.tile + instruction.count))
                self.tiles_requested += instruction.count
            case Mmc():
                self._mmc(instruction, index)
            case Act():
                self._act(instruction)
            case Cfg():
                self.regs[instruction.reg] = instruction.value
            case Ldq():
                self._ldq(instruction.ub)
            case Ldl():
                rows = self.ub[instruction.ub:instruction.ub + ldl_rows(cfg)]
                self.channels.lut = rows.reshape(-1)[:256].astype(np.int64)
        self.executed += 1

    def _mmc(self, ins, index):
        if ins.rows == 0:
            return
        if ins.switch:
            if not self.tiles:
                raise ChipFault(Fault.WEIGHT_FIFO_UNDERFLOW, index)
            self.weights = self.weight_memory[self.tiles.pop(0)].astype(np.int64)
            self.tiles_switched += 1
        self.matrix_rows += ins.rows
        weights = self.weights if self.weights is not None else np.zeros(
            (self.config.rows, self.config.cols), dtype=np.int64)
        rows = self.ub[_mmc_ub_rows(ins)]
        x = rows.astype(np.int64) if ins.unsigned else rows.view(np.int8).astype(np.int64)
        sums = x @ weights
        target = slice(ins.acc, ins.acc + ins.rows)
        old = self.acc[target].astype(np.int64) if ins.accumulate else 0
        self.acc[target] = wrap_int32(old + sums)

    def _act(self, ins):
        cfg = self.config
        if ins.rows == 0:
            return
        s = self.channels
        settings = ActivationSettings(
            cols=cfg.cols, bias=s.bias, multiplier=s.multiplier, shift=s.shift, lut=s.lut,
            function=int(ins.func), unsigned=ins.unsigned, single_round=ins.single_round,
            mlas_round=ins.mlas_round,
            zero_point=_saturate(self.regs[Reg.OUT_ZERO_POINT], VALUE_WIDTH),
            clamp_min=_saturate(self.regs[Reg.CLAMP_MIN], VALUE_WIDTH),
            clamp_max=_saturate(self.regs[Reg.CLAMP_MAX], VALUE_WIDTH))
        if ins.pool in (Pool.MAX, Pool.AVG):
            settings = settings.with_pooling(int(ins.pool), size=ins.pool_size,
                                             stride=ins.pool_stride, width=ins.in_w)
        elif ins.pool == Pool.GLOBAL_AVG:
            settings = settings.with_pooling(int(ins.pool), rows=ins.rows)
        out = run_operation(settings, self.acc[ins.acc:ins.acc + ins.rows])
        n = min(cfg.rows, cfg.cols)
        rows = np.zeros((len(out), cfg.rows), dtype=np.uint8)
        rows[:, :n] = out[:, :n]
        self.ub[ins.ub:ins.ub + len(out)] = rows

    def _ldq(self, ub):
        cfg = self.config
        table = self.ub[ub:ub + ldq_rows(cfg)]
        bias_row, mult_row, shift_row = ldq_sections(cfg)

        def section(row, nbytes):
            return table[row:].reshape(-1)[:nbytes].tobytes()

        bias = np.frombuffer(section(bias_row, 4 * cfg.cols), dtype="<i4").astype(np.int64)
        mult = np.frombuffer(section(mult_row, 4 * cfg.cols), dtype="<i4").astype(np.int64)
        shift = np.frombuffer(section(shift_row, cfg.cols), dtype=np.int8).astype(np.int64)
        low, high = -(1 << (SHIFT_WIDTH - 1)), (1 << (SHIFT_WIDTH - 1)) - 1
        self.channels.bias = bias
        self.channels.multiplier = mult
        self.channels.shift = np.clip(shift, low, high)
