"""DMA windows: the host bytes the chip may touch, and the check against them."""

from amaranth import *
from amaranth.lib import data


__all__ = ["DmaWindow", "DmaWindows", "inside_a_window", "WindowLimits", "at_most"]


def DmaWindow(addr_bits=64):
    """A DMA window: host bytes ``[base, base + size)``; ``size`` 0: closed.
    Both fields are `addr_bits` wide (``TPUConfig.host_addr_bits``)."""
    return data.StructLayout({"base": addr_bits, "size": addr_bits})


def DmaWindows(config):
    """The `DmaWindow` of each of the chip's ``config.dma_windows`` windows."""
    return data.ArrayLayout(DmaWindow(config.host_addr_bits), config.dma_windows)


def inside_a_window(m, windows, addr, nbytes):
    """A signal that is 1 when host bytes [addr, addr + nbytes) lie inside one
    of `windows` (a `DmaWindows` view). An empty span is always inside. Spans
    and windows are compared in 65 bits, so neither may wrap past 2**64
    unnoticed; with windows narrower than 64 bits, a span must also end at or
    below 2**width, since no wider address reaches the host."""
    end = Signal(66)
    m.d.comb += end.eq(addr + nbytes)
    hits = []
    for window in windows:
        hit = Signal()
        m.d.comb += hit.eq((window.size != 0) & (addr >= window.base) &
                           (end <= window.base + window.size))
        hits.append(hit)
    width = len(windows[0].base)
    reachable = end <= (1 << width) if width < 64 else C(1)
    inside = Signal()
    m.d.comb += inside.eq((nbytes == 0) | (Cat(*hits).any() & reachable))
    return inside


class WindowLimits:
    """The end of each of `windows` (a `DmaWindows` view), registered a cycle
    after the windows, so that a span's check against them is one comparison
    of registers and no add: ``limit`` is ``min(base + size, 2**width)`` (a
    span must end at or below both). Built into `m` with ``m.d.sync``; a
    window changed in one cycle has its limit from the next.

    Then a span ``[addr, end)`` of `addr` registered beside ``above_base``
    (`above_base`) and `end` registered is inside window ``i`` when
    ``above_base[i] & (end <= limit[i])`` (`inside`).

    With ``exact`` the limit is ``base + size`` itself and ``above_base``
    does not test ``size != 0``: a check of a span that is never empty and
    that tests ``end <= 2**width`` apart (`end_beyond`). Such a span ends
    above its start, so it is inside no closed window (its end above the
    base); the clamp's multiplexer and the size's OR are not built. Its
    base comparison is the borrow of a subtraction (`at_most`), which Yosys
    maps on the iCE40 to a LUT4 and a carry a bit where it maps a ``<=`` to
    nearly two LUT4s a bit; and the span is registered as the complement
    of its last byte (`span_mark`), so that its end comparison is the carry
    out of an addition of two registers: carry cells alone, as no operand
    needs inverting and no sum bit is read."""

    def __init__(self, m, windows, *, exact=False):
        width = len(windows[0].base)
        self.width = width
        self._exact = exact
        self.limit = [Signal(width + 1, name=f"win{i}_limit") for i in range(len(windows))]
        for window, limit in zip(windows, self.limit):
            end = Signal(width + 1, name=f"{limit.name}_sum")
            m.d.comb += end.eq(window.base + window.size)
            if exact:
                m.d.sync += limit.eq(end)
            else:
                # Above 2**width when bit `width` is set and any bit below it.
                m.d.sync += limit.eq(Mux(end[width] & end[:width].any(), 1 << width, end))
        self._windows = windows

    def above_base(self, addr):
        """Per window: open (``size != 0``; not with ``exact``), and `addr`
        at or above its base (to register), from the windows of this cycle,
        so that it may be taken in the cycle the windows are first
        sampled."""
        if self._exact:
            return Cat(*[at_most(window.base, addr) for window in self._windows])
        return Cat(*[(window.size != 0) & (window.base <= addr) for window in self._windows])

    def span_mark(self, addr, last):
        """With ``exact``: what to register for the span of bytes ``[addr,
        addr + last]`` (`addr` below ``2**width``, `last` a byte count less
        one, below ``2**width``): ``~(addr + last)`` on ``width + 1`` bits,
        the sum's LUT4s giving its complement at no cost."""
        return ~(Value.cast(addr) + Value.cast(last))[:self.width + 1]

    def end_beyond(self, mark):
        """With ``exact``: 1 when the span of `mark` (`span_mark`, registered)
        ends above ``2**width``, where no window reaches: its last byte at or
        above ``2**width``, bit `width` of the sum (clear in the mark)."""
        return ~Value.cast(mark)[self.width]

    def inside(self, above_base, end):
        """1 when the span ending at `end` (exclusive, registered; with
        ``exact`` its `span_mark`) and starting where `above_base`
        (registered) was taken lies inside one window: an empty span must be
        handled apart."""
        if self._exact:
            # `end` is a `span_mark`: the last byte below the limit, ``limit
            # + ~last`` carrying out of ``width + 1`` bits.
            return Cat(*[above_base[i] & (limit + end)[self.width + 1] for i, limit in enumerate(self.limit)]).any()
        return Cat(*[above_base[i] & (end <= limit) for i, limit in enumerate(self.limit)]).any()


def at_most(a, b):
    """``a <= b`` of unsigned `a` and `b` as the sign of ``b - a`` (no borrow
    out of the subtraction)."""
    diff = Value.cast(b) - Value.cast(a)
    return ~diff[-1]
