"""Turns a synchronous memory read port into a back-pressured stream."""

from amaranth import *
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out


__all__ = ["MemoryReader"]


class MemoryReader(wiring.Component):
    """Reads the addresses it is given and streams out what it read.

    A read port answers one cycle after it is asked and cannot be paused, so
    reads are issued only when a small FIFO has room for the answer; with
    three entries the stream runs at one row per cycle.

    Members
    -------
    i : In(stream.Signature(StructLayout{addr, side}))
        Addresses, each with a sideband value that comes out with its data.
    port : Out(Signature{en, addr, data})
        To the memory's read port (``data`` one cycle after ``en``); the
        same members as `UbReadSignature` and `AccReadSignature`.
    o : Out(stream.Signature(StructLayout{data, side}))
        What was read, in order.
    idle : Out(1)
        Nothing is in flight or buffered.
    """

    DEPTH = 3

    def __init__(self, *, addr_shape, data_shape, side_shape=1):
        self._in_layout = data.StructLayout({"addr": addr_shape, "side": side_shape})
        self._out_layout = data.StructLayout({"data": data_shape, "side": side_shape})
        super().__init__({
            "i":     In(stream.Signature(self._in_layout)),
            "port":  Out(wiring.Signature({
                "en":   Out(1),
                "addr": Out(addr_shape),
                "data": In(data_shape),
            })),
            "o":     Out(stream.Signature(self._out_layout)),
            "idle":  Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.buffer = buffer = fifo.SyncFIFO(width=self._out_layout.size, depth=self.DEPTH)
        in_flight = Signal()
        side = Signal(self._in_layout["side"].shape)
        fire = Signal()
        m.d.comb += [
            self.i.ready.eq(buffer.level + in_flight < self.DEPTH),
            fire.eq(self.i.valid & self.i.ready),
            self.port.en.eq(fire),
            self.port.addr.eq(self.i.payload.addr),
        ]
        m.d.sync += [in_flight.eq(fire), side.eq(self.i.payload.side)]
        m.d.comb += [
            buffer.w_en.eq(in_flight),
            buffer.w_data.eq(Cat(self.port.data, side)),
            self.o.payload.eq(buffer.r_data),
            self.o.valid.eq(buffer.r_rdy),
            buffer.r_en.eq(self.o.ready),
            self.idle.eq(~in_flight & (buffer.level == 0)),
        ]
        return m
