"""The driver and the golden model of the host interface.

The checks in `tpu.selftest.checks` run on every backend that is available
(only "golden" here; the RTL backends run the same checks under cocotb).
The golden-only tests below cover what a backend-independent check cannot
reach: counters past 2**32, host memory the host does not back, the MSI log.
"""

import asyncio

import numpy as np
import pytest

from tpu import TPUConfig
from tpu.config import UP5K_HOST_FIELDS
from tpu.driver import (BACKENDS, ChipFault, Device, DeviceTimeout, GoldenLink, JobAborted,
                        TpuError, register_backend, run)
from tpu.selftest.checks import CHECKS, long_program, why_not
from tpu.driver.errors import describe_error
from tpu.host_registers import (COUNTER_NAMES, Control, HostError, Irq, Status, register_map,
                                window_offset)
from tpu.isa import Fault, Halt, Int, Nop, Rhm, Whm


#: A chip of the small-FPGA host profile: 32-bit host addresses and counters.
UP5K_HOST = TPUConfig(rows=4, cols=4, acc_rows=256, ub_rows=1024, weight_mem_tiles=64,
                      **UP5K_HOST_FIELDS)
CONFIGS = [TPUConfig(), TPUConfig(rows=4, cols=8, acc_rows=64, ub_rows=256, weight_mem_tiles=16,
                                  dma_windows=2), UP5K_HOST]


def golden(config, coroutine_function, **options):
    """Run ``coroutine_function(device)`` on a fresh golden device, with a timeout."""
    async def main(device):
        return await asyncio.wait_for(coroutine_function(device), timeout=60)
    return run(main, backend="golden", config=config, **options)


@pytest.mark.parametrize("check", sorted(CHECKS))
@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: c.name)
def test_check(check, config):
    if why_not(check, config):
        pytest.skip(f"not for this configuration: {why_not(check, config)}")
    golden(config, CHECKS[check])


def test_backends():
    assert "golden" in BACKENDS
    with pytest.raises(ValueError, match="unknown backend 'nope'.*golden"):
        run(lambda device: None, backend="nope")
    register_backend("echo", lambda main, config, **options: (main, config, options))
    try:
        assert run(_value, backend="echo", x=1) == (_value, TPUConfig(), {"x": 1})
    finally:
        del BACKENDS["echo"]
    assert golden(TPUConfig(), lambda device: _value(device.link.backend)) == "golden"


async def _value(value):
    return value


def test_program_forms():
    """A program as assembly text, as instructions and as bytes gives the same result."""
    async def main(device):
        src = device.alloc(8)
        device.write(src, bytes(range(8)))
        dst = device.alloc(8)
        text = f"rhm ub=0, rows=1, host=0x{src.addr:x}\nwhm ub=0, rows=1, host=0x{dst.addr:x}\nhalt\n"
        instructions = [Rhm(ub=0, rows=1, host=src.addr), Whm(ub=0, rows=1, host=dst.addr), Halt()]
        for program in (text, instructions, b"".join(i.encode() for i in instructions)):
            device.write(dst, bytes(8))
            result = await device.run(program, timeout=1e-3)
            assert result.halted and device.read(dst) == bytes(range(8))
        with pytest.raises(ValueError, match="whole 16-byte instructions"):
            await device.start(b"\x00" * 17)
        with pytest.raises(TypeError, match="instruction 0 is not an instruction"):
            await device.start(["nop"])
    golden(TPUConfig(), main)


def test_program_without_halt():
    """A program that runs off its end leaves the chip idle, neither halted nor in error."""
    async def main(device):
        result = await device.run([Nop(), Nop()], timeout=1e-3)
        assert not result.halted and not result.by_interrupt
        with pytest.raises(ValueError, match="run: the program is empty"):
            await device.run(b"", timeout=1e-3)
        status = await device.status()
        assert status.idle and not status.halted
    golden(TPUConfig(), main)


