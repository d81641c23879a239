"""Whether a host byte span lies inside one DMA window."""

from amaranth import *


__all__ = ["inside_a_window"]


def inside_a_window(m, windows, addr, nbytes):
    """A signal that is 1 when host bytes [addr, addr + nbytes) lie inside one
    of `windows` (an array of ``{base, size}``, size 0 closed). An empty span
    is always inside. Spans and windows are compared in 65 bits, so neither may
    wrap past 2**64 unnoticed."""
    end = Signal(66)
    m.d.comb += end.eq(addr + nbytes)
    hits = []
    for window in windows:
        hit = Signal()
        m.d.comb += hit.eq((window.size != 0) & (addr >= window.base) &
                           (end <= window.base + window.size))
        hits.append(hit)
    inside = Signal()
    m.d.comb += inside.eq((nbytes == 0) | Cat(*hits).any())
    return inside
