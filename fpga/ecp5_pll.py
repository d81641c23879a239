"""The ECP5's PLL (``EHXPLLL``): a chip clock made from a board oscillator.

`ecp5_pll_settings` picks the dividers as Project Trellis's ``ecppll`` does:
the output is CLKOP, fed back to the PLL (``FEEDBK_PATH "CLKOP"``), so

    f_out = f_in / CLKI_DIV * CLKFB_DIV,   f_vco = f_out * CLKOP_DIV,

within the ECP5's ranges (data sheet FPGA-DS-02012, sysCLOCK PLL timing):
input 8 to 400 MHz, phase detector input (f_in / CLKI_DIV) 3.125 to
400 MHz, VCO 400 to 800 MHz, output 3.125 to 400 MHz; of the closest
settings, the one whose VCO is nearest 600 MHz. `ECP5PLL` instantiates the
block with them.
"""

from dataclasses import dataclass

from amaranth import *

from .pll_frequencies import check_frequencies, check_nearest, in_range


__all__ = ["PLLSettings", "ecp5_pll_settings", "ecp5_pll_outputs", "ECP5PLL", "PLL_RANGES_HZ"]

#: (lowest, highest) frequency in Hz of each point of the PLL.
PLL_RANGES_HZ = {
    "input": (8e6, 400e6),
    "pfd": (3.125e6, 400e6),
    "vco": (400e6, 800e6),
    "output": (3.125e6, 400e6),
}
#: The largest value each divider takes.
_CLKI_DIV_MAX, _CLKFB_DIV_MAX, _CLKOP_DIV_MAX = 128, 80, 128

#: How far the output may be from the frequency asked for (a fraction).
TOLERANCE = 1e-3


@dataclass(frozen=True)
class PLLSettings:
    """An ``EHXPLLL`` set up to make `output_hz` from `input_hz`."""
    input_hz: float
    clki_div: int
    clkfb_div: int
    clkop_div: int

    @property
    def pfd_hz(self):
        return self.input_hz / self.clki_div

    @property
    def output_hz(self):
        return self.pfd_hz * self.clkfb_div

    @property
    def vco_hz(self):
        return self.output_hz * self.clkop_div

    def as_dict(self):
        """The settings as a build report records them."""
        return {"primitive": "EHXPLLL", "clki_div": self.clki_div, "clkfb_div": self.clkfb_div,
                "clkop_div": self.clkop_div, "vco_mhz": self.vco_hz / 1e6}

    @property
    def clkop_cphase(self):
        # CLKOP shifted by half its period in VCO cycles, as Lattice's tools
        # and ecppll set it.
        return self.clkop_div // 2


def _in_range(point, hz):
    return in_range(PLL_RANGES_HZ, point, hz)


def ecp5_pll_settings(input_hz, output_hz):
    """The `PLLSettings` that make `output_hz` from `input_hz`, or ValueError
    (one line) when a frequency is out of the PLL's range or no settings come
    within 0.1% of it (the message names the nearest it can make)."""
    check_frequencies("ECP5", PLL_RANGES_HZ, input_hz, output_hz)
    best, best_key = None, None
    for clki_div in range(1, _CLKI_DIV_MAX + 1):
        if not _in_range("pfd", input_hz / clki_div):
            continue
        for clkfb_div in range(1, _CLKFB_DIV_MAX + 1):
            out = input_hz / clki_div * clkfb_div
            if not _in_range("output", out):
                continue
            # The output divider whose VCO is nearest 600 MHz, if one is in range.
            low, high = (int(-(-PLL_RANGES_HZ["vco"][0] // out)),
                         int(PLL_RANGES_HZ["vco"][1] // out))
            clkop_div = min(max(round(600e6 / out), low), high, _CLKOP_DIV_MAX)
            settings = PLLSettings(input_hz, clki_div, clkfb_div, clkop_div)
            if clkop_div < max(low, 1) or not _in_range("vco", settings.vco_hz):
                continue
            key = (abs(out - output_hz), abs(settings.vco_hz - 600e6))
            if best_key is None or key < best_key:
                best, best_key = settings, key
    return check_nearest("ECP5", best, input_hz, output_hz, TOLERANCE)


def ecp5_pll_outputs(input_hz):
    """Every frequency (Hz, ascending) the PLL makes exactly from `input_hz`
    with its output fed back (`ecp5_pll_settings` accepts each of them)."""
    outputs = set()
    for clki_div in range(1, _CLKI_DIV_MAX + 1):
        if not _in_range("pfd", input_hz / clki_div):
            continue
        for clkfb_div in range(1, _CLKFB_DIV_MAX + 1):
            out = input_hz / clki_div * clkfb_div
            # An output divider puts the VCO in range for any output within the
            # output range: 400 / 128 MHz is below the lowest output.
            if _in_range("output", out) and PLL_RANGES_HZ["vco"][1] // out >= 1:
                outputs.add(out)
    return sorted(outputs)


class ECP5PLL(Elaboratable):
    """An ``EHXPLLL`` with `settings`: ``clk_in`` (the oscillator, from its
    pin) in, ``clk_out`` and ``locked`` out."""

    def __init__(self, settings):
        self.settings = settings
        self.clk_in = Signal()
        self.clk_out = Signal()
        self.locked = Signal()

    def elaborate(self, platform):
        s = self.settings
        m = Module()
        m.submodules.pll = Instance(
            "EHXPLLL",
            # Read by Lattice's tools; nextpnr derives the output's timing
            # constraint from the input's and the dividers.
            a_FREQUENCY_PIN_CLKI=f"{s.input_hz / 1e6:g}",
            a_FREQUENCY_PIN_CLKOP=f"{s.output_hz / 1e6:g}",
            a_ICP_CURRENT="12", a_LPF_RESISTOR="8", a_MFG_ENABLE_FILTEROPAMP="1",
            a_MFG_GMCREF_SEL="2",
            p_PLLRST_ENA="DISABLED", p_INTFB_WAKE="DISABLED", p_STDBY_ENABLE="DISABLED",
            p_DPHASE_SOURCE="DISABLED",
            p_OUTDIVIDER_MUXA="DIVA", p_OUTDIVIDER_MUXB="DIVB", p_OUTDIVIDER_MUXC="DIVC",
            p_OUTDIVIDER_MUXD="DIVD",
            p_CLKI_DIV=s.clki_div, p_CLKFB_DIV=s.clkfb_div,
            p_CLKOP_ENABLE="ENABLED", p_CLKOP_DIV=s.clkop_div,
            p_CLKOP_CPHASE=s.clkop_cphase, p_CLKOP_FPHASE=0,
            p_FEEDBK_PATH="CLKOP",
            i_RST=0, i_STDBY=0, i_CLKI=self.clk_in, i_CLKFB=self.clk_out,
            i_PHASESEL0=0, i_PHASESEL1=0, i_PHASEDIR=1, i_PHASESTEP=1, i_PHASELOADREG=1,
            i_PLLWAKESYNC=0, i_ENCLKOP=0,
            o_CLKOP=self.clk_out, o_LOCK=self.locked)
        return m
