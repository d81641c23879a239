"""DMA reader, DMA writer and byte gearboxes under both simulators."""

import json
from functools import lru_cache

import pytest
from amaranth.back import verilog

from conftest import base_seed, run_testcases
from tpu import TPUConfig
from tpu.sim.harness import run
from tpu.sim.tops.dma_top import DmaTop, GearboxTop


# Small cpl_timeout keeps the timeout case short; it is still far above the
# host model's delays. The first is the UP5K's host side, with its small
# form (`serial_host`: the writer's word slots); the chip's 1-word NARROW
# configuration (tests/test_host_interface_rtl.py) keeps the byte queue.
CONFIGS = [
    TPUConfig(link_dw=1, max_read_request=128, max_payload=128, read_tags=1, cpl_timeout=1500,
              serial_host=1),
    TPUConfig(link_dw=2, max_read_request=512, max_payload=256, read_tags=4, cpl_timeout=1500),
    TPUConfig(link_dw=4, max_read_request=128, max_payload=256, read_tags=8, cpl_timeout=1500),
    TPUConfig(link_dw=4, max_read_request=512, max_payload=128, read_tags=8, cpl_timeout=1500),
]
TOP = "tpu_dma"


def _id(config):
    return (f"{config.link_dw}dw-mrr{config.max_read_request}-mps{config.max_payload}-tags{config.read_tags}"
            + ("-serial_host" if config.serial_host else ""))


# Each configuration's Verilog made once per test process (one simulation
# of its testcases under each simulator).
@lru_cache(maxsize=None)
def _source(config):
    return verilog.convert(DmaTop(config), name=TOP, emit_src=False)


TESTCASES = ["reads", "read_errors", "writes", "throughput"]


@pytest.mark.rtl
@pytest.mark.parametrize("config", CONFIGS, ids=_id)
def test_dma(simulator, config, tmp_path):
    """Every testcase in one simulation of the configuration."""
    _run_testcases(simulator, config, TESTCASES, tmp_path)


def _run_testcases(simulator, config, testcases, tmp_path):
    report = tmp_path / "report.jsonl"
    run_testcases(config, simulator, "tpu.sim.testbenches.tb_dma", testcases, toplevel=TOP,
                  verilog_source=_source(config), extra_env={"TPU_DMA_REPORT": str(report)})
    if report.exists():
        for line in report.read_text().splitlines():
            print(json.dumps(json.loads(line), indent=1))


@pytest.mark.rtl
def test_byte_gearboxes(simulator):
    seed = base_seed()
    print(f"seed {seed}: replay with TPU_SEED={seed}")
    config = TPUConfig()
    source = verilog.convert(GearboxTop(), name="tpu_gearboxes", emit_src=False)
    tests, failures = run(config, simulator, "tpu.sim.testbenches.tb_dma", testcase="gearboxes", seed=seed,
                          toplevel="tpu_gearboxes", verilog_source=source)
    assert tests == 1 and failures == 0, f"gearboxes failed with seed {seed}"


@pytest.mark.rtl
def test_dma_early_delivery(simulator, tmp_path):
    """A row is delivered as soon as a completion ends exactly at its end, not
    when the rest of the request arrives (one configuration: it is timing of
    the reorder buffer, the same logic in each)."""
    _run_testcases(simulator, CONFIGS[1], ["early_delivery"], tmp_path)


@pytest.mark.rtl
@pytest.mark.parametrize("config", [CONFIGS[1], CONFIGS[2]], ids=_id)
def test_dma_issue_at_handover(simulator, config, tmp_path):
    """A job's first request issued in the cycle delivery of the previous
    request ends: the reorder buffer's row for it is bypassed from the
    request being issued (two configurations: many rows per slot, and few
    with eight tags)."""
    _run_testcases(simulator, config, ["issue_at_handover"], tmp_path)
