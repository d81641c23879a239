"""The chip behind its PCIe-style host interface, driven through cocotbext-pcie's
root complex, under both simulators."""


import pytest

from conftest import base_seed
from tpu import TPUConfig
from tpu.config import UP5K_PROFILE
from tpu.selftest.checks import CHECKS
from tpu.sim.harness import run


# A narrow link with small splits and few tags, and a wide one with the defaults.
NARROW = TPUConfig(rows=4, cols=4, acc_rows=256, ub_rows=1024, weight_mem_tiles=64, link_dw=1,
                   max_payload=128, max_read_request=128, read_tags=2, cpl_timeout=2000)
WIDE = TPUConfig(rows=8, cols=8, acc_rows=256, ub_rows=1024, weight_mem_tiles=64, link_dw=4,
                 cpl_timeout=2000)
# The up5k profile's chip: the small-FPGA host side (one tag, one window,
# 32-bit addresses and counters, `serial_host`) on its 2x2 array with the
# small sequencer, decoder and activation pipeline, speaking TLPs (the
# profile itself speaks the narrow host protocol, `narrow_host`, which
# tests/test_serial_link_rtl.py drives over the UART).
UP5K_HOST = UP5K_PROFILE.replace(narrow_host=0)
# A rectangular array (ACT stores min(rows, cols) channels of a row): tpu sim
# runs testcases of the chip on it (tests/test_cli_sim.py).
RECTANGULAR = NARROW.replace(rows=3, cols=5)


def config_id(config):
    return f"{config.name}-dw{config.link_dw}" + ("-up5k_host" if config == UP5K_HOST else "")


def _run(config, simulator, testcase, **env):
    # The bridge also checks, every cycle, that the chip's link outputs it
    # samples at the falling edge do not change after it drives its own
    # (`tpu.sim.host.pcie_host.SAMPLED_AT_FALLING_EDGE`): these tests cover
    # every kind of packet and fault, on narrow, wide and small-FPGA links.
    seed = base_seed()
    print(f"seed {seed}: replay with TPU_SEED={seed}")
    tests, failures = run(config, simulator, "tpu.sim.testbenches.tb_host", testcase=testcase, seed=seed,
                          top="chip",
                          extra_env={"TPU_SIMULATOR": simulator, "TPU_BRIDGE_CHECK_SAMPLING": "1",
                                     **env})
    assert tests == 1 and failures == 0, f"{testcase} {env} failed with seed {seed}"


@pytest.mark.rtl
@pytest.mark.parametrize("config", [NARROW, WIDE, UP5K_HOST], ids=config_id)
def test_registers(simulator, config):
    _run(config, simulator, "registers_test")


@pytest.mark.rtl
@pytest.mark.parametrize("check", sorted(CHECKS))
def test_driver_check(simulator, check):
    _run(NARROW, simulator, "check", TPU_HOST_CHECK=f"tpu.selftest.checks:{CHECKS[check].__name__}")


@pytest.mark.rtl
@pytest.mark.parametrize("check", ["mlp", "faults", "abort"])
def test_driver_check_wide(simulator, check):
    _run(WIDE, simulator, "check", TPU_HOST_CHECK=f"tpu.selftest.checks:{CHECKS[check].__name__}")


@pytest.mark.rtl
@pytest.mark.parametrize("check", ["mlp", "faults", "dma_windows", "abort", "register_reset",
                                   "register_access", "counter_latch", "weights_at_tile"])
def test_driver_check_up5k_host(simulator, check):
    """The same driver checks on the up5k profile's chip."""
    _run(UP5K_HOST, simulator, "check", TPU_HOST_CHECK=f"tpu.selftest.checks:{CHECKS[check].__name__}")


@pytest.mark.rtl
@pytest.mark.parametrize("stage", ["rhm", "fetch", "wfill"])
def test_dma_faults(simulator, stage):
    """Every bad answer to a DMA read while an RHM, a program fetch or a weight fill reads."""
    _run(NARROW, simulator, "dma_faults", TPU_DMA_STAGE=stage)


@pytest.mark.rtl
@pytest.mark.parametrize("config", [NARROW, WIDE, UP5K_HOST], ids=config_id)
def test_bad_tlps(simulator, config):
    """Malformed and unsupported packets from the host, and a stray completion."""
    _run(config, simulator, "bad_tlps")


@pytest.mark.rtl
def test_abort_during_writes(simulator):
    """Many ABORTs and SOFT_RESETs while WHM writes keep the link busy."""
    _run(NARROW, simulator, "abort_during_writes")


@pytest.mark.rtl
@pytest.mark.parametrize("config", [NARROW, WIDE], ids=config_id)
def test_fetch_reads_only_the_program(simulator, config):
    """The program fetch reads each program's bytes once and nothing past its end."""
    _run(config, simulator, "fetch_bounds")
