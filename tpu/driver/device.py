"""`Device`: the driver of one chip, the same over every `Link`.

::

    device = await Device.open(link, config)
    await device.load_weights(tiles)                 # int8 [n, rows, cols]
    x = device.alloc(len(data)); device.write(x, data)
    result = await device.run(program, timeout=0.01)  # bytes, instructions or asm text
    out = device.read(y)

Host memory: `open` takes one arena from the link and opens DMA window 0
over exactly it; `alloc` hands out `HostBuffer` pieces of the arena (first
fit, freed with `free`), so everything the chip may touch by DMA is inside
the window and nothing else is. Programs and weight tiles are copied into
buffers of their own for the time the chip needs them.

Completion: after the doorbell the driver waits for an interrupt (an MSI
to the link's address), reads STATUS after each one and, because an
interrupt can be lost or disabled, also every `irq_recheck` seconds; with
interrupts off it polls STATUS every `poll_interval` seconds. Every
timeout is link time. After any error the chip is aborted, so it is idle
and the next job can start.

Concurrency: the chip runs one job at a time, so the driver keeps one job
in flight. `run` and `load_weights` called from several tasks at once take
turns, first come first served, each with its own result. `start`,
`submit` and `fill` (whose jobs the caller ends with `wait`) refuse with a
`TpuError` while any job is in flight or a turn is taken, before anything
reaches the chip. `abort`, `reset` and `close` end every job in flight: its
`wait` raises `JobAborted`.

Arguments are checked before anything reaches the chip or the link
(`tpu.driver.arguments`): nothing is cast, and a wrong one is a `TypeError`
or `ValueError` naming the call, the argument and the value.
"""

import collections
import numbers
import functools
from dataclasses import dataclass, field

import numpy as np

from ..asm import Raw, assemble, format_instruction
from ..config import TPUConfig
from ..host_registers import (BAR0_BYTES, CHIP_ID, COUNTER_NAMES, HW_VERSION, Control, HostError,
                              Irq, Status, config_words, register_map, window_offset)
from ..isa import INSTRUCTION_BYTES, ISA_VERSION, IllegalInstruction, decode, encode_program
from .arguments import flag, integer, seconds, show
from .errors import ChipFault, ConfigMismatch, DeviceTimeout, JobAborted, NotATpu, TpuError
from .link import Link


__all__ = ["Device", "HostBuffer", "DeviceStatus", "RunResult", "Job"]


ALL_IRQS = Irq.HALT | Irq.INT | Irq.ERROR | Irq.WFILL_DONE
_NO_INDEX = 0xFFFFFFFF
_U32 = (1 << 32) - 1
_U64 = (1 << 64) - 1


@dataclass(frozen=True)
class HostBuffer:
    """Host bytes ``[addr, addr + size)`` inside the device's DMA window.

    Only the `HostBuffer` objects `Device.alloc` returned can be read,
    written and freed, and only until they are freed; one made by hand is
    refused even when its bytes are those of a live buffer."""
    addr: int
    size: int
    _owner: object = field(default=None, init=False, compare=False, repr=False)
    _freed: bool = field(default=False, init=False, compare=False, repr=False)

    @property
    def end(self):
        return self.addr + self.size

    def __repr__(self):
        return f"HostBuffer(addr=0x{self.addr:x}, size={self.size})"

    def __reduce__(self):
        # A copy (a pickled result of a simulation backend) is not the buffer
        # alloc() returned: it carries the range, not the ownership.
        return HostBuffer, (self.addr, self.size)


@dataclass(frozen=True)
class DeviceStatus:
    """The chip's state registers, decoded."""
    status: Status
    error_code: int
    fault_index: int | None
    irq_status: Irq
    irq_code: int

    @property
    def busy(self):
        return bool(self.status & Status.BUSY)

    @property
    def halted(self):
        return bool(self.status & Status.HALTED)

    @property
    def error(self):
        return bool(self.status & Status.ERROR)

    @property
    def idle(self):
        """Neither busy nor stopped with an error: a job can start."""
        return not self.busy and not self.error


@dataclass
class RunResult:
    """How a job ended.

    Attributes
    ----------
    halted : bool
        The program ran to a HALT (False: it ended after its last instruction
        without one; always False for a weight fill).
    by_interrupt : bool
        The end was noticed through an interrupt (else by reading STATUS).
    interrupts : int
        Interrupts received while waiting.
    int_codes : list of int
        INT codes seen, in order. Two INTs closer together than the driver
        can read IRQ_CODE show as the later one only.
    counters : dict or None
        The performance counters after the job (the core counts from START).
    elapsed : float
        Link time from the doorbell to the end being noticed, in seconds.
    """
    halted: bool = False
    by_interrupt: bool = False
    interrupts: int = 0
    int_codes: list = field(default_factory=list)
    counters: dict | None = None
    elapsed: float = 0.0


