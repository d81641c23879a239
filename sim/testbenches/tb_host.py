"""cocotb testbench: the chip behind its PCIe-style host interface, driven by
cocotbext-pcie's root complex (`tpu.sim.host.pcie_host`).

``registers`` checks BAR0 against the register table through real MMIO
TLPs; ``check`` runs a driver-level check (an async function taking a
`tpu.driver.Device`, named by ``TPU_HOST_CHECK`` as ``module:function``) on
the RTL, the same function the golden backend runs.
"""

import importlib
import importlib.util
import os
import pickle
import random
import sys

import cocotb
import numpy as np
from cocotbext.pcie.core.tlp import CplStatus, Tlp, TlpType
from cocotbext.pcie.core.utils import PcieId

from ...host_registers import (CHIP_ID, COUNTER_NAMES, HW_VERSION, UNMAPPED, Control, HostError,
                              Irq, Status, config_words, counter_offset, kept_value,
                              register_map, registers)
from ...isa import ISA_VERSION, Halt, Int, Nop, Rhm, Whm, encode_program
from ..harness import config_from_env
from ..host.pcie_host import CLOCK_NS, READ_FAULTS, open_rtl_link
from ..host.tlp_link import Beat, tlp_to_words, words_to_beats


def _seed():
    return int(os.environ.get("TPU_SEED", "1"))


@cocotb.test(timeout_time=1, timeout_unit="ms")   # a stuck link fails, never hangs (about 6 us)
async def registers_test(dut):
    config = config_from_env()
    seed = _seed()
    rng = random.Random(seed)
    link = await open_rtl_link(dut, config, seed=seed)
    regs = register_map(config)

    expected = {"ID": CHIP_ID, "VERSION": HW_VERSION, "ISA_VERSION": ISA_VERSION,
                **config_words(config)}
    for name, value in expected.items():
        got = await link.read32(regs[name].offset)
        assert got == value, f"{name}: read 0x{got:08x}, expected 0x{value:08x}"

    # Every register after reset, then random writes to all of them.
    for reg in registers(config):
        if reg.name in expected or reg.access == "ro":
            continue
        got = await link.read32(reg.offset)
        assert got == (0 if reg.access in ("wo", "w1c") else reg.reset), \
            f"{reg.name} after reset: 0x{got:08x}"
    written = {}
    for reg in registers(config):
        if reg.access == "rw":
            written[reg.name] = rng.getrandbits(32)
            await link.write32(reg.offset, written[reg.name])
    # Counters move on their own; the rest must not change when written.
    counters = {f"{n.upper()}_{half}" for n in COUNTER_NAMES for half in ("LO", "HI")}
    for reg in registers(config):
        if reg.access == "ro" and reg.name not in counters:
            before = await link.read32(reg.offset)
            await link.write32(reg.offset, rng.getrandbits(32))
            after = await link.read32(reg.offset)
            assert before == after, f"read-only {reg.name} changed from 0x{before:08x} to 0x{after:08x}"
    # A register keeps only what `kept_value` says (an address _HI above
    # host_addr_bits keeps none).
    for name, value in written.items():
        got = await link.read32(regs[name].offset)
        value = kept_value(config, name, value)
        written[name] = value
        assert got == value, f"{name}: wrote 0x{value:08x}, read 0x{got:08x}"

    # Unmapped offsets read as UNMAPPED and ignore writes.
    mapped = {r.offset for r in registers(config)}
    for offset in rng.sample([o for o in range(0, 4096, 4) if o not in mapped], 16):
        await link.write32(offset, rng.getrandbits(32))
        got = await link.read32(offset)
        assert got == UNMAPPED, f"unmapped 0x{offset:03x} read 0x{got:08x}"

    # 64-bit reads come back in one completion; the small host side
    # (`serial_host`) serves one-word accesses only: UR, and counted.
    lo = regs["PROG_ADDR_LO"].offset
    if config.serial_host:
        bad_before = await link.read32(regs["BAD_REQUESTS"].offset)
        try:
            await link.bar.read_qword(lo)
        except Exception as error:
            dut._log.info(f"2-word read refused as expected: {error}")
        else:
            raise AssertionError("serial_host: a 2-word MMIO read was not answered with UR")
        await link.bar.write_qword(lo, 0x1234_5678_9ABC_DEF0)
        assert await link.read32(lo) == written["PROG_ADDR_LO"], "serial_host: a 2-word write was taken"
        bad_after = await link.read32(regs["BAD_REQUESTS"].offset)
        assert bad_after == bad_before + 2, f"BAD_REQUESTS {bad_before} -> {bad_after}"
    else:
        got = await link.bar.read_qword(lo)
        assert got == written["PROG_ADDR_LO"] | written["PROG_ADDR_HI"] << 32, f"qword read 0x{got:016x}"

    # A cycle counter's _LO read latches _HI: the pair is one snapshot.
    offset = counter_offset(COUNTER_NAMES.index("cycles"))
    lo = await link.read32(offset)
    hi = await link.read32(offset + 4)
    assert hi == 0 and lo > 0, f"cycles counter {hi:08x}_{lo:08x} before any program"

    # SOFT_RESET restores every writable register.
    await link.write32(regs["CONTROL"].offset, 4)
    for name in written:
        got = await link.read32(regs[name].offset)
        assert got == regs[name].reset, f"{name} after SOFT_RESET: 0x{got:08x}"

    # A request the chip does not serve (a 3-word read) is answered UR and counted.
    bad_before = await link.read32(regs["BAD_REQUESTS"].offset)
    try:
        await link.bar.read(regs["ID"].offset, 12)
    except Exception as error:
        dut._log.info(f"3-word read refused as expected: {error}")
    else:
        raise AssertionError("a 3-word MMIO read was not answered with UR")
    bad_after = await link.read32(regs["BAD_REQUESTS"].offset)
    assert bad_after == bad_before + 1, f"BAD_REQUESTS {bad_before} -> {bad_after}"


