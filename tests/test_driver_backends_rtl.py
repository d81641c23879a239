"""`tpu.driver.run` gives the same Device API, and the same results, on the
golden model and on the RTL under each simulator."""

import pytest

from tpu.driver import run
from tpu.selftest.checks import check_mlp
from tpu.sim.host.driver_backend import main_target

from test_host_interface_rtl import NARROW


@pytest.mark.rtl
def test_mlp_same_on_golden_and_rtl(simulator):
    golden = run(check_mlp, backend="golden", config=NARROW)
    rtl = run(check_mlp, backend=simulator, config=NARROW)
    assert rtl.halted and golden.halted
    for name in ("mxu_active", "useful_macs", "weight_shift"):
        assert rtl.counters[name] == golden.counters[name], name


def test_simulation_backends_need_module_level_functions():
    async def local(device):
        pass
    with pytest.raises(ValueError, match="module-level async function"):
        main_target(local)
    with pytest.raises(ValueError, match="module-level async function"):
        main_target(lambda device: None)
    assert main_target(check_mlp) == "tpu.selftest.checks:check_mlp"
    assert main_target(test_mlp_same_on_golden_and_rtl).endswith(
        "test_driver_backends_rtl.py:test_mlp_same_on_golden_and_rtl")


@pytest.mark.parametrize("simulator", ["icarus", "verilator"])
def test_simulation_backend_options_are_checked(simulator):
    """Refused before any simulator is looked for or started."""
    for seed, error in (("1", TypeError), (1.0, TypeError), (True, TypeError), (-1, ValueError)):
        with pytest.raises(error, match=f"the {simulator} backend's seed must be"):
            run(check_mlp, backend=simulator, config=NARROW, seed=seed)
    with pytest.raises(TypeError, match="takes no options clock_hz"):
        run(check_mlp, backend=simulator, config=NARROW, clock_hz=1)
    for latency in (-1, 2.0, True, "0"):
        with pytest.raises(ValueError, match=f"the {simulator} backend's host_latency must be"):
            run(check_mlp, backend=simulator, config=NARROW, host_latency=latency)
    from tpu.config import UP5K_PROFILE
    with pytest.raises(ValueError, match=f"the {simulator} backend drives the chip's PCIe-style host "
                                         f"interface, and this chip speaks the narrow host protocol"):
        run(check_mlp, backend=simulator, config=UP5K_PROFILE)


def test_simulation_process_imports_no_amaranth():
    """The testbench a driver backend runs, and the driver, load without
    Amaranth (the golden model and the RTL's generators need it, a
    simulation's start does not): its import was most of each `run`'s start."""
    import subprocess
    import sys
    code = ("import sys, tpu.sim.testbenches.tb_host, tpu.driver; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'amaranth'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout
