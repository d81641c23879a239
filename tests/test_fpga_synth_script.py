"""The yosys script the FPGA flow writes: on the ECP5, classic abc maps the
LUTs in place of synth_ecp5's abc9, which fails an assertion on large arrays."""

import pytest

from tpu.fpga.build import BOARDS, _platform, synth_overrides
from tpu.fpga.mxu_top import MxuBenchTop


def _script(board, tmp_path, synth_opts=""):
    overrides = synth_overrides(board, "mxu", synth_opts)
    plan = _platform(BOARDS[board]).prepare(MxuBenchTop(rows=1, cols=1), "mxu", **overrides)
    plan.extract(tmp_path)
    return [line.strip() for line in (tmp_path / "mxu.ys").read_text().splitlines()
            if line.strip() and not line.lstrip().startswith("#")]


@pytest.mark.parametrize("synth_opts", ["", "-nodsp"])
def test_ecp5_maps_luts_with_classic_abc(synth_opts, tmp_path):
    pytest.importorskip("amaranth_boards")
    lines = _script("ulx3s-85f", tmp_path, synth_opts)
    first = lines.index(" ".join(f"synth_ecp5 {synth_opts} -run :map_luts -top mxu".split()))
    assert lines[first + 1:first + 5] == [
        "techmap -map +/lattice/latches_map.v", "abc -dress -lut 4:7", "clean",
        "synth_ecp5 -top mxu -run map_cells:"]
    assert not any("abc9" in line for line in lines)
    assert lines[-1] == "write_json mxu.json"


def test_ice40_keeps_its_own_flow(tmp_path):
    pytest.importorskip("amaranth_boards")
    lines = _script("icebreaker", tmp_path, "-dsp")
    synth = [line for line in lines if line.startswith("synth_")]
    assert synth == ["synth_ice40 -dsp -top mxu"]
    assert "-run" not in " ".join(lines)
    # Instantiated SB_MAC16s (the array's dual 8 x 8 ones) hidden from ice40_dsp around it.
    at = lines.index("synth_ice40 -dsp -top mxu")
    assert lines[at - 1] == "chtype -map SB_MAC16 TPU_SB_MAC16"
    assert lines[at + 1] == "chtype -map TPU_SB_MAC16 SB_MAC16"
