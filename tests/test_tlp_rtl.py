"""TLP receiver and transmitter RTL under both simulators, against cocotbext-pcie."""

import pytest
from amaranth.back import verilog

from conftest import base_seed
from tpu import TPUConfig
from tpu.sim.harness import run
from tpu.sim.tops.tlp_top import TlpLoopbackTop


TOP = "tpu_tlp_loopback"


@pytest.mark.rtl
@pytest.mark.parametrize("link_dw", [1, 2, 4, 8])
@pytest.mark.parametrize("testcase", ["random_traffic", "throughput"])
def test_tlp(simulator, link_dw, testcase):
    seed = base_seed()
    print(f"seed {seed}: replay with TPU_SEED={seed}")
    config = TPUConfig(link_dw=link_dw, max_payload=256)
    source = verilog.convert(TlpLoopbackTop(link_dw, max_payload=config.max_payload), name=TOP,
                             emit_src=False)
    tests, failures = run(config, simulator, "tpu.sim.testbenches.tb_tlp", testcase=testcase, seed=seed,
                          toplevel=TOP, verilog_source=source)
    assert tests == 1 and failures == 0, f"{testcase} failed with seed {seed}"


@pytest.mark.rtl
def test_tlp_header_burst(simulator):
    """A long burst of header-only packets against back-pressure, at 4 words
    per beat, where a header-only packet is one beat and the receiver's
    header queue fills fastest."""
    test_tlp(simulator, 4, "header_burst")
