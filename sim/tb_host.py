"""cocotb testbench: the chip behind its PCIe-style host interface, driven by
cocotbext-pcie's root complex (`tpu.sim.pcie_host`).

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

import cocotb

from ..host_registers import (CHIP_ID, COUNTER_NAMES, HW_VERSION, UNMAPPED, config_words,
                              counter_offset, register_map, registers)
from ..isa import ISA_VERSION
from .harness import config_from_env
from .pcie_host import open_rtl_link


def _seed():
    return int(os.environ.get("TPU_SEED", "1"))


@cocotb.test()
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
    for name, value in written.items():
        got = await link.read32(regs[name].offset)
        assert got == value, f"{name}: wrote 0x{value:08x}, read 0x{got:08x}"

    # Unmapped offsets read as UNMAPPED and ignore writes.
    mapped = {r.offset for r in registers(config)}
    for offset in rng.sample([o for o in range(0, 4096, 4) if o not in mapped], 16):
        await link.write32(offset, rng.getrandbits(32))
        got = await link.read32(offset)
        assert got == UNMAPPED, f"unmapped 0x{offset:03x} read 0x{got:08x}"

    # 64-bit reads come back in one completion.
    lo = regs["PROG_ADDR_LO"].offset
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


def _load(target):
    """The function `target` names: ``package.module:function`` or
    ``/path/to/file.py:function``."""
    module, _, name = target.rpartition(":")
    if module.endswith(".py"):
        spec = importlib.util.spec_from_file_location("tpu_host_main", module)
        loaded = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(loaded)
    else:
        loaded = importlib.import_module(module)
    function = loaded
    for part in name.split("."):
        function = getattr(function, part)
    return function


@cocotb.test()
async def check(dut):
    from ..driver import Device
    config = config_from_env()
    seed = _seed()
    target = os.environ["TPU_HOST_CHECK"]
    function = _load(target)
    link = await open_rtl_link(dut, config, seed=seed, backend=os.environ.get("TPU_SIMULATOR", "rtl"))
    device = await Device.open(link, config)
    dut._log.info(f"running {target} with seed {seed}")
    result = await function(device)
    if os.environ.get("TPU_HOST_RESULT"):
        with open(os.environ["TPU_HOST_RESULT"], "wb") as file:
            pickle.dump(result, file)
