"""ACT, CFG, LDQ and LDL: everything that drives the activation pipeline."""

from amaranth import *
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ..config import TPUConfig
from ..isa import MAX_POOL_COUNT, MAX_POOL_SIZE, Opcode, Pool, Reg, ldq_sections
from .accumulators import AccReadSignature
from .activation_pipeline import ActivationPipeline
from .activation_settings import SHIFT_WIDTH, VALUE_WIDTH, RECIPROCAL_SHIFT
from .decoder import field
from .memory_reader import MemoryReader
from .sequencer import Command
from .serial_divider import SerialDivider
from .unified_buffer import UbReadSignature, UbWriteSignature


__all__ = ["ActivationUnit"]


def _saturate(value, width):
    low, high = -(1 << (width - 1)), (1 << (width - 1)) - 1
    return Mux(value < low, low, Mux(value > high, high, value))


def _saturate_bits(value, width):
    """`_saturate` from the bits alone: a positive `value` with any bit set
    from ``width - 1`` up sets every bit below the sign, a negative one with
    any of them clear clears them. Two reductions in LUTs where `_saturate`
    compares in two carry chains as long as `value`: on the iCE40 a carry
    cell with no LUT of its own still takes a logic cell."""
    sign = value[-1]
    high = value[width - 1:-1]
    over = ~sign & high.any()
    under = sign & ~high.all()
    return Cat((value[:width - 1] | over.replicate(width - 1)) & ~under.replicate(width - 1),
               sign).as_signed()


