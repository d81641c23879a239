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
        word = self.cmd.payload.word
        addr = Signal(range(self._config.ub_rows))
        left = Signal(24)
        requesting = Signal()
        m.d.comb += [
            self.idle.eq((left == 0) & ~requesting),
            self.cmd.ready.eq(self.idle),
        ]
        with m.If(self.cmd.valid & self.cmd.ready):
            rows = field(word, Opcode.RHM, "rows")
            m.d.sync += [
                addr.eq(field(word, Opcode.RHM, "ub")),
                left.eq(rows),
                requesting.eq(rows != 0),
                self.request.payload.addr.eq(field(word, Opcode.RHM, "host")),
                self.request.payload.rows.eq(rows),
            ]
        m.d.comb += self.request.valid.eq(requesting)
        with m.If(self.request.valid & self.request.ready):
            m.d.sync += requesting.eq(0)

        m.d.comb += [
            self.ub.valid.eq(self.data.valid & (left != 0)),
            self.ub.addr.eq(addr),
            self.ub.data.eq(self.data.payload),
            self.data.ready.eq(self.ub.ready & (left != 0)),
        ]
        with m.If(self.ub.valid & self.ub.ready):
            m.d.sync += [addr.eq(addr + 1), left.eq(left - 1)]
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
        word = self.cmd.payload.word
        m.submodules.reader = reader = MemoryReader(addr_shape=range(cfg.ub_rows),
                                                    data_shape=UbRow(cfg))
        addr = Signal(range(cfg.ub_rows))
        to_read = Signal(24)
        to_send = Signal(24)
        requesting = Signal()
        m.d.comb += [
            self.idle.eq((to_send == 0) & ~requesting),
            self.cmd.ready.eq(self.idle),
        ]
        with m.If(self.cmd.valid & self.cmd.ready):
            rows = field(word, Opcode.WHM, "rows")
            m.d.sync += [
                addr.eq(field(word, Opcode.WHM, "ub")),
                to_read.eq(rows),
                to_send.eq(rows),
                requesting.eq(rows != 0),
                self.request.payload.addr.eq(field(word, Opcode.WHM, "host")),
                self.request.payload.rows.eq(rows),
            ]
        m.d.comb += self.request.valid.eq(requesting)
        with m.If(self.request.valid & self.request.ready):
            m.d.sync += requesting.eq(0)

        m.d.comb += [
            reader.i.valid.eq(to_read != 0),
            reader.i.payload.addr.eq(addr),
            self.ub.en.eq(reader.en),
            self.ub.addr.eq(reader.addr),
            reader.rdata.eq(self.ub.data),
            # Data follows its request, never precedes it.
            self.data.payload.eq(reader.o.payload.data),
            self.data.valid.eq(reader.o.valid & ~requesting),
            reader.o.ready.eq(self.data.ready & ~requesting),
        ]
        with m.If(reader.i.valid & reader.i.ready):
            m.d.sync += [addr.eq(addr + 1), to_read.eq(to_read - 1)]
        with m.If(self.data.valid & self.data.ready):
            m.d.sync += to_send.eq(to_send - 1)
        return m