def test_fault_message():
    async def main(device):
        program = [Nop()] * 5 + [Rhm(ub=device.config.ub_rows, rows=1, host=device.arena.addr)]
        with pytest.raises(ChipFault) as info:
            await device.run(program, timeout=1e-3)
        assert info.value.code is Fault.UB_RANGE and info.value.index == 5
        assert str(info.value).startswith(
            "chip stopped with UB_RANGE (3) at instruction 5: the instruction addresses a "
            "unified-buffer row >= ub_rows")
        assert "rhm ub=2048" in str(info.value)
    golden(TPUConfig(), main)
    assert describe_error(16).startswith("FETCH_RANGE (16): ")
    assert describe_error(99).startswith("unknown error code 99")
    error = ChipFault(HostError.FETCH_RANGE)
    assert error.index is None and str(error).startswith("chip stopped with FETCH_RANGE (16): ")


def test_busy_doorbell_refused_by_driver():
    async def main(device):
        job = await device.start(long_program(device.config, 5000))
        with pytest.raises(TpuError, match="busy"):
            await device.run([Halt()])
        await device.abort()
        with pytest.raises(JobAborted, match="stopped by abort"):
            await device.wait(job)
    golden(TPUConfig(), main)


def test_arena():
    async def main(device):
        a = device.alloc(100)
        b = device.alloc(5000, align=4096)
        assert a.addr % 64 == 0 and b.addr % 4096 == 0
        assert device.arena.addr <= a.addr and b.end <= device.arena.end
        with pytest.raises(TpuError, match="no room"):
            device.alloc(device.arena.size)
        device.free(a)
        device.free(b)
        with pytest.raises(ValueError, match="already free"):
            device.free(a)
        whole = device.alloc(device.arena.size)
        assert whole.addr == device.arena.addr
        with pytest.raises(ValueError, match="do not fit"):
            device.write(whole, b"x", offset=device.arena.size)
    golden(TPUConfig(), main, open={"arena_bytes": 1 << 16})


# ---------------------------------------------------------------------------------------
# The golden link itself


def test_golden_counter_latch_past_32_bits():
    async def main(device):
        link = device.link
        regs = register_map(device.config)
        link.poke_counter("useful_macs", 0x1_2345_6789)
        link.poke_counter("cycles", 0x7_0000_0001)
        assert await link.read32(regs["USEFUL_MACS_LO"].offset) == 0x2345_6789
        link.poke_counter("useful_macs", 0x5_0000_0000)
        assert await link.read32(regs["USEFUL_MACS_HI"].offset) == 1      # latched at the _LO read
        # One latch for all counters: a _HI reads the last _LO's upper half.
        assert await link.read32(regs["CYCLES_LO"].offset) == 1
        assert await link.read32(regs["USEFUL_MACS_HI"].offset) == 7
        counters = await device.counters()
        assert counters["useful_macs"] == 0x5_0000_0000 and counters["cycles"] == 0x7_0000_0001
        assert set(counters) == set(COUNTER_NAMES)
    golden(TPUConfig(), main)


def test_golden_narrow_counters_and_addresses():
    """With 32-bit counters and host addresses, counters wrap at 2**32 and the
    address _HI registers keep nothing; the driver reads both the same way."""
    async def main(device):
        link = device.link
        regs = register_map(device.config)
        assert device.arena.end <= 1 << 32
        link.poke_counter("useful_macs", 0x1_2345_6789)
        assert await link.read32(regs["USEFUL_MACS_LO"].offset) == 0x2345_6789
        assert await link.read32(regs["USEFUL_MACS_HI"].offset) == 0
        assert (await device.counters())["useful_macs"] == 0x2345_6789
        for name in ("PROG_ADDR_HI", "MSI_ADDR_HI", "WFILL_ADDR_HI", "WIN0_BASE_HI", "WIN0_SIZE_HI"):
            await link.write32(regs[name].offset, 0xFFFF_FFFF)
            assert await link.read32(regs[name].offset) == 0, name
        await link.write32(regs["PROG_ADDR_LO"].offset, 0xFFFF_FFFF)
        assert await link.read32(regs["PROG_ADDR_LO"].offset) == 0xFFFF_FFFF
    golden(UP5K_HOST, main)