class _HandedOver(Exception):
    """A script's top level called `tpu.driver.run` while being loaded here."""


def _load_script(path):
    """The script at `path`, loaded as a module (not as "__main__").

    Its top level runs up to its first `tpu.driver.run` call, which is the
    call that started this simulation: that call stops the loading instead of
    starting another simulation, so a script needs no
    ``if __name__ == "__main__":`` guard (though one does no harm).
    """
    from ... import driver

    def handed_over(*args, **kwargs):
        raise _HandedOver

    spec = importlib.util.spec_from_file_location("tpu_host_main", path)
    loaded = importlib.util.module_from_spec(spec)
    sys.modules["tpu_host_main"] = loaded
    real_run, driver.run = driver.run, handed_over
    try:
        spec.loader.exec_module(loaded)
    except _HandedOver:
        pass
    finally:
        driver.run = real_run
    return loaded


def _load(target):
    """The function `target` names: ``package.module:function`` or
    ``/path/to/file.py:function``."""
    module, _, name = target.rpartition(":")
    if module.endswith(".py"):
        loaded = _load_script(module)
    else:
        loaded = importlib.import_module(module)
    function = loaded
    for part in name.split("."):
        function = getattr(function, part)
    return function


@cocotb.test()
async def check(dut):
    from ...driver import Device
    config = config_from_env()
    seed = _seed()
    target = os.environ["TPU_HOST_CHECK"]
    function = _load(target)
    backend = os.environ.get("TPU_SIMULATOR", "rtl")
    if os.environ.get("TPU_HOST_LATENCY"):
        # A deterministic host (the benchmarks' and the cycle model's): no
        # idle, back-pressure or reordering, completions of max_payload bytes.
        from ..bench.bench_host import open_bench_link
        link = await open_bench_link(dut, config, latency=int(os.environ["TPU_HOST_LATENCY"]))
        link.backend = backend
    else:
        link = await open_rtl_link(dut, config, seed=seed, backend=backend)
    device = await Device.open(link, config)
    dut._log.info(f"running {target} with seed {seed}")
    result = await function(device)
    if os.environ.get("TPU_HOST_RESULT"):
        with open(os.environ["TPU_HOST_RESULT"], "wb") as file:
            pickle.dump(result, file)


# ---------------------------------------------------------------------------------------
# DMA faults: the host answers one of the chip's reads badly


# The chip stops within this much link time of any read fault (a lost
# completion takes cpl_timeout cycles to notice).
def _fault_timeout(config):
    return (config.cpl_timeout + 20000) * CLOCK_NS * 1e-9


def _memory(link):
    return link.read_memory(*link.memory_range)


def _assert_untouched(link, before, allowed=(), what=""):
    """Host memory equals `before` outside the `allowed` (addr, nbytes) ranges."""
    base, _ = link.memory_range
    after = _memory(link)
    if after == before:
        return
    changed = np.flatnonzero(np.frombuffer(after, np.uint8) != np.frombuffer(before, np.uint8))
    allowed_mask = np.zeros(len(before), bool)
    for addr, n in allowed:
        allowed_mask[addr - base:addr - base + n] = True
    outside = changed[~allowed_mask[changed]]
    assert not len(outside), (f"{what}: {len(outside)} host bytes changed outside what the chip "
                              f"may write, first at 0x{base + outside[0]:x}")


async def _registers(device, *names):
    return {name: await device.read_register(name) for name in names}


async def _wait_stopped(device, timeout):
    """STATUS once the chip is no longer busy (polled, interrupts left pending)."""
    link = device.link
    deadline = link.time() + timeout
    while True:
        status = Status(await device.read_register("STATUS"))
        if not status & (Status.BUSY | Status.WFILL_BUSY) or status & Status.ERROR:
            return status
        assert link.time() < deadline, f"the chip is still busy after {timeout:g} s: {status!r}"
        await link.sleep(200 * CLOCK_NS * 1e-9)


