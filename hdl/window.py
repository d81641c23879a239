"""DMA windows: the host bytes the chip may touch, and the check against them."""

from amaranth import *
from amaranth.lib import data


__all__ = ["DmaWindow", "DmaWindows", "inside_a_window"]


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
