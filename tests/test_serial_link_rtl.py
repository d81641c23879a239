"""The chip behind its UART bridge (`SerialChip`), driven by the driver's
`SerialLink` through an independent UART model (cocotbext-uart), under both
simulators: the driver checks of the PCIe-style backends, clean and with
damaged frames, and damaged frames that must never act.

A UART byte takes 40 clock cycles even at the fastest divisor, so a register
access costs about 1,800 cycles and a check hundreds of thousands: the
suite runs the damaged frames that must not act and the LED pins against
STATUS, under Icarus; the MLP
with damaged and lost frames (whose result must still equal the
reference), the other
checks, the MLP on a clean line and the damaged-frames test under Verilator
(one more multi-minute model build), run with ``TPU_SERIAL_ALL=1`` (each
takes minutes; docs/serial_link.md has the measured times). The same for
the up5k profile's chip speaking the narrow host protocol (`narrow_host`):
in the suite under Icarus its MLP, its register reset and the bad messages
it must refuse; the rest with ``TPU_SERIAL_ALL=1``.
"""

import os
from functools import lru_cache

import pytest

from conftest import base_seed
from tpu import TPUConfig
from tpu.config import UP5K_PROFILE
from tpu.selftest.checks import CHECKS
from tpu.hdl.verilog import SERIAL_NAME, generate_verilog
from tpu.sim.harness import run


# A UART link is slow next to the chip: give the chip's reads time to be
# answered across it.
SERIAL = TPUConfig(rows=4, cols=4, acc_rows=256, ub_rows=1024, weight_mem_tiles=64, link_dw=1,
                   max_payload=128, max_read_request=128, read_tags=2, cpl_timeout=1 << 20)


# A configuration's serial chip Verilog (about 6 s of CPU for SERIAL) is
# made once per test process, not once per test.
@lru_cache(maxsize=None)
def _source(config):
    return generate_verilog(config, top="serial")


def _run(simulator, testcase, config=SERIAL, **env):
    seed = base_seed()
    print(f"seed {seed}: replay with TPU_SEED={seed}")
    tests, failures = run(config, simulator, "tpu.sim.testbenches.tb_serial", testcase=testcase, seed=seed,
                          toplevel=SERIAL_NAME, verilog_source=_source(config),
                          extra_env={"TPU_SIMULATOR": simulator, **env})
    assert tests == 1 and failures == 0, f"{testcase} {env} failed with seed {seed}"


# Verilator leaves this file's cases to TPU_SERIAL_ALL=1: the CI run's cut of
# Icarus cases (conftest.py) does not apply.
pytestmark = pytest.mark.icarus_every_case

ALL = pytest.mark.skipif(not os.environ.get("TPU_SERIAL_ALL"),
                         reason="minutes of simulation over the UART: set TPU_SERIAL_ALL=1")


@pytest.mark.rtl
@pytest.mark.parametrize("check", [pytest.param(c, marks=ALL) for c in
                                   ["mlp", "faults", "dma_windows", "abort", "register_reset",
                                    "stop_mid_program"]])
def test_driver_check(simulator, check):
    _run(simulator, "check", TPU_HOST_CHECK=f"tpu.selftest.checks:{CHECKS[check].__name__}")


@pytest.mark.rtl
@pytest.mark.parametrize("checks", [pytest.param(c, marks=ALL) for c in
                                    ["mlp,abort", "faults", "dma_windows,register_reset"]])
def test_driver_checks_up5k(simulator, checks):
    """The driver checks on the up5k profile's chip, its small host side
    (`serial_host`) behind the UART, several on one device."""
    _run(simulator, "check", config=UP5K_PROFILE,
         TPU_HOST_CHECK=",".join(f"tpu.selftest.checks:{CHECKS[c].__name__}" for c in checks.split(",")))


# The up5k profile's chip speaking the narrow host protocol (`narrow_host`).
UP5K_NARROW = UP5K_PROFILE.replace(narrow_host=1)


# In the suite under Icarus: the MLP and the register reset (a minute or two
# each); the other checks, and all of them under Verilator (one more
# multi-minute model build), with TPU_SERIAL_ALL=1.
NARROW_IN_SUITE = ("mlp", "register_reset")


def _all_unless(simulator, suite):
    if simulator == "verilator" or not suite:
        if not os.environ.get("TPU_SERIAL_ALL"):
            pytest.skip("minutes of simulation over the UART (and, under Verilator, one more "
                        "model build): set TPU_SERIAL_ALL=1")


@pytest.mark.rtl
@pytest.mark.parametrize("check", ["mlp", "faults", "dma_windows", "abort", "register_reset",
                                   "stop_mid_program", "host_errors", "weights_at_tile"])
def test_driver_check_narrow(simulator, check):
    """Every driver check over the narrow host protocol, unchanged."""
    _all_unless(simulator, check in NARROW_IN_SUITE)
    _run(simulator, "check", config=UP5K_NARROW,
         TPU_HOST_CHECK=f"tpu.selftest.checks:{CHECKS[check].__name__}")


@pytest.mark.rtl
def test_bad_messages_narrow(simulator):
    """Messages that are not well formed, read answers without a read and
    bad answers to a read, over the narrow host protocol."""
    _all_unless(simulator, True)
    _run(simulator, "bad_messages", config=UP5K_NARROW)


@pytest.mark.rtl
@ALL
def test_driver_check_noisy_narrow(simulator):
    """The MLP over the narrow host protocol with frames damaged, cut short
    and lost both ways."""
    _run(simulator, "check", config=UP5K_NARROW, TPU_HOST_CHECK="tpu.selftest.checks:check_mlp",
         TPU_SERIAL_FRAME_RATE="0.05", TPU_SERIAL_BYTE_RATE="0.001")


@pytest.mark.rtl
@ALL
def test_driver_check_noisy(simulator):
    """The MLP with frames damaged, cut short and lost both ways: the link
    sends again until each arrives, and the result is the reference's."""
    _run(simulator, "check", TPU_HOST_CHECK="tpu.selftest.checks:check_mlp",
         TPU_SERIAL_FRAME_RATE="0.05", TPU_SERIAL_BYTE_RATE="0.001")


@pytest.mark.rtl
def test_damaged_frames(simulator):
    if simulator == "verilator" and not os.environ.get("TPU_SERIAL_ALL"):
        pytest.skip("the serial chip's Verilator model is one more multi-minute build for the "
                    "suite; Icarus runs this test, and TPU_SERIAL_ALL=1 runs it under Verilator too")
    _run(simulator, "damaged_frames")


@pytest.mark.rtl
def test_status_pins(simulator):
    if simulator == "verilator" and not os.environ.get("TPU_SERIAL_ALL"):
        pytest.skip("the serial chip's Verilator model is one more multi-minute build for the "
                    "suite; Icarus runs this test, and TPU_SERIAL_ALL=1 runs it under Verilator too")
    _run(simulator, "status_pins")