def _placed(device, rng, nbytes, guard=16):
    """A buffer with `nbytes` at a random byte offset, `guard` bytes either side."""
    buffer = device.alloc(nbytes + 2 * guard + 64, 64)
    return buffer, buffer.addr + guard + rng.randrange(64)


async def _expect_dma_error(device, fault, code, index, bad_requests, what, status=Status.ERROR):
    """The chip stopped with `code` after `fault` struck, and says so in
    every register; an ERROR interrupt came; START is refused."""
    link = device.link
    await _wait_stopped(device, _fault_timeout(device.config))
    assert fault.read is not None, f"{what}: the fault never struck"
    what = f"{what} ({fault.applied}: {fault.note} in the read at 0x{fault.read.address:x})"
    regs = await _registers(device, "STATUS", "ERROR_CODE", "DMA_ERROR", "FAULT_INDEX",
                            "IRQ_STATUS", "BAD_REQUESTS")
    assert regs["STATUS"] == status, f"{what}: STATUS {Status(regs['STATUS'])!r}, not {status!r}"
    assert regs["ERROR_CODE"] == code, f"{what}: ERROR_CODE {regs['ERROR_CODE']}, not {code!r}"
    assert regs["DMA_ERROR"] == code, f"{what}: DMA_ERROR {regs['DMA_ERROR']}, not {code!r}"
    expected_index = 0xFFFFFFFF if index is None else index
    assert regs["FAULT_INDEX"] == expected_index, \
        f"{what}: FAULT_INDEX 0x{regs['FAULT_INDEX']:x}, not 0x{expected_index:x}"
    assert regs["IRQ_STATUS"] & Irq.ERROR, f"{what}: IRQ_STATUS {Irq(regs['IRQ_STATUS'])!r}"
    assert not regs["IRQ_STATUS"] & (Irq.HALT | Irq.WFILL_DONE), \
        f"{what}: IRQ_STATUS {Irq(regs['IRQ_STATUS'])!r}"
    assert await link.wait_interrupt(2e-6), f"{what}: no ERROR interrupt"
    assert regs["BAD_REQUESTS"] == bad_requests, \
        f"{what}: BAD_REQUESTS {regs['BAD_REQUESTS']}, expected {bad_requests}"
    # Stopped means stopped: a doorbell is refused and counted, nothing moves.
    await device.write_register("CONTROL", Control.START)
    after = await _registers(device, "STATUS", "ERROR_CODE", "BAD_REQUESTS")
    assert after == {**{k: regs[k] for k in ("STATUS", "ERROR_CODE")},
                     "BAD_REQUESTS": bad_requests + 1}, f"{what}: after a refused START {after}"
    return what


async def _recover(device, how, what):
    """ABORT or SOFT_RESET: the chip is idle with no error; after SOFT_RESET
    its registers are back at reset and the driver sets it up again."""
    if how == "abort":
        await device.abort()
    else:
        await device.write_register("CONTROL", Control.SOFT_RESET)
        regs = await _registers(device, "WIN0_SIZE_LO", "PROG_LEN", "IRQ_ENABLE", "MSI_ADDR_LO",
                                "IRQ_STATUS", "BAD_REQUESTS")
        assert not any(regs.values()), f"{what}: after SOFT_RESET {regs}"
        await device.reset()
    regs = await _registers(device, "STATUS", "ERROR_CODE", "DMA_ERROR", "FAULT_INDEX")
    assert regs == {"STATUS": 0, "ERROR_CODE": 0, "DMA_ERROR": 0, "FAULT_INDEX": 0xFFFFFFFF}, \
        f"{what}: after {how.upper()} {regs}"


