"""Test tops for the DMA engines and byte gearboxes."""

from amaranth import *
from amaranth.lib import wiring
from amaranth.lib.wiring import In

from ...hdl.byte_gearbox import BeatShifter, ByteGearbox
from ...hdl.dma_read import DmaReader
from ...hdl.dma_write import DmaWriter


__all__ = ["DmaTop", "GearboxTop", "GEARBOX_SIZES", "SHIFTER_SIZES", "WHOLE_SHIFTER_SIZES"]


#: (in_bytes, out_bytes) of the gearboxes `GearboxTop` holds: both
#: directions of the DMA beat widths against UB rows, instructions and
#: weight rows, and the extremes.
GEARBOX_SIZES = [(8, 16), (16, 8), (8, 3), (3, 8), (4, 4), (1, 64), (64, 1), (32, 12),
                 (5, 7), (16, 1)]

#: (in_bytes, out_bytes) of the `BeatShifter`s `GearboxTop` holds after the
#: gearboxes: a one-word link against instructions and 2- and 4-byte rows,
#: both ways, and the extremes.
SHIFTER_SIZES = [(4, 16), (4, 2), (2, 4), (16, 4), (8, 8), (32, 16), (1, 64), (64, 1)]

#: (in_bytes, out_bytes) of the `BeatShifter(whole=True)`s after those, whose
#: jobs are whole output beats: a one- and a two-word link against instructions.
WHOLE_SHIFTER_SIZES = [(4, 16), (8, 16)]


class DmaTop(wiring.Component):
    """A `DmaReader` (members ``rd_*``) and a `DmaWriter` (``wr_*``) side by
    side, sharing ``requester_id``, so one model build serves both."""

    def __init__(self, config):
        self._config = config
        self._reader = DmaReader(config)
        self._writer = DmaWriter(config)
        reader = self._reader.signature.members
        writer = self._writer.signature.members
        members = {"requester_id": In(16)}
        members.update({f"rd_{name}": member for name, member in reader.items()
                        if name != "requester_id"})
        members.update({f"wr_{name}": member for name, member in writer.items()
                        if name != "requester_id"})
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        m.submodules.reader = reader = self._reader
        m.submodules.writer = writer = self._writer
        for prefix, unit in (("rd_", reader), ("wr_", writer)):
            m.d.comb += unit.requester_id.eq(self.requester_id)
            for name, member in unit.signature.members.items():
                if name == "requester_id":
                    continue
                ours = getattr(self, prefix + name)
                if member.is_port:
                    if member.flow == In:
                        m.d.comb += getattr(unit, name).eq(ours)
                    else:
                        m.d.comb += ours.eq(getattr(unit, name))
                else:
                    wiring.connect(m, wiring.flipped(ours), getattr(unit, name))
        return m


class GearboxTop(wiring.Component):
    """One `ByteGearbox` per entry of `sizes`, then one `BeatShifter` per
    entry of `shifters`, members ``g<n>_i``/``g<n>_o``."""

    def __init__(self, sizes=GEARBOX_SIZES, shifters=SHIFTER_SIZES, whole=WHOLE_SHIFTER_SIZES):
        self._boxes = ([ByteGearbox(a, b) for a, b in sizes] +
                       [BeatShifter(a, b) for a, b in shifters] +
                       [BeatShifter(a, b, whole=True) for a, b in whole])
        members = {}
        for n, box in enumerate(self._boxes):
            members[f"g{n}_i"] = box.signature.members["i"]
            members[f"g{n}_o"] = box.signature.members["o"]
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        for n, box in enumerate(self._boxes):
            m.submodules[f"g{n}"] = box
            wiring.connect(m, wiring.flipped(getattr(self, f"g{n}_i")), box.i)
            wiring.connect(m, box.o, wiring.flipped(getattr(self, f"g{n}_o")))
        return m
