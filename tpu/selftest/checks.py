"""Checks of a chip through the driver, the same on every backend.

Each check is a coroutine function ``check(device)`` that raises
`AssertionError` when the chip (or the driver) does something other than
docs/driver.md says. They use only the `Device` API and its link, so a
simulation backend of the RTL runs them unchanged: `CHECKS` maps a name to
each. A check leaves the device idle, soft-reset where it changed registers,
and wants a freshly opened device (registers at their power-on values).
Every check runs on every `TPUConfig` except where `why_not` gives the
reason it cannot (memories too small for what it needs).
"""

import asyncio
import copy
import dataclasses
import os
import random

import numpy as np

from ..asm import parse
from ..host_registers import (BAR0_BYTES, CHIP_ID, COUNTER_NAMES, UNMAPPED, Control, HostError, Irq,
                              Status, config_words, kept_value, registers)
from ..isa import Act, Conv, Fault, Halt, Int, Mmc, Nop, Rhm, Rw, Sync, Whm, encode_program
from ..programs import relocate
from ..models.cycle_model import estimate_cycles
from ..sim.stimulus.programs import mlp_program, mlp_shape
from ..driver.device import Device, HostBuffer
from ..driver.errors import ChipFault, ConfigMismatch, DeviceTimeout, JobAborted, NotATpu, TpuError
from ..driver.link import Link


__all__ = ["CHECKS", "why_not", "relocate", "long_program", "fault_programs", "load_program_data",
           "together", "copy_program"]


# Counters that count every cycle the core is not halted, also while idle.
FREE_RUNNING = ("CYCLES_LO", "CYCLES_HI", "NON_MATRIX_LO", "NON_MATRIX_HI")


# ---------------------------------------------------------------------------------------
# Helpers


def load_program_data(device, chip_program):
    """Buffers for a `tpu.sim.stimulus.programs.ChipProgram`'s host data (written) and
    outputs; ``(instructions relocated to them, {old address: buffer})``."""
    buffers = {}
    for old, data in chip_program.host.items():
        buffers[old] = device.alloc(len(data))
        device.write(buffers[old], data)
    for old, data in chip_program.expected_host.items():
        buffers[old] = device.alloc(len(data))
    regions = [(old, b.size, b) for old, b in buffers.items()]
    return relocate(parse(chip_program.text), regions), buffers