async def _copy_runs(device, rng, what, ub_check=None):
    """An RHM/WHM copy of random bytes runs to its HALT and moves exactly its
    bytes. `ub_check` ``(ub, rows, check(bytes))``: the program first writes
    those UB rows to the host and `check` looks at them."""
    cfg, link = device.config, device.link
    rows = rng.randint(1, 3 * cfg.max_read_request // cfg.rows)
    data = rng.randbytes(rows * cfg.rows)
    src, src_addr = _placed(device, rng, len(data))
    dst, dst_addr = _placed(device, rng, len(data))
    device.link.write_memory(src_addr, data)
    program = []
    allowed = [(dst_addr, len(data))]
    if ub_check:
        ub, ub_rows, _ = ub_check
        seen, seen_addr = _placed(device, rng, ub_rows * cfg.rows)
        program.append(Whm(ub=ub, rows=ub_rows, host=seen_addr))
        allowed.append((seen_addr, ub_rows * cfg.rows))
    ub = rng.randint(0, cfg.ub_rows - rows)
    program += [Rhm(ub=ub, rows=rows, host=src_addr), Whm(ub=ub, rows=rows, host=dst_addr), Halt()]
    before = _memory(link)
    job = await device.start(program)
    allowed.append((job.buffer.addr, job.buffer.size))
    result = await device.wait(job, timeout=1e-3)
    assert result.halted, f"{what}: the next program did not halt: {result}"
    assert link.read_memory(dst_addr, len(data)) == data, f"{what}: the next program copied wrong bytes"
    _assert_untouched(link, before, allowed, f"{what}, the next program")
    if ub_check:
        ub_check[2](link.read_memory(seen_addr, ub_check[1] * cfg.rows))
        device.free(seen)
    device.free(src)
    device.free(dst)


def _reads_in(lo, hi):
    """A read selector: the MRd asks for bytes inside [lo, hi)."""
    return lambda tlp: lo <= tlp.address + tlp.get_first_be_offset() < hi


async def _rhm_fault(device, bridge, rng, kind, what):
    """An RHM whose reads fail: FAULT_INDEX names it; its UB rows hold old
    bytes, or new bytes only for rows wholly before the failed completion;
    the WHM after it writes nothing."""
    cfg, link = device.config, device.link
    mrr = cfg.max_read_request
    rows = rng.randint(mrr // cfg.rows + 1, 3 * mrr // cfg.rows)
    nbytes = rows * cfg.rows
    old, new = rng.randbytes(nbytes), rng.randbytes(nbytes)
    old_buf, old_addr = _placed(device, rng, nbytes)
    new_buf, new_addr = _placed(device, rng, nbytes)
    dst, dst_addr = _placed(device, rng, nbytes)
    link.write_memory(old_addr, old)
    link.write_memory(new_addr, new)
    ub = rng.randint(0, cfg.ub_rows - rows)
    nops = rng.randint(0, 4)
    index = 1 + nops
    program = encode_program([Rhm(ub=ub, rows=rows, host=old_addr)] + [Nop()] * nops +
                             [Rhm(ub=ub, rows=rows, host=new_addr),
                              Whm(ub=ub, rows=rows, host=dst_addr), Halt()])
    prog = device.alloc(len(program), 16)
    device.write(prog, program)
    fault = bridge.fail_read(kind, _reads_in(new_addr, new_addr + nbytes),
                             status=rng.choice([CplStatus.UR, CplStatus.CA, CplStatus.CRS]))
    bad = await device.read_register("BAD_REQUESTS") + (kind == "link_length")
    before = _memory(link)
    await device.submit(prog.addr, len(program) // 16)
    what = await _expect_dma_error(device, fault, HostError[READ_FAULTS[kind]], index, bad, what)
    _assert_untouched(link, before, what=what)

    # Rows whose bytes all come before the failed completion may be new.
    may_be_new = (fault.address - new_addr) // cfg.rows

    def check(seen):
        newer = []
        for r in range(rows):
            got = seen[r * cfg.rows:(r + 1) * cfg.rows]
            want_old, want_new = (x[r * cfg.rows:(r + 1) * cfg.rows] for x in (old, new))
            if r < may_be_new and got == want_new:
                # Rows are written in order: new rows are a prefix.
                assert r == 0 or newer[-1] == r - 1, f"{what}: UB row {ub + r} is new, row {ub + r - 1} not"
                newer.append(r)
                continue
            assert got == want_old, (f"{what}: UB row {ub + r} of the failed RHM holds "
                                     f"{got.hex()}, neither its old bytes {want_old.hex()} nor "
                                     f"(row {r} of {may_be_new} before the fault) its new ones")
    for buffer in (old_buf, new_buf, dst, prog):
        device.free(buffer)
    return what, (ub, rows, check)


async def _fetch_fault(device, bridge, rng, kind, what):
    """A program whose fetch fails: no instruction from the spoilt completion
    on runs (each read's first instruction is an INT with the read's
    number), FAULT_INDEX names none."""
    cfg, link = device.config, device.link
    per_read = cfg.max_read_request // 16
    reads = rng.randint(2, 5)
    # IRQ_CODE keeps the last INT's code through ABORT: codes of our own.
    base = rng.randrange(1, 1 << 12) << 3
    irq_code = await device.read_register("IRQ_CODE")
    program = []
    for k in range(reads):
        program += [Int(code=base + k)] + [Nop()] * (per_read - 1)
    program[-1] = Halt()
    data = encode_program(program)
    prog = device.alloc(len(data), cfg.max_read_request)
    device.write(prog, data)
    failed = rng.randrange(reads)
    lo = prog.addr + failed * cfg.max_read_request
    fault = bridge.fail_read(kind, _reads_in(lo, lo + cfg.max_read_request),
                             status=rng.choice([CplStatus.UR, CplStatus.CA, CplStatus.CRS]))
    bad = await device.read_register("BAD_REQUESTS") + (kind == "link_length")
    before = _memory(link)
    await device.submit(prog.addr, len(program))
    what = await _expect_dma_error(device, fault, HostError[READ_FAULTS[kind]], None, bad,
                                   f"{what}, read {failed} of {reads}")
    _assert_untouched(link, before, what=what)
    # Instructions wholly before the spoilt completion may have run.
    may_run = sum(prog.addr + k * cfg.max_read_request + 16 <= fault.address for k in range(reads))
    code = await device.read_register("IRQ_CODE")
    assert code == irq_code or base <= code < base + may_run, \
        f"{what}: IRQ_CODE {code}: the INT of read {code - base} ran"
    device.free(prog)
    return what, None


async def _wfill_fault(device, bridge, rng, kind, what):
    """A weight fill whose reads fail. Before it, sometimes, a program that
    ran off its end after an RHM: the fill's error is no instruction's."""
    cfg, link = device.config, device.link
    if rng.random() < 0.5:
        buf = device.alloc(cfg.rows)
        result = await device.run([Rhm(ub=0, rows=1, host=buf.addr), Nop()], timeout=1e-3)
        assert not result.halted
        device.free(buf)
    tiles = rng.randint(cfg.max_read_request // cfg.tile_bytes + 1,
                        min(cfg.weight_mem_tiles, 3 * cfg.max_read_request // cfg.tile_bytes))
    nbytes = tiles * cfg.tile_bytes
    buf, addr = _placed(device, rng, nbytes)
    link.write_memory(addr, rng.randbytes(nbytes))
    fault = bridge.fail_read(kind, _reads_in(addr, addr + nbytes),
                             status=rng.choice([CplStatus.UR, CplStatus.CA, CplStatus.CRS]))
    bad = await device.read_register("BAD_REQUESTS") + (kind == "link_length")
    # HALTED tells of the last program, which a fill leaves alone.
    halted = Status(await device.read_register("STATUS")) & Status.HALTED
    before = _memory(link)
    await device.fill(addr, rng.randint(0, cfg.weight_mem_tiles - tiles), tiles)
    what = await _expect_dma_error(device, fault, HostError[READ_FAULTS[kind]], None, bad, what,
                                   status=Status.ERROR | halted)
    _assert_untouched(link, before, what=what)
    device.free(buf)
    return what, None


_STAGES = {"rhm": _rhm_fault, "fetch": _fetch_fault, "wfill": _wfill_fault}


@cocotb.test(timeout_time=1, timeout_unit="ms")   # a stuck link fails, never hangs
async def dma_faults(dut):
    """Every kind of bad answer to a DMA read (`READ_FAULTS`) while the stage
    ``TPU_DMA_STAGE`` (rhm, fetch or wfill) reads: the chip stops with the
    right error, writes nothing, keeps taking TLPs, and after ABORT or
    SOFT_RESET runs the next program correctly."""
    from ...driver import Device
    from ...selftest.checks import check_mlp
    config = config_from_env()
    seed = _seed()
    rng = random.Random(seed)
    stage = os.environ["TPU_DMA_STAGE"]
    link = await open_rtl_link(dut, config, seed=seed)
    # A program without HALT sends no interrupt: look at STATUS often.
    device = await Device.open(link, config, interrupts=True, irq_recheck=2e-6)
    kinds = list(READ_FAULTS)
    rng.shuffle(kinds)
    for kind in kinds:
        how = rng.choice(["abort", "soft_reset"])
        what = f"{stage} {kind} (seed {seed})"
        dut._log.info(f"{what}, then {how}")
        what, ub_check = await _STAGES[stage](device, link.bridge, rng, kind, what)
        # Late completions of reads in flight arrive meanwhile: still taken.
        await link.sleep(rng.randint(0, 400) * CLOCK_NS * 1e-9)
        await _recover(device, how, what)
        await _copy_runs(device, rng, f"{what}, then {how}", ub_check)
        if stage == "wfill":
            tiles = np.frombuffer(rng.randbytes(3 * config.tile_bytes), np.int8)
            result = await device.load_weights(tiles.reshape(3, config.rows, config.cols),
                                               first_tile=rng.randint(0, config.weight_mem_tiles - 3),
                                               timeout=1e-3)
            assert not result.halted
    assert not link.bridge.faults, "faults left over"
    # Weights loaded after the faults drive a whole network correctly.
    await check_mlp(device)


# ---------------------------------------------------------------------------------------
# Malformed and unsupported packets from the host


_STRANGER = 0xBEEF      # requester ID of injected requests: nothing may answer them


def _request_words(fmt_type, addr, payload=(), *, length=None, first_be=0xF, last_be=None,
                   ep=False, tag=0):
    """The link words of a memory request, Length free to disagree with the payload."""
    tlp = Tlp()
    tlp.fmt_type = fmt_type
    tlp.requester_id = PcieId.from_int(_STRANGER)
    tlp.tag, tlp.ep, tlp.address = tag, ep, addr
    tlp.first_be = first_be
    tlp.last_be = (0xF if len(payload) > 1 else 0) if last_be is None else last_be
    tlp.data = bytearray(b"".join(w.to_bytes(4, "little") for w in payload))
    tlp.length = len(payload) if length is None else length
    return tlp_to_words(tlp)


def _malformed(config, rng, bar, target):
    """``[(note, beats)]``: packets the receiver must drop, each of which
    would write `target` (a rw register's address) or ring START were it
    taken."""
    dw = config.link_dw
    write = lambda payload, **kw: _request_words(TlpType.MEM_WRITE, target, payload, **kw)
    value = rng.getrandbits(32)
    start = bar + register_map(config)["CONTROL"].offset
    out = [
        ("Length 1, two payload words", words_to_beats(write([value, value], length=1), dw)),
        ("Length 2, one payload word", words_to_beats(write([value], length=2, last_be=0xF), dw)),
        ("Length 1, no payload", words_to_beats(write([value])[:3], dw)),
        ("ends inside its header", words_to_beats(write([value])[:rng.randint(1, 2)], dw)),
        ("Length over max_payload",
         words_to_beats(write([value] * (config.max_payload // 4 + 1)), dw)),
        ("MRd with a payload word",
         words_to_beats(_request_words(TlpType.MEM_READ, target) + [value], dw)),
    ]
    # A START whose beats break the keep rules: a short beat before the last.
    words = _request_words(TlpType.MEM_WRITE, start, [int(Control.START)])
    cut = rng.randint(1, len(words) - 1)
    first, rest = words_to_beats(words[:cut], dw), words_to_beats(words[cut:], dw)
    beats = first[:-1] + [first[-1]._replace(last=False)]
    if cut % dw == 0:
        # The beats before the cut are full: an empty one in the middle.
        beats.append(Beat(0, 0, False))
    beats += rest
    out.append(("START with a short beat before the last", beats))
    if dw > 2:
        lone = words_to_beats(words, dw)
        holes = [k for k in range(1, 1 << dw) if k & (k + 1)]     # not contiguous from word 0
        out.append(("START with keep not contiguous",
                    [b._replace(keep=rng.choice(holes)) if b.last else b for b in lone]))
    # A completion whose Length disagrees with its payload, while no read is
    # due: dropped at the receiver, so not an unexpected completion either.
    cpl = Tlp.create_completion_data_for_tlp(_request_tlp(TlpType.MEM_READ, target), PcieId(0, 0, 0))
    cpl.set_data(value.to_bytes(4, "little") * 2)
    cpl.byte_count, cpl.length = 8, 1
    out.append(("CplD, Length 1 with two payload words", words_to_beats(tlp_to_words(cpl), dw)))
    # Garbage: random words shaped so that their length can never fit.
    for n in range(6):
        kind = rng.choice([TlpType.MEM_WRITE, TlpType.MEM_WRITE_64, TlpType.MEM_READ,
                           TlpType.MEM_READ_64, TlpType.CPL_DATA])
        fmt, typ = kind.value
        header = 4 if fmt & 1 else 3
        length = rng.randint(1, 4)
        if fmt & 2:
            total = rng.choice([n for n in range(1, header + length + 4) if n != header + length])
        else:
            total = rng.choice([n for n in range(1, header + 4) if n != header])
        word0 = (fmt << 29 | typ << 24 | rng.getrandbits(24) & ~(1 << 15) & ~0x3FF) | length
        words = [word0] + [rng.getrandbits(32) for _ in range(total - 1)]
        out.append((f"garbage {kind.name}, {total} words", words_to_beats(words, dw)))
    return out


def _request_tlp(fmt_type, addr):
    tlp = Tlp()
    tlp.fmt_type = fmt_type
    tlp.requester_id = PcieId.from_int(_STRANGER)
    tlp.set_addr_be(addr, 4)
    return tlp


def _unsupported(config, rng, target):
    """``[(note, beats)]``: well-formed posted requests BAR0 drops and counts."""
    dw = config.link_dw
    value = rng.getrandbits(32)
    write = lambda payload, **kw: words_to_beats(
        _request_words(TlpType.MEM_WRITE, target, payload, **kw), dw)
    message = [0x34 << 24, _STRANGER << 16 | 0x7F, 0, 0]      # Msg, no data, routed locally
    return [
        ("poisoned write", write([value], ep=True)),
        ("write of three words", write([value] * 3)),
        ("write of part of a word", write([value], first_be=rng.choice([0x1, 0x3, 0x6, 0xE]))),
        ("message without data", words_to_beats(message, dw)),
        ("message with data", words_to_beats([0x74 << 24 | 1, _STRANGER << 16 | 0x7F, 0, 0, value], dw)),
    ]


@cocotb.test(timeout_time=1, timeout_unit="ms")   # a stuck link fails, never hangs
async def bad_tlps(dut):
    """Malformed packets (dropped by the receiver) and requests BAR0 does not
    serve: each counts once in BAD_REQUESTS and changes nothing, none is
    answered, and MMIO and DMA go on working, also with packets arriving
    between the completions of a running program. A completion while no
    read is due is CPL_UNEXPECTED."""
    from ...driver import Device
    config = config_from_env()
    seed = _seed()
    rng = random.Random(seed)
    link = await open_rtl_link(dut, config, seed=seed)
    device = await Device.open(link, config, irq_recheck=2e-6)
    bridge = link.bridge
    bar = link.pci.bar_addr[0]
    regs = register_map(config)
    target = bar + regs["PROG_ADDR_LO"].offset
    # Were a START or WFILL taken, these would fail it at once with FETCH_RANGE.
    await device.write_register("PROG_ADDR_LO", device.arena.end & 0xFFFFFFFF)
    await device.write_register("PROG_ADDR_HI", device.arena.end >> 32)
    await device.write_register("PROG_LEN", 1)
    rw = [r.name for r in registers(config) if r.access == "rw"]
    state = await _registers(device, *rw, "STATUS", "ERROR_CODE", "IRQ_STATUS", "DMA_ERROR")
    before = _memory(link)

    packets = _malformed(config, rng, bar, target) + _unsupported(config, rng, target)
    rng.shuffle(packets)
    for note, beats in packets:
        count = await device.read_register("BAD_REQUESTS")
        bridge.inject_raw(beats, note)
        got = await device.read_register("BAD_REQUESTS")
        assert got == count + 1, f"{note} (seed {seed}): BAD_REQUESTS {count} -> {got}"
        assert await device.read_register("ID") == CHIP_ID, f"{note} (seed {seed}): MMIO broke"
    now = await _registers(device, *rw, "STATUS", "ERROR_CODE", "IRQ_STATUS", "DMA_ERROR")
    changed = {k: (state[k], now[k]) for k in state if state[k] != now[k]}
    assert not changed, f"bad packets changed registers (seed {seed}): {changed}"
    answers = [t for t in bridge.sent if int(t.requester_id) == _STRANGER]
    assert not answers, f"the chip answered a dropped packet (seed {seed}): {answers[0]!r}"
    _assert_untouched(link, before, what=f"bad packets (seed {seed})")

    # A 4-word header (MWr with a 64-bit address; BAR0 decodes the offset
    # from its lower word): the write is taken.
    for _ in range(2):
        value = rng.getrandbits(32)
        high = rng.getrandbits(32)
        bridge.inject_raw(words_to_beats(_request_words(TlpType.MEM_WRITE_64, high << 32 | target, [value]),
                                         config.link_dw), "MWr with a 4-word header")
        got = await device.read_register("PROG_ADDR_LO")
        assert got == value, f"MWr 4-word header (seed {seed}): PROG_ADDR_LO 0x{got:08x}, not 0x{value:08x}"

    # Bad packets among the completions of a running program: it runs on.
    for _ in range(2):
        await _copy_during(device, rng, packets, seed)

    # A completion while no read is due: CPL_UNEXPECTED, no instruction's.
    for tag in (0, rng.randint(config.read_tags, 255)):
        stray = Tlp.create_completion_data_for_tlp(_request_tlp(TlpType.MEM_READ, bar), PcieId(0, 0, 0))
        stray.requester_id = PcieId.from_int(int(link.bridge.function.pcie_id))
        stray.tag, stray.byte_count, stray.lower_address = tag, 4, 0
        stray.set_data(rng.randbytes(4))
        before = _memory(link)
        await device.read_register("ID")
        bridge.inject(stray)
        # The chip is idle all along: wait for the error itself.
        deadline = link.time() + 1e-5
        while not (status := Status(await device.read_register("STATUS"))) & Status.ERROR:
            assert link.time() < deadline, f"stray completion, tag {tag} (seed {seed}): no error"
        regs_now = await _registers(device, "STATUS", "ERROR_CODE", "DMA_ERROR", "FAULT_INDEX")
        assert regs_now == {"STATUS": Status.ERROR | (status & Status.HALTED),
                            "ERROR_CODE": HostError.CPL_UNEXPECTED,
                            "DMA_ERROR": HostError.CPL_UNEXPECTED, "FAULT_INDEX": 0xFFFFFFFF}, \
            f"stray completion, tag {tag} (seed {seed}): {regs_now}"
        assert await link.wait_interrupt(2e-6), f"stray completion, tag {tag}: no ERROR interrupt"
        _assert_untouched(link, before, what=f"stray completion (seed {seed})")
        await _recover(device, "abort", f"stray completion, tag {tag} (seed {seed})")
        await _copy_runs(device, rng, f"after a stray completion, tag {tag} (seed {seed})")


async def _copy_during(device, rng, packets, seed):
    """A copy big enough to keep reads in flight while bad packets arrive."""
    cfg, link = device.config, device.link
    rows = min(6 * cfg.max_read_request // cfg.rows, cfg.ub_rows)
    data = rng.randbytes(rows * cfg.rows)
    src, src_addr = _placed(device, rng, len(data))
    dst, dst_addr = _placed(device, rng, len(data))
    link.write_memory(src_addr, data)
    count = await device.read_register("BAD_REQUESTS")
    before = _memory(link)
    job = await device.start([Rhm(ub=0, rows=rows, host=src_addr),
                              Whm(ub=0, rows=rows, host=dst_addr), Halt()])
    program = (job.buffer.addr, job.buffer.size)
    chosen = rng.sample(packets, 6)
    for note, beats in chosen:
        await link.sleep(rng.randint(0, 60) * CLOCK_NS * 1e-9)
        link.bridge.inject_raw(beats, note)
    result = await device.wait(job, timeout=1e-3)
    assert result.halted, result
    assert link.read_memory(dst_addr, len(data)) == data, f"bad packets during a copy (seed {seed})"
    _assert_untouched(link, before, [(dst_addr, len(data)), program],
                      f"bad packets during a copy (seed {seed})")
    got = await device.read_register("BAD_REQUESTS")
    assert got == count + len(chosen), f"during a copy (seed {seed}): BAD_REQUESTS {count} -> {got}"
    device.free(src)
    device.free(dst)


# ---------------------------------------------------------------------------------------
# ABORT while the chip writes


@cocotb.test(timeout_time=1, timeout_unit="ms")   # a stuck link fails, never hangs
async def abort_during_writes(dut):
    """ABORT or SOFT_RESET at random moments of a program that keeps the
    link busy with WHM writes: every TLP the chip sends stays whole (the
    root complex checks each), nothing outside the WHMs' destinations
    changes, and the next program is right."""
    from ...driver import Device
    config = config_from_env()
    seed = _seed()
    rng = random.Random(seed)
    link = await open_rtl_link(dut, config, seed=seed)
    device = await Device.open(link, config, irq_recheck=2e-6)
    rows = min(config.ub_rows, 4 * config.max_payload // config.rows)
    dst, dst_addr = _placed(device, rng, rows * config.rows)
    program = [Whm(ub=0, rows=rows, host=dst_addr)] * 16 + [Halt()]
    for n in range(int(os.environ.get("TPU_ABORTS", "24"))):
        what = f"stop {n} (seed {seed})"
        before = _memory(link)
        job = await device.start(program)
        allowed = [(dst_addr, rows * config.rows), (job.buffer.addr, job.buffer.size)]
        await link.sleep(rng.randint(100, 1500) * CLOCK_NS * 1e-9)
        if rng.random() < 0.75:
            await device.abort()
        else:
            await device.reset()
        assert (await device.status()).idle, what
        await link.sleep(rng.randint(0, 100) * CLOCK_NS * 1e-9)
        _assert_untouched(link, before, allowed, what)
    await _copy_runs(device, rng, f"after the stops (seed {seed})")


# ---------------------------------------------------------------------------------------
# The program fetch reads the program and nothing past it


@cocotb.test(timeout_time=1, timeout_unit="ms")   # a stuck link fails, never hangs
async def fetch_bounds(dut):
    """Programs of lengths around the fetcher's chunks (16 instructions) and
    the link's largest read, at random 16-byte offsets: the chip's memory
    reads while each runs to its HALT, and for a while after, cover the
    program's bytes exactly once and nothing past its end (the words there,
    host memory all the same, would only wait behind the HALT)."""
    from ...driver import Device
    from ..host.pcie_host import _READS
    config = config_from_env()
    seed = _seed()
    rng = random.Random(seed)
    link = await open_rtl_link(dut, config, seed=seed)
    device = await Device.open(link, config, irq_recheck=2e-6)
    chunk, per_read = 16, config.max_read_request // 16
    lengths = sorted({1, 2, chunk - 1, chunk, chunk + 1, 2 * chunk - 1, 2 * chunk, 2 * chunk + 1,
                      3 * chunk + rng.randint(1, chunk - 1), per_read + 1, rng.randint(3, 5 * chunk)})
    rng.shuffle(lengths)
    for n in lengths:
        program = encode_program([Nop()] * (n - 1) + [Halt()])
        buffer = device.alloc(len(program) + 256, 256)
        addr = buffer.addr + 16 * rng.randrange(16)
        device.write(buffer, program, addr - buffer.addr)
        what = f"a program of {n} instructions at 0x{addr:x} (seed {seed})"
        sent = len(link.bridge.sent)
        result = await device.wait(await device.submit(addr, n), timeout=1e-3)
        assert result.halted, f"{what}: {result}"
        await link.sleep(rng.randint(200, 600) * CLOCK_NS * 1e-9)
        reads = sorted((t.address + t.get_first_be_offset(), t.get_be_byte_count())
                       for t in link.bridge.sent[sent:] if t.fmt_type in _READS)
        past = [f"0x{a:x}+{b}" for a, b in reads if a < addr or a + b > addr + len(program)]
        assert not past, f"{what}: reads outside [0x{addr:x}, 0x{addr + len(program):x}): {past}"
        at = addr
        for a, b in reads:
            assert a == at, f"{what}: the reads {reads} leave a gap or overlap at 0x{at:x}"
            at += b
        assert at == addr + len(program), f"{what}: the reads {reads} end at 0x{at:x}"
        device.free(buffer)
