"""The performance counters after a fault of every class follow their
definitions (docs/core.md), and the golden model and the RTL under each
simulator agree on them.

Every program first does matrix work (an RHM, an RW, an MMC of four rows),
so the counters a fault leaves are not all zero. One driver session per
backend runs them all (one simulation start per simulator, on the chip
model tests/test_host_interface_rtl.py builds anyway).
"""

import pytest

from tpu.driver import ChipFault, DeviceTimeout, run
from tpu.host_registers import COUNTER_NAMES, HostError, window_offset
from tpu.isa import Fault, Halt, Mmc, Nop, Rhm, Rw, encode_program

from test_host_interface_rtl import NARROW


#: Exact on every backend (docs/core.md): the golden link's others are the
#: cycle model's estimates, the RTL's the cycles it took on its link.
EXACT = ("mxu_active", "useful_macs", "weight_shift")


def _prefix(cfg, buffer):
    return [Rhm(ub=0, rows=4, host=buffer.addr), Rw(tile=0, count=1),
            Mmc(ub=0, rows=4, acc=0, switch=True)]


async def fault_counters(device):
    """``{class: (code, index, counters)}`` for a fault of every class."""
    import numpy as np
    cfg = device.config
    link = device.link
    await device.load_weights(np.ones((2, cfg.rows, cfg.cols), dtype=np.int8))
    buffer = device.alloc(4 * cfg.rows)
    device.write(buffer, bytes(range(4 * cfg.rows)))
    prefix = encode_program(_prefix(cfg, buffer))
    raw = lambda *b: bytes(b) + bytes(16 - len(b))     # noqa: E731
    halt = Halt().encode()
    # Host memory inside a window the driver opens, but not backed by the
    # host's RAM: its reads fail with CPL_STATUS.
    base, size = (link.ram_base, link.ram_bytes) if hasattr(link, "ram_base") else link.memory_range
    beyond = base + size + (1 << 20)
    programs = {
        "ILLEGAL_OPCODE": prefix + raw(0x7F) + halt,
        "ILLEGAL_FIELD": prefix + raw(0x00, 0x01) + halt,
        "UB_RANGE": prefix + Rhm(ub=cfg.ub_rows - 1, rows=2, host=buffer.addr).encode() + halt,
        "ACC_RANGE": prefix + Mmc(ub=0, rows=2, acc=cfg.acc_rows - 1).encode() + halt,
        "WEIGHT_MEM_RANGE": prefix + Rw(tile=cfg.weight_mem_tiles, count=1).encode() + halt,
        "HOST_RANGE": prefix + Rhm(ub=0, rows=1, host=device.arena.end).encode() + halt,
        "WEIGHT_FIFO_UNDERFLOW": prefix + Mmc(ub=0, rows=1, acc=0, switch=True).encode() + halt,
        "WEIGHT_FIFO_OVERFLOW": prefix + encode_program(
            [Rw(tile=1, count=1)] * (cfg.weight_fifo_tiles + 3) + [Halt()]),
        "DMA_ERROR": prefix + Rhm(ub=0, rows=1, host=beyond).encode() + halt,
    }
    out = {}
    for name, program in programs.items():
        if name == "DMA_ERROR":
            await _open_window(device, 1, beyond, 1 << 16)
        try:
            await device.run(program, timeout=1e-3)
        except ChipFault as error:
            out[name] = (int(error.code), error.index, error.counters)
        else:
            raise AssertionError(f"{name}: the program ran to its end")
    # A failed fetch halts the core before its first instruction.
    try:
        await device.wait(await device.submit(beyond, 1), 1e-3)
    except ChipFault as error:
        out["fetch"] = (int(error.code), error.index, error.counters)
    await _open_window(device, 1, 0, 0)
    # Refused at START: no instruction ran, no counters of the program's.
    try:
        await device.wait(await device.submit(device.arena.end, 1), 1e-3)
    except ChipFault as error:
        out["FETCH_RANGE"] = (int(error.code), error.index, error.counters)
    # A timeout: the counters of the running core, read before the abort.
    long = _prefix(cfg, buffer) + [Mmc(ub=0, rows=cfg.acc_rows, acc=0)] * 40 + [Halt()]
    try:
        await device.run(long, timeout=2000 / link.clock_hz)
    except DeviceTimeout as error:
        out["timeout"] = (None, None, error.counters)
    return out


async def _open_window(device, i, base, size):
    for offset, value in ((0, base & 0xFFFFFFFF), (4, base >> 32), (8, size & 0xFFFFFFFF),
                          (12, size >> 32)):
        await device.write_register(window_offset(i) + offset, value)


def _check_definitions(name, counters):
    """What docs/core.md's table says of the counters of a halted core."""
    assert set(counters) == set(COUNTER_NAMES), name
    assert counters["non_matrix"] == counters["cycles"] - counters["mxu_active"], (name, counters)
    for counter in ("weight_stall", "raw_stall", "host_stall", "mxu_active"):
        assert counters[counter] <= counters["cycles"], (name, counter, counters)


def _check(results):
    for name, (code, index, counters) in results.items():
        if name == "FETCH_RANGE":
            assert code == HostError.FETCH_RANGE and counters is None, (name, counters)
        elif name == "timeout":
            # Read one after another from a running core: only their order
            # binds (and the golden link sets all but cycles and non_matrix
            # only when a program ends).
            assert counters["cycles"] <= counters["mxu_active"] + counters["non_matrix"], counters
            assert counters["cycles"] > 0, counters
        elif name == "fetch":
            assert code == HostError.CPL_STATUS and index is None, (name, code, index)
            _check_definitions(name, counters)
            assert all(counters[c] == 0 for c in EXACT), (name, counters)
        else:
            expected = HostError.CPL_STATUS if name == "DMA_ERROR" else Fault[name]
            assert code == expected, (name, code)
            _check_definitions(name, counters)
            # The prefix ran to completion before the core halted.
            assert counters["mxu_active"] == 4, (name, counters)
            assert counters["useful_macs"] == 4 * NARROW.rows * NARROW.cols, (name, counters)


def test_fault_counters_golden():
    _check(run(fault_counters, backend="golden", config=NARROW))


@pytest.mark.rtl
def test_fault_counters_same_on_golden_and_rtl(simulator):
    golden = run(fault_counters, backend="golden", config=NARROW)
    rtl = run(fault_counters, backend=simulator, config=NARROW)
    _check(rtl)
    assert set(rtl) == set(golden)
    for name, (code, index, counters) in rtl.items():
        assert (code, index) == golden[name][:2], name
        if counters is not None and name != "timeout":
            for counter in EXACT:
                assert counters[counter] == golden[name][2][counter], (name, counter)
