"""`GoldenLink`: the golden model of the chip's host interface, as a `Link`.

The chip behind this link is Python: a register file that follows
`tpu.host_registers` exactly, the DMA windows, the CONTROL actions, the
program fetch, the weight fill and MSI interrupts, around the instruction-level
model of the core (`tpu.models.chip_model.ChipModel`) and the cycle estimate
(`tpu.models.cycle_model.estimate_cycles`). It is what the RTL's host interface
(``hdl/host_interface.py``, ``hdl/bar0.py``) is compared with, so every rule
below is a rule of the hardware; docs/driver.md has the same list for readers.

Registers (BAR0)
    * ``rw`` registers hold all 32 bits written, except the ``_HI`` halves of
      host addresses, which keep ``host_addr_bits - 32`` of them, and those
      `kept_value` narrows otherwise; ``ro`` registers and
      unmapped offsets ignore writes; unmapped offsets read `UNMAPPED`;
      CONTROL (``wo``) reads 0; IRQ_STATUS is write-1-to-clear, and an event
      raised at the moment of a clear is kept.
    * The configuration registers read `config_words(config)`; ID, VERSION and
      ISA_VERSION their table values.
    * Counters: reading any counter's ``_LO`` latches that counter's upper
      half into the one ``_HI`` latch all counters share; every ``_HI`` reads
      the latch. Counters wrap modulo ``2**counter_bits``.
    * FAULT_INDEX reads the faulting instruction's index when the core has
      faulted since it was last reset, 0xFFFFFFFF otherwise (host errors
      leave it so).

CONTROL (one write; bits acted on in this order)
    * ABORT or SOFT_RESET: the program, the weight fill and every DMA stop;
      the core is reset (its registers, weight FIFO and counters; the unified
      buffer, accumulators and weight memory keep their contents); STATUS,
      ERROR_CODE and DMA_ERROR clear; IRQ_STATUS, IRQ_CODE and the ``rw``
      registers are kept. SOFT_RESET also returns every ``rw`` register
      (windows included) to its reset value and clears IRQ_STATUS, IRQ_CODE
      and BAD_REQUESTS. START and WFILL in the same write are ignored.
    * START or WFILL while the chip is busy or ERROR_CODE is set: ignored,
      BAD_REQUESTS counts the write (the running work is not disturbed).
    * START: the program's bytes ``[PROG_ADDR, PROG_ADDR + 16 * PROG_LEN)``
      must lie inside one open window (an empty program always does), else
      ERROR_CODE = FETCH_RANGE. Accepted, it resets the core (counters from 0,
      instruction indices from 0), clears HALTED and sets BUSY.
    * WFILL: the bytes ``[WFILL_ADDR, + WFILL_TILES * rows * cols)`` must lie
      inside one window and ``WFILL_TILE < weight_mem_tiles``,
      ``WFILL_TILE + WFILL_TILES <= weight_mem_tiles``, else WFILL_RANGE.
      Accepted, it sets BUSY and WFILL_BUSY until the last tile is written,
      then raises WFILL_DONE; zero tiles raise WFILL_DONE at once.
    * START and WFILL in one write are both checked against the state before
      the write; FETCH_RANGE wins over WFILL_RANGE.

A program
    runs on a fresh `ChipModel` (the core reset at START) that shares the
    link's unified buffer, accumulators and weight memory and sees the windows
    as they were at START. It ends
    * at HALT: STATUS.HALTED, IRQ HALT;
    * at a fault: ERROR_CODE = the `tpu.isa.Fault`, FAULT_INDEX = its index,
      IRQ ERROR;
    * at an RHM inside a window whose bytes the host does not back (outside
      the link's RAM; the host answers Unsupported Request): ERROR_CODE =
      DMA_ERROR register = CPL_STATUS, FAULT_INDEX = the RHM's index;
    * after its last instruction without HALT: idle, neither HALTED nor
      ERROR, no interrupt, and the counters keep counting (the core is not
      halted).
    Only the first error is recorded (ERROR_CODE is sticky until ABORT) and
    only it raises IRQ ERROR. An INT raises IRQ INT and sets IRQ_CODE. A WHM
    to bytes the host does not back is dropped (posted writes have no
    answer). A program fetched from unbacked bytes stops with CPL_STATUS
    before running anything. An empty program (PROG_LEN 0) fetches nothing,
    so its PROG_ADDR does not matter: it ends at once like a program run off
    its end (idle, neither HALTED nor ERROR, no interrupt).

Interrupts
    Every event sets its bit in IRQ_STATUS; when that bit is enabled in
    IRQ_ENABLE and MSI_ADDR is not 0, the chip writes MSI_DATA (4 bytes,
    little-endian) to MSI_ADDR -- into host RAM if it is there, and as an
    interrupt of this link if it is `msi_address` with `msi_data` (every MSI
    is logged in `msi_log`). MSIs are not checked against the windows.

Time
    The link keeps a virtual clock in chip cycles (`clock_hz`); nothing waits
    on wall-clock time. A register read takes `read_cycles`, a write
    `write_cycles`; `sleep` and `wait_interrupt` move the clock (at least one
    cycle when asked for any time at all). Several asyncio tasks share the
    clock: a wait moves it in steps of at most 1000 cycles, never past another
    waiting task's deadline, and lets the other tasks run between steps. A program's
    effects on memory happen at START; its events (each INT at its issue
    cycle, the end at the estimated cycle count) come `start_cycles` later
    on the cycle estimate's schedule. A fill takes `start_cycles` plus one
    cycle per link beat (``4 * link_dw`` bytes).

Counters
    From the cycle estimate of the instructions that ran (up to the HALT or
    the fault), set when the program ends: ``mxu_active``, ``useful_macs`` and
    ``weight_shift`` are exact (the core tests hold the RTL to them), the
    others estimates. Until then ``cycles`` and ``non_matrix`` count the cycles
    since the core was reset and the rest read 0; they keep counting while
    the core is not halted (after reset, ABORT, or a program without HALT).

What is not modelled: malformed requests (the link only makes whole 32-bit
accesses, so BAD_REQUESTS counts only refused START/WFILL), completion
timeouts and the other CPL_* errors, and the partial effects of an aborted
program (here it has done everything or, for its events, nothing).
"""

