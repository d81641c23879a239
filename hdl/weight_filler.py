"""Copies weight tiles from host memory into the weight memory by DMA."""

from amaranth import *
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from .byte_gearbox import ByteBeat, gearbox
from .dma_read import read_job
from .weight_memory import WeightMemoryFillSignature


__all__ = ["WeightFiller"]


class WeightFiller(wiring.Component):
    """One read job for ``tiles`` whole tiles (``rows x cols`` int8 each,
    row-major, tiles back to back), written row by row into the weight
    memory from tile ``tile`` on. The caller checks the ranges first.

    Ports
    -----
    start : In(1)
        Pulse: copy ``tiles`` tiles from host ``addr`` to weight tile ``tile``.
    addr : In(host_addr_bits)
    tile, tiles : In(32)
    job : Out(stream of read_job(host_addr_bits))
    data : In(byte_stream)
    fill : Out(WeightMemoryFillSignature)
    busy : Out(1)
    done : Out(1)
        Pulse: the last row is written.
    flush : In(1)
    """

    def __init__(self, config):
        self._config = config
        super().__init__({
            "start": In(1),
            "addr":  In(config.host_addr_bits),
            "tile":  In(32),
            "tiles": In(32),
            "job":   Out(stream.Signature(read_job(config.host_addr_bits))),
            "data":  In(stream.Signature(ByteBeat(4 * config.link_dw))),
            "fill":  Out(WeightMemoryFillSignature(config)),
            "busy":  Out(1),
            "done":  Out(1),
            "flush": In(1),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self._config
        # A fill is whole tile rows, as a `BeatShifter` needs.
        m.submodules.gearbox = packer = ResetInserter(self.flush)(
            gearbox(4 * cfg.link_dw, cfg.cols))
        wiring.connect(m, wiring.flipped(self.data), packer.i)

        asking = Signal()
        row = Signal.like(self.fill.addr)
        left = Signal(range(cfg.weight_mem_tiles * cfg.rows + 1))
        m.d.comb += [
            self.job.valid.eq(asking),
            self.job.payload.addr.eq(self.addr),
            self.job.payload.length.eq(self.tiles * cfg.tile_bytes),
            packer.o.ready.eq(1),
            self.fill.en.eq(packer.o.valid & (left != 0)),
            self.fill.addr.eq(row),
            self.fill.data.eq(packer.o.payload.data[:8 * cfg.cols]),
            self.busy.eq(asking | (left != 0)),
        ]
        with m.If(self.job.ready):
            m.d.sync += asking.eq(0)
        with m.If(self.fill.en):
            m.d.sync += [row.eq(row + 1), left.eq(left - 1)]
            m.d.comb += self.done.eq(left == 1)
        with m.If(self.start & (self.tiles != 0)):
            m.d.sync += [asking.eq(1), row.eq(self.tile * cfg.rows),
                         left.eq(self.tiles * cfg.rows)]
        with m.If(self.start & (self.tiles == 0)):
            m.d.comb += self.done.eq(1)
        with m.If(self.flush):
            m.d.sync += [asking.eq(0), left.eq(0)]
        return m