def test_host_memory_past_the_address_width_is_refused():
    """The driver refuses a link whose host RAM (or MSI address) the chip's
    host_addr_bits cannot reach, naming the field."""
    with pytest.raises(ValueError, match=r"ends past 2\*\*32.*host_addr_bits"):
        golden(UP5K_HOST, _value, ram_base=(1 << 32) - 4096)
    with pytest.raises(ValueError, match=r"MSI address 0x100000000 is past 2\*\*32"):
        golden(UP5K_HOST, _value, ram_base=1 << 32)
    # The same RAM is fine for a chip of 33-bit addresses.
    golden(UP5K_HOST.replace(host_addr_bits=33), lambda device: _value(None), ram_base=1 << 32)


def test_golden_unbacked_host_memory():
    """DMA inside a window but outside the host's RAM: reads fail with
    CPL_STATUS (the RHM's index in FAULT_INDEX, the code in DMA_ERROR)."""
    async def main(device):
        link = device.link
        beyond = link.ram_base + link.ram_bytes
        await device.write_register(window_offset(1), beyond & 0xFFFFFFFF)
        await device.write_register(window_offset(1) + 4, beyond >> 32)
        await device.write_register(window_offset(1) + 8, 1 << 16)
        program = [Nop(), Whm(ub=0, rows=1, host=beyond), Rhm(ub=0, rows=1, host=beyond), Halt()]
        with pytest.raises(ChipFault) as info:
            await device.run(program, timeout=1e-3)
        assert info.value.code is HostError.CPL_STATUS and info.value.index == 2
        fetch = await device.submit(beyond, 1)
        with pytest.raises(ChipFault) as info:
            await device.wait(fetch, 1e-3)
        assert info.value.code is HostError.CPL_STATUS and info.value.index is None
        job = await device.fill(beyond, 0, 1)
        await device.link.sleep(1e-5)
        assert await device.read_register("DMA_ERROR") == HostError.CPL_STATUS
        with pytest.raises(ChipFault, match="CPL_STATUS"):
            await device.wait(job, 1e-3)
        assert await device.read_register("DMA_ERROR") == 0          # cleared by ABORT
    golden(TPUConfig(), main)


def test_golden_msi_rules():
    """One MSI per enabled event, none with MSI_ADDR 0; events set IRQ_STATUS regardless."""
    async def main(device):
        link = device.link
        await device.run([Int(code=1), Halt()], timeout=1e-3)
        assert [data for _, _, data in link.msi_log] == [link.msi_data] * 2
        await device.write_register("MSI_ADDR_LO", 0)
        await device.write_register("MSI_ADDR_HI", 0)
        result = await device.run([Int(code=2), Halt()], timeout=1e-3)
        assert len(link.msi_log) == 2 and not result.by_interrupt and result.int_codes == [2]
        await device.reset()
        await device.write_register("IRQ_ENABLE", Irq.ERROR)
        await device.run([Halt()], timeout=1e-3)
        assert len(link.msi_log) == 2
        with pytest.raises(ChipFault):
            await device.run([Rhm(ub=0, rows=1, host=0)], timeout=1e-3)
        assert len(link.msi_log) == 3
    golden(TPUConfig(), main)


def test_golden_start_and_wfill_together():
    """One CONTROL write with START and WFILL starts both; FETCH_RANGE wins over WFILL_RANGE."""
    async def main(device):
        cfg = device.config
        tiles = (np.arange(8 * cfg.tile_bytes) % 256).astype(np.uint8).view(np.int8).reshape(
            8, cfg.rows, cfg.cols)
        wbuf = device.alloc(tiles.nbytes)
        device.write(wbuf, tiles)
        pbuf = device.alloc(16)
        device.write(pbuf, Halt().encode())
        for name, value in (("WFILL_ADDR_LO", wbuf.addr & 0xFFFFFFFF), ("WFILL_ADDR_HI", wbuf.addr >> 32),
                            ("WFILL_TILE", 3), ("WFILL_TILES", 8),
                            ("PROG_ADDR_LO", pbuf.addr & 0xFFFFFFFF), ("PROG_ADDR_HI", pbuf.addr >> 32),
                            ("PROG_LEN", 1)):
            await device.write_register(name, value)
        await device.write_register("CONTROL", Control.START | Control.WFILL)
        assert Status(await device.read_register("STATUS")) & Status.WFILL_BUSY
        await device.link.sleep(1e-4)
        assert Status(await device.read_register("STATUS")) == Status.HALTED
        assert await device.read_register("IRQ_STATUS") == Irq.HALT | Irq.WFILL_DONE
        assert (device.link.weight_memory[3:11] == tiles).all()
        await device.write_register("WFILL_TILE", cfg.weight_mem_tiles)
        await device.write_register("PROG_LEN", 1 << 20)
        await device.write_register("CONTROL", Control.START | Control.WFILL)
        assert await device.read_register("ERROR_CODE") == HostError.FETCH_RANGE
        assert await device.read_register("FAULT_INDEX") == 0xFFFFFFFF
        await device.abort()
    golden(TPUConfig(), main)


