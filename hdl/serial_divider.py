"""A small restoring divider: one quotient bit per cycle."""

from amaranth import *
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out


__all__ = ["SerialDivider"]


class SerialDivider(wiring.Component):
    """Unsigned ``dividend // divisor`` and ``dividend % divisor`` in ``width`` cycles.

    The instruction decoder needs a few divisions (convolution and pooling
    geometry) for its range checks; they are rare, so one slow, small divider
    serves them all.

    Members
    -------
    start : In(1)
        Latch ``dividend`` and ``divisor`` and begin; ignored while busy.
    dividend : In(width)
    divisor : In(width)
        Must not be zero (the quotient is then all ones).
    busy : Out(1)
    done : Out(1)
        High for one cycle when ``quotient`` and ``remainder`` are valid; they
        stay valid until the next start.
    quotient, remainder : Out(width)
    """

    def __init__(self, width):
        self._width = width
        super().__init__({
            "start":     In(1),
            "dividend":  In(width),
            "divisor":   In(width),
            "busy":      Out(1),
            "done":      Out(1),
            "quotient":  Out(width),
            "remainder": Out(width),
        })

    def elaborate(self, platform):
        m = Module()
        w = self._width
        divisor = Signal(w)
        count = Signal(range(w + 1))
        rem = Signal(w + 1)
        quo = Signal(w)
        m.d.comb += [
            self.busy.eq(count != 0),
            self.quotient.eq(quo),
            self.remainder.eq(rem[:w]),
        ]
        m.d.sync += self.done.eq(0)
        with m.If(count == 0):
            with m.If(self.start):
                m.d.sync += [divisor.eq(self.divisor), quo.eq(self.dividend), rem.eq(0),
                             count.eq(w)]
        with m.Else():
            shifted = Cat(quo[w - 1], rem[:w])
            fits = shifted >= divisor
            m.d.sync += [
                rem.eq(Mux(fits, shifted - divisor, shifted)),
                quo.eq(Cat(fits, quo[:w - 1])),
                count.eq(count - 1),
            ]
            with m.If(count == 1):
                m.d.sync += self.done.eq(1)
        return m