import asyncio
import heapq
import inspect
import itertools
import math
import numbers

import numpy as np

from ..config import TPUConfig
from ..host_registers import (BAR0_BYTES, COUNTER_NAMES, UNMAPPED, Control, HostError, Irq,
                              Status, config_words, kept_value, registers)
from ..isa import INSTRUCTION_BYTES, Fault, Halt, Int, decode
from ..models.chip_model import ChipFault as ModelFault, ChipModel
from ..models.cycle_model import estimate_cycles
from .arguments import integer, positive_real, show
from .link import Link, check_offset, check_value


__all__ = ["GoldenLink"]


_NO_INDEX = 0xFFFFFFFF
# The chip model checks RHM/WHM against DMA windows itself when it takes them.
_MODEL_TAKES_WINDOWS = "windows" in inspect.signature(ChipModel).parameters
# A word that faults ILLEGAL_OPCODE: the cycle estimate stops at the first
# fault, so it ends the estimate where the model's run ended.
_STOP_WORD = bytes([0xFF]) + bytes(INSTRUCTION_BYTES - 1)
# The most cycles the clock moves in one step of a wait before other tasks
# get their turn.
_QUANTUM = 1000


def inside_a_window(windows, addr, nbytes, addr_bits=64):
    """Host bytes ``[addr, addr + nbytes)`` inside one open window (as the RTL's
    ``hdl/window.py``: an empty span always is; nothing wraps past 2**64, nor,
    with `addr_bits` < 64, past ``2**addr_bits``)."""
    if nbytes == 0:
        return True
    end = addr + nbytes
    if addr_bits < 64 and end > 1 << addr_bits:
        return False
    return any(size and base <= addr and end <= base + size for base, size in windows)


