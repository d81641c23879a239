"""The iCE40's PLL (``SB_PLL40_PAD``): a chip clock made from a board oscillator.

`ice40_pll_settings` picks the dividers as Project IceStorm's ``icepll``
does, with the simple feedback path (``FEEDBACK_PATH "SIMPLE"``):

    f_pfd = f_in / (DIVR + 1),   f_vco = f_pfd * (DIVF + 1),   f_out = f_vco / 2**DIVQ,

within the iCE40's ranges (Lattice TN1251, iCE40 sysCLOCK PLL; the ranges
``icepll`` checks): input 10 to 133 MHz, phase detector input 10 to 133 MHz,
VCO 533 to 1066 MHz, output 16 to 275 MHz; of the settings nearest the
frequency asked for, the first ``icepll`` meets (smallest DIVR, DIVF, DIVQ).
The loop filter's range follows the phase detector's frequency.

`ICE40PLL` instantiates the block fed from its pad: on the iCEBreaker the
12 MHz oscillator is on pin 35 (``IOT_46b_G0``), the UP5K's PLL input pad,
so ``SB_PLL40_PAD`` takes it without a global buffer between.
"""

from dataclasses import dataclass

from amaranth import *
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .pll_frequencies import check_frequencies, check_nearest, in_range


__all__ = ["ICE40PLLSettings", "ice40_pll_settings", "ice40_pll_outputs", "ICE40PLL", "LockReset",
           "ICE40_PLL_RANGES_HZ", "ICE40_TOLERANCE"]

#: (lowest, highest) frequency in Hz of each point of the PLL.
ICE40_PLL_RANGES_HZ = {
    "input": (10e6, 133e6),
    "pfd": (10e6, 133e6),
    "vco": (533e6, 1066e6),
    "output": (16e6, 275e6),
}
#: The largest value each divider takes (DIVQ from 1 in simple feedback).
_DIVR_MAX, _DIVF_MAX, _DIVQ_MAX = 15, 127, 6

#: How far the output may be from the frequency asked for (a fraction). From
#: 12 MHz the phase detector runs at 12 MHz only (DIVR 0), so the outputs
#: are 12 MHz x (DIVF + 1) / 2**DIVQ: steps of 0.375 MHz from 16.7 to 33 MHz,
#: 0.75 MHz to 66 MHz; 1% reaches nearly every frequency in range, where the
#: ECP5's 0.1% (`tpu.fpga.ecp5_pll.TOLERANCE`) would refuse most.
ICE40_TOLERANCE = 1e-2


@dataclass(frozen=True)
class ICE40PLLSettings:
    """An ``SB_PLL40_PAD`` with simple feedback set up to make `output_hz`
    from `input_hz`."""
    input_hz: float
    divr: int
    divf: int
    divq: int

    @property
    def pfd_hz(self):
        return self.input_hz / (self.divr + 1)

    @property
    def vco_hz(self):
        return self.pfd_hz * (self.divf + 1)

    @property
    def output_hz(self):
        return self.vco_hz / 2 ** self.divq

    @property
    def filter_range(self):
        # icepll's choice from the phase detector's frequency (MHz).
        pfd = self.pfd_hz / 1e6
        return 1 if pfd < 17 else 2 if pfd < 26 else 3 if pfd < 44 else 4 if pfd < 66 else \
            5 if pfd < 101 else 6

    def as_dict(self):
        """The settings as a build report records them."""
        return {"primitive": "SB_PLL40_PAD", "divr": self.divr, "divf": self.divf, "divq": self.divq,
                "filter_range": self.filter_range, "vco_mhz": self.vco_hz / 1e6}


def _in_range(point, hz):
    return in_range(ICE40_PLL_RANGES_HZ, point, hz)


def _all_settings(input_hz):
    """Every setting in range from `input_hz`, in icepll's search order."""
    for divr in range(_DIVR_MAX + 1):
        if not _in_range("pfd", input_hz / (divr + 1)):
            continue
        for divf in range(_DIVF_MAX + 1):
            if not _in_range("vco", input_hz / (divr + 1) * (divf + 1)):
                continue
            for divq in range(1, _DIVQ_MAX + 1):
                yield ICE40PLLSettings(input_hz, divr, divf, divq)


def ice40_pll_settings(input_hz, output_hz):
    """The `ICE40PLLSettings` that make `output_hz` from `input_hz`, or
    ValueError (one line) when a frequency is out of the PLL's range or no
    settings come within `ICE40_TOLERANCE` of it (the message names the
    nearest it can make)."""
    check_frequencies("iCE40", ICE40_PLL_RANGES_HZ, input_hz, output_hz)
    best = None
    for settings in _all_settings(input_hz):
        # Strictly nearer only, as icepll: the first of equals wins.
        if best is None or abs(settings.output_hz - output_hz) < abs(best.output_hz - output_hz):
            best = settings
    return check_nearest("iCE40", best, input_hz, output_hz, ICE40_TOLERANCE,
                         f" within {ICE40_TOLERANCE:.0%}")


def ice40_pll_outputs(input_hz):
    """Every frequency (Hz, ascending) the PLL makes exactly from `input_hz`
    (`ice40_pll_settings` accepts each of them)."""
    return sorted({s.output_hz for s in _all_settings(input_hz) if _in_range("output", s.output_hz)})


class ICE40PLL(Elaboratable):
    """An ``SB_PLL40_PAD`` with `settings`: ``pad`` (the oscillator's pin, an
    I/O port) in, ``clk_out`` (through the global network) and ``locked`` out."""

    def __init__(self, settings, pad):
        self.settings = settings
        self.pad = pad
        self.clk_out = Signal()
        self.locked = Signal()

    def elaborate(self, platform):
        s = self.settings
        m = Module()
        m.submodules.pll = Instance(
            "SB_PLL40_PAD",
            p_FEEDBACK_PATH="SIMPLE", p_PLLOUT_SELECT="GENCLK",
            p_DIVR=C(s.divr, 4), p_DIVF=C(s.divf, 7), p_DIVQ=C(s.divq, 3),
            p_FILTER_RANGE=C(s.filter_range, 3),
            i_PACKAGEPIN=self.pad, i_RESETB=1, i_BYPASS=0,
            o_PLLOUTGLOBAL=self.clk_out, o_LOCK=self.locked)
        return m


class LockReset(wiring.Component):
    """Releases a reset `delay` cycles after a PLL has locked, in the PLL's
    clock: ``locked`` (the PLL's LOCK, asynchronous to it) goes through two
    flip-flops; ``ready`` rises `delay` cycles after that copy rose (the
    iCE40's block RAMs read zeros for about 3 us after configuration) and
    falls in the cycle after it falls (the PLL lost lock).

    Ports
    -----
    locked : In(1)
    ready : Out(1)
    """

    def __init__(self, delay):
        if not isinstance(delay, int) or delay < 1:
            self._MustUse__silence = True   # refused, so never elaborated
            raise ValueError(f"the reset delay must be a positive number of cycles, not {delay!r}")
        self._delay = delay
        super().__init__({"locked": In(1), "ready": Out(1)})

    def elaborate(self, platform):
        m = Module()
        locked = Signal(2)
        timer = Signal(range(self._delay + 1))
        m.d.sync += locked.eq(Cat(self.locked, locked[0]))
        with m.If(~locked[1]):
            m.d.sync += [timer.eq(0), self.ready.eq(0)]
        with m.Elif(timer == self._delay):
            m.d.sync += self.ready.eq(1)
        with m.Else():
            m.d.sync += timer.eq(timer + 1)
        return m
