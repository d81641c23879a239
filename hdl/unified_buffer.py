"""Unified buffer: the chip's activation memory."""

from amaranth import *
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from ..config import TPUConfig
from .ram import Ram
from .single_port_ram import SinglePortRam


__all__ = ["UnifiedBuffer", "UbReadSignature", "UbWriteSignature"]


def UbRow(config):
    return data.ArrayLayout(unsigned(8), config.rows)


def UbReadSignature(config):
    """A synchronous read port, from the reader's side: ``data`` is valid the
    cycle after ``en`` with ``addr``."""
    return wiring.Signature({
        "en":   Out(1),
        "addr": Out(range(config.ub_rows)),
        "data": In(UbRow(config)),
    })


def UbWriteSignature(config):
    """A write request, from the writer's side: taken in a cycle where
    ``valid`` and ``ready`` are both high."""
    return wiring.Signature({
        "valid": Out(1),
        "ready": In(1),
        "addr":  Out(range(config.ub_rows)),
        "data":  Out(UbRow(config)),
    })


class UnifiedBuffer(wiring.Component):
    """``ub_rows`` rows of ``rows`` bytes.

    One write port shared by the two writers, so that a synthesised buffer
    maps onto block RAM: the activation unit has priority (its pipeline
    drains into the buffer at one row per cycle) and host DMA takes the
    cycles it leaves. Separate read ports for the matrix unit (one row per
    cycle, never stalled), host DMA, the activation unit's table loads, and
    a debug port; all reads are transparent to a write in the same cycle.

    With ``serial_issue`` (one unit at a time, so the UB is read or written
    by one unit in a cycle, never both) the buffer is one `SinglePortRam`,
    on an iCE40 in the UP5K's SPRAM instead of three EBRs a read port: the
    readers share its one port (a reader's ``data`` then holds only while
    no other reads and nothing is written), and no read may come in a
    cycle with a write.

    Members
    -------
    act_write, dma_write : In(UbWriteSignature)
        Writers, in priority order.
    mxu_read, dma_read, table_read, debug_read : In(UbReadSignature)
        Readers.
    """

    def __init__(self, config):
        if not isinstance(config, TPUConfig):
            raise TypeError(f"UnifiedBuffer needs a TPUConfig, not {config!r}")
        self._config = config
        if config.serial_issue:
            self._mem = SinglePortRam(shape=UbRow(config), depth=config.ub_rows)
        else:
            self._mem = Ram(shape=UbRow(config), depth=config.ub_rows)
        super().__init__({
            "act_write":  In(UbWriteSignature(config)),
            "dma_write":  In(UbWriteSignature(config)),
            "mxu_read":   In(UbReadSignature(config)),
            "dma_read":   In(UbReadSignature(config)),
            "table_read": In(UbReadSignature(config)),
            "debug_read": In(UbReadSignature(config)),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.mem = mem = self._mem
        if self._config.serial_issue:
            return self._elaborate_single_port(m, mem)
        wr = mem.write_port()
        m.d.comb += [
            self.act_write.ready.eq(1),
            self.dma_write.ready.eq(~self.act_write.valid),
        ]
        with m.If(self.act_write.valid):
            m.d.comb += [wr.en.eq(1), wr.addr.eq(self.act_write.addr), wr.data.eq(self.act_write.data)]
        with m.Else():
            m.d.comb += [wr.en.eq(self.dma_write.valid), wr.addr.eq(self.dma_write.addr),
                         wr.data.eq(self.dma_write.data)]
        for port in (self.mxu_read, self.dma_read, self.table_read, self.debug_read):
            rd = mem.read_port(transparent_for=(wr,))
            m.d.comb += [rd.en.eq(port.en), rd.addr.eq(port.addr), port.data.eq(rd.data)]
        return m

    def _elaborate_single_port(self, m, mem):
        m.d.comb += [
            self.act_write.ready.eq(1),
            self.dma_write.ready.eq(self.act_write.valid == 0),   # never both: one unit at a time
        ]
        with m.If(self.act_write.valid):
            m.d.comb += [mem.w_en.eq(1), mem.w_addr.eq(self.act_write.addr),
                         mem.w_data.eq(self.act_write.data)]
        with m.Else():
            m.d.comb += [mem.w_en.eq(self.dma_write.valid), mem.w_addr.eq(self.dma_write.addr),
                         mem.w_data.eq(self.dma_write.data)]
        readers = (self.mxu_read, self.dma_read, self.table_read, self.debug_read)
        m.d.comb += mem.r_en.eq(Cat(port.en for port in readers).any())
        with m.If(self.mxu_read.en):
            m.d.comb += mem.r_addr.eq(self.mxu_read.addr)
        with m.Elif(self.dma_read.en):
            m.d.comb += mem.r_addr.eq(self.dma_read.addr)
        with m.Elif(self.table_read.en):
            m.d.comb += mem.r_addr.eq(self.table_read.addr)
        with m.Else():
            m.d.comb += mem.r_addr.eq(self.debug_read.addr)
        m.d.comb += [port.data.eq(mem.r_data) for port in readers]
        return m