def test_golden_timeout_without_events():
    """wait_interrupt with nothing pending returns False after the timeout, in link time."""
    async def main(device):
        link = device.link
        t = link.time()
        assert not await link.wait_interrupt(0.5)
        assert link.time() - t == pytest.approx(0.5)
        with pytest.raises(ValueError, match="infinite"):
            await link.wait_interrupt(float("inf"))
        with pytest.raises(ValueError, match="register offset"):
            await link.read32(2)
        with pytest.raises(ValueError, match="register offset"):
            await link.write32(4096, 0)
        with pytest.raises(ValueError, match="32 bits"):
            await link.write32(0, 1 << 32)
        with pytest.raises(ValueError, match="outside the golden link's RAM"):
            link.read_memory(0, 4)
    golden(TPUConfig(), main)


def test_golden_timeout_is_link_time():
    """A long program times out in link time, not wall-clock time."""
    async def main(device):
        with pytest.raises(DeviceTimeout, match="was not done after 1e-05 s of golden link time"):
            await device.run(long_program(device.config, 100000), timeout=1e-5)
    golden(TPUConfig(), main)


# ---------------------------------------------------------------------------------------
# The contract under misuse (the checks cover what every backend shares)


def test_gathered_runs_each_run_their_program():
    """Two runs at once used to lose one program and report both halted."""
    async def main(device):
        bufs = [device.alloc(8) for _ in range(4)]
        for i, buf in enumerate(bufs[:2]):
            device.write(buf, bytes([i + 1]) * 8)
        programs = [[Rhm(ub=0, rows=1, host=src.addr), Whm(ub=0, rows=1, host=dst.addr), Halt()]
                    for src, dst in ((bufs[0], bufs[2]), (bufs[1], bufs[3]))]
        results = await asyncio.gather(*(device.run(p, timeout=1e-3) for p in programs))
        assert all(r.halted for r in results)
        assert device.read(bufs[2]) == b"\x01" * 8 and device.read(bufs[3]) == b"\x02" * 8
        assert await device.read_register("BAD_REQUESTS") == 0
    golden(TPUConfig(), main)


def test_cancelled_wait_aborts_the_chip():
    async def main(device):
        task = asyncio.ensure_future(device.run(long_program(device.config, 100000), timeout=1.0))
        for _ in range(20):
            await asyncio.sleep(0)
        assert (await device.status()).busy
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert (await device.status()).idle
        assert (await device.run([Halt()], timeout=1e-3)).halted
    golden(TPUConfig(), main)


def test_two_waits_for_one_job_and_closed_device():
    async def main(device):
        job = await device.start(long_program(device.config, 2000))
        outcomes = await asyncio.gather(device.wait(job), device.wait(job), return_exceptions=True)
        assert outcomes[0].halted and isinstance(outcomes[1], TpuError)
        assert "another task is already waiting" in str(outcomes[1])
        with pytest.raises(TpuError, match="already ended"):
            await device.wait(job)
        with pytest.raises(ValueError, match="not started by this device"):
            other = await Device.open(device.link, device.config)
            await other.wait(await device.start([Halt()]))
        await device.close()
        with pytest.raises(TpuError, match="run: the device is closed"):
            await device.run([Halt()])
    golden(TPUConfig(), main)