class _Unbacked(Exception):
    """A DMA read of host bytes outside the link's RAM."""


class _HostPort:
    """The link's RAM as `ChipModel` sees host memory.

    With `windows` (for a `ChipModel` that does not take them itself) a DMA
    outside them faults HOST_RANGE here: the model is fresh for every
    program, so the instructions it has executed are the faulting one's index.
    """

    def __init__(self, link, model, windows=None):
        self._link = link
        self._model = model
        self._windows = windows

    def _check(self, addr, n):
        bits = self._link.config.host_addr_bits
        if self._windows is not None and not inside_a_window(self._windows, addr, n, bits):
            raise ModelFault(Fault.HOST_RANGE, self._model.executed, "outside the DMA windows")

    def read(self, addr, n):
        self._check(addr, n)
        if not self._link._backed(addr, n):
            raise _Unbacked(addr, n)
        return self._link.read_memory(addr, n)

    def write(self, addr, data):
        self._check(addr, len(data))
        self._link._dma_write(addr, bytes(data))


class GoldenLink(Link):
    """A `Link` whose chip is the golden model of the host interface.

    Parameters
    ----------
    config : TPUConfig
    ram_base, ram_bytes : int
        The host RAM the link provides (`alloc` hands it out). The default
        base is 4 GiB so that every ``_HI`` address register matters (2 GiB
        for a chip of 32-bit host addresses, ``host_addr_bits``).
    clock_hz : float
        The chip clock; the virtual time unit is one cycle of it.
    read_cycles, write_cycles : int
        Cycles one register read or write takes.
    start_cycles : int
        Cycles from START or WFILL to the first instruction or tile row (the
        DMA read's round trip).
    host_latency : int
        Extra cycles of every RHM's first row, passed to the cycle estimate.

    Attributes
    ----------
    msi_log : list of (cycle, address, data)
        Every MSI the chip sent, wherever it went.
    ub, acc, weight_memory : ndarray
        The chip's memories, for inspection.
    """

    backend = "golden"

    def __init__(self, config=TPUConfig(), *, ram_base=None, ram_bytes=16 << 20,
                 clock_hz=100e6, read_cycles=100, write_cycles=10, start_cycles=64,
                 host_latency=0):
        if not isinstance(config, TPUConfig):
            raise TypeError(f"GoldenLink needs a TPUConfig, not {config!r}")
        if ram_base is None:
            ram_base = 1 << min(32, config.host_addr_bits - 1)
        ram_base = integer(ram_base, "GoldenLink: ram_base", 0, (1 << 64) - 1)
        ram_bytes = integer(ram_bytes, "GoldenLink: ram_bytes", 1, 1 << 40)
        if ram_base + ram_bytes > 1 << 64:
            raise ValueError(f"GoldenLink: host RAM 0x{ram_base:x} + {ram_bytes} bytes is not "
                             f"inside the 64-bit address space")
        self.config = config
        self.ram_base = ram_base
        self.ram_bytes = ram_bytes
        self.clock_hz = positive_real(clock_hz, "GoldenLink: clock_hz", " of Hz")
        self.read_cycles = integer(read_cycles, "GoldenLink: read_cycles", 0, 1 << 32)
        self.write_cycles = integer(write_cycles, "GoldenLink: write_cycles", 0, 1 << 32)
        self.start_cycles = integer(start_cycles, "GoldenLink: start_cycles", 0, 1 << 32)
        self.host_latency = integer(host_latency, "GoldenLink: host_latency", 0, 1 << 32)
        self._ram = bytearray(ram_bytes)
        self._next_free = ram_base
        self._table = registers(config)
        self._by_offset = {r.offset: r for r in self._table}
        self._by_name = {r.name: r for r in self._table}
        self._constants = {r.name: r.reset for r in self._table if r.access == "ro"}
        self._constants.update(config_words(config))
        self._counter_names = {f"{n.upper()}_LO": n for n in COUNTER_NAMES}
        cfg = config
        self.ub = np.zeros((cfg.ub_rows, cfg.rows), dtype=np.uint8)
        self.acc = np.zeros((cfg.acc_rows, cfg.cols), dtype=np.int32)
        self.weight_memory = np.zeros((cfg.weight_mem_tiles, cfg.rows, cfg.cols), dtype=np.int8)
        self._cycle = 0
        self._waiters = {}              # a task in sleep/wait_interrupt -> its deadline cycle
        self._events = []
        self._order = itertools.count()
        self._msis = 0
        self.msi_log = []
        self.msi_address = self.alloc(64, 64)
        self.msi_data = 0x7E510000
        self._power_on()

    # Link: registers ---------------------------------------------------------

    async def read32(self, offset):
        check_offset(offset, BAR0_BYTES)
        self._advance(self._cycle + self.read_cycles)
        await asyncio.sleep(0)
        return self._read(offset)

    async def write32(self, offset, value):
        check_offset(offset, BAR0_BYTES)
        check_value(value)
        self._advance(self._cycle)
        self._write(offset, value)
        self._advance(self._cycle + self.write_cycles)
        await asyncio.sleep(0)

    # Link: host memory -------------------------------------------------------

    def alloc(self, nbytes, align=64):
        nbytes = integer(nbytes, "GoldenLink.alloc: nbytes", 1)
        align = integer(align, "GoldenLink.alloc: align", 1)
        if align & (align - 1):
            raise ValueError(f"GoldenLink.alloc: align must be a power of two, not {align}")
        addr = -(-self._next_free // align) * align
        if addr + nbytes > self.ram_base + self.ram_bytes:
            raise MemoryError(f"the golden link's host RAM is full: {nbytes} bytes asked, "
                              f"{self.ram_base + self.ram_bytes - addr} left of {self.ram_bytes} "
                              f"(GoldenLink(ram_bytes=...))")
        self._next_free = addr + nbytes
        return addr

    def write_memory(self, addr, data):
        try:
            data = bytes(memoryview(data))
        except TypeError:
            raise TypeError(f"write_memory needs bytes-like data, not {show(data)}") from None
        start = self._ram_offset(addr, len(data))
        self._ram[start:start + len(data)] = data

    def read_memory(self, addr, n):
        start = self._ram_offset(addr, n)
        return bytes(self._ram[start:start + n])

    # Link: interrupts and time -----------------------------------------------

    async def wait_interrupt(self, timeout):
        await self._pass_time(self._cycle + self._cycles(timeout), interrupt=True)
        got, self._msis = self._msis > 0, 0
        return got

    async def sleep(self, seconds):
        await self._pass_time(self._cycle + self._cycles(seconds))

    async def _pass_time(self, deadline, interrupt=False):
        """Let the clock run to cycle `deadline` (with `interrupt`, only to the
        first MSI before it).

        Tasks share the clock, so it moves in steps of at most `_QUANTUM`
        cycles, never past another waiting task's deadline, and every task
        gets its turn between steps: one task waiting long does not carry the
        others' time past what they wanted to do meanwhile."""
        token = object()
        self._waiters[token] = deadline
        try:
            while not (interrupt and self._msis) and self._cycle < deadline:
                target = min(min(self._waiters.values()), self._cycle + _QUANTUM)
                while self._events and self._events[0][0] <= target and not (interrupt and self._msis):
                    self._advance(self._events[0][0])
                if not (interrupt and self._msis):
                    self._advance(target)
                await asyncio.sleep(0)
        finally:
            del self._waiters[token]
        await asyncio.sleep(0)

    def time(self):
        return self._cycle / self.clock_hz

    @property
    def cycle(self):
        """The virtual clock, in chip cycles."""
        return self._cycle

    def poke_counter(self, name, value):
        """Set counter `name` (one of COUNTER_NAMES) to `value`, frozen: for
        tests of the ``_LO``/``_HI`` latch, which short programs never reach."""
        if name not in COUNTER_NAMES:
            raise ValueError(f"no counter {name!r}; the counters are {', '.join(COUNTER_NAMES)}")
        for n in COUNTER_NAMES:
            self._counters[n] = self._counter(n)
        self._counting_since = None
        self._counters[name] = value % (1 << self.config.counter_bits)

    # Host RAM ------------------------------------------------------------------

    def _backed(self, addr, n):
        return self.ram_base <= addr and addr + n <= self.ram_base + self.ram_bytes

    def _ram_offset(self, addr, n):
        if not isinstance(addr, int) or not isinstance(n, int) or isinstance(addr, bool) \
                or isinstance(n, bool) or n < 0:
            raise TypeError(f"host memory access needs int address and length, not "
                            f"{addr!r}, {n!r}")
        if not self._backed(addr, n):
            raise ValueError(f"host bytes 0x{addr:x} + {n} are outside the golden link's RAM "
                             f"0x{self.ram_base:x} + {self.ram_bytes}")
        return addr - self.ram_base

    def _dma_write(self, addr, data):
        """A write by the chip: bytes the host does not back are dropped."""
        if self._backed(addr, len(data)):
            self.write_memory(addr, data)
            return
        for i, byte in enumerate(data):
            if self._backed(addr + i, 1):
                self._ram[addr + i - self.ram_base] = byte

    # Time and events ----------------------------------------------------------

    def _cycles(self, seconds):
        if not isinstance(seconds, numbers.Real) or isinstance(seconds, bool):
            raise TypeError(f"a duration must be a number of seconds, not {show(seconds)}")
        if seconds < 0 or math.isnan(seconds):
            raise ValueError(f"a duration must be a number of seconds >= 0, not {seconds!r}")
        if math.isinf(seconds):
            raise ValueError("an infinite wait never ends: give the golden link a finite timeout")
        # Any wait longer than 0 lets at least one cycle pass, so nothing spins in place.
        return max(math.ceil(seconds * self.clock_hz), 1 if seconds > 0 else 0)

    def _at(self, cycle, action):
        heapq.heappush(self._events, (cycle, next(self._order), action))

    def _advance(self, cycle):
        """Run every event up to `cycle`, then set the clock to it."""
        while self._events and self._events[0][0] <= cycle:
            when, _, action = heapq.heappop(self._events)
            self._cycle = max(self._cycle, when)
            action()
        self._cycle = max(self._cycle, cycle)

    # Chip state ----------------------------------------------------------------

    def _power_on(self):
        self._rw = {r.name: r.reset for r in self._table if r.access == "rw"}
        self._irq_status = 0
        self._irq_code = 0
        self._bad_requests = 0
        self._latch = 0
        self._abort()

    def _abort(self):
        self._events.clear()
        self._running = False
        self._filling = False
        self._halted = False
        self._error_code = 0
        self._dma_error = 0
        self._core_reset()

    def _core_reset(self):
        self._core_fault_index = None
        self._counters = dict.fromkeys(COUNTER_NAMES, 0)
        self._counting_since = self._cycle

    def _counter(self, name):
        value = self._counters[name]
        if self._counting_since is not None and name in ("cycles", "non_matrix"):
            value += self._cycle - self._counting_since
        return value % (1 << self.config.counter_bits)

    def _windows(self):
        return [(self._rw[f"WIN{i}_BASE_LO"] | self._rw[f"WIN{i}_BASE_HI"] << 32,
                 self._rw[f"WIN{i}_SIZE_LO"] | self._rw[f"WIN{i}_SIZE_HI"] << 32)
                for i in range(self.config.dma_windows)]

    def _status(self):
        busy = self._running or self._filling
        return ((Status.BUSY if busy else 0) | (Status.HALTED if self._halted else 0) |
                (Status.ERROR if self._error_code else 0) |
                (Status.WFILL_BUSY if self._filling else 0))

    def _read(self, offset):
        r = self._by_offset.get(offset)
        if r is None:
            return UNMAPPED
        name = r.name
        if name in self._rw:
            return self._rw[name]
        if name in self._counter_names:
            value = self._counter(self._counter_names[name])
            self._latch = value >> 32
            return value & 0xFFFFFFFF
        if name.endswith("_HI") and name[:-3].lower() in COUNTER_NAMES:
            return self._latch
        dynamic = {
            "CONTROL": 0,
            "STATUS": int(self._status()),
            "ERROR_CODE": self._error_code,
            "FAULT_INDEX": _NO_INDEX if self._core_fault_index is None else self._core_fault_index,
            "IRQ_STATUS": self._irq_status,
            "IRQ_CODE": self._irq_code,
            "BAD_REQUESTS": self._bad_requests,
            "DMA_ERROR": self._dma_error,
        }
        if name in dynamic:
            return dynamic[name]
        return self._constants[name]

    def _write(self, offset, value):
        r = self._by_offset.get(offset)
        if r is None or r.access == "ro":
            return
        if r.access == "rw":
            self._rw[r.name] = kept_value(self.config, r.name, value)
        elif r.access == "w1c":
            self._irq_status &= ~value
        elif r.name == "CONTROL":
            self._control(value)

    # Control -------------------------------------------------------------------

    def _control(self, value):
        if value & (Control.ABORT | Control.SOFT_RESET):
            self._abort()
            if value & Control.SOFT_RESET:
                self._rw = {r.name: r.reset for r in self._table if r.access == "rw"}
                self._irq_status = 0
                self._irq_code = 0
                self._bad_requests = 0
            return
        start, wfill = bool(value & Control.START), bool(value & Control.WFILL)
        if not (start or wfill):
            return
        if self._running or self._filling or self._error_code:
            self._bad_requests = (self._bad_requests + 1) & 0xFFFFFFFF
            return
        cfg, rw, windows = self.config, self._rw, self._windows()
        prog_addr = rw["PROG_ADDR_LO"] | rw["PROG_ADDR_HI"] << 32
        prog_bytes = rw["PROG_LEN"] * INSTRUCTION_BYTES
        fill_addr = rw["WFILL_ADDR_LO"] | rw["WFILL_ADDR_HI"] << 32
        tile, tiles = rw["WFILL_TILE"], rw["WFILL_TILES"]
        prog_ok = inside_a_window(windows, prog_addr, prog_bytes, cfg.host_addr_bits)
        fill_ok = (inside_a_window(windows, fill_addr, tiles * cfg.tile_bytes, cfg.host_addr_bits) and
                   tile < cfg.weight_mem_tiles and tile + tiles <= cfg.weight_mem_tiles)
        if start and not prog_ok:
            self._error(HostError.FETCH_RANGE)
        elif wfill and not fill_ok:
            self._error(HostError.WFILL_RANGE)
        if wfill and fill_ok:
            self._start_fill(fill_addr, tile, tiles)
        if start and prog_ok:
            self._core_reset()
            self._halted = False
            if not self._error_code:
                self._start_program(prog_addr, rw["PROG_LEN"], windows)

    def _error(self, code, dma=False):
        """Record an error; only the first one counts and interrupts."""
        if dma and not self._dma_error:
            self._dma_error = int(code)
        if self._error_code:
            return
        self._error_code = int(code)
        self._raise(Irq.ERROR)

    def _raise(self, bits):
        self._irq_status |= int(bits)
        if int(bits) & self._rw["IRQ_ENABLE"]:
            address = self._rw["MSI_ADDR_LO"] | self._rw["MSI_ADDR_HI"] << 32
            if address:
                self._send_msi(address, self._rw["MSI_DATA"])

    def _send_msi(self, address, data):
        self._dma_write(address, data.to_bytes(4, "little"))
        self.msi_log.append((self._cycle, address, data))
        if address == self.msi_address and data == self.msi_data:
            self._msis += 1

    # Weight fill -----------------------------------------------------------------

    def _start_fill(self, addr, tile, tiles):
        cfg = self.config
        if tiles == 0:
            self._raise(Irq.WFILL_DONE)
            return
        self._filling = True
        nbytes = tiles * cfg.tile_bytes
        if not self._backed(addr, nbytes):
            self._at(self._cycle + self.start_cycles, self._fill_failed)
            return
        data = np.frombuffer(self.read_memory(addr, nbytes), dtype=np.int8)
        self.weight_memory[tile:tile + tiles] = data.reshape(tiles, cfg.rows, cfg.cols)
        beats = -(-nbytes // (4 * cfg.link_dw))
        self._at(self._cycle + self.start_cycles + beats, self._fill_done)

    def _fill_done(self):
        self._filling = False
        self._raise(Irq.WFILL_DONE)

    def _fill_failed(self):
        self._filling = False
        self._error(HostError.CPL_STATUS, dma=True)

    # Programs ----------------------------------------------------------------------

    def _start_program(self, addr, count, windows):
        self._running = True
        begin = self._cycle + self.start_cycles
        nbytes = count * INSTRUCTION_BYTES
        if nbytes and not self._backed(addr, nbytes):
            self._at(begin, lambda: self._end_program("fetch", None, None))
            return
        # An empty program reads no host byte, wherever PROG_ADDR points.
        program = self.read_memory(addr, nbytes) if nbytes else b""
        if _MODEL_TAKES_WINDOWS:
            model = ChipModel(self.config, windows=windows)
            model.host = _HostPort(self, model)
        else:
            model = ChipModel(self.config)
            model.host = _HostPort(self, model, windows)
        model.ub, model.acc, model.weight_memory = self.ub, self.acc, self.weight_memory
        try:
            model.run(program)
            unbacked = False
        except _Unbacked:
            unbacked = True     # the RHM at index `model.executed` read no byte
        words = [program[i:i + INSTRUCTION_BYTES] for i in range(0, nbytes, INSTRUCTION_BYTES)]
        if unbacked:
            end, index, code = "dma", model.executed, HostError.CPL_STATUS
            ran = words[:index] + [_STOP_WORD]
        elif model.fault:
            end, index, code = "fault", model.fault_index, model.fault
            ran = words[:index] + [_STOP_WORD]
        elif model.halted:
            end, index, code = "halt", None, None
            ran = words
        else:
            end, index, code = "end", None, None
            ran = words
        estimate = estimate_cycles(self.config, b"".join(ran), host_latency=self.host_latency,
                                   schedule=True)
        for entry in estimate["schedule"]:
            if entry["issue"] is None:
                continue
            instruction = decode(words[entry["index"]])
            if isinstance(instruction, Int):
                self._at(begin + entry["issue"], lambda code=instruction.code: self._interrupt(code))
            if isinstance(instruction, Halt):
                break
        self._at(begin + estimate["cycles"],
                 lambda: self._end_program(end, index, code, estimate["counters"]))

    def _interrupt(self, code):
        self._irq_code = code
        self._raise(Irq.INT)

    def _end_program(self, end, index, code, counters=None):
        self._running = False
        if counters is not None:
            self._counters = dict(counters)
            self._counting_since = self._cycle if end == "end" else None
        if end == "halt":
            self._halted = True
            self._raise(Irq.HALT)
        elif end == "fault":
            self._core_fault_index = index
            self._error(code)
        elif end == "dma":
            self._core_fault_index = index
            self._error(code, dma=True)
        elif end == "fetch":
            # The failed fetch halts the core with DMA_ERROR (as the RTL's
            # does): its counters stop, no row having entered the array.
            elapsed = self._counter("cycles")
            self._counters = dict.fromkeys(COUNTER_NAMES, 0)
            self._counters.update(cycles=elapsed, non_matrix=elapsed)
            self._counting_since = None
            self._error(HostError.CPL_STATUS, dma=True)