def long_program(config, cycles):
    """A program (instructions) that runs for at least `cycles` cycles: MMCs
    streaming the whole accumulator memory through the array, then HALT.
    A UB smaller than the accumulators gives every row from its row 0 (CONV
    addressing with no steps); an MMC takes two cycles at least."""
    rows = config.acc_rows
    if config.ub_rows >= rows:
        mmc = Mmc(ub=0, rows=rows, acc=0)
    else:
        mmc = Mmc(ub=0, rows=rows, acc=0, conv=Conv(out_w=1, col_step=0, row_step=0))
    count = -(-cycles // max(rows, 2)) + 1
    return [mmc] * count + [Halt()]


def _seconds(device, program):
    """The estimated run time of `program` on the device, in link seconds."""
    return estimate_cycles(device.config, encode_program(program))["cycles"] / device.link.clock_hz


def fault_programs(device, outside):
    """``{Fault: program}``: three NOPs, the faulting instruction (index 3),
    HALT. `outside` is a host address outside every open window."""
    cfg = device.config
    nops = encode_program([Nop()] * 3)
    halt = Halt().encode()
    raw = lambda *b: bytes(b) + bytes(16 - len(b))
    overflow = [Rw(tile=0, count=1)] * (cfg.weight_fifo_tiles + 3)
    # Two rows into the last accumulator row and one past it; a one-row UB
    # gives both from its row 0 (CONV addressing with no steps).
    past_acc = Mmc(ub=0, rows=2, acc=cfg.acc_rows - 1) if cfg.ub_rows > 1 else \
        Mmc(ub=0, rows=2, acc=cfg.acc_rows - 1, conv=Conv(out_w=1, col_step=0, row_step=0))
    return {
        Fault.ILLEGAL_OPCODE: nops + raw(0x7F) + halt,
        Fault.ILLEGAL_FIELD: nops + raw(0x00, 0x01) + halt,
        Fault.UB_RANGE: nops + Rhm(ub=cfg.ub_rows - 1, rows=2, host=device.arena.addr).encode() + halt,
        Fault.ACC_RANGE: nops + past_acc.encode() + halt,
        Fault.WEIGHT_MEM_RANGE: nops + Rw(tile=cfg.weight_mem_tiles, count=1).encode() + halt,
        Fault.WEIGHT_FIFO_UNDERFLOW: nops + Mmc(ub=0, rows=1, acc=0, switch=True).encode() + halt,
        Fault.HOST_RANGE: nops + Rhm(ub=0, rows=1, host=outside).encode() + halt,
        # The overflowing RW is the last of the run of RWs, not index 3.
        Fault.WEIGHT_FIFO_OVERFLOW: encode_program(overflow + [Halt()]),
    }


async def _expect_fault(awaitable, code, index):
    try:
        await awaitable
    except ChipFault as fault:
        assert fault.code == code, f"expected {code!r}, the chip stopped with {fault}"
        assert fault.index == index, f"expected {code.name} at instruction {index}: {fault}"
        assert code.name in str(fault)
        return fault
    raise AssertionError(f"expected the chip to stop with {code!r}, it did not")


async def _assert_idle(device):
    status = await device.status()
    assert status.idle, f"the chip is not idle: {status}"


async def _assert_runs(device):
    """A tiny program runs to its HALT: the chip is usable."""
    result = await device.run([Nop(), Sync(), Halt()], timeout=1e-3)
    assert result.halted, result


async def together(*awaitables):
    """Run `awaitables` as concurrent tasks of whichever event loop runs the
    caller (asyncio for the golden model, cocotb's in a simulation); each
    one's outcome, in order: ``("ok", result)`` or ``("error", exception)``."""
    async def outcome(awaitable):
        try:
            return "ok", await awaitable
        except Exception as error:          # noqa: BLE001 -- the outcome is the point
            return "error", error
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        import cocotb                       # no asyncio loop: cocotb runs this one
        tasks = [cocotb.start_soon(outcome(a)) for a in awaitables]
        return [await task for task in tasks]
    return list(await asyncio.gather(*(outcome(a) for a in awaitables)))


def copy_program(device, nbytes, rng=None):
    """``(program, src, dst)``: a program that copies `nbytes` (a whole number
    of rows) of random bytes from a new buffer `src` through UB rows 0.. to a
    new zeroed buffer `dst`, then HALTs. The bytes are in `src` already."""
    rng = rng or random.Random(0)
    rows = nbytes // device.config.rows
    src, dst = device.alloc(nbytes), device.alloc(nbytes)
    device.write(src, rng.randbytes(nbytes))
    device.write(dst, bytes(nbytes))
    return [Rhm(ub=0, rows=rows, host=src.addr), Whm(ub=0, rows=rows, host=dst.addr), Halt()], src, dst


def _expected_reset(device):
    """Register name -> value right after SOFT_RESET (free-running counters left out)."""
    words = config_words(device.config)
    out = {}
    for r in registers(device.config):
        if r.name in FREE_RUNNING:
            continue
        out[r.name] = words.get(r.name, r.reset)
    return out


# ---------------------------------------------------------------------------------------
# Register semantics


async def check_register_reset(device):
    """After SOFT_RESET every register reads its table value."""
    await device.write_register("CONTROL", Control.SOFT_RESET)
    try:
        for name, value in _expected_reset(device).items():
            got = await device.read_register(name)
            assert got == value, f"{name} reads 0x{got:x} after SOFT_RESET, the table says 0x{value:x}"
        assert await device.read_register("ID") == CHIP_ID
    finally:
        await device.reset()


async def check_register_access(device):
    """rw registers hold what is written (all 32 bits, or the bits
    `kept_value` says they keep) until SOFT_RESET; ro registers and
    unmapped offsets ignore writes; unmapped offsets read UNMAPPED; CONTROL
    reads 0."""
    table = registers(device.config)
    mapped = {r.offset for r in table}
    await device.write_register("CONTROL", Control.SOFT_RESET)
    try:
        before = {r.name: await device.read_register(r.name) for r in table
                  if r.name not in FREE_RUNNING}
        for r in table:
            if r.access == "rw":
                for pattern in (0xFFFFFFFF, 0xA5A55A5A, 0x00000001):
                    await device.write_register(r.name, pattern)
                    got = await device.read_register(r.name)
                    expected = kept_value(device.config, r.name, pattern)
                    assert got == expected, (f"rw {r.name} reads 0x{got:x} after writing "
                                             f"0x{pattern:x}, not 0x{expected:x}")
            elif r.access == "ro" and r.name not in FREE_RUNNING:
                await device.write_register(r.name, before[r.name] ^ 0xFFFFFFFF)
                got = await device.read_register(r.name)
                assert got == before[r.name], f"ro {r.name} changed to 0x{got:x} when written"
            elif r.access == "wo":
                assert await device.read_register(r.name) == 0, f"wo {r.name} does not read 0"
        await device.write_register("CONTROL", Control.SOFT_RESET)
        for r in table:
            if r.access == "rw":
                got = await device.read_register(r.name)
                assert got == r.reset, f"rw {r.name} reads 0x{got:x} after SOFT_RESET, not 0x{r.reset:x}"
        for offset in range(0, BAR0_BYTES, 4):
            if offset in mapped:
                continue
            await device.link.write32(offset, 0xFFFFFFFF)
            got = await device.link.read32(offset)
            assert got == UNMAPPED, f"unmapped offset 0x{offset:03x} reads 0x{got:x}, not UNMAPPED"
        after = {name: await device.read_register(name) for name in before}
        changed = {n: (before[n], after[n]) for n in before if before[n] != after[n]}
        assert not changed, f"writes to unmapped offsets changed registers: {changed}"
    finally:
        await device.reset()


async def check_irq_status_w1c(device):
    """IRQ_STATUS records events even when not enabled; writing 1 clears a
    bit, writing 0 does nothing. IRQ_CODE holds the last INT's code."""
    await device.set_interrupts(False)
    try:
        job = await device.start([Int(code=0x1234), Int(code=0x55), Halt()])
        result = await _poll_without_ack(device, job)
        assert result & Status.HALTED
        irq = await device.read_register("IRQ_STATUS")
        assert irq == Irq.HALT | Irq.INT, f"IRQ_STATUS 0x{irq:x} after INT and HALT"
        assert await device.read_register("IRQ_CODE") == 0x55
        await device.write_register("IRQ_STATUS", 0)
        assert await device.read_register("IRQ_STATUS") == Irq.HALT | Irq.INT
        await device.write_register("IRQ_STATUS", Irq.INT | Irq.WFILL_DONE)
        assert await device.read_register("IRQ_STATUS") == Irq.HALT
        await device.write_register("IRQ_STATUS", 0xFFFFFFFF)
        assert await device.read_register("IRQ_STATUS") == 0
    finally:
        await device.reset()


async def _poll_without_ack(device, job, timeout=1e-3):
    """STATUS once the program ends, leaving IRQ_STATUS alone."""
    deadline = device.link.time() + timeout
    while True:
        status = Status(await device.read_register("STATUS"))
        if not status & Status.BUSY:
            break
        assert device.link.time() < deadline, "the program did not end"
        await device.link.sleep(device.poll_interval)
    device._end(job)
    return status


async def check_counter_latch(device):
    """Reading a counter's _LO latches its _HI: _HI then reads the upper half
    as it was at the _LO read."""
    result = await device.run(long_program(device.config, 2000), timeout=1e-2)
    for name in COUNTER_NAMES:
        lo = await device.read_register(f"{name.upper()}_LO")
        hi = await device.read_register(f"{name.upper()}_HI")
        if name not in ("cycles", "non_matrix"):
            assert hi << 32 | lo == result.counters[name], name


# ---------------------------------------------------------------------------------------
# Opening


class _Relabelled(Link):
    """Another link's chip with one register reading a different value."""

    def __init__(self, link, offset, value):
        self._link, self._offset, self._value = link, offset, value
        self.backend = link.backend
        self.msi_address, self.msi_data, self.clock_hz = link.msi_address, link.msi_data, link.clock_hz

    async def read32(self, offset):
        value = await self._link.read32(offset)
        return self._value if offset == self._offset else value

    async def write32(self, offset, value):
        await self._link.write32(offset, value)

    def alloc(self, nbytes, align=64):
        return self._link.alloc(nbytes, align)

    def write_memory(self, addr, data):
        self._link.write_memory(addr, data)

    def read_memory(self, addr, n):
        return self._link.read_memory(addr, n)

    async def wait_interrupt(self, timeout):
        return await self._link.wait_interrupt(timeout)

    async def sleep(self, seconds):
        await self._link.sleep(seconds)

    def time(self):
        return self._link.time()


async def check_open(device):
    """open() refuses a chip of another configuration (naming the register
    and both values) and a device that is not this chip."""
    cfg = device.config
    other = cfg.replace(ub_rows=cfg.ub_rows + 1 if cfg.ub_rows < 1 << 20 else cfg.ub_rows - 1)
    try:
        await Device.open(device.link, other)
    except ConfigMismatch as error:
        assert error.register == "UB_ROWS", error
        assert (error.chip, error.expected) == (cfg.ub_rows, other.ub_rows), error
        assert "UB_ROWS" in str(error) and str(cfg.ub_rows) in str(error) \
            and str(other.ub_rows) in str(error), error
    else:
        raise AssertionError("Device.open accepted a chip of another configuration")
    regs = {r.name: r.offset for r in registers(cfg)}
    try:
        await Device.open(_Relabelled(device.link, regs["ID"], 0x12345678), cfg)
    except NotATpu as error:
        assert "0x12345678" in str(error), error
    else:
        raise AssertionError("Device.open accepted a device whose ID is not the chip's")
    try:
        await Device.open(_Relabelled(device.link, regs["ISA_VERSION"], 99), cfg)
    except ConfigMismatch as error:
        assert error.register == "ISA_VERSION" and error.chip == 99, error
    else:
        raise AssertionError("Device.open accepted a chip of another ISA version")


# ---------------------------------------------------------------------------------------
# Programs


async def check_mlp(device, seed=1):
    """The two-layer MLP of tpu.sim.stimulus.programs: weights by WFILL, data in host
    buffers, the program by doorbell; the output equals the integer reference."""
    cfg = device.config
    p = mlp_program(seed, config=cfg, **mlp_shape(cfg))
    await device.load_weights(p.weights)
    program, buffers = load_program_data(device, p)
    result = await device.run(program, timeout=1e-2)
    assert result.halted, result
    (out_addr, expected), = p.expected_host.items()
    got = device.read(buffers[out_addr])
    assert got == expected, "MLP output differs from the reference"
    counters = estimate_cycles(cfg, encode_program(program))["counters"]
    for name in ("mxu_active", "useful_macs", "weight_shift"):
        assert result.counters[name] == counters[name], \
            f"counter {name} is {result.counters[name]}, the model says {counters[name]}"
    for buffer in buffers.values():
        device.free(buffer)
    return result


async def check_weights_at_tile(device, seed=3):
    """Weights loaded at tiles other than 0 land there: with different tiles
    at 0 and from the last tiles on, a program switching to those computes
    what the golden model computes (one-hot activations, so the output rows
    are the weight rows themselves)."""
    from ..models.chip_model import ChipModel
    cfg = device.config
    rng = np.random.default_rng(seed)
    first = max(1, cfg.weight_mem_tiles - 2)
    count = min(2, cfg.weight_mem_tiles - first)
    if min(cfg.acc_rows // count, cfg.ub_rows // (count + 1)) == 0:
        count = 1           # the memories hold one tile's rows only
    tiles = rng.integers(-128, 128, size=(1 + count, cfg.rows, cfg.cols)).astype(np.int8)
    await device.load_weights(tiles[:1], first_tile=0)
    await device.load_weights(tiles[1:], first_tile=first)
    rows = min(cfg.rows, cfg.acc_rows // count, cfg.ub_rows // (count + 1))
    one_hot = np.zeros((rows, cfg.rows), dtype=np.uint8)
    one_hot[np.arange(rows), np.arange(rows)] = 1
    src, out = device.alloc(one_hot.size), device.alloc(count * rows * cfg.rows)
    device.write(src, one_hot.tobytes())
    device.write(out, bytes(out.size))
    program = [Rhm(ub=0, rows=rows, host=src.addr), Rw(tile=first, count=count)]
    program += [Mmc(ub=0, rows=rows, acc=k * rows, switch=True) for k in range(count)]
    program += [Act(acc=0, ub=rows, rows=count * rows),
                Whm(ub=rows, rows=count * rows, host=out.addr), Halt()]
    result = await device.run(program, timeout=1e-2)
    assert result.halted, result
    model = ChipModel(cfg)
    model.weight_memory[0] = tiles[0]
    model.weight_memory[first:first + count] = tiles[1:]
    model.host.write(src.addr, one_hot.tobytes())
    model.run(encode_program(program))
    got, expected = device.read(out), model.host.read(out.addr, out.size)
    assert got == expected, (f"weights loaded at tile {first} and used: output {got.hex()}, "
                             f"the golden model says {expected.hex()}")
    device.free(src)
    device.free(out)


async def check_faults(device):
    """Each fault stops the chip with its code and the faulting instruction's
    index; the driver aborts, and the next program runs."""
    outside = device.arena.end
    for fault, program in fault_programs(device, outside).items():
        index = device.config.weight_fifo_tiles + 2 if fault == Fault.WEIGHT_FIFO_OVERFLOW else 3
        error = await _expect_fault(device.run(program, timeout=1e-3), fault, index)
        assert error.instruction is not None, error
        await _assert_idle(device)
        await _assert_runs(device)


async def check_host_errors(device):
    """FETCH_RANGE for a program outside the window (running past its end, or
    starting a byte before it), WFILL_RANGE for weights outside the window
    (by a byte at either end) or past weight memory, also by values whose
    low bits would fit; a program and a fill that end exactly at the
    window's end are taken."""
    cfg, link = device.config, device.link
    start, end = device.arena.addr, device.arena.end
    for addr, count in ((end, 1), (end - 16, 2), (start - 16, 1), (start - 1, 1)):
        job = await device.submit(addr, count)
        await _expect_fault(device.wait(job, 1e-3), HostError.FETCH_RANGE, None)
        await _assert_idle(device)
    # The window's last 16 bytes, whoever's they are, hold a HALT for a while.
    last = link.read_memory(end - 16, 16)
    link.write_memory(end - 16, encode_program([Halt()]))
    result = await device.wait(await device.submit(end - 16, 1), 1e-3)
    link.write_memory(end - 16, last)
    assert result.halted, f"a program ending at the window's end: {result}"
    await device.wait(await device.fill(end - cfg.tile_bytes, 0, 1), 1e-3)
    await _assert_idle(device)
    job = await device.fill(start - 1, 0, 1)
    await _expect_fault(device.wait(job, 1e-3), HostError.WFILL_RANGE, None)
    await _assert_idle(device)
    tiles = np.ones((2, cfg.rows, cfg.cols), dtype=np.int8)
    await _expect_fault(device.load_weights(tiles, first_tile=cfg.weight_mem_tiles - 1, timeout=1e-3),
                        HostError.WFILL_RANGE, None)
    await _expect_fault(device.load_weights(tiles[:0], first_tile=cfg.weight_mem_tiles, timeout=1e-3),
                        HostError.WFILL_RANGE, None)
    job = await device.fill(end - cfg.tile_bytes + 1, 0, 1)
    await _expect_fault(device.wait(job, 1e-3), HostError.WFILL_RANGE, None)
    await _assert_idle(device)
    # Values whose low bits would fit: the narrow host side keeps those
    # registers' low bits and one for a value past them.
    for first_tile, count in ((1 << 31, 0), (0, 1 << 31), ((1 << 31) + 1, 1)):
        job = await device.fill(start, first_tile, count)
        await _expect_fault(device.wait(job, 1e-3), HostError.WFILL_RANGE, None)
        await _assert_idle(device)
    job = await device.submit(start, (1 << 28) + 1)
    await _expect_fault(device.wait(job, 1e-3), HostError.FETCH_RANGE, None)
    await _assert_idle(device)
    result = await device.load_weights(tiles[:0], first_tile=0, timeout=1e-3)
    assert not result.halted
    await _assert_runs(device)


async def check_refused_doorbell(device):
    """START or WFILL while a program runs is ignored and counted in
    BAD_REQUESTS; the running program ends normally. So are they while the
    chip is stopped with an error, until the error is cleared."""
    program = long_program(device.config, 3000)
    job = await device.start(program)
    before = await device.read_register("BAD_REQUESTS")
    await device.write_register("CONTROL", Control.START)
    await device.write_register("CONTROL", Control.WFILL)
    assert await device.read_register("BAD_REQUESTS") == before + 2
    assert (await device.status()).busy
    result = await device.wait(job, timeout=10 * _seconds(device, program) + 1e-3)
    assert result.halted, result
    await _assert_idle(device)
    job = await device.submit(device.arena.end, 1)      # FETCH_RANGE
    for _ in range(100):
        if (await device.status()).error:
            break
    assert (await device.status()).error, "a program outside the window did not stop the chip"
    before = await device.read_register("BAD_REQUESTS")
    await device.write_register("CONTROL", Control.START)
    await device.write_register("CONTROL", Control.WFILL)
    assert await device.read_register("BAD_REQUESTS") == before + 2, "a doorbell was taken in an error"
    await _expect_fault(device.wait(job, 1e-3), HostError.FETCH_RANGE, None)
    await _assert_idle(device)


async def check_timeout(device):
    """A program that outlasts its timeout raises DeviceTimeout and is
    aborted; the next program runs correctly."""
    program = long_program(device.config, 20000)
    try:
        await device.run(program, timeout=_seconds(device, program) / 10)
    except DeviceTimeout as error:
        assert "aborted" in str(error)
    else:
        raise AssertionError("a program 10x longer than its timeout did not time out")
    await _assert_idle(device)
    await check_mlp(device)


async def check_abort(device):
    """ABORT stops a running program: idle at once, and the next program runs."""
    program = long_program(device.config, 20000)
    job = await device.start(program)
    await device.link.sleep(_seconds(device, program) / 10)
    assert (await device.status()).busy
    await device.abort()
    status = await device.status()
    assert status.idle and not status.halted, status
    assert job.done
    await check_mlp(device)


async def check_interrupts(device):
    """With interrupts the end is noticed through an MSI to the link's
    address; with them off, or the MSI sent elsewhere, by polling STATUS;
    the results are the same."""
    link = device.link
    with_irq = await check_mlp(device)
    assert with_irq.by_interrupt and with_irq.interrupts >= 1, with_irq
    await device.set_interrupts(False)
    polled = await check_mlp(device)
    assert not polled.by_interrupt and polled.interrupts == 0, polled
    # Interrupts on, but the MSI goes to another address: polling still ends the run.
    await device.set_interrupts(True)
    elsewhere = device.alloc(4)
    await device.write_register("MSI_ADDR_LO", elsewhere.addr & 0xFFFFFFFF)
    await device.write_register("MSI_ADDR_HI", elsewhere.addr >> 32)
    lost = await check_mlp(device)
    assert not lost.by_interrupt and lost.interrupts == 0, lost
    assert device.read(elsewhere) == link.msi_data.to_bytes(4, "little")
    await device.reset()
    device.free(elsewhere)


async def check_int_codes(device):
    """INT interrupts the host with its code while the program runs on."""
    gap = long_program(device.config, 5000)[:-1]
    program = [Int(code=7)] + gap + [Int(code=9)] + gap + [Halt()]
    result = await device.run(program, timeout=10 * _seconds(device, program) + 1e-3)
    assert result.halted and result.int_codes == [7, 9], result
    await device.set_interrupts(False)
    result = await device.run(program, timeout=10 * _seconds(device, program) + 1e-3)
    assert result.int_codes == [9], result
    await device.set_interrupts(True)


# ---------------------------------------------------------------------------------------
# DMA


def _check_rng(device, seed=None):
    """``(Random, seed)``: the link's seed when it has one (an RTL run's, to
    replay), else a fresh one; messages quote it."""
    if seed is None:
        seed = getattr(device.link, "seed", None)
    if seed is None:
        seed = int.from_bytes(os.urandom(3), "little")
    return random.Random(seed), seed


def _place(device, rng, nbytes, guard=16):
    """``(buffer, addr)``: `nbytes` at a random byte address inside a buffer
    of random bytes, `guard` of them at least either side; a quarter of
    the time the bytes straddle a 4 KiB line."""
    if 1 < nbytes < 4096 - guard and rng.random() < 0.25:
        buffer = device.alloc(nbytes + 2 * guard + 4096, 4096)
        addr = buffer.addr + 4096 - rng.randint(1, nbytes - 1)
    else:
        buffer = device.alloc(nbytes + 2 * guard + 64, 64)
        addr = buffer.addr + guard + rng.randrange(64)
    device.write(buffer, rng.randbytes(buffer.size))
    return buffer, addr


def _arena_changes(device, before, allowed):
    """Offsets in the arena where it differs from `before` outside the
    `allowed` (addr, nbytes) ranges."""
    arena = device.arena
    after = np.frombuffer(device.link.read_memory(arena.addr, arena.size), np.uint8)
    changed = np.flatnonzero(after != np.frombuffer(before, np.uint8))
    mask = np.zeros(arena.size, bool)
    for addr, n in allowed:
        mask[addr - arena.addr:addr - arena.addr + n] = True
    return changed[~mask[changed]]


def _random_copies(device, rng, ops, max_bytes=1024):
    """A random program of `ops` RHMs and WHMs: host bytes at random byte
    addresses into random UB rows, rows known to hold bytes back out to
    other random addresses, in a random order.

    Returns ``(program, buffers, expected)``: `expected` maps each WHM's
    destination address to the bytes it must hold afterwards."""
    cfg = device.config
    max_rows = max(1, max_bytes // cfg.rows)
    ub = {}                 # UB row -> the bytes the program has put there
    filled = []             # (ub, rows) of the RHMs so far
    program, buffers, expected = [], [], {}
    while len(program) < ops:
        if not filled or rng.random() < 0.5:
            rows = rng.randint(1, min(max_rows, cfg.ub_rows))
            first = rng.randint(0, cfg.ub_rows - rows)
            buffer, addr = _place(device, rng, rows * cfg.rows)
            data = device.link.read_memory(addr, rows * cfg.rows)
            for r in range(rows):
                ub[first + r] = data[r * cfg.rows:(r + 1) * cfg.rows]
            program.append(Rhm(ub=first, rows=rows, host=addr))
            filled.append((first, rows))
        else:
            first, rows = rng.choice(filled)
            skip = rng.randrange(rows)
            first, rows = first + skip, rng.randint(1, rows - skip)
            buffer, addr = _place(device, rng, rows * cfg.rows)
            expected[addr] = b"".join(ub[first + r] for r in range(rows))
            program.append(Whm(ub=first, rows=rows, host=addr))
        buffers.append(buffer)
    return program, buffers, expected


async def _run_copies(device, rng, seed, ops, what):
    """Run `_random_copies` and check every host byte of the arena."""
    program, buffers, expected = _random_copies(device, rng, ops)
    arena = device.arena
    before = device.link.read_memory(arena.addr, arena.size)
    job = await device.start(program + [Halt()])
    allowed = [(job.buffer.addr, job.buffer.size)]
    result = await device.wait(job, timeout=10 * _seconds(device, program) + 1e-3)
    assert result.halted, f"{what} (seed {seed}): {result}"
    for addr, data in expected.items():
        got = device.link.read_memory(addr, len(data))
        assert got == data, (f"{what} (seed {seed}): the WHM to 0x{addr:x} wrote {got.hex()}, "
                             f"not {data.hex()}")
        allowed.append((addr, len(data)))
    outside = _arena_changes(device, before, allowed)
    assert not len(outside), (f"{what} (seed {seed}): {len(outside)} host bytes changed that no "
                              f"WHM writes, first at 0x{arena.addr + outside[0]:x}")
    for buffer in buffers:
        device.free(buffer)


async def check_dma_random(device, seed=None, programs=2):
    """RHMs and WHMs of random sizes at random byte addresses (some across
    4 KiB lines), in random order: every WHM destination holds exactly the
    bytes the RHMs put in its UB rows, and no other host byte changes."""
    rng, seed = _check_rng(device, seed)
    for n in range(programs):
        await _run_copies(device, rng, seed, rng.randint(4, 10), f"random DMA program {n}")


async def check_dma_windows(device, seed=None):
    """An RHM or WHM not wholly inside one window (a byte past either end of
    the driver's window, or spanning two adjacent open windows) faults with
    HOST_RANGE at its index before any of its bytes moves; the instructions
    before it have run, none after it; a WHM inside the second window works."""
    rng, seed = _check_rng(device, seed)
    cfg, link, arena = device.config, device.link, device.arena
    # Host RAM right after the arena, for a second window and for bytes a
    # WHM past the window's end would write.
    extra = link.alloc(4096, 4096)
    rows = rng.randint(1, min(cfg.ub_rows, max(1, 256 // cfg.rows)))
    nbytes = rows * cfg.rows
    src, src_addr = _place(device, rng, nbytes)
    done, done_addr = _place(device, rng, nbytes)
    data = link.read_memory(src_addr, nbytes)
    cases = [("WHM past the window's end", Whm, arena.end - nbytes + rng.randint(1, min(nbytes, 16))),
             ("RHM before the window's start", Rhm, arena.addr - rng.randint(1, min(nbytes, 16)))]
    if extra == arena.end and nbytes > 1 and cfg.dma_windows > 1:
        cases.append(("WHM across two windows", Whm, arena.end - rng.randint(1, nbytes - 1)))
    for name, op, addr in cases:
        what = f"{name} (seed {seed})"
        two = name.endswith("two windows")
        if two:
            offset = 0x100 + 16      # window 1
            for i, value in enumerate((extra & 0xFFFFFFFF, extra >> 32, 4096, 0)):
                await device.write_register(offset + 4 * i, value)
        ok_rows = rng.randint(1, rows)
        program = [Rhm(ub=0, rows=rows, host=src_addr), Whm(ub=0, rows=ok_rows, host=done_addr),
                   op(ub=0, rows=rows, host=addr), Whm(ub=0, rows=rows, host=done_addr), Halt()]
        before_arena = link.read_memory(arena.addr, arena.size)
        before_extra = link.read_memory(extra, 4096)
        job = await device.start(program)
        allowed = [(job.buffer.addr, job.buffer.size), (done_addr, ok_rows * cfg.rows)]
        await _expect_fault(device.wait(job, 1e-3), Fault.HOST_RANGE, 2)
        assert link.read_memory(done_addr, ok_rows * cfg.rows) == data[:ok_rows * cfg.rows], \
            f"{what}: the WHM before the faulting instruction did not run"
        assert link.read_memory(done_addr + ok_rows * cfg.rows, nbytes - ok_rows * cfg.rows) == \
            before_arena[done_addr + ok_rows * cfg.rows - arena.addr:done_addr + nbytes - arena.addr], \
            f"{what}: the WHM after the faulting instruction ran"
        changed = _arena_changes(device, before_arena, allowed)
        assert not len(changed), f"{what}: host bytes at 0x{arena.addr + changed[0]:x} changed"
        assert link.read_memory(extra, 4096) == before_extra, f"{what}: bytes past the window changed"
        await _assert_idle(device)
        if two:
            # Inside the second window alone, the same WHM writes.
            inside = extra + rng.randint(0, 4096 - nbytes)
            result = await device.run([Rhm(ub=0, rows=rows, host=src_addr),
                                       Whm(ub=0, rows=rows, host=inside), Halt()], timeout=1e-3)
            assert result.halted and link.read_memory(inside, nbytes) == data, \
                f"{what}: a WHM inside window 1 alone did not write"
            await device.reset()
    device.free(src)
    device.free(done)


async def check_stop_mid_program(device, seed=None):
    """ABORT, then SOFT_RESET, at a random time while a program moves data
    by RHM and WHM: the chip is idle at once (after SOFT_RESET with every
    register at its reset value), no host byte changes outside the WHMs'
    destinations, then or later, and the next programs run correctly."""
    rng, seed = _check_rng(device, seed)
    cfg, link, arena = device.config, device.link, device.arena
    for control in (Control.ABORT, Control.SOFT_RESET):
        what = f"{control.name} in mid-program (seed {seed})"
        program, buffers, expected = _random_copies(device, rng, 8)
        # Four passes, so that the stop lands among RHMs and WHMs at work.
        program = program * 4 + [Halt()]
        before = link.read_memory(arena.addr, arena.size)
        job = await device.start(program)
        allowed = [(job.buffer.addr, job.buffer.size)]
        allowed += [(addr, len(data)) for addr, data in expected.items()]
        await link.sleep(_seconds(device, program) * rng.uniform(0.05, 0.5))
        assert (await device.status()).busy, f"{what}: the program ended too soon for the check"
        if control == Control.ABORT:
            await device.abort()
        else:
            await device.write_register("CONTROL", Control.SOFT_RESET)
        status = await device.status()
        assert status.idle and not status.halted and status.error_code == 0, f"{what}: {status}"
        assert job.done or control == Control.SOFT_RESET
        if control == Control.SOFT_RESET:
            for name, value in _expected_reset(device).items():
                got = await device.read_register(name)
                assert got == value, f"{what}: {name} reads 0x{got:x}, not its reset 0x{value:x}"
            await device.reset()
        # Destinations may hold part of the copy; nothing else may change, and
        # nothing at all once the chip is stopped.
        await link.sleep(2e-6)
        outside = _arena_changes(device, before, allowed)
        assert not len(outside), (f"{what}: {len(outside)} host bytes changed that no WHM "
                                  f"writes, first at 0x{arena.addr + outside[0]:x}")
        stopped = link.read_memory(arena.addr, arena.size)
        await _run_copies(device, rng, seed, 4, f"{what}, the next program")
        for addr, data in expected.items():
            offset = addr - arena.addr
            assert link.read_memory(addr, len(data)) == stopped[offset:offset + len(data)], \
                f"{what}: the stopped program's WHM to 0x{addr:x} went on writing"
        for buffer in buffers:
            device.free(buffer)
    if _mlp_unfit(cfg) is None:
        await check_mlp(device)


# ---------------------------------------------------------------------------------------
# The driver's contract: concurrency, abort, arguments, buffers


async def check_concurrent_runs(device, seed=None):
    """`run` and `load_weights` from several tasks at once take turns: every
    program runs and each call returns its own result; no doorbell is
    refused by the chip (BAD_REQUESTS stays). `start` while a job is in
    flight is refused by the driver before the chip sees it."""
    rng, seed = _check_rng(device, seed)
    cfg = device.config
    bad = await device.read_register("BAD_REQUESTS")
    copies = [copy_program(device, cfg.rows * rng.randint(1, min(4, cfg.ub_rows)), rng)
              for _ in range(3)]
    tiles = np.array(rng.choices(range(-128, 128), k=2 * cfg.tile_bytes), np.int8).reshape(
        2, cfg.rows, cfg.cols)
    first = rng.randrange(cfg.weight_mem_tiles - 1)
    programs = [device.run(program, timeout=1e-3) for program, _, _ in copies]
    outcomes = await together(*programs[:2], device.load_weights(tiles, first, timeout=1e-3),
                              programs[2])
    for i, (kind, value) in enumerate(outcomes):
        assert kind == "ok", f"concurrent call {i} (seed {seed}) failed: {value!r}"
    for i, (_, src, dst) in enumerate(copies):
        assert device.read(dst) == device.read(src), \
            f"concurrent run {i} (seed {seed}) did not copy its bytes: a program was lost"
        device.free(src)
        device.free(dst)
    halted = [value.halted for kind, value in outcomes]
    assert halted == [True, True, False, True], f"(seed {seed}) results {halted}"
    assert await device.read_register("BAD_REQUESTS") == bad, "the chip refused a doorbell"
    # A load of the weights back through the array is not needed: the fill
    # ended with WFILL_DONE and no error, which is what the chip promises.
    job = await device.start(long_program(cfg, 2000))
    for call in (lambda: device.start([Halt()]), lambda: device.submit(device.arena.addr, 1),
                 lambda: device.fill(device.arena.addr, 0, 1), lambda: device.run([Halt()]),
                 lambda: device.load_weights(tiles[:1])):
        try:
            await call()
        except TpuError as error:
            assert "busy" in str(error), error
        else:
            raise AssertionError("a second job started while one was in flight")
    result = await device.wait(job, timeout=1e-2)
    assert result.halted, result
    assert await device.read_register("BAD_REQUESTS") == bad, "a refused call reached the chip"
    await _assert_runs(device)


async def check_stopped_job(device):
    """A job stopped by `abort` or `reset` from another task while `run` or
    `wait` is pending raises JobAborted there (never a result); the chip is
    idle and the next program runs. A job aborted before anybody waited for
    it raises JobAborted in `wait` too."""
    cfg = device.config
    program = long_program(cfg, 20000)
    pause = _seconds(device, program) / 10

    async def stop(how):
        deadline = device.link.time() + 5 * pause
        while not (await device.status()).busy:          # until the job is in flight
            assert device.link.time() < deadline, "the program did not start"
            await device.link.sleep(pause / 50)
        await device.link.sleep(pause)
        assert (await device.status()).busy, "the program ended before it could be stopped"
        await (device.abort() if how == "abort" else device.reset())

    # An abort sends no interrupt: the waiting task sees it when it next
    # reads STATUS, after at most irq_recheck. Look often, to keep this short.
    recheck, device.irq_recheck = device.irq_recheck, pause / 4
    try:
        await _stop_runs(device, program, stop)
    finally:
        device.irq_recheck = recheck


async def _stop_runs(device, program, stop):
    for how in ("abort", "reset"):
        outcomes = await together(device.run(program, timeout=1.0), stop(how))
        (kind, error), (stop_kind, stop_error) = outcomes
        assert stop_kind == "ok", f"{how}() failed: {stop_error!r}"
        assert kind == "error" and isinstance(error, JobAborted), \
            f"run() of a program stopped by {how}() gave {kind} {error!r}, not JobAborted"
        assert error.by == how and f"stopped by {how}()" in str(error), error
        await _assert_idle(device)
        await _assert_runs(device)
        job = await device.start(program)
        outcomes = await together(device.wait(job, timeout=1.0), stop(how))
        assert outcomes[0][0] == "error" and isinstance(outcomes[0][1], JobAborted), outcomes
        await _assert_idle(device)
        await _assert_runs(device)
    job = await device.start(program)
    await device.abort()
    try:
        await device.wait(job, timeout=1e-3)
    except JobAborted as error:
        assert error.by == "abort", error
    else:
        raise AssertionError("wait() for an aborted job returned")
    await _assert_runs(device)


async def _snapshot(device):
    """Registers a refused call could change (a doorbell's and the driver's
    set-up), and the arena's bytes."""
    names = [r.name for r in registers(device.config)
             if r.name.startswith(("PROG_", "WFILL_", "IRQ_", "MSI_", "WIN0_"))
             or r.name in ("STATUS", "ERROR_CODE", "BAD_REQUESTS")]
    regs = {name: await device.read_register(name) for name in names}
    arena = device.arena
    return regs, device.link.read_memory(arena.addr, arena.size)


def _bad_calls(device, buffer):
    """``(call, exception type, words the message must hold)`` for calls with
    a wrong argument: each must fail before anything reaches the chip."""
    cfg = device.config
    tile = np.zeros((1, cfg.rows, cfg.cols), np.int8)
    nan, inf = float("nan"), float("inf")
    calls = []
    for timeout in (None, "1", nan, inf, -1.0, 0, True, 1j):
        error = TypeError if timeout is None or isinstance(timeout, (str, bool, complex)) else ValueError
        calls.append((lambda t=timeout: device.run([Halt()], timeout=t), error, ["run: timeout"]))
        calls.append((lambda t=timeout: device.load_weights(tile, timeout=t), error,
                      ["load_weights: timeout"]))
    calls += [
        (lambda: device.run(None), TypeError, ["run: program", "None"]),
        (lambda: device.run(42), TypeError, ["run: program", "42"]),
        (lambda: device.run(b""), ValueError, ["run: the program is empty"]),
        (lambda: device.start(""), ValueError, ["start: the program is empty"]),
        (lambda: device.submit(device.arena.addr, 0), ValueError, ["submit: count", "0"]),
        (lambda: device.submit(-1, 1), ValueError, ["submit: addr", "-1"]),
        (lambda: device.submit(device.arena.addr, -1), ValueError, ["submit: count", "-1"]),
        (lambda: device.submit(device.arena.addr, 1.0), TypeError, ["submit: count", "1.0"]),
        (lambda: device.submit(device.arena.addr, True), TypeError, ["submit: count", "True"]),
        (lambda: device.fill(device.arena.addr, -1, 1), ValueError, ["fill: first_tile", "-1"]),
        (lambda: device.fill(device.arena.addr, 0, 1 << 32), ValueError, ["fill: tiles"]),
        (lambda: device.load_weights(tile, first_tile=-1), ValueError, ["load_weights: first_tile", "-1"]),
        (lambda: device.load_weights(tile, first_tile=1.7), TypeError, ["load_weights: first_tile", "1.7"]),
        (lambda: device.load_weights(tile.astype(float)), TypeError, ["load_weights: tiles", "float64"]),
        (lambda: device.load_weights(tile.astype(complex)), TypeError, ["load_weights: tiles", "complex"]),
        (lambda: device.load_weights(tile.astype(bool)), TypeError, ["load_weights: tiles", "bool"]),
        (lambda: device.load_weights(tile.astype(str)), TypeError, ["load_weights: tiles"]),
        (lambda: device.load_weights(tile.astype(np.int16) + 128), ValueError,
         ["load_weights: weights", "128"]),
        (lambda: device.load_weights(np.zeros((1, cfg.rows + 1, cfg.cols), np.int8)), ValueError,
         ["load_weights: tiles", "shape"]),
        (lambda: device.load_weights(None), TypeError, ["load_weights: tiles", "None"]),
        (lambda: device.write_register("PROG_LEN", 1.9), TypeError, ["write_register PROG_LEN", "1.9"]),
        (lambda: device.write_register("PROG_LEN", "7"), TypeError, ["write_register PROG_LEN", "'7'"]),
        (lambda: device.write_register("PROG_LEN", True), TypeError, ["write_register PROG_LEN", "True"]),
        (lambda: device.write_register("PROG_LEN", -1), ValueError, ["write_register PROG_LEN", "-1"]),
        (lambda: device.write_register("PROG_LEN", 1 << 32), ValueError, ["write_register PROG_LEN"]),
        (lambda: device.write_register("NOPE", 1), ValueError, ["write_register", "'NOPE'"]),
        (lambda: device.write_register(2, 1), ValueError, ["write_register", "0x2"]),
        (lambda: device.read_register(4096), ValueError, ["read_register", "0x1000"]),
        (lambda: device.read_register(None), TypeError, ["read_register", "None"]),
        (lambda: device.set_interrupts(1), TypeError, ["set_interrupts: enabled", "1"]),
        (lambda: device.wait("job"), TypeError, ["wait: job"]),
        (lambda: Device.open(device.link, device.config, poll_interval=0), ValueError,
         ["Device.open: poll_interval", "0"]),
        (lambda: Device.open(device.link, device.config, irq_recheck=nan), ValueError,
         ["Device.open: irq_recheck", "nan"]),
        (lambda: Device.open(device.link, device.config, arena_bytes=True), TypeError,
         ["Device.open: arena_bytes", "True"]),
        (lambda: Device.open(device.link, device.config, interrupts="yes"), TypeError,
         ["Device.open: interrupts", "'yes'"]),
    ]
    # Synchronous calls, wrapped so that every entry is awaited the same way.
    sync = [
        (lambda: device.alloc(True), TypeError, ["alloc: nbytes", "True"]),
        (lambda: device.alloc(1.5), TypeError, ["alloc: nbytes", "1.5"]),
        (lambda: device.alloc(0), ValueError, ["alloc: nbytes", "0"]),
        (lambda: device.alloc(16, align=3), ValueError, ["alloc: align", "3"]),
        (lambda: device.alloc(16, align=0), ValueError, ["alloc: align", "0"]),
        (lambda: device.write(buffer, 3), TypeError, ["write: data", "3"]),
        (lambda: device.write(buffer, "abc"), TypeError, ["write: data", "'abc'"]),
        (lambda: device.write(buffer, None), TypeError, ["write: data", "None"]),
        (lambda: device.write(buffer, b"x", offset=-1), ValueError, ["write: offset", "-1"]),
        (lambda: device.write(buffer, b"x", offset=1.0), TypeError, ["write: offset", "1.0"]),
        (lambda: device.write(buffer, b"xy", offset=buffer.size - 1), ValueError, ["do not fit"]),
        (lambda: device.read(buffer, n=-1), ValueError, ["read: n", "-1"]),
        (lambda: device.read(buffer, n=2.0), TypeError, ["read: n", "2.0"]),
        (lambda: device.read(buffer, offset=buffer.size + 1), ValueError, ["read:"]),
    ]
    for call, error, words in sync:
        calls.append((_as_coroutine(call), error, words))
    return calls


def _as_coroutine(call):
    async def run():
        return call()
    return run


async def check_arguments(device):
    """Every call with an argument of the wrong type or value raises
    TypeError or ValueError naming the call, the argument and the value,
    before anything reaches the chip: no register and no host byte changes,
    and the chip runs the next program."""
    buffer = device.alloc(64)
    before = await _snapshot(device)
    for call, error, words in _bad_calls(device, buffer):
        try:
            await call()
        except (TypeError, ValueError) as raised:
            text = str(raised)
            assert type(raised) is error or isinstance(raised, error), \
                f"expected {error.__name__} with {words}, got {type(raised).__name__}: {text}"
            assert "\n" not in text and all(w in text for w in words), \
                f"the message does not name {words}: {text}"
        else:
            raise AssertionError(f"a call that should raise {error.__name__} ({words}) did not")
        after = await _snapshot(device)
        if after != before:
            changed = [n for n in before[0] if before[0][n] != after[0][n]]
            raise AssertionError(f"the refused call ({words}) changed {changed or 'host memory'}")
    device.free(buffer)
    await _assert_runs(device)


async def check_buffers(device):
    """Only buffers `alloc` returned can be read, written and freed, and
    only until they are freed; a hand-made HostBuffer, even one over a live
    buffer's bytes, is refused; allocations never overlap."""
    a = device.alloc(256)
    b = device.alloc(64)
    device.write(a, bytes(range(256)))
    forged = HostBuffer(a.addr + 64, 64)
    for call, what in ((lambda: device.free(forged), "free"), (lambda: device.read(forged), "read"),
                       (lambda: device.write(forged, b"x"), "write"),
                       (lambda: device.free(device.arena), "free"),
                       (lambda: device.free(HostBuffer(a.addr, a.size)), "free"),
                       (lambda: device.read(dataclasses.replace(b)), "read"),
                       (lambda: device.write(copy.copy(b), b"x"), "write")):
        try:
            call()
        except ValueError as error:
            assert f"{what}:" in str(error) and "alloc()" in str(error), error
        else:
            raise AssertionError(f"{what} of a HostBuffer alloc() did not return was accepted")
    for call in (lambda: device.free(3), lambda: device.read(None)):
        try:
            call()
        except TypeError:
            pass
        else:
            raise AssertionError("a HostBuffer that is not one was accepted")
    device.free(a)
    for call in (lambda: device.free(a), lambda: device.read(a), lambda: device.write(a, b"x")):
        try:
            call()
        except ValueError as error:
            assert "already freed" in str(error), error
        else:
            raise AssertionError("a freed buffer was accepted")
    # The freed bytes are handed out again, never overlapping a live buffer.
    pieces = [device.alloc(32) for _ in range(12)]
    live = sorted([(p.addr, p.end) for p in pieces] + [(b.addr, b.end)])
    for (_, end), (start, _) in zip(live, live[1:]):
        assert end <= start, f"allocations overlap: {live}"
    assert device.read(b) == bytes(64)
    for p in pieces + [b]:
        device.free(p)
    await _assert_runs(device)


async def check_empty_program(device):
    """The driver refuses an empty program; the chip, given START with
    PROG_LEN 0 anyway (wherever PROG_ADDR points: nothing is fetched), ends
    at once: idle, neither HALTED nor ERROR, no interrupt, nothing refused.
    The same for START right after SOFT_RESET (no window open)."""
    for call in (lambda: device.run([]), lambda: device.start(b""),
                 lambda: device.submit(device.arena.addr, 0)):
        try:
            await call()
        except ValueError as error:
            assert "empty" in str(error), error
        else:
            raise AssertionError("the driver started an empty program")
    unbacked = (device.arena.end + (1 << 40)) & ((1 << 64) - 1)
    for what, addr in (("outside every window", unbacked), ("at address 0", 0),
                       ("after SOFT_RESET", None)):
        await _assert_runs(device)          # HALTED is set: START must clear it
        if addr is None:
            await device.write_register("CONTROL", Control.SOFT_RESET)
        else:
            await device.write_register("PROG_ADDR_LO", addr & 0xFFFFFFFF)
            await device.write_register("PROG_ADDR_HI", addr >> 32)
            await device.write_register("PROG_LEN", 0)
            await device.write_register("IRQ_STATUS", 0xFFFFFFFF)
        bad = await device.read_register("BAD_REQUESTS")
        await device.write_register("CONTROL", Control.START)
        await device.link.sleep(2e-6)
        status = await device.status()
        assert status.status == Status(0) and status.error_code == 0, \
            f"an empty program {what}: {status}"
        assert status.irq_status == 0, f"an empty program {what} raised {status.irq_status!r}"
        assert status.fault_index is None, f"an empty program {what}: {status}"
        assert await device.read_register("BAD_REQUESTS") == bad, f"an empty program {what} was refused"
        await device.reset()
    await _assert_runs(device)


CHECKS = {
    "register_reset": check_register_reset,
    "register_access": check_register_access,
    "irq_status_w1c": check_irq_status_w1c,
    "counter_latch": check_counter_latch,
    "open": check_open,
    "mlp": check_mlp,
    "faults": check_faults,
    "weights_at_tile": check_weights_at_tile,
    "host_errors": check_host_errors,
    "refused_doorbell": check_refused_doorbell,
    "timeout": check_timeout,
    "abort": check_abort,
    "interrupts": check_interrupts,
    "int_codes": check_int_codes,
    "dma_random": check_dma_random,
    "dma_windows": check_dma_windows,
    "stop_mid_program": check_stop_mid_program,
    "concurrent_runs": check_concurrent_runs,
    "stopped_job": check_stopped_job,
    "arguments": check_arguments,
    "buffers": check_buffers,
    "empty_program": check_empty_program,
}


# ---------------------------------------------------------------------------------------
# Configurations a check cannot run on


def _mlp_unfit(config):
    try:
        mlp_shape(config)
    except ValueError as error:
        return str(error)
    return None


def _weight_tiles(count):
    def unfit(config):
        if config.weight_mem_tiles < count:
            return (f"it loads weights at {count} different tiles, weight_mem_tiles is "
                    f"{config.weight_mem_tiles}")
        return None
    return unfit


#: check name -> function of the `TPUConfig`: None, or why the check cannot run on it.
_UNFIT = {
    "mlp": _mlp_unfit,
    "timeout": _mlp_unfit,
    "abort": _mlp_unfit,
    "interrupts": _mlp_unfit,
    "weights_at_tile": lambda config: _weight_tiles(2)(config) or (
        f"it needs 2 UB rows (one-hot rows in, results out), ub_rows is {config.ub_rows}"
        if config.ub_rows < 2 else None),
    "concurrent_runs": _weight_tiles(2),
}


def why_not(name, config):
    """None if the check `name` of `CHECKS` runs on `config`, else the reason
    it cannot (one line)."""
    if name not in CHECKS:
        raise ValueError(f"unknown check {name!r}; the checks are {', '.join(CHECKS)}")
    unfit = _UNFIT.get(name)
    return unfit(config) if unfit else None
