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

    Parameters
    ----------
    head_bits : int
        The low `head_bits` bits of ``o.payload.data`` come from a flip-flop
        (a copy of the buffer's entries in registers that move up as the
        first is read) rather than through the buffer's read multiplexer,
        for a consumer that puts more logic after them; the same values in
        the same cycles.
    depth : int
        Entries of the buffer: `DEPTH` for a row a cycle; a consumer that
        takes a row no more often than every 4 cycles loses nothing with
        one (an answer is in the buffer 2 cycles after the entry is freed).
    """

    DEPTH = 3

    def __init__(self, *, addr_shape, data_shape, side_shape=1, head_bits=0, depth=DEPTH):
        if not isinstance(depth, int) or isinstance(depth, bool) or depth < 1:
            raise ValueError(f"depth must be a positive int, not {depth!r}")
        if head_bits and depth != self.DEPTH:
            raise ValueError(f"head_bits needs the depth {self.DEPTH}, not {depth}")
        self._head_bits = head_bits
        self._depth = depth
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
        m.submodules.buffer = buffer = fifo.SyncFIFO(width=self._out_layout.size, depth=self._depth)
        in_flight = Signal()
        side = Signal(self._in_layout["side"].shape)
        fire = Signal()
        m.d.comb += [
            self.i.ready.eq(buffer.level + in_flight < self._depth),
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
        if self._head_bits:
            # The entries' low bits in order, the first the one read: a read
            # moves each up one, a write fills the first free one after it.
            heads = [Signal(self._head_bits, name=f"head{i}") for i in range(self.DEPTH)]
            read = buffer.r_en & buffer.r_rdy
            kept = Signal(range(self.DEPTH + 1))
            m.d.comb += kept.eq(buffer.level - read)
            for i, head in enumerate(heads):
                with m.If(in_flight & (kept == i)):
                    m.d.sync += head.eq(Value.cast(self.port.data)[:self._head_bits])
                if i + 1 < self.DEPTH:
                    with m.Elif(read):
                        m.d.sync += head.eq(heads[i + 1])
            m.d.comb += Value.cast(self.o.payload.data)[:self._head_bits].eq(heads[0])
        return m