class ActivationUnit(wiring.Component):
    """Executes the activation-side instructions, one at a time.

    * CFG sets OUT_ZERO_POINT, CLAMP_MIN or CLAMP_MAX (used saturated to
      -256..255, the pipeline's value range).
    * LDQ reads the bias, multiplier and shift of every column from the UB
      (shifts saturated to -32..31) and writes them into the pipeline.
    * LDL reads the 256-byte function table from the UB.
    * ACT streams accumulator rows through the pipeline into UB rows. Output
      byte ``n`` of a result row goes to byte ``n`` of its UB row; when
      ``cols < rows`` the remaining bytes are zero, when ``cols > rows`` the
      columns from ``rows`` on are not stored. Average pooling divides by
      multiplying with ``ceil(2**32 / count)``, computed here on a serial
      divider (33 cycles) before the rows start.

    Members
    -------
    cmd : In(stream.Signature(Command()))
    idle : Out(1)
        No instruction in progress (an ACT is done when its last row is in the UB).
    acc : Out(AccReadSignature)
    ub_read : Out(UbReadSignature)
        For LDQ and LDL.
    ub_write : Out(UbWriteSignature)
    """

    def __init__(self, config):
        if not isinstance(config, TPUConfig):
            raise TypeError(f"ActivationUnit needs a TPUConfig, not {config!r}")
        self._config = config
        super().__init__({
            "cmd":      In(stream.Signature(Command())),
            "idle":     Out(1),
            "acc":      Out(AccReadSignature(acc_rows=config.acc_rows, cols=config.cols)),
            "ub_read":  Out(UbReadSignature(config)),
            "ub_write": Out(UbWriteSignature(config)),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self._config
        rows, cols = cfg.rows, cfg.cols
        m.submodules.pipeline = pipe = ActivationPipeline(cfg, max_width=cfg.pool_max_width)

        word = Signal(128)
        # Row counters sized to the memories: the decoder faults an ACT
        # whose rows reach past the accumulators or the UB.
        out_rows = Signal(range(cfg.ub_rows + 1))
        # The registers hold the values ACT uses, saturated to the pipeline's
        # range as CFG writes them, so one saturation serves all three.
        regs = {reg: Signal(signed(VALUE_WIDTH), name=f"reg_{reg.name.lower()}") for reg in Reg}

        # ACT: accumulator rows into the pipeline, results into the UB.
        # The small pipeline takes a row at most every 4 cycles (its
        # product alone takes 4), so one row buffered keeps it fed: the
        # next is read in the cycle after the pipeline takes one and is
        # there 2 cycles later. Two more rows of `cols` int32s would be flip-flops and
        # their read multiplexer.
        reader_depth = {"depth": 1} if cfg.serial_act else {}
        m.submodules.reader = reader = MemoryReader(
            addr_shape=range(cfg.acc_rows), data_shape=data.ArrayLayout(signed(32), cols),
            side_shape=1, head_bits=ActivationPipeline.head_bits(cfg), **reader_depth)
        acc_addr = Signal(range(cfg.acc_rows))
        to_read = Signal(range(cfg.acc_rows + 1))
        ub_addr = Signal(range(cfg.ub_rows))
        to_write = Signal(range(cfg.ub_rows + 1))
        m.d.comb += [
            reader.i.payload.addr.eq(acc_addr),
            reader.i.payload.side.eq(to_read == 1),
            pipe.i.payload.data.eq(reader.o.payload.data),
            pipe.i.payload.last.eq(reader.o.payload.side),
            pipe.i.valid.eq(reader.o.valid),
            reader.o.ready.eq(pipe.i.ready),
        ]
        wiring.connect(m, reader.port, wiring.flipped(self.acc))
        with m.If(reader.i.valid & reader.i.ready):
            m.d.sync += [acc_addr.eq(acc_addr + 1), to_read.eq(to_read - 1)]

        m.d.comb += [
            self.ub_write.valid.eq(pipe.o.valid),
            self.ub_write.addr.eq(ub_addr),
            pipe.o.ready.eq(self.ub_write.ready),
        ]
        for i in range(rows):
            m.d.comb += self.ub_write.data[i].eq(pipe.o.payload[i] if i < cols else 0)
        with m.If(pipe.o.valid & pipe.o.ready):
            m.d.sync += [ub_addr.eq(ub_addr + 1), to_write.eq(to_write - 1)]

        # Settings of an ACT, from its fields and the CFG registers.
        # The divisor is a pooling count: the decoder faults a GLOBAL_AVG of
        # more than MAX_POOL_COUNT rows, so the divisor and the divider's
        # remainder are 13 bits, not the dividend's 34.
        count = Signal(range(MAX_POOL_COUNT + 1))
        if cfg.serial_act:
            # The small form's counts are only what its memories allow: a
            # window's k * k or a global average's rows, which the decoder
            # keeps within the accumulators, so its divisor and remainder
            # are that narrow too.
            count = Signal(range(max(cfg.acc_rows, MAX_POOL_SIZE ** 2) + 1))
        # The small form's divider takes its one dividend length (2**32 +
        # count - 1 has 33 bits for every count it divides by: a window's
        # k * k or a global average's rows, never 0) and the count from its
        # register, which holds through the ACT: the same 33 cycles and
        # quotient as the general divider. So does the ulx3s16 chip's (a
        # shared lane with a multi-cycle product), where the general
        # divider's length (a priority encoder after the dividend's add,
        # into its count) and its next dividend bit (a 34-way select at
        # ``count - 2``) were two of the unit's 7-level paths.
        fixed_length = cfg.serial_act or (cfg.requantize_steps > 1 and cfg.requantize_multiply_cycles > 1)
        fixed = {"length": RECIPROCAL_SHIFT + 1} if fixed_length else {}
        m.submodules.divider = divider = SerialDivider(RECIPROCAL_SHIFT + 2,
                                                       divisor_width=len(count), **fixed)
        act = {name: field(word, Opcode.ACT, name) for name in
               ("unsigned", "single_round", "acc", "ub", "rows", "func", "pool", "pool_size", "pool_stride", "in_w")}
        windowed = (act["pool"] == Pool.MAX) | (act["pool"] == Pool.AVG)
        averaging = (act["pool"] == Pool.AVG) | (act["pool"] == Pool.GLOBAL_AVG)
        settings = pipe.set_settings.payload
        if cfg.serial_act:
            # The pooling unit reads the window's shape only in a window
            # mode and the count and reciprocal only in an average one, so
            # the small form passes the fields and the quotient as they are.
            pool_size, pool_stride, pool_width = act["pool_size"], act["pool_stride"], act["in_w"]
            reciprocal = divider.quotient
        else:
            pool_size = Mux(windowed, act["pool_size"], 1)
            pool_stride = Mux(windowed, act["pool_stride"], 1)
            pool_width = Mux(windowed, act["in_w"], 1)
            reciprocal = Mux(averaging, divider.quotient, 1 << RECIPROCAL_SHIFT)
        single_round = act["single_round"]
        if cfg.mlas_rounding:
            # MLAS's rounding is one rounding (no left shift) with or without
            # the flag: the decoder checks no condition between the two.
            mlas_round = field(word, Opcode.ACT, "mlas_round")
            single_round = single_round | mlas_round
            m.d.comb += settings.mlas_round.eq(mlas_round)
        m.d.comb += [
            settings.function.eq(act["func"]),
            settings.unsigned.eq(act["unsigned"]),
            settings.single_round.eq(single_round),
            settings.zero_point.eq(regs[Reg.OUT_ZERO_POINT]),
            settings.clamp_min.eq(regs[Reg.CLAMP_MIN]),
            settings.clamp_max.eq(regs[Reg.CLAMP_MAX]),
            settings.pool.eq(act["pool"]),
            settings.pool_size.eq(pool_size),
            settings.pool_stride.eq(pool_stride),
            settings.pool_width.eq(pool_width),
            settings.pool_count.eq(count),
            settings.pool_reciprocal.eq(reciprocal),
            divider.dividend.eq((1 << RECIPROCAL_SHIFT) + count - 1),
            divider.divisor.eq(count),
        ]

        # LDQ/LDL: byte cursors over the UB table.
        table_row = Signal(range(cfg.ub_rows))
        table = Signal(data.ArrayLayout(unsigned(8), rows))
        cursors = [(Signal(range(cfg.ub_rows), name=f"cur{i}_row"),
                    Signal(range(rows), name=f"cur{i}_byte")) for i in range(3)]
        which = Signal(range(3))
        byte_index = Signal(range(9))
        column = Signal(range(max(cols, 2)))
        value = Signal(32)
        bias = Signal(32)
        multiplier = Signal(32)
        lut_index = Signal(9)

        channel = pipe.set_channel.payload
        m.d.comb += [
            channel.col.eq(column),
            channel.bias.eq(bias),
            channel.multiplier.eq(multiplier),
            pipe.set_lut.payload.index.eq(lut_index),
        ]
        cur_row = Array(c[0] for c in cursors)[which]
        cur_byte = Array(c[1] for c in cursors)[which]
        # The small form (`serial_act`, a power-of-two row width) finds each
        # LDQ byte from the column and the byte's index instead of keeping
        # three cursors: byte ``4 column + index`` of the bias and multiplier
        # sections, byte ``column`` of the shift section. Its bytes go
        # straight into the register they make (no 32-bit word assembled
        # first), the shift's into a byte of its own.
        direct = bool(cfg.serial_act) and rows & (rows - 1) == 0
        if direct:
            ldq_base = Signal(range(cfg.ub_rows))
            position = Signal(range(4 * cols))
            m.d.comb += position.eq(Mux(which == 2, column, Cat(byte_index[:2], column)))
            row_bits = (rows - 1).bit_length()
            sections = Array(C(offset, range(cfg.ub_rows)) for offset in ldq_sections(cfg))
            cur_row = (ldq_base + sections[which] + (position >> row_bits))[:len(ldq_base)]
            cur_byte = position[:row_bits] if row_bits else C(0, 1)
            shift_byte = Signal(8)

        m.d.comb += self.ub_read.addr.eq(table_row)

        # The sequencer hands this unit only ACT, CFG, LDQ and LDL (0x40,
        # 0x50, 0x51, 0x52), which bits 0, 1 and 4 of the opcode tell
        # apart: the small form decodes those three, not all eight.
        unit_opcodes = (Opcode.ACT, Opcode.CFG, Opcode.LDQ, Opcode.LDL)
        # CFG's value and LDQ's shift byte: from the bits on the small form.
        saturate = _saturate_bits if cfg.serial_act else _saturate
        if cfg.serial_act:
            def code_of(opcode):
                return (opcode & 0b11) | (opcode >> 4 & 1) << 2

            def opcode_key(payload):
                return Cat(payload[0:2], payload[4])
            assert len({code_of(op) for op in unit_opcodes}) == len(unit_opcodes)
        else:
            def code_of(opcode):
                return opcode

            def opcode_key(payload):
                return payload[:8]

        with m.FSM():
            with m.State("IDLE"):
                m.d.comb += [self.idle.eq(1), self.cmd.ready.eq(1)]
                with m.If(self.cmd.valid):
                    payload = self.cmd.payload.word
                    m.d.sync += [word.eq(payload), out_rows.eq(self.cmd.payload.out_rows)]
                    with m.Switch(opcode_key(payload)):
                        with m.Case(code_of(Opcode.CFG)):
                            reg = field(payload, Opcode.CFG, "reg")
                            cfg_value = field(payload, Opcode.CFG, "value").as_signed()
                            saturated = saturate(cfg_value, VALUE_WIDTH)
                            for r, sig in regs.items():
                                with m.If(reg == r):
                                    m.d.sync += sig.eq(saturated)
                        with m.Case(code_of(Opcode.LDL)):
                            m.d.sync += [table_row.eq(field(payload, Opcode.LDL, "ub")),
                                         lut_index.eq(0)]
                            m.next = "LDL_READ"
                        with m.Case(code_of(Opcode.LDQ)):
                            base = field(payload, Opcode.LDQ, "ub")
                            if direct:
                                m.d.sync += ldq_base.eq(base)
                            else:
                                for (row, byte), offset in zip(cursors, ldq_sections(cfg)):
                                    m.d.sync += [row.eq(base + offset), byte.eq(0)]
                            m.d.sync += [column.eq(0), which.eq(0), byte_index.eq(0)]
                            m.next = "LDQ_READ"
                        with m.Case(code_of(Opcode.ACT)):
                            r = field(payload, Opcode.ACT, "rows")
                            if cfg.serial_act:
                                # The decoder faults an ACT reading past the
                                # accumulators: its rows fit `to_read`.
                                r = r[:len(to_read)]
                            pool = field(payload, Opcode.ACT, "pool")
                            k = field(payload, Opcode.ACT, "pool_size")
                            # The count is read only by an average (the
                            # small form's settings pass it as it is).
                            if cfg.serial_act:
                                # A window average's side is 1..MAX_POOL_SIZE
                                # (the decoder faults others), so ``k * k``
                                # is a table of its low bits: a LUT a bit of
                                # the count, not a small multiplier.
                                squares = Array(C(i * i, 2 * MAX_POOL_SIZE.bit_length())
                                                for i in range(1 << MAX_POOL_SIZE.bit_length()))
                                act_count = Mux(pool == Pool.GLOBAL_AVG, r, squares[k[:MAX_POOL_SIZE.bit_length()]])
                            else:
                                act_count = Mux(pool == Pool.GLOBAL_AVG, r,
                                                Mux((pool == Pool.MAX) | (pool == Pool.AVG), k * k, 1))
                            m.d.sync += [
                                acc_addr.eq(field(payload, Opcode.ACT, "acc")),
                                ub_addr.eq(field(payload, Opcode.ACT, "ub")),
                                count.eq(act_count),
                            ]
                            with m.If(r != 0):
                                m.next = "ACT_DIVIDE"

            with m.State("LDL_READ"):
                m.d.comb += self.ub_read.en.eq(1)
                m.next = "LDL_CAPTURE"
            with m.State("LDL_CAPTURE"):
                m.d.sync += [table.eq(self.ub_read.data), cursors[0][1].eq(0)]
                m.next = "LDL_WRITE"
            with m.State("LDL_WRITE"):
                m.d.comb += [pipe.set_lut.valid.eq(1),
                             pipe.set_lut.payload.value.eq(table[cursors[0][1]])]
                with m.If(pipe.set_lut.ready):
                    m.d.sync += [lut_index.eq(lut_index + 1), cursors[0][1].eq(cursors[0][1] + 1)]
                    with m.If(lut_index == 255):
                        m.next = "IDLE"
                    with m.Elif(cursors[0][1] == rows - 1):
                        m.d.sync += table_row.eq(table_row + 1)
                        m.next = "LDL_READ"

            with m.State("LDQ_READ"):
                m.d.comb += [self.ub_read.en.eq(1), self.ub_read.addr.eq(cur_row)]
                if not direct:
                    # A section's word, whole in `value` since its last
                    # capture, goes into its register in the read of the
                    # next section's first byte (no cycle of its own): the
                    # byte read from the UB then ends in `value`, which the
                    # placer can keep by the UB, and not across the die in
                    # the registers beside the requantizers (the twenty-
                    # seventh ulx3s16 build's critical path: the block RAM's
                    # output, its multiplexers, the byte's select and
                    # `multiplier`'s input over 6.72 ns of wire, 18.25 ns).
                    with m.If(byte_index == 0):
                        with m.If(which == 1):
                            m.d.sync += bias.eq(value)
                        with m.If(which == 2):
                            m.d.sync += multiplier.eq(value)
                m.next = "LDQ_CAPTURE"
            with m.State("LDQ_CAPTURE"):
                byte = self.ub_read.data[cur_byte]
                if direct:
                    with m.Switch(which):
                        with m.Case(0):
                            m.d.sync += bias.eq(Cat(bias[8:], byte))
                        with m.Case(1):
                            m.d.sync += multiplier.eq(Cat(multiplier[8:], byte))
                        with m.Default():
                            m.d.sync += shift_byte.eq(byte)
                else:
                    m.d.sync += value.eq(Cat(value[8:], byte))
                    with m.If(cur_byte == rows - 1):
                        m.d.sync += [cur_byte.eq(0), cur_row.eq(cur_row + 1)]
                    with m.Else():
                        m.d.sync += cur_byte.eq(cur_byte + 1)
                last_byte = Mux(which == 2, 0, 3)
                with m.If(byte_index == last_byte):
                    m.d.sync += byte_index.eq(0)
                    with m.If(which == 2):
                        m.d.sync += which.eq(0)
                        m.next = "LDQ_SHIFT"
                    with m.Else():
                        m.d.sync += which.eq(which + 1)
                        m.next = "LDQ_READ"
                with m.Else():
                    m.d.sync += byte_index.eq(byte_index + 1)
                    m.next = "LDQ_READ"
            with m.State("LDQ_SHIFT"):
                # `value[24:32]` now holds the shift byte.
                shift_value = shift_byte if direct else value[24:32]
                m.d.comb += [pipe.set_channel.valid.eq(1),
                             channel.shift.eq(saturate(shift_value.as_signed(), SHIFT_WIDTH))]
                with m.If(pipe.set_channel.ready):
                    m.d.sync += column.eq(column + 1)
                    with m.If(column == cols - 1):
                        m.next = "IDLE"
                    with m.Else():
                        m.next = "LDQ_READ"

            with m.State("ACT_DIVIDE"):
                with m.If(averaging):
                    m.d.comb += divider.start.eq(1)
                    m.next = "ACT_WAIT_DIVIDE"
                with m.Else():
                    m.next = "ACT_SETTINGS"
            with m.State("ACT_WAIT_DIVIDE"):
                with m.If(divider.done):
                    m.next = "ACT_SETTINGS"
            with m.State("ACT_SETTINGS"):
                m.d.comb += pipe.set_settings.valid.eq(1)
                with m.If(pipe.set_settings.ready):
                    m.d.sync += [to_read.eq(act["rows"]), to_write.eq(out_rows)]
                    m.next = "ACT_RUN"
            with m.State("ACT_RUN"):
                m.d.comb += reader.i.valid.eq(to_read != 0)
                # At a row per cycle the pipeline has taken the last row read
                # before the next ACT can write its settings. A slower one
                # may not have: the ACT waits until it has (else the next
                # ACT's settings would stop the rows still in the reader, and
                # that ACT would take them for its own).
                taken = reader.idle if cfg.act_row_cycles > 1 else 1
                with m.If((to_read == 0) & (to_write == 0) & taken):
                    m.next = "IDLE"
        return m
