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
"""

from dataclasses import dataclass, field

import numpy as np

from ..asm import Raw, assemble, format_instruction
from ..config import TPUConfig
from ..host_registers import (CHIP_ID, COUNTER_NAMES, HW_VERSION, Control, Irq, Status,
                              config_words, register_map, window_offset)
from ..isa import INSTRUCTION_BYTES, ISA_VERSION, IllegalInstruction, decode, encode_program
from .errors import ChipFault, ConfigMismatch, DeviceTimeout, NotATpu, TpuError
from .link import Link


__all__ = ["Device", "HostBuffer", "DeviceStatus", "RunResult", "Job"]


ALL_IRQS = Irq.HALT | Irq.INT | Irq.ERROR | Irq.WFILL_DONE
_NO_INDEX = 0xFFFFFFFF


@dataclass(frozen=True)
class HostBuffer:
    """Host bytes ``[addr, addr + size)`` inside the device's DMA window."""
    addr: int
    size: int

    @property
    def end(self):
        return self.addr + self.size


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


def _as_program(program, config):
    """``(bytes, instructions or None)`` of a program given as bytes, a list of
    instructions or assembly text."""
    if isinstance(program, str):
        data = assemble(program, "<program>", config)
    elif isinstance(program, (bytes, bytearray, memoryview)):
        data = bytes(program)
        if len(data) % INSTRUCTION_BYTES:
            raise ValueError(f"a program is whole {INSTRUCTION_BYTES}-byte instructions; "
                             f"{len(data)} bytes leave {len(data) % INSTRUCTION_BYTES} over")
    else:
        data = encode_program(list(program))
    instructions = []
    for i in range(0, len(data), INSTRUCTION_BYTES):
        word = data[i:i + INSTRUCTION_BYTES]
        try:
            instructions.append(format_instruction(decode(word)))
        except IllegalInstruction:
            instructions.append(format_instruction(Raw.from_bytes(word)))
    return data, instructions


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
        Seconds between STATUS reads when polling.
    irq_recheck : float
        Seconds after which STATUS is read even without an interrupt.
    """

    def __init__(self, link, config, arena, *, use_interrupts, poll_interval, irq_recheck):
        self.link = link
        self.config = config
        self.registers = register_map(config)
        self.arena = arena
        self._arena = _Arena(arena.addr, arena.size)
        self.use_interrupts = use_interrupts
        self.poll_interval = poll_interval
        self.irq_recheck = irq_recheck
        self._jobs = []

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
            raise TypeError(f"Device.open needs a tpu.driver.Link, not {link!r}")
        if not isinstance(config, TPUConfig):
            raise TypeError(f"Device.open needs a TPUConfig, not {config!r}")
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
        device = cls(link, config, arena, use_interrupts=interrupts, poll_interval=poll_interval,
                     irq_recheck=irq_recheck)
        await device.reset()
        return device

    async def reset(self):
        """SOFT_RESET, then program the window, the MSI and the interrupt enables again.

        Buffers stay allocated; the chip's memories keep their contents."""
        await self.write_register("CONTROL", Control.SOFT_RESET)
        self._forget_jobs()
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
        self.use_interrupts = bool(enabled) and self.link.msi_address is not None
        await self.write_register("IRQ_ENABLE", int(ALL_IRQS) if self.use_interrupts else 0)

    async def close(self):
        """Stop the chip, close its window and silence its interrupts."""
        await self.abort()
        await self.write_register("IRQ_ENABLE", 0)
        for i in range(4):
            await self.link.write32(window_offset(0) + 4 * i, 0)

    # Registers -------------------------------------------------------------------

    def _offset(self, register):
        if isinstance(register, int):
            return register
        try:
            return self.registers[register].offset
        except KeyError:
            raise KeyError(f"no register {register!r} in BAR0 (tpu.host_registers)") from None

    async def read_register(self, register):
        """The register named `register` (or at byte offset `register`)."""
        return await self.link.read32(self._offset(register))

    async def write_register(self, register, value):
        await self.link.write32(self._offset(register), int(value))

    async def status(self):
        """STATUS, ERROR_CODE, FAULT_INDEX, IRQ_STATUS and IRQ_CODE."""
        status = Status(await self.read_register("STATUS"))
        code = await self.read_register("ERROR_CODE")
        index = await self.read_register("FAULT_INDEX")
        return DeviceStatus(status, code, None if index == _NO_INDEX else index,
                            Irq(await self.read_register("IRQ_STATUS") & int(ALL_IRQS)),
                            await self.read_register("IRQ_CODE"))

    async def counters(self):
        """The eight performance counters (`COUNTER_NAMES`), each read ``_LO`` then ``_HI``."""
        out = {}
        for name in COUNTER_NAMES:
            lo = await self.read_register(f"{name.upper()}_LO")
            hi = await self.read_register(f"{name.upper()}_HI")
            out[name] = hi << 32 | lo
        return out

    # Host memory ----------------------------------------------------------------------

    def alloc(self, nbytes, align=64):
        """A `HostBuffer` of `nbytes` bytes inside the DMA window."""
        if not isinstance(nbytes, int) or nbytes <= 0:
            raise ValueError(f"a buffer needs a positive size, not {nbytes!r}")
        if not isinstance(align, int) or align <= 0 or align & (align - 1):
            raise ValueError(f"alignment {align!r} is not a power of two")
        return HostBuffer(self._arena.alloc(nbytes, align), nbytes)

    def free(self, buffer):
        self._arena.release(buffer.addr, buffer.size)

    def write(self, buffer, data, offset=0):
        """Copy `data` (bytes-like or an ndarray, as its bytes) into `buffer` at `offset`."""
        data = data.tobytes() if isinstance(data, np.ndarray) else bytes(data)
        if offset < 0 or offset + len(data) > buffer.size:
            raise ValueError(f"{len(data)} bytes at offset {offset} do not fit the "
                             f"{buffer.size}-byte buffer at 0x{buffer.addr:x}")
        self.link.write_memory(buffer.addr + offset, data)

    def read(self, buffer, n=None, offset=0):
        """`n` bytes (default: to the end) of `buffer` from `offset`."""
        n = buffer.size - offset if n is None else n
        if offset < 0 or n < 0 or offset + n > buffer.size:
            raise ValueError(f"{n} bytes at offset {offset} are not inside the "
                             f"{buffer.size}-byte buffer at 0x{buffer.addr:x}")
        return self.link.read_memory(buffer.addr + offset, n)

    # Jobs ------------------------------------------------------------------------------

    async def _ensure_idle(self):
        status = Status(await self.read_register("STATUS"))
        if status & Status.BUSY:
            raise TpuError("the chip is busy with an earlier job: wait for it or abort() it "
                           "(the chip would ignore this doorbell)")
        if status & Status.ERROR:
            code = await self.read_register("ERROR_CODE")
            raise TpuError(f"the chip is stopped with error code {code}: abort() or reset() it "
                           f"first (the chip would ignore this doorbell)")

    async def _prepare(self):
        await self._ensure_idle()
        await self.write_register("IRQ_STATUS", 0xFFFFFFFF)
        await self.link.wait_interrupt(0)        # drop interrupts of earlier jobs

    async def submit(self, addr, count, *, program=None):
        """Ring the doorbell for `count` instructions already at host `addr`.

        Returns a `Job` for `wait`. `program` (assembly lines) only improves
        fault messages."""
        await self._prepare()
        await self.write_register("PROG_ADDR_LO", addr & 0xFFFFFFFF)
        await self.write_register("PROG_ADDR_HI", addr >> 32)
        await self.write_register("PROG_LEN", count)
        job = Job("program", self.link.time(), program=program)
        self._jobs.append(job)
        await self.write_register("CONTROL", Control.START)
        return job

    async def start(self, program):
        """Copy `program` (bytes, instructions or assembly text) into a buffer of
        its own and start it; `wait` for the returned `Job`."""
        data, lines = _as_program(program, self.config)
        buffer = self.alloc(max(len(data), INSTRUCTION_BYTES), INSTRUCTION_BYTES)
        try:
            self.write(buffer, data)
            job = await self.submit(buffer.addr, len(data) // INSTRUCTION_BYTES, program=lines)
        except BaseException:
            self.free(buffer)
            raise
        job.buffer = buffer
        return job

    async def run(self, program, timeout=1.0):
        """`start` then `wait`: run `program` to its end; a `RunResult`.

        Raises
        ------
        ChipFault
            The chip stopped with an error (it is aborted, so idle again).
        DeviceTimeout
            Not done after `timeout` seconds of link time (it is aborted).
        """
        return await self.wait(await self.start(program), timeout)

    async def fill(self, addr, first_tile, tiles):
        """Ring the WFILL doorbell for `tiles` tiles at host `addr`; a `Job`."""
        await self._prepare()
        await self.write_register("WFILL_ADDR_LO", addr & 0xFFFFFFFF)
        await self.write_register("WFILL_ADDR_HI", addr >> 32)
        await self.write_register("WFILL_TILE", first_tile)
        await self.write_register("WFILL_TILES", tiles)
        job = Job("wfill", self.link.time())
        self._jobs.append(job)
        await self.write_register("CONTROL", Control.WFILL)
        return job

    async def load_weights(self, tiles, first_tile=0, timeout=1.0):
        """Copy weight tiles (int8 ``[n, rows, cols]``) into weight memory from
        tile `first_tile` on; a `RunResult`.

        Raises
        ------
        ChipFault
            WFILL_RANGE: the tiles do not fit weight memory.
        DeviceTimeout
        """
        cfg = self.config
        tiles = np.asarray(tiles)
        if tiles.ndim == 2:
            tiles = tiles[None]
        if tiles.ndim != 3 or tiles.shape[1:] != (cfg.rows, cfg.cols):
            raise ValueError(f"weight tiles must be an array [n, {cfg.rows}, {cfg.cols}], "
                             f"not of shape {tiles.shape}")
        if tiles.dtype != np.int8:
            if tiles.size and (tiles.min() < -128 or tiles.max() > 127):
                raise ValueError("weights must be int8: values outside -128..127")
            tiles = tiles.astype(np.int8)
        n = tiles.shape[0]
        buffer = self.alloc(max(1, tiles.nbytes))
        try:
            self.write(buffer, np.ascontiguousarray(tiles))
            job = await self.fill(buffer.addr, first_tile, n)
        except BaseException:
            self.free(buffer)
            raise
        job.buffer = buffer
        return await self.wait(job, timeout)

    async def wait(self, job, timeout=1.0):
        """Wait for `job` to end; a `RunResult`. See `run` for the errors."""
        if job.done:
            raise TpuError(f"this {job.kind} job has already ended (waited for, or aborted)")
        link = self.link
        deadline = job.started + timeout
        result = RunResult()
        woken = False
        busy = Status.BUSY if job.kind == "program" else Status.WFILL_BUSY
        try:
            while True:
                status = Status(await self.read_register("STATUS"))
                if not status & busy:
                    break
                remaining = deadline - link.time()
                if remaining <= 0:
                    await self.abort()
                    raise DeviceTimeout(
                        f"the {job.kind} job was not done after {timeout:g} s of "
                        f"{link.backend} link time (STATUS {status!r}); the chip was aborted")
                if self.use_interrupts:
                    woken = await link.wait_interrupt(min(remaining, self.irq_recheck))
                    if woken:
                        result.interrupts += 1
                        await self._take_int(result)
                else:
                    woken = False
                    await link.sleep(min(remaining, self.poll_interval))
            result.by_interrupt = woken
            if status & Status.ERROR:
                code = await self.read_register("ERROR_CODE")
                index = await self.read_register("FAULT_INDEX")
                index = None if index == _NO_INDEX else index
                text = None
                if job.program is not None and index is not None and index < len(job.program):
                    text = job.program[index]
                await self.abort()
                raise ChipFault(code, index, text)
            await self._take_int(result)
            irq = await self.read_register("IRQ_STATUS")
            await self.write_register("IRQ_STATUS", irq)
            if job.kind == "program":
                result.halted = bool(status & Status.HALTED)
                result.counters = await self.counters()
            result.elapsed = link.time() - job.started
            return result
        finally:
            self._end(job)

    async def _take_int(self, result):
        """Note an INT's code and acknowledge it (other causes are left for the end)."""
        irq = await self.read_register("IRQ_STATUS")
        if irq & Irq.INT:
            result.int_codes.append(await self.read_register("IRQ_CODE"))
            await self.write_register("IRQ_STATUS", Irq.INT)

    def _end(self, job):
        if job.done:
            return
        job.done = True
        if job.buffer is not None:
            self.free(job.buffer)
            job.buffer = None
        if job in self._jobs:
            self._jobs.remove(job)

    def _forget_jobs(self):
        for job in list(self._jobs):
            self._end(job)

    async def abort(self):
        """Stop the program, the weight fill and all DMA; the chip comes back idle.

        Jobs not yet waited for end, and their buffers are freed."""
        await self.write_register("CONTROL", Control.ABORT)
        self._forget_jobs()


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
    if register in names:
        return f" (TPUConfig.{names[register]})"
    return ""
