"""The banded floorplan of the array's DSP PEs on the ECP5-85F: which PEs
multiply on DSP blocks, on which sites, and that nextpnr places them there."""

import json
import re

import pytest

from tpu.fpga.build import build_mxu, missing_fpga_tools
from tpu.fpga.ecp5_floorplan import DSP_LINES, band_rows, banded_multipliers, mult18_sites
from tpu.hdl.multiplier import ECP5PipelinedMultiplier, PipelinedLUTMultiplier


def _x(site):
    return int(re.match(r"X(\d+)/", site).group(1))


def test_sites_of_a_line():
    for y in DSP_LINES:
        sites = mult18_sites(y)
        assert len(sites) == len(set(sites)) == 52
        assert all(site.endswith(("MULT18_0", "MULT18_1", "MULT18_4", "MULT18_5"))
                   and f"/Y{y}/" in site for site in sites)
        assert [_x(site) for site in sites] == sorted(_x(site) for site in sites)
    assert 3 * 52 == 156    # every MULT18X18D of the device
    with pytest.raises(ValueError, match="no line of DSP blocks at Y=11"):
        mult18_sites(11)


def test_band_rows():
    assert band_rows(16, 16) == [[0, 1, 2], [5, 6, 7], [10, 11, 12]]
    assert band_rows(20, 20) == [[0, 1], [6, 7], [13, 14]]
    assert band_rows(3, 3) == [[0], [1], [2]]
    for rows, cols in ((16, 16), (20, 20), (12, 17), (9, 52)):
        bands = band_rows(rows, cols)
        flat = [row for band in bands for row in band]
        assert flat == sorted(set(flat)) and flat[-1] < rows
        assert all(band == list(range(band[0], band[0] + len(band))) for band in bands)
        assert len(bands[0]) * cols <= 52
    with pytest.raises(ValueError, match="a 2x2 array cannot be banded"):
        band_rows(2, 2)
    with pytest.raises(ValueError, match="a 8x53 array cannot be banded"):
        band_rows(8, 53)
    with pytest.raises(ValueError, match="rows must be a positive int"):
        band_rows(0, 4)


def test_banded_multipliers_16x16():
    make = banded_multipliers(16, 16)
    bands = band_rows(16, 16)
    pes = {(row, col): make(row, col) for row in range(16) for col in range(16)}
    hard = {key: pe for key, pe in pes.items() if isinstance(pe, ECP5PipelinedMultiplier)}
    assert set(hard) == {(row, col) for band in bands for row in band for col in range(16)}
    assert all(isinstance(pe, PipelinedLUTMultiplier) for key, pe in pes.items()
               if key not in hard)
    sites = [pe.site for pe in hard.values()]
    assert len(set(sites)) == len(sites) == 144
    for line, band in zip(DSP_LINES, bands):
        for row in band:
            row_sites = [hard[row, col].site for col in range(16)]
            assert all(f"/Y{line}/" in site for site in row_sites)
            # Activations move right: so do a row's sites.
            assert [_x(site) for site in row_sites] == sorted(_x(site) for site in row_sites)
        for col in range(16):
            # A column's PEs within a band are on adjacent sites of the line.
            xs = [_x(hard[row, col].site) for row in band]
            assert max(xs) - min(xs) <= 9
    # Elaboratables made for inspection only.
    for pe in pes.values():
        pe._MustUse__silence = True


@pytest.mark.fpga
def test_nextpnr_places_the_bands(tmp_path):
    reason = missing_fpga_tools("ulx3s-85f")
    if reason:
        pytest.skip(reason)
    result = build_mxu("ulx3s-85f", 3, 3, build_dir=tmp_path, multipliers="band3")
    assert result["fits"], result.get("reason")
    assert result["dsp_blocks"]["used"] == 9
    netlist = json.loads((tmp_path / "mxu_3x3.json").read_text())
    bels = sorted(cell["attributes"]["BEL"] for module in netlist["modules"].values()
                  for cell in module["cells"].values() if cell["type"] == "MULT18X18D")
    assert bels == sorted(site for y in DSP_LINES
                          for site in (mult18_sites(y)[0], mult18_sites(y)[17],
                                       mult18_sites(y)[34]))
    # The 4 pins and the 9 blocks: nextpnr took every BEL as a constraint.
    assert "Placed 13 cells based on constraints." in (tmp_path / "mxu_3x3.tim").read_text()


def test_a_site_sets_a_multiplier_apart():
    plain, placed = ECP5PipelinedMultiplier(), ECP5PipelinedMultiplier("X4/Y10/MULT18_0")
    # An array row's Verilog module is named after these keys: rows whose
    # blocks sit on different sites must not share one module.
    assert plain.module_key == "ECP5PipelinedMultiplier"
    assert placed.module_key == "ECP5PipelinedMultiplier@X4/Y10/MULT18_0"
    plain._MustUse__silence = placed._MustUse__silence = True
    with pytest.raises(TypeError, match="site must be None or a BEL name, not 3"):
        ECP5PipelinedMultiplier(3)
