"""MMC: stream UB rows through the matrix engine into the accumulators."""

from amaranth import *
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ..isa import Opcode
from .decoder import field
from .matrix_engine import ActivationRow
from .memory_reader import MemoryReader
from .sequencer import Command
from .unified_buffer import UbReadSignature, UbRow


__all__ = ["MatrixUnit"]


class MatrixUnit(wiring.Component):
    """Executes MMC: generates the UB addresses of its rows (linear, or the
    convolution pattern ``ub + (b // out_w) * row_step + (b % out_w) *
    col_step``), reads them and hands each row, with its accumulator row and
    flags, to the matrix engine.

    The address generator takes the next MMC in the cycle after it issued
    the last read of the previous one, so back-to-back MMCs reach the engine
    with no gap.

    Members
    -------
    cmd : In(stream.Signature(Command()))
    idle : Out(1)
        Every UB row of every accepted MMC has been read.
    drained : Out(1)
        Idle, and no row is buffered here.
    ub : Out(UbReadSignature)
    rows : Out(stream.Signature(ActivationRow(config)))
        To `MatrixEngine.act`.
    """

    def __init__(self, config):
        self._config = config
        super().__init__({
            "cmd":     In(stream.Signature(Command())),
            "idle":    Out(1),
            "drained": Out(1),
            "ub":      Out(UbReadSignature(config)),
            "rows":    Out(stream.Signature(ActivationRow(config))),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self._config
        word = self.cmd.payload.word
        side = data.StructLayout({"acc_addr": range(cfg.acc_rows), "accumulate": 1,
                                  "unsigned": 1, "switch": 1})
        m.submodules.reader = reader = MemoryReader(addr_shape=range(cfg.ub_rows),
                                                    data_shape=UbRow(cfg), side_shape=side)

        left = Signal(24)
        line_base = Signal(25)      # UB row of the current output line's first row
        addr = Signal(25)
        x = Signal(16)
        out_w = Signal(16)
        col_step = Signal(8)
        row_step = Signal(16)
        conv = Signal()
        acc_addr = Signal(range(cfg.acc_rows))
        accumulate = Signal()
        unsigned = Signal()
        switch = Signal()

        # `left` of 0 and of 1 (and of 2, for the 1 after a read) kept in
        # flip-flops beside it: ``cmd.ready`` and ``idle`` decide the
        # sequencer's issue in the same cycle, so they are read from
        # registers rather than through 24-bit compares.
        left_0 = Signal(init=1)
        left_1 = Signal()
        m.d.comb += [
            self.idle.eq(left_0),
            self.cmd.ready.eq(left_0 | (left_1 & reader.i.ready)),
            self.drained.eq(self.idle & reader.idle),
        ]

        m.d.comb += [
            reader.i.valid.eq(~left_0),
            reader.i.payload.addr.eq(addr),
            reader.i.payload.side.acc_addr.eq(acc_addr),
            reader.i.payload.side.accumulate.eq(accumulate),
            reader.i.payload.side.unsigned.eq(unsigned),
            reader.i.payload.side.switch.eq(switch),
        ]
        wiring.connect(m, reader.port, wiring.flipped(self.ub))

        with m.If(reader.i.valid & reader.i.ready):
            m.d.sync += [left.eq(left - 1), left_0.eq(left_1), left_1.eq(left == 2),
                         acc_addr.eq(acc_addr + 1), switch.eq(0)]
            with m.If(conv & (x == out_w - 1)):
                m.d.sync += [x.eq(0), line_base.eq(line_base + row_step),
                             addr.eq(line_base + row_step)]
            with m.Elif(conv):
                m.d.sync += [x.eq(x + 1), addr.eq(addr + col_step)]
            with m.Else():
                m.d.sync += addr.eq(addr + 1)

        with m.If(self.cmd.valid & self.cmd.ready):
            ub = field(word, Opcode.MMC, "ub")
            rows = field(word, Opcode.MMC, "rows")
            m.d.sync += [
                left.eq(rows),
                left_0.eq(rows == 0),
                left_1.eq(rows == 1),
                addr.eq(ub),
                line_base.eq(ub),
                x.eq(0),
                conv.eq(field(word, Opcode.MMC, "conv")),
                out_w.eq(field(word, Opcode.MMC, "out_w")),
                col_step.eq(field(word, Opcode.MMC, "col_step")),
                row_step.eq(field(word, Opcode.MMC, "row_step")),
                acc_addr.eq(field(word, Opcode.MMC, "acc")),
                accumulate.eq(field(word, Opcode.MMC, "accumulate")),
                unsigned.eq(field(word, Opcode.MMC, "unsigned")),
                switch.eq(field(word, Opcode.MMC, "switch")),
            ]

        payload = reader.o.payload
        m.d.comb += [
            self.rows.payload.data.eq(payload.data),
            self.rows.payload.acc_addr.eq(payload.side.acc_addr),
            self.rows.payload.accumulate.eq(payload.side.accumulate),
            self.rows.payload.unsigned.eq(payload.side.unsigned),
            self.rows.payload.switch.eq(payload.side.switch),
            self.rows.valid.eq(reader.o.valid),
            reader.o.ready.eq(self.rows.ready),
        ]
        return m