@pytest.mark.parametrize("options", [{"interrupts": False, "poll_interval": 1e-12},
                                     {"interrupts": True, "irq_recheck": 1e-12}])
def test_no_hang_with_free_register_accesses(options):
    """With register accesses taking no time and the shortest intervals, a
    wait still moves the clock: `nop; halt` returns."""
    async def main(device):
        result = await device.run("nop\nhalt", timeout=1e-3)
        assert result.halted and device.link.time() > 0
    golden(TPUConfig(), main, read_cycles=0, write_cycles=0, open=options)


@pytest.mark.parametrize("options, error, words", [
    ({"clock_hz": 0}, ValueError, "GoldenLink: clock_hz must be a finite number of Hz > 0, not 0"),
    ({"clock_hz": float("nan")}, ValueError, "GoldenLink: clock_hz"),
    ({"clock_hz": "1e8"}, TypeError, "GoldenLink: clock_hz must be a real number of Hz, not '1e8'"),
    ({"read_cycles": 1.5}, TypeError, "GoldenLink: read_cycles must be an int, not 1.5 (float)"),
    ({"write_cycles": -1}, ValueError, "GoldenLink: write_cycles must be in 0..4294967296, not -1"),
    ({"ram_bytes": True}, TypeError, "GoldenLink: ram_bytes must be an int, not True (bool)"),
    ({"ram_base": 1 << 64}, ValueError, "GoldenLink: ram_base"),
    ({"start_cycles": None}, TypeError, "GoldenLink: start_cycles must be an int, not None"),
    ({"open": "arena"}, TypeError, "open option must be a dict"),
    ({"open": {"poll_interval": 0}}, ValueError, "Device.open: poll_interval must be a finite"),
    ({"open": {"irq_recheck": float("inf")}}, ValueError, "Device.open: irq_recheck"),
])
def test_backend_options_are_checked(options, error, words):
    async def main(device):
        raise AssertionError("opened with a bad option")
    with pytest.raises(error) as info:
        run(main, backend="golden", **options)
    assert words in str(info.value) and "\n" not in str(info.value)


def test_run_arguments_are_checked():
    with pytest.raises(TypeError, match="run: main must be an async function"):
        run(None)
    with pytest.raises(TypeError, match="run: config must be a TPUConfig"):
        run(_value, config={"rows": 8})
    with pytest.raises(TypeError, match="run: backend must be a backend name"):
        run(_value, backend=3)


def test_golden_link_arguments():
    link = GoldenLink(TPUConfig())
    for call, error, words in ((lambda: link.alloc(True), TypeError, "nbytes must be an int"),
                               (lambda: link.alloc(16, 3), ValueError, "power of two"),
                               (lambda: link.write_memory(link.ram_base, 3), TypeError, "bytes-like"),
                               (lambda: link.write_memory(link.ram_base, "ab"), TypeError, "bytes-like"),
                               (lambda: link.read_memory(link.ram_base, True), TypeError, "int")):
        with pytest.raises(error, match=words):
            call()

    async def main():
        for seconds, error in ((float("nan"), ValueError), ("1", TypeError), (None, TypeError),
                               (True, TypeError), (-1, ValueError)):
            with pytest.raises(error):
                await link.sleep(seconds)
            with pytest.raises(error):
                await link.wait_interrupt(seconds)
        before = link.cycle
        await link.sleep(1e-300)
        assert link.cycle == before + 1          # any wait at all lets time pass
    asyncio.run(main())


# ---------------------------------------------------------------------------------------
# Two-register accesses (Link.read64 / write64)


class _CountingLink(GoldenLink):
    """A golden link that logs each access the driver makes, as ``(kind, offset)``."""

    def __init__(self, config):
        super().__init__(config)
        self.log = []
        self._inner = False     # the one-word accesses of a pair are not the driver's

    def _note(self, kind, offset):
        if not self._inner:
            self.log.append((kind, offset))

    async def read32(self, offset):
        self._note("read32", offset)
        return await super().read32(offset)

    async def write32(self, offset, value):
        self._note("write32", offset)
        await super().write32(offset, value)

    async def read64(self, offset):
        self._note("read64", offset)
        self._inner = True
        try:
            return await super().read64(offset)
        finally:
            self._inner = False

    async def write64(self, offset, value):
        self._note("write64", offset)
        self._inner = True
        try:
            await super().write64(offset, value)
        finally:
            self._inner = False