@dataclass(eq=False)
class Job:
    """A program or weight fill the driver started; `Device.wait` ends it."""
    kind: str                      #: "program" or "wfill"
    started: float                 #: link time of the doorbell
    buffer: HostBuffer | None = None
    program: list | None = None    #: decoded instructions, for fault messages
    done: bool = False
    aborted_by: str | None = None  #: "abort", "reset" or "close" when one of them ended it
    device: object = field(default=None, repr=False)
    waiting: bool = field(default=False, repr=False)


class _Turns:
    """First come, first served turns at the chip for `Device.run` and
    `Device.load_weights`.

    The driver runs on event loops it does not own (asyncio for the golden
    model, cocotb's for a simulation), so it cannot use either's locks: a
    task waits for its turn by sleeping `interval` of link time at a time.
    """

    def __init__(self):
        self._queue = collections.deque()     # the head holds the turn

    @property
    def taken(self):
        return bool(self._queue)

    async def take(self, link, interval):
        ticket = object()
        self._queue.append(ticket)
        try:
            while self._queue[0] is not ticket:
                await link.sleep(interval)
        except BaseException:
            self._queue.remove(ticket)
            raise
        return ticket

    def try_take(self):
        """A turn if nobody has one or waits for one, else None."""
        if self._queue:
            return None
        ticket = object()
        self._queue.append(ticket)
        return ticket

    def give_back(self, ticket):
        self._queue.remove(ticket)


