"""The array benchmark's Markdown table, from build_mxu results (no build here)."""

import pytest

from tpu.bench.fpga import mxu_table


_FITS = {
    "board": "ulx3s-85f", "device": "ECP5 LFE5U-85F (ULX3S)", "rows": 8, "cols": 8, "dsp": True,
    "multipliers": "mix", "fits": True, "fmax_mhz": 156.94, "seconds": 528.0,
    "logic": {"used": 2050, "available": 83640}, "ffs": {"used": 4548, "available": 83640},
    "dsp_blocks": {"used": 64, "available": 156}, "ram_blocks": {"used": 0, "available": 208},
    "critical_path": {"start": "mxu.pe_2_4_mul.mult.P9",
                      "end": "mxu.pe_2_4_psum_TRELLIS_FF_Q_16.DI"},
}

_DOES_NOT_FIT = {
    "board": "ulx3s-85f", "device": "ECP5 LFE5U-85F (ULX3S)", "rows": 16, "cols": 16,
    "dsp": True, "multipliers": "auto", "fits": False, "seconds": 38.0,
    "reason": "Unable to place cell 'x', no BELs remaining to implement cell type 'MULT18X18D'",
    "needed": {"MULT18X18D": {"used": 256, "available": 156}},
}


def test_row_of_a_build_that_fits():
    lines = mxu_table([_FITS]).splitlines()
    assert lines[0].startswith("| FPGA | array | multipliers |")
    assert len(lines) == 3
    cells = [c.strip() for c in lines[2].strip("|").split("|")]
    assert cells[:9] == ["ECP5 LFE5U-85F (ULX3S)", "8x8", "mix", "yes", "2050/83640",
                         "4548/83640", "64/156", "0/208", "156.9"]
    # 2 x 8 x 8 x 156.94 MHz
    assert cells[9] == "20.1" and cells[10] == "9 min"
    assert cells[11:] == ["`mxu.pe_2_4_mul.mult.P9`", "`mxu.pe_2_4_psum_TRELLIS_FF_Q_16.DI`"]


def test_row_of_a_build_that_does_not_fit():
    cells = [c.strip() for c in mxu_table([_DOES_NOT_FIT]).splitlines()[2].strip("|").split("|")]
    assert cells[2:4] == ["DSP", "NO"] and cells[6] == "256/156"
    assert "no BELs remaining" in cells[11]


def test_row_names_the_three_cycle_mix():
    cells = [c.strip() for c in mxu_table([{**_FITS, "multipliers": "mix3"}]).splitlines()[2]
             .strip("|").split("|")]
    assert cells[2] == "mix3"


def test_row_names_copied_weight_controls():
    for fanout, name in ((1, "mix3, controls per row"), (4, "mix3, controls per 4 rows")):
        result = {**_FITS, "multipliers": "mix3", "control_fanout": fanout}
        cells = [c.strip() for c in mxu_table([result]).splitlines()[2].strip("|").split("|")]
        assert cells[2] == name


def test_parse_run():
    from tpu.bench.fpga import parse_run
    assert parse_run("ulx3s-85f:16x16:band3") == ("ulx3s-85f", 16, 16, "band3")
    assert parse_run("icebreaker:4x4") == ("icebreaker", 4, 4, "dsp")
    with pytest.raises(ValueError, match="is not BOARD:ROWSxCOLS"):
        parse_run("ulx3s-85f:16x16:band4")
    with pytest.raises(ValueError, match="unknown board 'arty'"):
        parse_run("arty:2x2")
