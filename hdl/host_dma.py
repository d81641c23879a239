"""RHM and WHM: copy UB rows from and to host memory."""

from amaranth import *
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ..isa import Opcode
from .decoder import field
from .memory_reader import MemoryReader
from .sequencer import Command
from .unified_buffer import UbReadSignature, UbRow, UbWriteSignature


__all__ = ["HostRequest", "HostReadUnit", "HostWriteUnit"]


def HostRequest():
    """A host-memory transfer: ``rows`` UB rows' worth of bytes at ``addr``."""
    return data.StructLayout({"addr": 64, "rows": 24})


def _take_transfer(m, unit, opcode, ub_rows, counts, zero):
    """Accept `unit`'s RHM/WHM command while `unit.cmd.ready`: latch its first
    UB row, set every signal in `counts` to its row count (and `zero` to
    whether it is 0), and offer its host request once. Returns the UB row
    and the "request not yet taken" flag."""
    word = unit.cmd.payload.word
    addr = Signal(range(ub_rows))
    requesting = Signal()
    with m.If(unit.cmd.valid & unit.cmd.ready):
        rows = field(word, opcode, "rows")
        m.d.sync += [
            addr.eq(field(word, opcode, "ub")),
            requesting.eq(rows != 0),
            unit.request.payload.addr.eq(field(word, opcode, "host")),
            unit.request.payload.rows.eq(rows),
            *[count.eq(rows) for count in counts],
            zero.eq(rows == 0),
        ]
    m.d.comb += unit.request.valid.eq(requesting)
    with m.If(unit.request.valid & unit.request.ready):
        m.d.sync += requesting.eq(0)
    return addr, requesting


class HostReadUnit(wiring.Component):
    """Executes RHM: asks the host side for the bytes, writes them to the UB.

    Members
    -------
    cmd : In(stream.Signature(Command()))
    idle : Out(1)
    request : Out(stream.Signature(HostRequest()))
        One request per RHM (none for zero rows).
    data : In(stream.Signature(UbRow))
        The bytes, one UB row per beat, in order.
    ub : Out(UbWriteSignature)
    """

    def __init__(self, config):
        self._config = config
        super().__init__({
            "cmd":     In(stream.Signature(Command())),
            "idle":    Out(1),
            "request": Out(stream.Signature(HostRequest())),
            "data":    In(stream.Signature(UbRow(config))),
            "ub":      Out(UbWriteSignature(config)),
        })

    def elaborate(self, platform):
        m = Module()
        left = Signal(24)
        # `left == 0` in a flip-flop: ``idle`` decides the sequencer's issue
        # in the same cycle, so it reads registers, not a 24-bit compare.
        left_0 = Signal(init=1)
        addr, requesting = _take_transfer(m, self, Opcode.RHM, self._config.ub_rows, [left], left_0)
        m.d.comb += [
            self.idle.eq(left_0 & ~requesting),
            self.cmd.ready.eq(self.idle),
        ]

        m.d.comb += [
            self.ub.valid.eq(self.data.valid & ~left_0),
            self.ub.addr.eq(addr),
            self.ub.data.eq(self.data.payload),
            self.data.ready.eq(self.ub.ready & ~left_0),
        ]
        with m.If(self.ub.valid & self.ub.ready):
            m.d.sync += [addr.eq(addr + 1), left.eq(left - 1), left_0.eq(left == 1)]
        return m


class HostWriteUnit(wiring.Component):
    """Executes WHM: reads UB rows and sends them to the host side.

    Members
    -------
    cmd : In(stream.Signature(Command()))
    idle : Out(1)
    request : Out(stream.Signature(HostRequest()))
    data : Out(stream.Signature(UbRow))
        The bytes, one UB row per beat, in order.
    ub : Out(UbReadSignature)
    """

    def __init__(self, config):
        self._config = config
        super().__init__({
            "cmd":     In(stream.Signature(Command())),
            "idle":    Out(1),
            "request": Out(stream.Signature(HostRequest())),
            "data":    Out(stream.Signature(UbRow(config))),
            "ub":      Out(UbReadSignature(config)),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self._config
        m.submodules.reader = reader = MemoryReader(addr_shape=range(cfg.ub_rows),
                                                    data_shape=UbRow(cfg))
        to_read = Signal(24)
        to_send = Signal(24)
        # `to_send == 0` in a flip-flop, as the read unit's `left_0`.
        sent = Signal(init=1)
        addr, requesting = _take_transfer(m, self, Opcode.WHM, cfg.ub_rows, [to_read, to_send], sent)
        m.d.comb += [
            self.idle.eq(sent & ~requesting),
            self.cmd.ready.eq(self.idle),
        ]

        m.d.comb += [
            reader.i.valid.eq(to_read != 0),
            reader.i.payload.addr.eq(addr),
            # Data follows its request, never precedes it.
            self.data.payload.eq(reader.o.payload.data),
            self.data.valid.eq(reader.o.valid & ~requesting),
            reader.o.ready.eq(self.data.ready & ~requesting),
        ]
        wiring.connect(m, reader.port, wiring.flipped(self.ub))
        with m.If(reader.i.valid & reader.i.ready):
            m.d.sync += [addr.eq(addr + 1), to_read.eq(to_read - 1)]
        with m.If(self.data.valid & self.data.ready):
            m.d.sync += [to_send.eq(to_send - 1), sent.eq(to_send == 1)]
        return m