class _Arena:
    """First-fit allocator over one host range."""

    def __init__(self, base, size):
        self.base, self.size = base, size
        self.free = [(base, size)]          # sorted, coalesced (addr, size)

    def alloc(self, nbytes, align):
        for i, (addr, size) in enumerate(self.free):
            start = -(-addr // align) * align
            if start + nbytes <= addr + size:
                pieces = [(addr, start - addr), (start + nbytes, addr + size - start - nbytes)]
                self.free[i:i + 1] = [p for p in pieces if p[1]]
                return start
        largest = max((s for _, s in self.free), default=0)
        raise TpuError(f"the host arena has no room for {nbytes} bytes aligned to {align} "
                       f"(arena {self.size} bytes, largest free piece {largest}): free buffers "
                       f"or open the device with a larger arena_bytes")

    def release(self, addr, nbytes):
        if not (self.base <= addr and addr + nbytes <= self.base + self.size):
            raise ValueError(f"buffer 0x{addr:x} + {nbytes} is not in this device's arena")
        for a, s in self.free:
            if a < addr + nbytes and addr < a + s:
                raise ValueError(f"buffer 0x{addr:x} + {nbytes} is already free")
        self.free.append((addr, nbytes))
        self.free.sort()
        merged = []
        for a, s in self.free:
            if merged and merged[-1][0] + merged[-1][1] == a:
                merged[-1] = (merged[-1][0], merged[-1][1] + s)
            else:
                merged.append((a, s))
        self.free = merged


def _as_program(program, config, what):
    """``(bytes, instructions as assembly)`` of a program given as bytes, a list
    of instructions or assembly text; an empty one is refused."""
    if isinstance(program, str):
        data = assemble(program, "<program>", config)
    elif isinstance(program, (bytes, bytearray, memoryview)):
        data = bytes(program)
        if len(data) % INSTRUCTION_BYTES:
            raise ValueError(f"{what}: a program is whole {INSTRUCTION_BYTES}-byte instructions; "
                             f"{len(data)} bytes leave {len(data) % INSTRUCTION_BYTES} over")
    elif isinstance(program, (list, tuple)):
        data = encode_program(list(program))
    else:
        raise TypeError(f"{what}: program must be assembly text (str), bytes or a list of "
                        f"tpu.isa instructions, not {show(program)}")
    if not data:
        raise ValueError(f"{what}: the program is empty: a program needs at least one "
                         f"instruction")
    return data, [_assembly(data[i:i + INSTRUCTION_BYTES])
                  for i in range(0, len(data), INSTRUCTION_BYTES)]


@functools.lru_cache(maxsize=1 << 16)
def _assembly(word):
    """The assembly text of one instruction word (cached: programs are rerun)."""
    try:
        return format_instruction(decode(word))
    except IllegalInstruction:
        return format_instruction(Raw.from_bytes(word))


class Device:
    """One chip, driven over a `Link`. Make one with `Device.open`.

    Attributes
    ----------
    link : Link
    config : TPUConfig
    arena : HostBuffer
        The host memory DMA window 0 covers.
    use_interrupts : bool
        Wait for interrupts (else poll STATUS); set with `set_interrupts`.
    poll_interval : float
        Seconds between STATUS reads when polling, and between looks at the
        queue when `run` or `load_weights` waits for its turn.
    irq_recheck : float
        Seconds after which STATUS is read even without an interrupt.
    """

    def __init__(self, link, config, arena, *, use_interrupts, poll_interval, irq_recheck):
        self.link = link
        self.config = config
        self.registers = register_map(config)
        self.arena = arena
        self._arena = _Arena(arena.addr, arena.size)
        self._live = {}                 # addr -> the HostBuffer alloc() gave out there
        self.use_interrupts = use_interrupts
        self.poll_interval = poll_interval
        self.irq_recheck = irq_recheck
        self._jobs = []
        self._turns = _Turns()
        self._closed = False

    # Opening -------------------------------------------------------------------

    @classmethod
    async def open(cls, link, config=TPUConfig(), *, arena_bytes=1 << 20, interrupts=True,
                   poll_interval=10e-6, irq_recheck=200e-6):
        """Check the chip behind `link` is a `config` chip, reset it, and set it up.

        Raises
        ------
        NotATpu
            ID is not the chip's.
        ConfigMismatch
            VERSION, ISA_VERSION or a configuration register differs from
            what `config` gives; the message names every such register.
        """
        if not isinstance(link, Link):
            raise TypeError(f"Device.open needs a tpu.driver.Link, not {show(link)}")
        if not isinstance(config, TPUConfig):
            raise TypeError(f"Device.open needs a TPUConfig, not {show(config)}")
        arena_bytes = integer(arena_bytes, "Device.open: arena_bytes", 1, _U64)
        interrupts = flag(interrupts, "Device.open: interrupts")
        poll_interval = seconds(poll_interval, "Device.open: poll_interval")
        irq_recheck = seconds(irq_recheck, "Device.open: irq_recheck")
        regs = register_map(config)
        chip_id = await link.read32(regs["ID"].offset)
        if chip_id != CHIP_ID:
            raise NotATpu(f"BAR0 ID reads 0x{chip_id:08x}, not 0x{CHIP_ID:08x} (\"TPU1\"): the "
                          f"{link.backend} link does not lead to this chip")
        expected = {"VERSION": HW_VERSION, "ISA_VERSION": ISA_VERSION, **config_words(config)}
        mismatches = []
        for name, value in expected.items():
            chip = await link.read32(regs[name].offset)
            if chip != value:
                mismatches.append((name, chip, value))
        if mismatches:
            raise ConfigMismatch(mismatches, _explain)
        arena = HostBuffer(link.alloc(arena_bytes, 4096), arena_bytes)
        _check_reachable(config, link, arena)
        device = cls(link, config, arena, use_interrupts=interrupts, poll_interval=poll_interval,
                     irq_recheck=irq_recheck)
        await device.reset()
        return device

    async def reset(self):
        """SOFT_RESET, then program the window, the MSI and the interrupt enables again.

        Jobs in flight end (their `wait` raises `JobAborted`); buffers stay
        allocated; the chip's memories keep their contents."""
        self._check_open("reset")
        self._forget_jobs("reset")
        await self.write_register("CONTROL", Control.SOFT_RESET)
        self._forget_jobs("reset")
        await self._setup()

    async def _setup(self):
        base, size = self.arena.addr, self.arena.size
        offset = window_offset(0)
        for i, value in enumerate((base & 0xFFFFFFFF, base >> 32, size & 0xFFFFFFFF, size >> 32)):
            await self.link.write32(offset + 4 * i, value)
        msi = self.link.msi_address or 0
        await self.write_register("MSI_ADDR_LO", msi & 0xFFFFFFFF)
        await self.write_register("MSI_ADDR_HI", msi >> 32)
        await self.write_register("MSI_DATA", self.link.msi_data & 0xFFFFFFFF)
        await self.write_register("IRQ_STATUS", 0xFFFFFFFF)
        await self.set_interrupts(self.use_interrupts)

    async def set_interrupts(self, enabled):
        """Wait for interrupts (True) or poll STATUS (False)."""
        enabled = flag(enabled, "set_interrupts: enabled")
        self._check_open("set_interrupts")
        self.use_interrupts = enabled and self.link.msi_address is not None
        await self.write_register("IRQ_ENABLE", int(ALL_IRQS) if self.use_interrupts else 0)

    async def close(self):
        """Stop the chip, close its window and silence its interrupts. Jobs in
        flight end (`JobAborted`); the device takes no more calls."""
        if self._closed:
            return
        self._forget_jobs("close")
        await self.write_register("CONTROL", Control.ABORT)
        self._forget_jobs("close")
        await self.write_register("IRQ_ENABLE", 0)
        for i in range(4):
            await self.link.write32(window_offset(0) + 4 * i, 0)
        self._closed = True

    def _check_open(self, what):
        if self._closed:
            raise TpuError(f"{what}: the device is closed")

    # Registers -------------------------------------------------------------------

    def _offset(self, register, what):
        if isinstance(register, str):
            try:
                return self.registers[register].offset
            except KeyError:
                raise ValueError(f"{what}: no register {register!r} in BAR0 "
                                 f"(tpu.host_registers)") from None
        if not isinstance(register, numbers.Integral) or isinstance(register, (bool, np.bool_)):
            raise TypeError(f"{what}: register must be a register name (str) or a BAR0 offset "
                            f"(int), not {show(register)}")
        offset = int(register)
        if offset % 4 or not 0 <= offset < BAR0_BYTES:
            raise ValueError(f"{what}: offset {offset:#x} is not a register offset: registers "
                             f"are 32-bit words at multiples of 4 below {BAR0_BYTES:#x}")
        return offset

    async def read_register(self, register):
        """The register named `register` (or at byte offset `register`)."""
        offset = self._offset(register, "read_register")
        self._check_open("read_register")
        return await self.link.read32(offset)

    async def write_register(self, register, value):
        """Write `value` (an int, 0 .. 2**32 - 1) to a register by name or offset."""
        offset = self._offset(register, "write_register")
        value = integer(value, f"write_register {register}: value", 0, _U32)
        self._check_open("write_register")
        await self.link.write32(offset, value)

    async def status(self):
        """STATUS, ERROR_CODE, FAULT_INDEX, IRQ_STATUS and IRQ_CODE."""
        status = Status(await self.read_register("STATUS"))
        code = await self.read_register("ERROR_CODE")
        index = await self.read_register("FAULT_INDEX")
        return DeviceStatus(status, code, None if index == _NO_INDEX else index,
                            Irq(await self.read_register("IRQ_STATUS") & int(ALL_IRQS)),
                            await self.read_register("IRQ_CODE"))

    async def counters(self):
        """The eight performance counters (`COUNTER_NAMES`), each read ``_LO`` then ``_HI``.

        The counters lie ``_LO``, ``_HI`` one after another, so a counter's
        ``_HI`` and the next one's ``_LO`` are one `Link.read64` (one MMIO
        round trip where the link has two-word accesses): nine accesses for
        the sixteen registers, in the same order."""
        self._check_open("counters")
        offsets = [self.registers[f"{name.upper()}_{half}"].offset
                   for name in COUNTER_NAMES for half in ("LO", "HI")]
        words = [await self.link.read32(offsets[0])]
        for i in range(1, len(offsets) - 1, 2):
            if offsets[i + 1] == offsets[i] + 4:
                pair = await self.link.read64(offsets[i])
                words += [pair & _U32, pair >> 32]
            else:
                words += [await self.link.read32(offsets[i]), await self.link.read32(offsets[i + 1])]
        words.append(await self.link.read32(offsets[-1]))
        return {name: words[2 * i + 1] << 32 | words[2 * i] for i, name in enumerate(COUNTER_NAMES)}

    # Host memory ----------------------------------------------------------------------

    def alloc(self, nbytes, align=64):
        """A `HostBuffer` of `nbytes` bytes inside the DMA window at a multiple
        of `align` (a power of two); it never overlaps another live buffer.
        Its bytes are whatever the arena held there."""
        nbytes = integer(nbytes, "alloc: nbytes", 1, self.arena.size)
        align = integer(align, "alloc: align", 1, 1 << 63)
        if align & (align - 1):
            raise ValueError(f"alloc: align must be a power of two, not {align}")
        self._check_open("alloc")
        buffer = HostBuffer(self._arena.alloc(nbytes, align), nbytes)
        object.__setattr__(buffer, "_owner", self)
        self._live[buffer.addr] = buffer
        return buffer

    def _own(self, buffer, what):
        """`buffer`, if it is a live buffer of this device's `alloc`."""
        if not isinstance(buffer, HostBuffer):
            raise TypeError(f"{what}: buffer must be a HostBuffer from alloc(), not {show(buffer)}")
        if self._live.get(buffer.addr) is buffer:
            return buffer
        if buffer._owner is self and buffer._freed:
            raise ValueError(f"{what}: {buffer} was already freed")
        if buffer._owner is None:
            raise ValueError(f"{what}: {buffer} was not made by this device's alloc() (only "
                             f"buffers alloc() returned can be used)")
        raise ValueError(f"{what}: {buffer} belongs to another device")

    def free(self, buffer):
        """Give `buffer` back; it can no longer be read, written or freed."""
        self._own(buffer, "free")
        for job in self._jobs:
            if job.buffer is buffer:
                raise ValueError(f"free: {buffer} holds the {job.kind} of a job in flight; "
                                 f"it is freed when the job ends")
        self._release(buffer)

    def _release(self, buffer):
        del self._live[buffer.addr]
        object.__setattr__(buffer, "_freed", True)
        self._arena.release(buffer.addr, buffer.size)

    def write(self, buffer, data, offset=0):
        """Copy `data` (bytes-like, or an ndarray as its bytes) into `buffer` at `offset`."""
        self._own(buffer, "write")
        if isinstance(data, np.ndarray):
            if data.dtype.hasobject:
                raise TypeError(f"write: data must be bytes-like or an ndarray of numbers, not an "
                                f"ndarray of dtype {data.dtype}")
            data = data.tobytes()
        elif isinstance(data, (str, numbers.Number)) or data is None:
            raise TypeError(f"write: data must be bytes-like or an ndarray, not {show(data)}")
        else:
            try:
                data = bytes(memoryview(data))
            except TypeError:
                raise TypeError(f"write: data must be bytes-like or an ndarray, "
                                f"not {show(data)}") from None
        offset = integer(offset, "write: offset", 0)
        if offset + len(data) > buffer.size:
            raise ValueError(f"write: {len(data)} bytes at offset {offset} do not fit the "
                             f"{buffer.size}-byte buffer at 0x{buffer.addr:x}")
        self.link.write_memory(buffer.addr + offset, data)

    def read(self, buffer, n=None, offset=0):
        """`n` bytes (default: to the end) of `buffer` from `offset`."""
        self._own(buffer, "read")
        offset = integer(offset, "read: offset", 0)
        n = buffer.size - offset if n is None else integer(n, "read: n", 0)
        if n < 0 or offset + n > buffer.size:
            raise ValueError(f"read: {n} bytes at offset {offset} are not inside the "
                             f"{buffer.size}-byte buffer at 0x{buffer.addr:x}")
        return self.link.read_memory(buffer.addr + offset, n)

    # Jobs ------------------------------------------------------------------------------

    def _claim(self, what):
        """The turn for a doorbell of `start`, `submit` or `fill`, taken at once,
        or a `TpuError` while a job is in flight or another call has the turn."""
        self._check_open(what)
        if self._jobs:
            job = self._jobs[0]
            raise TpuError(f"{what}: the device is busy with a {job.kind} job in flight: wait() "
                           f"for it or abort() it first (the chip runs one job at a time)")
        ticket = self._turns.try_take()
        if ticket is None:
            raise TpuError(f"{what}: the device is busy: another task is starting or running a "
                           f"job (the chip runs one job at a time)")
        return ticket

    async def _ensure_idle(self, what):
        status = Status(await self.read_register("STATUS"))
        if status & Status.BUSY:
            raise TpuError(f"{what}: the chip is busy with a job the driver did not start: "
                           f"abort() it (the chip would ignore this doorbell)")
        if status & Status.ERROR:
            code = await self.read_register("ERROR_CODE")
            raise TpuError(f"{what}: the chip is stopped with error code {code}: abort() or "
                           f"reset() it first (the chip would ignore this doorbell)")

    async def _prepare(self, what):
        await self._ensure_idle(what)
        await self.write_register("IRQ_STATUS", 0xFFFFFFFF)
        await self.link.wait_interrupt(0)        # drop interrupts of earlier jobs

    async def _doorbell(self, job, control, registers):
        """Write `registers` then `control`; `job` is in flight from the first write,
        so an abort meanwhile ends it (and the chip is stopped again)."""
        job.device = self
        self._jobs.append(job)
        try:
            await self._write_registers(registers)
            if job.aborted_by is None:
                await self.write_register("CONTROL", control)
        except BaseException as error:
            self._end(job)
            if not isinstance(error, TpuError):
                # Cancelled around the doorbell: the chip may have taken it,
                # and nobody will wait for the job.
                await self.write_register("CONTROL", Control.ABORT)
            raise
        if job.aborted_by is not None:
            # Stopped before (or while) its doorbell rang: make sure nothing runs.
            await self.write_register("CONTROL", Control.ABORT)
            raise JobAborted(job.kind, job.aborted_by)
        return job

    async def _write_registers(self, registers):
        """Write ``(name, value)`` pairs in order; two registers one after the
        other in BAR0 go in one `Link.write64` (one posted TLP on PCIe)."""
        registers = [(self.registers[name].offset, value) for name, value in registers]
        i = 0
        while i < len(registers):
            offset, value = registers[i]
            self._check_open("write_register")
            if i + 1 < len(registers) and registers[i + 1][0] == offset + 4:
                await self.link.write64(offset, registers[i + 1][1] << 32 | value)
                i += 2
            else:
                await self.link.write32(offset, value)
                i += 1

    async def submit(self, addr, count, *, program=None):
        """Ring the doorbell for `count` (>= 1) instructions already at host `addr`.

        Returns a `Job` for `wait`. `program` (assembly lines) only improves
        fault messages."""
        addr = integer(addr, "submit: addr", 0, _U64)
        if integer(count, "submit: count", None) == 0:
            raise ValueError("submit: count must be >= 1, not 0: the program is empty")
        count = integer(count, "submit: count", 1, _U32)
        if program is not None and not (isinstance(program, list) and
                                        all(isinstance(line, str) for line in program)):
            raise TypeError(f"submit: program must be a list of assembly lines, not {show(program)}")
        ticket = self._claim("submit")
        try:
            return await self._submit(addr, count, program, "submit")
        finally:
            self._turns.give_back(ticket)

    async def _submit(self, addr, count, program, what):
        await self._prepare(what)
        job = Job("program", self.link.time(), program=program)
        return await self._doorbell(job, Control.START, (
            ("PROG_ADDR_LO", addr & 0xFFFFFFFF), ("PROG_ADDR_HI", addr >> 32), ("PROG_LEN", count)))

    async def start(self, program):
        """Copy `program` (bytes, instructions or assembly text; not empty) into a
        buffer of its own and start it; `wait` for the returned `Job`."""
        data, lines = _as_program(program, self.config, "start")
        ticket = self._claim("start")
        try:
            return await self._start(data, lines, "start")
        finally:
            self._turns.give_back(ticket)

    async def _start(self, data, lines, what):
        # Aligned to the largest read, so the fetcher's chunks split into
        # requests the same way wherever the program lands.
        buffer = self.alloc(len(data), max(INSTRUCTION_BYTES, self.config.max_read_request))
        try:
            self.write(buffer, data)
            job = await self._submit(buffer.addr, len(data) // INSTRUCTION_BYTES, lines, what)
        except BaseException:
            if not buffer._freed:
                self._release(buffer)
            raise
        job.buffer = buffer
        return job

    async def run(self, program, timeout=1.0):
        """`start` then `wait`: run `program` to its end; a `RunResult`.

        Calls from several tasks take turns (first come, first served).

        Raises
        ------
        ChipFault
            The chip stopped with an error (it is aborted, so idle again).
        DeviceTimeout
            Not done after `timeout` seconds of link time (it is aborted).
        JobAborted
            `abort`, `reset` or `close` stopped it.
        """
        data, lines = _as_program(program, self.config, "run")
        timeout = seconds(timeout, "run: timeout")
        self._check_open("run")
        ticket = await self._turns.take(self.link, self.poll_interval)
        try:
            self._check_no_job("run")
            return await self.wait(await self._start(data, lines, "run"), timeout)
        finally:
            self._turns.give_back(ticket)

    def _check_no_job(self, what):
        self._check_open(what)
        if self._jobs:
            raise TpuError(f"{what}: the device is busy with a {self._jobs[0].kind} job started "
                           f"by start(), submit() or fill(): wait() for it or abort() it first")

    async def fill(self, addr, first_tile, tiles):
        """Ring the WFILL doorbell for `tiles` tiles at host `addr`; a `Job`."""
        addr = integer(addr, "fill: addr", 0, _U64)
        first_tile = integer(first_tile, "fill: first_tile", 0, _U32)
        tiles = integer(tiles, "fill: tiles", 0, _U32)
        ticket = self._claim("fill")
        try:
            return await self._fill(addr, first_tile, tiles, "fill")
        finally:
            self._turns.give_back(ticket)

    async def _fill(self, addr, first_tile, tiles, what):
        await self._prepare(what)
        job = Job("wfill", self.link.time())
        return await self._doorbell(job, Control.WFILL, (
            ("WFILL_ADDR_LO", addr & 0xFFFFFFFF), ("WFILL_ADDR_HI", addr >> 32),
            ("WFILL_TILE", first_tile), ("WFILL_TILES", tiles)))

    async def load_weights(self, tiles, first_tile=0, timeout=1.0):
        """Copy weight tiles (integers in -128..127, ``[n, rows, cols]`` or one
        ``[rows, cols]`` tile) into weight memory from tile `first_tile` on; a
        `RunResult`. Calls from several tasks take turns with `run`.

        Raises
        ------
        ChipFault
            WFILL_RANGE: the tiles do not fit weight memory.
        DeviceTimeout
        JobAborted
        """
        tiles = _weight_tiles(tiles, self.config)
        first_tile = integer(first_tile, "load_weights: first_tile", 0, _U32)
        timeout = seconds(timeout, "load_weights: timeout")
        self._check_open("load_weights")
        ticket = await self._turns.take(self.link, self.poll_interval)
        try:
            self._check_no_job("load_weights")
            buffer = self.alloc(max(1, tiles.nbytes))
            try:
                self.write(buffer, tiles)
                job = await self._fill(buffer.addr, first_tile, tiles.shape[0], "load_weights")
            except BaseException:
                if not buffer._freed:
                    self._release(buffer)
                raise
            job.buffer = buffer
            return await self.wait(job, timeout)
        finally:
            self._turns.give_back(ticket)

    async def wait(self, job, timeout=1.0):
        """Wait for `job` to end; a `RunResult`. See `run` for the errors."""
        if not isinstance(job, Job):
            raise TypeError(f"wait: job must be a Job from start(), submit() or fill(), "
                            f"not {show(job)}")
        timeout = seconds(timeout, "wait: timeout")
        if job.device is not self:
            raise ValueError("wait: this job was not started by this device")
        if job.aborted_by is not None:
            raise JobAborted(job.kind, job.aborted_by)
        if job.done:
            raise TpuError(f"wait: this {job.kind} job has already ended (it was waited for)")
        if job.waiting:
            raise TpuError(f"wait: another task is already waiting for this {job.kind} job")
        job.waiting = True
        try:
            return await self._wait(job, timeout)
        except BaseException as error:
            if not job.done and not isinstance(error, TpuError):
                # Cancelled or interrupted: nobody will wait for the job, so
                # stop the chip rather than leave it running unowned.
                self._end(job)
                await self.write_register("CONTROL", Control.ABORT)
            raise
        finally:
            job.waiting = False
            self._end(job)

    def _stopped(self, job):
        if job.aborted_by is not None:
            raise JobAborted(job.kind, job.aborted_by)

    async def _wait(self, job, timeout):
        link = self.link
        deadline = job.started + timeout
        result = RunResult()
        woken = False
        busy = Status.BUSY if job.kind == "program" else Status.WFILL_BUSY
        while True:
            status = Status(await self.read_register("STATUS"))
            self._stopped(job)
            if not status & busy:
                break
            remaining = deadline - link.time()
            if remaining <= 0:
                # ABORT resets the counters: read them first.
                counters = await self.counters() if job.kind == "program" else None
                self._end(job)
                await self.abort()
                raise DeviceTimeout(
                    f"the {job.kind} job was not done after {timeout:g} s of "
                    f"{link.backend} link time (STATUS {status!r}); the chip was aborted",
                    counters)
            if self.use_interrupts:
                if woken:
                    # The interrupt was an INT of a program still running
                    # (STATUS above says busy): note its code now, before a
                    # later INT replaces it.
                    await self._take_int(result)
                    self._stopped(job)
                woken = await link.wait_interrupt(min(remaining, self.irq_recheck))
                self._stopped(job)
                if woken:
                    # STATUS first (the loop's next read): an interrupt that
                    # ends the job needs no IRQ_STATUS read of its own; the
                    # end's read below takes its causes and any INT code.
                    result.interrupts += 1
            else:
                woken = False
                await link.sleep(min(remaining, self.poll_interval))
                self._stopped(job)
        result.by_interrupt = woken
        if status & Status.ERROR:
            code = await self.read_register("ERROR_CODE")
            index = await self.read_register("FAULT_INDEX")
            self._stopped(job)
            index = None if index == _NO_INDEX else index
            text = None
            if job.program is not None and index is not None and index < len(job.program):
                text = job.program[index]
            # The core halted at the fault, so its counters hold still; ABORT
            # would reset them. A program refused at START (FETCH_RANGE) or a
            # fill never ran an instruction: no counters of theirs to report.
            counters = await self.counters() \
                if job.kind == "program" and code != HostError.FETCH_RANGE else None
            self._stopped(job)
            self._end(job)
            await self.abort()
            raise ChipFault(code, index, text, counters)
        # The job is over, so no cause can rise between this read and the
        # write that acknowledges them all.
        irq = await self.read_register("IRQ_STATUS")
        if irq & Irq.INT:
            result.int_codes.append(await self.read_register("IRQ_CODE"))
        await self.write_register("IRQ_STATUS", irq)
        if job.kind == "program":
            result.halted = bool(status & Status.HALTED)
            result.counters = await self.counters()
        self._stopped(job)
        result.elapsed = link.time() - job.started
        return result

    async def _take_int(self, result):
        """Note an INT's code and acknowledge it (other causes are left for the end)."""
        irq = await self.read_register("IRQ_STATUS")
        if irq & Irq.INT:
            result.int_codes.append(await self.read_register("IRQ_CODE"))
            await self.write_register("IRQ_STATUS", Irq.INT)

    def _end(self, job, aborted_by=None):
        if job.done:
            return
        job.done = True
        job.aborted_by = aborted_by
        if job.buffer is not None:
            self._release(job.buffer)
            job.buffer = None
        if job in self._jobs:
            self._jobs.remove(job)

    def _forget_jobs(self, by):
        for job in list(self._jobs):
            self._end(job, by)

    async def abort(self):
        """Stop the program, the weight fill and all DMA; the chip comes back idle.

        Jobs in flight end: their buffers are freed, and a `wait` for one
        (pending in another task, or later) raises `JobAborted`."""
        self._check_open("abort")
        self._forget_jobs("abort")
        await self.write_register("CONTROL", Control.ABORT)
        self._forget_jobs("abort")


def _weight_tiles(tiles, config):
    """`tiles` as a C-contiguous int8 array ``[n, rows, cols]``: only integer
    arrays with values in -128..127 are taken."""
    rows, cols = config.rows, config.cols
    if isinstance(tiles, (str, bytes, bytearray, memoryview, numbers.Number)) or tiles is None:
        raise TypeError(f"load_weights: tiles must be an integer array [n, {rows}, {cols}], "
                        f"not {show(tiles)}")
    if not isinstance(tiles, np.ndarray):
        try:
            tiles = np.asarray(tiles)
        except (ValueError, TypeError) as error:
            raise TypeError(f"load_weights: tiles must be an integer array [n, {rows}, {cols}]: "
                            f"{error}") from None
    if tiles.dtype.kind not in "iu":
        raise TypeError(f"load_weights: tiles must be an integer array (int8 values), not an "
                        f"array of dtype {tiles.dtype}; nothing is cast")
    if tiles.ndim == 2:
        tiles = tiles[None]
    if tiles.ndim != 3 or tiles.shape[1:] != (rows, cols):
        raise ValueError(f"load_weights: tiles must be an array [n, {rows}, {cols}] "
                         f"(or one [{rows}, {cols}] tile), not of shape {tiles.shape}")
    if tiles.dtype != np.int8 and tiles.size:
        low, high = int(tiles.min()), int(tiles.max())
        if low < -128 or high > 127:
            bad = low if low < -128 else high
            raise ValueError(f"load_weights: weights must be int8 values in -128..127, "
                             f"not {bad}")
    return np.ascontiguousarray(tiles, dtype=np.int8)


def _check_reachable(config, link, arena):
    """`ValueError` unless the arena and the MSI address lie below
    ``2**host_addr_bits``: the chip keeps no higher address bits."""
    limit = 1 << config.host_addr_bits
    if (link.msi_address or 0) + 4 > limit:
        raise ValueError(f"Device.open: the {link.backend} link's MSI address "
                         f"0x{link.msi_address:x} is past 2**{config.host_addr_bits}, beyond the "
                         f"chip's host addresses (TPUConfig.host_addr_bits)")
    if arena.addr + arena.size > limit:
        raise ValueError(f"Device.open: the {link.backend} link's host buffer 0x{arena.addr:x} + "
                         f"{arena.size} bytes ends past 2**{config.host_addr_bits}, beyond the "
                         f"chip's host addresses (TPUConfig.host_addr_bits)")


def _explain(register, chip, expected):
    """A readable hint for a configuration register that differs."""
    if register == "ARRAY":
        return (f": the chip's array is {chip & 0xFFFF}x{chip >> 16}, the driver's "
                f"{expected & 0xFFFF}x{expected >> 16}")
    if register == "LINK":
        fields = lambda v: f"link_dw={v & 0xFF}, read_tags={v >> 8 & 0xFF}, dma_windows={v >> 16}"
        return f": the chip has {fields(chip)}, the driver {fields(expected)}"
    names = {"ACC_ROWS": "acc_rows", "UB_ROWS": "ub_rows", "WEIGHT_FIFO_TILES": "weight_fifo_tiles",
             "WEIGHT_MEM_TILES": "weight_mem_tiles", "MAX_PAYLOAD": "max_payload",
             "MAX_READ_REQUEST": "max_read_request"}
    if register == "HOST_WIDTHS":
        fields = lambda v: f"host_addr_bits={v & 0xFF}, counter_bits={v >> 8 & 0xFF}"
        return f": the chip has {fields(chip)}, the driver {fields(expected)}"
    if register in names:
        return f" (TPUConfig.{names[register]})"
    return ""