def test_read64_and_write64_are_the_two_registers():
    """The default pair access is the two one-word accesses in order; a pair
    that would leave BAR0, a misaligned offset or a value over 64 bits is refused
    before anything is accessed."""
    async def main(device):
        link = device.link
        regs = register_map(device.config)
        lo = regs["PROG_ADDR_LO"].offset
        await link.write64(lo, 0x1234_5678_9ABC_DEF0)
        assert await link.read32(lo) == 0x9ABC_DEF0
        assert await link.read32(lo + 4) == 0x1234_5678
        assert await link.read64(lo) == 0x1234_5678_9ABC_DEF0
        # A counter's _HI with the next counter's _LO: the _LO latches its own _HI.
        link.poke_counter("cycles", 0x3_0000_0010)
        link.poke_counter("mxu_active", 0x9_0000_0020)
        assert await link.read32(regs["CYCLES_LO"].offset) == 0x10
        pair = await link.read64(regs["CYCLES_HI"].offset)
        assert (pair & 0xFFFF_FFFF, pair >> 32) == (3, 0x20)
        assert await link.read32(regs["MXU_ACTIVE_HI"].offset) == 9
        for offset, error in [(4092, "last register"), (2, "register offset"), (4096, "register offset")]:
            with pytest.raises(ValueError, match=error):
                await link.read64(offset)
            with pytest.raises(ValueError, match=error):
                await link.write64(offset, 0)
        with pytest.raises(ValueError, match="64 bits"):
            await link.write64(lo, 1 << 64)
        with pytest.raises(TypeError, match="must be an int"):
            await link.write64(lo, 1.0)
        assert await link.read64(lo) == 0x1234_5678_9ABC_DEF0
    golden(TPUConfig(), main)


def test_a_part_takes_few_register_accesses():
    """A weight fill and a program as a compiled model's part runs them: the
    doorbells write register pairs in one access, the counters are read in
    nine, and the end of a job reads IRQ_STATUS once (each access is an MMIO
    round trip on a PCIe link)."""
    config = TPUConfig()
    regs = register_map(config)

    async def main():
        link = _CountingLink(config)
        device = await Device.open(link, config)
        link.log.clear()
        await device.load_weights(np.ones((1, config.rows, config.cols), dtype=np.int8))
        fill = list(link.log)
        link.log.clear()
        result = await device.run([Int(code=5), Halt()], timeout=1e-3)
        return fill, list(link.log), result

    fill, program, result = asyncio.run(main())
    assert result.halted and result.int_codes == [5] and result.counters["cycles"] > 0
    names = {r.offset: r.name for r in regs.values()}
    named = lambda log: [(kind, names[offset]) for kind, offset in log]
    assert named(fill)[:5] == [("read32", "STATUS"), ("write32", "IRQ_STATUS"),
                               ("write64", "WFILL_ADDR_LO"), ("write64", "WFILL_TILE"),
                               ("write32", "CONTROL")]
    assert named(program)[:5] == [("read32", "STATUS"), ("write32", "IRQ_STATUS"),
                                  ("write64", "PROG_ADDR_LO"), ("write32", "PROG_LEN"),
                                  ("write32", "CONTROL")]
    counters = [(kind, names[offset]) for kind, offset in program[-9:]]
    assert counters == [("read32", "CYCLES_LO")] + [
        ("read64", f"{a.upper()}_HI") for a in COUNTER_NAMES[:-1]] + [
        ("read32", f"{COUNTER_NAMES[-1].upper()}_HI")]
    # The end: one IRQ_STATUS read, IRQ_CODE for the INT, one acknowledging write.
    assert named(program)[-12:-9] == [("read32", "IRQ_STATUS"), ("read32", "IRQ_CODE"),
                                      ("write32", "IRQ_STATUS")]
    assert len(fill) <= 8 and len(program) <= 19, (named(fill), named(program))
