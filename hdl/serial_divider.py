"""A small restoring divider: one quotient bit per cycle, from the dividend's
leading one or over a fixed number of bits."""

from amaranth import *
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out


__all__ = ["SerialDivider", "divider_cycles"]


def divider_cycles(dividend, length=None):
    """The cycles `SerialDivider` (of `length`, if it has one) is busy
    dividing `dividend` (by anything): ``done`` comes in the cycle after
    them."""
    return length if length is not None else max(1, int(dividend).bit_length())


class SerialDivider(wiring.Component):
    """Unsigned ``dividend // divisor`` and ``dividend % divisor`` in
    `divider_cycles` ``(dividend) = max(1, dividend.bit_length())`` cycles.

    The instruction decoder needs a few divisions (convolution and pooling
    geometry) for its range checks; one small divider serves them all. Their
    dividends are mostly small: the division starts at the dividend's
    leading one (the bits above it are quotient zeros), so that it takes as
    many cycles as the dividend has bits, not `width`.

    Members
    -------
    start : In(1)
        Latch ``dividend`` and ``divisor`` and begin; ignored while busy.
    dividend : In(width)
    divisor : In(width)
        Zero gives the quotient all ones and the remainder ``dividend`` (as
        a full-width restoring division would), in the same cycles.
    busy : Out(1)
        High for the `divider_cycles` after ``start``.
    done : Out(1)
        High for one cycle, the cycle after the last busy one, when
        ``quotient`` and ``remainder`` are valid; they stay valid until the
        next start.
    quotient : Out(width)
    remainder : Out(divisor_width)

    Parameters
    ----------
    width : int
        Width of the dividend and the quotient.
    divisor_width : int
        Width of the divisor (`width` unless given). The remainder is below
        the divisor, so it and the running remainder are this narrow: the
        activation unit divides 34-bit dividends by pooling counts of 13
        bits. A zero divisor still gives the all-ones quotient; its
        remainder is then the dividend's low `divisor_width` bits.
    length : int
        Every division takes exactly `length` cycles, over the dividend's
        low `length` bits (the bits above are taken as zero), and the
        divisor holds still from ``start`` to ``done``. The dividend then
        shifts out of one register as the quotient shifts in (no separate
        quotient, no bit selection, no search for the leading one, no
        divisor register); the quotient's bits from `length` up are zero.
        A zero divisor gives the all-ones quotient (of `length` bits) and
        the dividend's low bits as remainder, as without `length`. The
        small activation unit's reciprocal, ``(2**32 + count - 1) //
        count``, has 33 bits for every count (``length=33``); the small
        decoder divides 24-bit dividends in 24 cycles (``length=24``),
        where a search for the leading one and the selection of each next
        bit cost more logic than the cycles they save.
    complemented : bool
        ``divisor`` is given as its complement (``~divisor``; all ones for
        a zero divisor), which the caller registers at no cost in the LUT4s
        that choose it: each step's compare and subtract is then an
        addition, ``shifted + ~divisor + 1``, whose carry out says the
        divisor fits, with no LUT4 a bit inverting the divisor into the
        carry chain.
    """

    def __init__(self, width, *, divisor_width=None, length=None, complemented=False):
        if divisor_width is None:
            divisor_width = width
        if not 1 <= divisor_width <= width:
            raise ValueError(f"divisor_width must be in 1..{width}, not {divisor_width!r}")
        if length is not None and not 1 <= length <= width:
            raise ValueError(f"length must be in 1..{width}, not {length!r}")
        self._width = width
        self._divisor_width = divisor_width
        self._length = length
        self._complemented = complemented
        super().__init__({
            "start":     In(1),
            "dividend":  In(width),
            "divisor":   In(divisor_width),
            "busy":      Out(1),
            "done":      Out(1),
            "quotient":  Out(width),
            "remainder": Out(divisor_width),
        })

    def elaborate(self, platform):
        if self._length is not None:
            return self._elaborate_fixed()
        m = Module()
        w, dw = self._width, self._divisor_width
        dividend = Signal(w)
        divisor = Signal(dw)
        count = Signal(range(w + 1))
        rem = Signal(dw + 1)
        quo = Signal(w)
        # The dividend bit the next step shifts in, selected a cycle ahead so
        # that the selection is not in series with the compare and subtract.
        bit = Signal()
        m.d.comb += [
            self.busy.eq(count != 0),
            self.quotient.eq(quo),
            self.remainder.eq(rem[:dw]),
        ]

        # The dividend's length in bits, at least 1 (a priority encoder).
        length = Signal(range(w + 1))
        m.d.comb += length.eq(1)
        for i in range(1, w):
            with m.If(self.dividend[i]):
                m.d.comb += length.eq(i + 1)

        m.d.sync += self.done.eq(0)
        with m.If(count == 0):
            with m.If(self.start):
                # The quotient shifts in from bit 0; the bits above the
                # dividend's length keep their start value: zero, or one for
                # a zero divisor (as every step of a longer division would
                # have found that the divisor fits).
                m.d.sync += [
                    dividend.eq(self.dividend), divisor.eq(self.divisor), rem.eq(0),
                    quo.eq(Mux(self.divisor == (((1 << dw) - 1) if self._complemented else 0), (1 << w) - 1, 0)),
                    bit.eq(self.dividend != 0),     # its leading one
                    count.eq(length),
                ]
        with m.Else():
            shifted = Cat(bit, rem[:dw])
            fits, difference = self._step(shifted, divisor)
            m.d.sync += [
                rem.eq(Mux(fits, difference, shifted)),
                quo.eq(Cat(fits, quo[:w - 1])),
                count.eq(count - 1),
            ]
            with m.If(count == 1):
                m.d.sync += self.done.eq(1)
            with m.Else():
                m.d.sync += bit.eq(dividend.bit_select((count - 2)[:len(count)], 1))
        return m

    def _step(self, shifted, divisor):
        """(whether `divisor` fits in `shifted`, their difference)."""
        dw = self._divisor_width
        if self._complemented:
            # shifted + ~divisor + 1 on dw + 1 bits, the + 1 as the carry
            # out of a low bit of ones; its carry out of dw + 1 bits is
            # shifted >= divisor.
            total = Cat(C(1, 1), shifted) + Cat(C(1, 1), divisor, C(1, 1))
            return total[dw + 2], total[1:dw + 2]
        return shifted >= divisor, shifted - divisor

    def _elaborate_fixed(self):
        m = Module()
        n, dw = self._length, self._divisor_width
        # The dividend's bits not yet divided, most significant first, and
        # below them the quotient's bits found so far.
        bits = Signal(n)
        count = Signal(range(n + 1))
        rem = Signal(dw + 1)
        m.d.comb += [
            self.busy.eq(count != 0),
            self.quotient.eq(bits),
            self.remainder.eq(rem[:dw]),
        ]
        m.d.sync += self.done.eq(0)
        with m.If(count == 0):
            with m.If(self.start):
                m.d.sync += [bits.eq(self.dividend[:n]), rem.eq(0), count.eq(n)]
        with m.Else():
            shifted = Cat(bits[n - 1], rem[:dw])
            fits, difference = self._step(shifted, self.divisor)
            m.d.sync += [
                rem.eq(Mux(fits, difference, shifted)),
                bits.eq(Cat(fits, bits[:n - 1])),
                count.eq(count - 1),
            ]
            with m.If(count == 1):
                m.d.sync += self.done.eq(1)
        return m
