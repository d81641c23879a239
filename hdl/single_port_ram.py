"""A memory of one access a cycle, in the iCE40 UP5K's SPRAM where it can be.

The UP5K has 4 SB_SPRAM256KA (16K x 16 bits each, one port) beside its 30
EBRs (256 x 16, two ports); yosys does not infer them, so a memory that
never reads and writes in the same cycle (the matrix part's unified buffer)
instantiates them directly when built for the iCE40 (`tpu.hdl.device_family`).
"""

from amaranth import *
from amaranth.lib import data

from .device_family import is_ice40
from .ram import Ram


__all__ = ["SinglePortRam", "SPRAM_DEPTH", "SPRAM_WIDTH"]

SPRAM_DEPTH = 16384
SPRAM_WIDTH = 16


class SinglePortRam(Elaboratable):
    """`depth` words of `shape`, zero at power-on except in SPRAM (whose
    power-on contents are undefined: write a word before reading it), with
    a write (``w_en``, ``w_addr``, ``w_data``) or a read (``r_en``,
    ``r_addr``; ``r_data`` the next cycle) each cycle, never both.

    For an iCE40 and `depth` up to 16384: ``ceil(width / 16)``
    SB_SPRAM256KA side by side. Elsewhere: `Ram`, one write and one read port.
    ``r_data`` is only valid the cycle after a read.
    """

    def __init__(self, *, shape, depth):
        self._shape = shape
        self._depth = depth
        self.w_en = Signal()
        self.w_addr = Signal(range(depth))
        self.w_data = Signal(shape)
        self.r_en = Signal()
        self.r_addr = Signal(range(depth))
        self.r_data = Signal(shape)

    def elaborate(self, platform):
        m = Module()
        width = Shape.cast(data.Layout.cast(self._shape) if isinstance(self._shape, data.Layout)
                           else self._shape).width
        if is_ice40(platform) and self._depth <= SPRAM_DEPTH:
            address = Signal(14)
            m.d.comb += address.eq(Mux(self.w_en, self.w_addr, self.r_addr))
            written = Value.cast(self.w_data)
            read = Value.cast(self.r_data)
            for n, lsb in enumerate(range(0, width, SPRAM_WIDTH)):
                bits = min(SPRAM_WIDTH, width - lsb)
                out = Signal(SPRAM_WIDTH, name=f"spram_{n}_out")
                m.submodules[f"spram_{n}"] = Instance(
                    "SB_SPRAM256KA",
                    i_ADDRESS=address, i_DATAIN=written[lsb:lsb + bits], i_MASKWREN=C(0xF, 4),
                    i_WREN=self.w_en, i_CHIPSELECT=self.w_en | self.r_en, i_CLOCK=ClockSignal(),
                    i_STANDBY=C(0, 1), i_SLEEP=C(0, 1), i_POWEROFF=C(1, 1), o_DATAOUT=out)
                m.d.comb += read[lsb:lsb + bits].eq(out[:bits])
            return m
        m.submodules.mem = mem = Ram(shape=self._shape, depth=self._depth)
        wr = mem.write_port()
        rd = mem.read_port()
        m.d.comb += [wr.en.eq(self.w_en), wr.addr.eq(self.w_addr), wr.data.eq(self.w_data),
                     rd.en.eq(self.r_en), rd.addr.eq(self.r_addr), self.r_data.eq(rd.data)]
        return m
