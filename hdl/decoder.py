"""Instruction decoder: legality and range checks, generated from the ISA table."""

import functools

from amaranth import *
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from ..config import TPUConfig
from ..isa import LAYOUTS, MAX_POOL_COUNT, Fault, Opcode, Pool, ldl_rows, ldq_rows, INSTRUCTION_BITS
from .bounded_product import bounded_product_terms
from .device_family import is_ecp5, is_ice40
from .serial_divider import SerialDivider, divider_cycles
from .window import DmaWindows, WindowLimits, at_most


__all__ = ["InstructionDecoder", "field", "decode_cycles", "product_cycles", "SMALL_DIVISION_CYCLES", "Ranges", "RANGE_KINDS",
           "DECODE_STAGES"]


#: An inclusive range of UB or accumulator rows, with a valid bit.
RowRange = data.StructLayout({"valid": 1, "lo": 25, "hi": 25})

#: What an instruction reads and writes: UB rows, accumulator rows.
RANGE_KINDS = ("ub_r", "ub_w", "acc_r", "acc_w")
Ranges = data.StructLayout({kind: RowRange for kind in RANGE_KINDS})

#: Cycles after the word is presented (2 cycles after ``start`` for a word
#: without divisions): the ranges and derived values are registered, then
#: the fault, then ``done`` rises. After divisions, the products, their sums
#: and the larger sum are registered first: 3 more.
DECODE_STAGES = 3


def _fields(opcode):
    return {f.name: f for f in LAYOUTS[Opcode(opcode)]}


def _values(word, opcode):
    return {f.name: f.extract(word) for f in LAYOUTS[opcode]}


#: The cycles of each of the small decoder's divisions (``serial_decode``):
#: over all 24 bits of the dividend (`SerialDivider` ``length``).
SMALL_DIVISION_CYCLES = 24


def decode_cycles(word, config=None):
    """Cycles from `InstructionDecoder`'s ``start`` to its ``done`` for the
    128-bit `word` (an int, or its 16 bytes), legal or not, on the decoder
    of `config` (a `TPUConfig`; None: one with ``serial_decode`` 0).

    3 for most words. An MMC with CONV and rows divides ``rows - 1`` by
    ``out_w``: ``8 + divider_cycles(rows - 1)``. An ACT with MAX or AVG
    pooling and rows divides ``rows`` by ``in_w`` (``in_h``, the quotient):
    ``8 + divider_cycles(rows)`` when the rows are not whole image rows of at
    least ``pool_size`` x ``pool_size`` pixels (the instruction faults),
    else two more divisions, of ``in_h - pool_size`` and of ``in_w -
    pool_size`` by the stride, and 4 cycles around them.

    With ``config.serial_decode`` every division takes
    ``SMALL_DIVISION_CYCLES`` (24) cycles, whatever its dividend, and the
    products are multiplied a bit a cycle, ``product_cycles(config)`` cycles
    each: an MMC with CONV and rows takes 4 products more, an ACT with MAX
    or AVG pooling and rows 1.
    """
    word = word if isinstance(word, int) else int.from_bytes(word, "little")
    small = config is not None and config.serial_decode
    cycles = _decode_cycles(word, SMALL_DIVISION_CYCLES if small else None)
    if small and cycles > 3:
        cycles += (4 if word & 0xFF == Opcode.MMC else 1) * product_cycles(config)
    return cycles


def product_cycles(config):
    """Cycles of one of the decoder's products with ``config.serial_decode``:
    a bit a cycle of a multiplier clamped at ``2**ub_rows.bit_length()``."""
    return config.ub_rows.bit_length() + 1


@functools.lru_cache(maxsize=1 << 14)
def _decode_cycles(word, length):
    # Cached: programs repeat their words. `length`: the divider's
    # (`SerialDivider`), None for the one that starts at the leading one.
    opcode = word & 0xFF
    if opcode == Opcode.MMC:
        mmc = _values(word, Opcode.MMC)
        if mmc["conv"] and mmc["rows"]:
            return 8 + divider_cycles(mmc["rows"] - 1, length)
    elif opcode == Opcode.ACT:
        act = _values(word, Opcode.ACT)
        rows, in_w, k = act["rows"], act["in_w"], act["pool_size"]
        if act["pool"] in (Pool.MAX, Pool.AVG) and rows:
            cycles = 8 + divider_cycles(rows, length)
            if in_w == 0 or rows % in_w or rows // in_w < k or in_w < k:
                return cycles
            return cycles + 4 + divider_cycles(rows // in_w - k, length) + \
                divider_cycles(in_w - k, length)
    return 3


def _clamped(value, bits):
    """`value` (unsigned) below ``2**bits``, else ``2**bits``: on ``bits + 1``
    bits. At or above ``2**bits`` is any bit from `bits` up, an OR of LUTs
    where a comparison would take a carry chain."""
    value = Value.cast(value)
    if len(value) <= bits:
        return value
    return Mux(value[bits:].any(), 1 << bits, value[:bits])


def field(word, opcode, name):
    """The bits of field `name` of `opcode` in the instruction `word`."""
    f = _fields(opcode)[name]
    value = word[f.lsb:f.lsb + f.width]
    return value.as_signed() if f.signed else value


class InstructionDecoder(wiring.Component):
    """Checks one instruction the way `tpu.isa.check` does, in hardware.

    Every rule comes from `tpu.isa.LAYOUTS` and the `TPUConfig`: the opcode,
    reserved bits, enumerations and field ranges (ILLEGAL_OPCODE,
    ILLEGAL_FIELD), and the UB, accumulator, weight-memory and host address
    ranges; and, beyond `tpu.isa.check`, that an RHM or WHM moves only host
    bytes inside one of the DMA ``windows`` (HOST_RANGE). Convolution and
    pooling geometry need divisions, on a serial divider that takes as many
    cycles as the dividend has bits (with ``config.serial_decode`` 24
    cycles each, `SMALL_DIVISION_CYCLES`); `decode_cycles` gives the cycles from
    ``start`` to ``done`` of every word: 3 but for an MMC with CONV (one
    division) and an ACT with windowed pooling (up to three). Every result
    is registered, and no product, sum and comparison are chained in one
    cycle: the outputs come from flip-flops and feed the sequencer's issue
    logic without adding to its depth. With ``config.serial_decode`` the
    products are multiplied a bit a cycle on one multiplier clamped at the
    UB's size (`product_cycles`); with ``config.serial_issue`` no ranges
    are registered (``ranges`` stays invalid: nothing compares them).

    Members
    -------
    start : In(1)
        A new ``word`` is presented: it is taken in this cycle (and need
        not be held), as is what the word alone decides (its opcode and
        fields, each span's end); the stages after read only registers.
        Only while idle (not before the cycle after ``done``).
    word : In(128)
    windows : In(DmaWindows(config))
        Sampled from the cycle of ``start`` (each window's end is
        registered, `WindowLimits`) until ``done``: the host interface must
        not change them while an instruction is being decoded or waits to
        issue.
    done : Out(1)
        ``fault`` and the derived values below are valid for ``word``.
    fault : Out(4)
        The lowest-numbered `tpu.isa.Fault` the instruction breaks, or NONE.
    ub_last : Out(25)
        MMC: the largest UB row read; ACT: the largest UB row written.
    out_rows : Out(24)
        ACT: the UB rows written.
    ranges : Out(Ranges)
        The UB and accumulator rows the instruction reads and writes (what
        the sequencer's interlocks compare), valid from the cycle before
        ``done``, so that the comparisons can be registered too.
    held : Out(128)
        The word being decoded, registered, from the cycle after ``start``
        until ``done``; once done, it follows ``word`` without
        ``config.serial_issue``, and with it stays until the next
        ``start`` (the small sequencer issues it from here: no copy).
    """

    def __init__(self, config):
        if not isinstance(config, TPUConfig):
            raise TypeError(f"InstructionDecoder needs a TPUConfig, not {config!r}")
        self._config = config
        super().__init__({
            "start":    In(1),
            "word":     In(INSTRUCTION_BITS),
            "windows":  In(DmaWindows(config)),
            "done":     Out(1),
            "fault":    Out(4),
            "ub_last":  Out(25),
            "out_rows": Out(24),
            "ranges":   Out(Ranges),
            "held":     Out(INSTRUCTION_BITS),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self._config
        # The word is taken in the cycle of ``start`` (PRESENT): what it
        # alone decides is worked out then, from the word as it arrives (in
        # the sequencer, the instruction queue's output register), and
        # registered with it. START and the stages after it read only
        # registers.
        new = self.word
        word = Signal(INSTRUCTION_BITS)
        # With parallel issue the word and what it alone decides are
        # registered in every cycle the decoder is idle, not only in the
        # cycle of ``start``, which enables only the FSM: so the enable of
        # these few hundred flip-flops is a flip-flop (`taking`) and not the
        # sequencer's issue decision (the ulx3s16 chip's critical path went
        # from its units' ready through ``start`` into these enables, 8 ns
        # of it on that one net). Nothing reads them once the stages after
        # START are done. The small form keeps them enabled by ``start``.
        if cfg.serial_issue:
            taking = self.start
        else:
            taking = Signal(init=1)
        m.d.comb += self.held.eq(word)
        with m.If(taking):
            m.d.sync += word.eq(new)
        opcode = word[:8]

        def legality(w):
            """(legal opcode, an illegal field) of `w`, from the layout table."""
            legal_opcode = Signal()
            illegal_field = Signal()
            for op, fields in LAYOUTS.items():
                if not cfg.mlas_rounding:
                    # A chip without the MLAS rounding takes ACT's flag as
                    # a reserved bit: ILLEGAL_FIELD.
                    fields = [f for f in fields if f.name != "mlas_round"]
                with m.If(w[:8] == int(op)):
                    m.d.comb += legal_opcode.eq(1)
                    by_name = {f.name: f for f in fields}
                    # Conditional fields are checked below: zero when inactive.
                    defined = 0xFF
                    for f in fields:
                        defined |= f.mask
                    reserved = ((1 << INSTRUCTION_BITS) - 1) & ~defined
                    bad = [(w & reserved) != 0] if reserved else []
                    for f in fields:
                        value = w[f.lsb:f.lsb + f.width]
                        value = value.as_signed() if f.signed else value
                        low, high = f.legal
                        natural = (-(1 << (f.width - 1)), (1 << (f.width - 1)) - 1) if f.signed \
                            else (0, (1 << f.width) - 1)
                        checks = []
                        if low > natural[0]:
                            checks.append(value < low)
                        if high < natural[1]:
                            checks.append(value > high)
                        if f.when is None:
                            bad.extend(checks)
                            continue
                        cond = by_name[f.when[0]]
                        cond_value = w[cond.lsb:cond.lsb + cond.width]
                        active = Cat(*[cond_value == v for v in f.when[1]]).any()
                        inactive_bits = value != 0
                        bad.append(Mux(active, Cat(*checks).any() if checks else 0, inactive_bits))
                    if bad:
                        m.d.comb += illegal_field.eq(Cat(*bad).any())
            return legal_opcode, illegal_field

        # Geometry that needs division, done on the serial divider.
        # Every divisor is a 16-bit field (or the 4-bit stride): the small
        # decoder's remainder, its running remainder and its divisor are that
        # wide. A zero divisor is an illegal field; only the cycles of its
        # word matter, and an ACT's are kept below (`in_w` zero).
        if cfg.serial_decode:
            # The divisor registered as its complement (`complemented`);
            # every division 24 cycles (`length`), with no search for the
            # dividend's leading one.
            m.submodules.div = div = SerialDivider(24, divisor_width=16, complemented=True,
                                                   length=SMALL_DIVISION_CYCLES)
        else:
            m.submodules.div = div = SerialDivider(24)
        act = {name: field(word, Opcode.ACT, name) for name in _fields(Opcode.ACT)}
        mmc = {name: field(word, Opcode.MMC, name) for name in _fields(Opcode.MMC)}
        new_act = {name: field(new, Opcode.ACT, name) for name in _fields(Opcode.ACT)}
        new_mmc = {name: field(new, Opcode.MMC, name) for name in _fields(Opcode.MMC)}

        # The opcode, decoded in PRESENT.
        ops = (Opcode.RHM, Opcode.WHM, Opcode.RW, Opcode.MMC, Opcode.ACT, Opcode.LDQ, Opcode.LDL)
        is_op = {op: Signal(name=f"is_{op.name.lower()}") for op in ops}
        is_act, is_mmc = is_op[Opcode.ACT], is_op[Opcode.MMC]
        windowed = Signal()
        conv = Signal()
        new_windowed = (new[:8] == Opcode.ACT) & ((new_act["pool"] == Pool.MAX) | (new_act["pool"] == Pool.AVG)) & \
            (new_act["rows"] != 0)
        new_conv = (new[:8] == Opcode.MMC) & new_mmc["conv"] & (new_mmc["rows"] != 0)

        win_bad = Signal()
        # The small decoder keeps the geometry only as far as its clamped
        # products read it: the pooled sizes and a convolution's last column
        # clamped at 2**ub_bits, its last row at 2**(ub_bits + 1), so that
        # `conv_y - 1` is exact below 2**ub_bits too.
        small_geometry = cfg.serial_decode
        out_h = Signal(cfg.ub_rows.bit_length() + 1 if small_geometry else 24)
        out_w = Signal(cfg.ub_rows.bit_length() + 1 if small_geometry else 24)
        # `out_h` and `out_w` clamped at the UB's size (`bounded_operand`),
        # for the pooled rows' bounded product.
        out_h_bound = Signal(cfg.ub_rows.bit_length() + 1)
        out_w_bound = Signal(cfg.ub_rows.bit_length() + 1)
        conv_y = Signal(cfg.ub_rows.bit_length() + 2 if small_geometry else 24)
        conv_x = Signal(cfg.ub_rows.bit_length() + 1 if small_geometry else 24)
        # Where `conv_y - 1` and `out_w - 1` are multiplied whole (not on an
        # iCE40, whose bounded terms keep their form, nor in the small
        # decoder's serial products), each is registered, signed as the
        # difference is (a zero `conv_y` gives -1 as before: PICK does not
        # take that product), so that its multiplier reads a flip-flop: the
        # twenty-third ulx3s16 build's critical path was `conv_y` through
        # the decrement's carry chain into a MULT18X18D. `conv_y_less` is
        # loaded with `conv_y`; `out_w_less` follows the word register a
        # cycle behind: valid from CONV's first cycle, which the division
        # keeps a cycle or more before PRODUCT reads it. Only on the chips
        # with the array in DSP bands (ulx3s16), whose routed path it was:
        # on the default chip the two registers left its own paths as they
        # were but moved an unrelated one (the queue's word into
        # `bad_field`) a LUT level deeper in Yosys's mapping, over the
        # sequencer's budget.
        less_registered = not small_geometry and not is_ice40(platform) and cfg.dsp_bands
        # The steps those products multiply by follow the word register a
        # cycle behind in the same way, in flip-flops the placer can put
        # beside the multipliers: the twenty-fifth ulx3s16 build's critical
        # path was the word's `row_step` over 8.54 ns of wire into a
        # MULT18X18D.
        if less_registered:
            conv_y_less = Signal(signed(len(conv_y) + 1))
            out_w_less = Signal(signed(len(mmc["out_w"]) + 1))
            row_step = Signal.like(mmc["row_step"], name="row_step")
            col_step = Signal.like(mmc["col_step"], name="col_step")
            m.d.sync += [out_w_less.eq(mmc["out_w"] - 1), row_step.eq(mmc["row_step"]),
                         col_step.eq(mmc["col_step"])]
        else:
            conv_y_less = conv_y - 1
            out_w_less = mmc["out_w"] - 1
            row_step, col_step = mmc["row_step"], mmc["col_step"]
        # The stages after the geometry: each registers its results, so no
        # product, sum and comparison are chained in one cycle. `derive`
        # registers the ranges and derived values, `check` the fault, and
        # `done` rises in the cycle after (`DECODE_STAGES`).
        derive = Signal()
        check = Signal()
        done = Signal()

        # Checks of the word alone: PRESENT registers the opcode and field
        # checks and each span's end, START compares the ends.
        bad_opcode = Signal()
        bad_field = Signal()
        word_ub_bad = Signal()
        acc_bad = Signal()
        wmem_bad = Signal()
        host_bad = Signal()

        ub_bits = cfg.ub_rows.bit_length()
        # The geometry's products only matter below the UB's size (at or above
        # it the instruction faults): on an iCE40, whose 8 DSP blocks the
        # array needs, they are bounded products in logic. On an ECP5 only
        # with the array in DSP bands, which leave too few blocks for them:
        # otherwise the 9 MULT18X18D they take cost less logic as soft PEs.
        bounded = is_ice40(platform) or (is_ecp5(platform) and cfg.dsp_bands)
        if bounded:
            def product_terms(a, b):
                # `conv_y - 1` and `out_w - 1` are signed, and used only
                # where they are not negative: their unsigned bits.
                a = Value.cast(a)
                return bounded_product_terms(a[:-1] if a.shape().signed else a, b, ub_bits, 4)
        else:
            def product_terms(a, b):
                return [a * b]

        # With `serial_decode` the products are at most 2**ub_bits (saturated
        # there: `_serial_products`), so their sums need ub_bits + 2 bits.
        part_bits = ub_bits + 2 if cfg.serial_decode else 48
        rows_part = Signal(part_bits)
        full_rows_part = Signal(part_bits)
        col_part = Signal(part_bits)
        full_col_part = Signal(part_bits)
        # The small decoder's UB rows (`narrow`): an ACT's output rows
        # clamped at 2**ub_bits, and the last row read or written summed
        # from operands so clamped, on ub_bits + 3 bits. Clamping keeps
        # every sum exact below 2**ub_bits and at or above the UB's size
        # whenever the exact one is, so the same words fault; an
        # instruction that issues has rows below the UB's size, exact.
        narrow = cfg.serial_decode
        rows_bits = ub_bits + 1 if narrow else 24
        last_bits = ub_bits + 3 if narrow else 48
        pooled_rows = Signal(rows_bits)
        if not cfg.serial_decode:
            # PRODUCT registers each product as the terms `product_terms`
            # leaves (two partial sums in logic, one product on a DSP
            # block); SUM adds them into its sums and registers the pooled
            # rows, which only DERIVE reads: the products' last adds leave
            # PRODUCT's cycle without a cycle more (the twelfth ulx3s16
            # build's critical path was `out_h x out_w` in one cycle).
            staged = []

            def terms_sum(name, terms, width):
                regs = [Signal(width, name=f"{name}_term{i}") for i in range(len(terms))]
                staged.extend(reg.eq(term) for reg, term in zip(regs, terms))
                return sum(regs[1:], regs[0])

            if is_ice40(platform):
                # (conv_y - 1) * row_step as one product less; the bounded
                # one stays exact or at least the UB's size (an operand
                # clamped at 2**ub_bits: (2**ub_bits - 1) * row_step).
                row_step = Mux(mmc["row_step"] >> ub_bits, 1 << ub_bits, mmc["row_step"])
                m.d.comb += [
                    rows_part.eq(terms_sum("rows_part", product_terms(conv_y, mmc["row_step"]),
                                           part_bits)),
                    full_rows_part.eq(rows_part - row_step),
                ]
            else:
                m.d.comb += [
                    rows_part.eq(terms_sum("rows_part", [conv_y * row_step], part_bits)),
                    full_rows_part.eq(terms_sum("full_rows_part", [conv_y_less * row_step],
                                                part_bits)),
                ]
            m.d.comb += [
                col_part.eq(terms_sum("col_part", product_terms(conv_x, col_step), part_bits)),
                full_col_part.eq(terms_sum("full_col_part",
                                           product_terms(out_w_less, col_step), part_bits)),
            ]
            if bounded:
                # The pooled sizes clamped as their divisions end, so that
                # PRODUCT's partial products read flip-flops directly (the
                # clamp's compare before them was the ulx3s16 sequencer's
                # deepest path, 7 levels).
                pooled_terms = bounded_product_terms(out_h_bound, out_w_bound, ub_bits, 4, clamped=True)
            else:
                pooled_terms = product_terms(out_h, out_w)
            pooled_sum = terms_sum("pooled_rows", pooled_terms, 24)
        # SUM and PICK: the last UB row of a convolution, from the end of its
        # last full line of output pixels or of its last pixel.
        tail = Signal(part_bits)
        full = Signal(part_bits)
        conv_span = Signal(part_bits)
        if cfg.serial_decode:
            # Each end is summed on the multiplier as its two products are
            # made, from the first UB row read, saturated at 2**ub_bits as
            # the products are: below it exact, at or above the UB's size
            # whenever the exact sum is. So no product has a register of its
            # own, and no add follows them: the last pixel's end is kept in
            # `tail`, and the last full line's end and the pooled rows stay
            # in the multiplier's sum (`full`, `pooled_rows`). SUM is then a
            # cycle of waiting, kept so that the cycles stay those of
            # `decode_cycles`.
            tail = Signal(ub_bits + 1)
            conv_span = Signal(ub_bits + 1)
            first_row = _clamped(mmc["ub"], ub_bits)
            multiply, multiplied, full = self._serial_products(m, ub_bits, conv, [
                (conv_y, mmc["row_step"], first_row, None),
                (conv_x, mmc["col_step"], None, tail),
                ((conv_y - 1)[:len(conv_y)], mmc["row_step"], first_row, None),
                ((mmc["out_w"] - 1)[:16], mmc["col_step"], None, None),
                (out_h, out_w, 0, None),
            ], clamped_already=(conv_x, out_h, out_w))
            pooled_rows = full

        # The next division's operands, registered in the cycle before it
        # starts (the first's chosen in PRESENT, the pooling geometry's
        # differences and stride as the division before ends): the divider
        # reads flip-flops alone, so no subtract or state decode is in
        # series with its leading-one search.
        dividend = Signal(24)
        divisor = Signal(24)

        def bound_of(size):
            # `size` as `bounded_operand(div.quotient + 1)` where the pooled
            # product is bounded in registered terms; its compare made on
            # the quotient beside the add rather than after it.
            if not bounded or cfg.serial_decode:
                return []
            limit = 1 << ub_bits
            return [size.eq(Mux(div.quotient >= limit - 1, limit, (div.quotient + 1)[:ub_bits + 1]))]
        m.d.comb += [div.dividend.eq(dividend), div.divisor.eq(divisor)]

        def divisor_of(value):
            # The divisor as the divider takes it: the small one's registered
            # complemented (`SerialDivider` ``complemented``).
            if not cfg.serial_decode:
                return value
            value = Value.cast(value)
            return ~Cat(value, C(0, len(divisor) - len(value)))

        def pooled_size():
            # `quotient + 1`; the small geometry's clamped at 2**ub_bits from
            # the quotient's own bits (no 24-bit add; a low part of all ones
            # reaches 2**ub_bits by itself).
            if not small_geometry:
                return div.quotient + 1
            return Mux(div.quotient[ub_bits:].any(), 1 << ub_bits, div.quotient[:ub_bits] + 1)

        def zero_width_bad():
            # The small divider's remainder by zero is its dividend's low 16
            # bits, which may be zero: an `in_w` of zero ends the geometry
            # as the wide remainder (`rows`, not zero) does.
            return [act["in_w"] == 0] if small_geometry else []

        with m.FSM() as fsm:
            with m.State("IDLE"):
                with m.If(self.start):
                    m.d.sync += [done.eq(0), win_bad.eq(0)]
                    m.next = "START"
            with m.State("START"):
                with m.If(windowed | conv):
                    m.d.comb += div.start.eq(1)
                with m.If(windowed):
                    m.next = "IN_H"
                with m.Elif(conv):
                    m.next = "CONV"
                with m.Else():
                    m.d.comb += derive.eq(1)
                    m.next = "CHECK"
            with m.State("CONV"):
                with m.If(div.done):
                    if small_geometry:
                        m.d.sync += [conv_y.eq(_clamped(div.quotient, ub_bits + 1)),
                                     conv_x.eq(_clamped(div.remainder, ub_bits))]
                    else:
                        m.d.sync += [conv_y.eq(div.quotient), conv_x.eq(div.remainder)]
                        if less_registered:
                            m.d.sync += conv_y_less.eq(div.quotient - 1)
                    m.next = "PRODUCT"
            with m.State("IN_H"):
                with m.If(div.done):
                    k = act["pool_size"]
                    m.d.sync += [dividend.eq(div.quotient - k),  # in_h - pool_size
                                 divisor.eq(divisor_of(act["pool_stride"]))]
                    if small_geometry:
                        # `v < k` as the sign of `v - k` (`at_most`).
                        bad = [div.remainder != 0, ~at_most(k, div.quotient), ~at_most(k, act["in_w"]),
                               *zero_width_bad()]
                    else:
                        bad = [div.remainder != 0, div.quotient < k, act["in_w"] < k, *zero_width_bad()]
                    with m.If(functools.reduce(lambda a, b: a | b, bad)):
                        m.d.sync += win_bad.eq(1)
                        m.next = "PRODUCT"
                    with m.Else():
                        m.next = "OUT_H_START"
            with m.State("OUT_H_START"):
                m.d.comb += div.start.eq(1)
                m.next = "OUT_H"
            with m.State("OUT_H"):
                with m.If(div.done):
                    m.d.sync += [out_h.eq(pooled_size()), *bound_of(out_h_bound),
                                 dividend.eq(act["in_w"] - act["pool_size"])]
                    m.next = "OUT_W_START"
            with m.State("OUT_W_START"):
                m.d.comb += div.start.eq(1)
                m.next = "OUT_W"
            with m.State("OUT_W"):
                with m.If(div.done):
                    m.d.sync += [out_w.eq(pooled_size()), *bound_of(out_w_bound)]
                    m.next = "PRODUCT"
            with m.State("PRODUCT"):
                if cfg.serial_decode:
                    m.d.comb += multiply.eq(1)
                else:
                    m.d.sync += staged
                m.next = "MULTIPLY" if cfg.serial_decode else "SUM"
            if cfg.serial_decode:
                with m.State("MULTIPLY"):
                    with m.If(multiplied):
                        m.next = "SUM"
            with m.State("SUM"):
                if not cfg.serial_decode:
                    m.d.sync += [tail.eq(rows_part + col_part), full.eq(full_rows_part + full_col_part)]
                    m.d.sync += pooled_rows.eq(pooled_sum)
                m.next = "PICK"
            with m.State("PICK"):
                if small_geometry:
                    m.d.sync += conv_span.eq(Mux((conv_y != 0) & ~at_most(full, tail), full, tail))
                else:
                    m.d.sync += conv_span.eq(Mux((conv_y != 0) & (full > tail), full, tail))
                m.next = "DERIVE"
            with m.State("DERIVE"):
                m.d.comb += derive.eq(1)
                m.next = "CHECK"
            with m.State("CHECK"):
                m.d.comb += check.eq(1)
                m.d.sync += done.eq(1)
                m.next = "IDLE"
        if not cfg.serial_issue:
            # Idle from the cycle after CHECK until ``start``.
            with m.If(self.start):
                m.d.sync += taking.eq(0)
            with m.Elif(check):
                m.d.sync += taking.eq(1)

        # ACT output rows: without windowed pooling, decided in PRESENT.
        plain_out_rows = Signal(rows_bits)
        out_rows = Signal(rows_bits)
        m.d.comb += out_rows.eq(Mux(windowed, pooled_rows, plain_out_rows))

        # MMC: the largest UB row read.
        mmc_last = Signal(last_bits)
        mmc_ub, mmc_rows = mmc["ub"], mmc["rows"]
        act_ub = act["ub"]
        if narrow:
            mmc_ub, mmc_rows = _clamped(mmc_ub, ub_bits), _clamped(mmc_rows, ub_bits)
            act_ub = _clamped(act_ub, ub_bits)
        if cfg.serial_decode:
            # The span holds the first row already (`_serial_products`).
            with m.If(conv):
                m.d.comb += mmc_last.eq(conv_span)
            with m.Else():
                m.d.comb += mmc_last.eq(mmc_ub + mmc_rows - 1)
        else:
            with m.If(conv):
                m.d.comb += mmc_last.eq(mmc_ub + conv_span)
            with m.Else():
                m.d.comb += mmc_last.eq(mmc_ub + mmc_rows - 1)

        # RHM and WHM: inside one DMA window. Each window's end is
        # registered beside the decoder (`WindowLimits`); PRESENT registers
        # the span's end and whether it starts inside each window, START
        # compares the registered end with the registered window ends: no
        # add and compare are chained in one cycle.
        new_dma = {name: field(new, Opcode.RHM, name) for name in _fields(Opcode.RHM)}
        # The small decoder keeps a span's address and end at the windows'
        # width (`host_addr_bits`) and one bit for an address above it, which
        # no window reaches: a span there faults as its 64-bit end would.
        # Its spans are checked only when not empty (``host_check``), so
        # each window's limit is its exact end and a span's end above
        # 2**width is tested apart (`WindowLimits` ``exact``); the span is
        # registered as the complement of its last byte (`span_mark`), its
        # byte count from the rows' low ub_bits bits: exact wherever the
        # check decides the fault, as more rows than the UB holds fault
        # UB_RANGE first.
        narrow_host = cfg.serial_decode and cfg.host_addr_bits < 64
        limits = WindowLimits(m, self.windows, exact=narrow_host)
        host_check = Signal()
        host_above = Signal(len(self.windows))
        host_end = Signal(66)
        host_addr = new_dma["host"]
        if narrow_host:
            host_high = Signal()
            host_addr = new_dma["host"][:limits.width]
            host_end = Signal(limits.width + 1)

        # The word's UB, accumulator or weight-memory span (first row, and
        # how many), ended in PRESENT and compared with the memory's size in
        # START.
        # The small decoder clamps the first row and the count at the
        # largest of the three memories' sizes' powers of two, as the UB
        # rows above: the same spans end beyond their memory.
        span_bits = max(cfg.ub_rows, cfg.acc_rows, cfg.weight_mem_tiles).bit_length()
        span_end = Signal(span_bits + 2 if narrow else 26)
        # (One adder for every opcode's span: its operands chosen first.)
        span_first = Signal(span_bits + 1)
        span_count = Signal(span_bits + 1)
        span_in = {kind: Signal(name=f"span_in_{kind}") for kind in ("ub", "acc", "wmem")}
        span_size = {"ub": cfg.ub_rows, "acc": cfg.acc_rows, "wmem": cfg.weight_mem_tiles}
        new_rw = {name: field(new, Opcode.RW, name) for name in _fields(Opcode.RW)}
        spans = {
            Opcode.RHM: ("ub", new_dma["ub"], new_dma["rows"]),
            Opcode.WHM: ("ub", new_dma["ub"], new_dma["rows"]),
            Opcode.RW: ("wmem", new_rw["tile"], new_rw["count"]),
            Opcode.MMC: ("acc", new_mmc["acc"], new_mmc["rows"]),
            Opcode.ACT: ("acc", new_act["acc"], new_act["rows"]),
            Opcode.LDQ: ("ub", field(new, Opcode.LDQ, "ub"), C(ldq_rows(cfg), 24)),
            Opcode.LDL: ("ub", field(new, Opcode.LDL, "ub"), C(ldl_rows(cfg), 24)),
        }

        # Limits of the activation unit this chip was built with.
        unsupported = (new[:8] == Opcode.ACT) & (
            (new_windowed & (new_act["in_w"] > cfg.pool_max_width)) |
            ((new_act["pool"] == Pool.GLOBAL_AVG) & (new_act["rows"] > MAX_POOL_COUNT)))

        legal_opcode, illegal_field = legality(new)
        with m.If(taking):
            m.d.sync += [bad_opcode.eq(~legal_opcode), bad_field.eq(illegal_field | unsupported),
                         windowed.eq(new_windowed), conv.eq(new_conv),
                         *[is_op[op].eq(new[:8] == op) for op in ops],
                         host_check.eq(0), host_above.eq(limits.above_base(host_addr)),
                         host_end.eq(limits.span_mark(host_addr, (new_dma["rows"][:ub_bits] * cfg.rows - 1)
                                                      [:(cfg.ub_rows * cfg.rows - 1).bit_length()])
                                     if narrow_host else host_addr + new_dma["rows"] * cfg.rows),
                         span_end.eq(0), *[s.eq(0) for s in span_in.values()],
                         dividend.eq(Mux(new_windowed, new_act["rows"], new_mmc["rows"] - 1)),
                         divisor.eq(divisor_of(Mux(new_windowed, new_act["in_w"], new_mmc["out_w"])))]
            with m.If(new_act["rows"] == 0):
                m.d.sync += plain_out_rows.eq(0)
            with m.Elif(new_act["pool"] == Pool.GLOBAL_AVG):
                m.d.sync += plain_out_rows.eq(1)
            with m.Else():
                m.d.sync += plain_out_rows.eq(new_act["rows"])
                if narrow:
                    m.d.sync += plain_out_rows.eq(_clamped(new_act["rows"], ub_bits))
            if narrow_host:
                m.d.sync += host_high.eq(new_dma["host"][limits.width:] != 0)
            with m.Switch(new[:8]):
                for op, (kind, first, count_) in spans.items():
                    with m.Case(op):
                        if narrow:
                            m.d.comb += [span_first.eq(_clamped(first, span_bits)),
                                         span_count.eq(_clamped(count_, span_bits))]
                            m.d.sync += span_end.eq(span_first + span_count)
                        else:
                            m.d.sync += span_end.eq(first + count_)
                        m.d.sync += span_in[kind].eq(count_ != 0)
                        if op in (Opcode.RHM, Opcode.WHM):
                            m.d.sync += host_check.eq(count_ != 0)

        with m.If(fsm.ongoing("START")):
            host_outside = ~limits.inside(host_above, host_end)
            if narrow_host:
                host_outside = host_high | limits.end_beyond(host_end) | host_outside
            m.d.sync += [host_bad.eq(host_check & host_outside),
                         word_ub_bad.eq(span_in["ub"] & (span_end > span_size["ub"])),
                         acc_bad.eq(span_in["acc"] & (span_end > span_size["acc"])),
                         wmem_bad.eq(span_in["wmem"] & (span_end > span_size["wmem"]))]

        # DERIVE: what the sequencer and the units need, registered.
        ub_last = Signal(last_bits)
        out_rows_r = Signal(rows_bits)
        ranges = {kind: self.ranges[kind] for kind in ("ub_r", "ub_w", "acc_r", "acc_w")}

        def rows_range(kind, first, count_):
            return [ranges[kind].valid.eq(count_ != 0), ranges[kind].lo.eq(first),
                    ranges[kind].hi.eq(first + count_ - 1)]

        dma = {name: field(word, Opcode.RHM, name) for name in _fields(Opcode.RHM)}
        with m.If(derive):
            m.d.sync += [out_rows_r.eq(out_rows), ub_last.eq(Mux(is_act, act_ub + out_rows - 1, mmc_last))]
            m.d.sync += [r.valid.eq(0) for r in ranges.values()]
            # Serial issue compares no ranges: they stay invalid.
            if not cfg.serial_issue:
                with m.If(is_op[Opcode.RHM]):
                    m.d.sync += rows_range("ub_w", dma["ub"], dma["rows"])
                with m.If(is_op[Opcode.WHM]):
                    m.d.sync += rows_range("ub_r", dma["ub"], dma["rows"])
                with m.If(is_mmc):
                    m.d.sync += [ranges["ub_r"].valid.eq(mmc["rows"] != 0), ranges["ub_r"].lo.eq(mmc["ub"]),
                                 ranges["ub_r"].hi.eq(mmc_last)]
                    m.d.sync += rows_range("acc_w", mmc["acc"], mmc["rows"])
                with m.If(is_act):
                    m.d.sync += rows_range("acc_r", act["acc"], act["rows"])
                    m.d.sync += [ranges["ub_w"].valid.eq(out_rows != 0), ranges["ub_w"].lo.eq(act["ub"]),
                                 ranges["ub_w"].hi.eq(act["ub"] + out_rows - 1)]
                with m.If(is_op[Opcode.LDQ]):
                    m.d.sync += rows_range("ub_r", field(word, Opcode.LDQ, "ub"), ldq_rows(cfg))
                with m.If(is_op[Opcode.LDL]):
                    m.d.sync += rows_range("ub_r", field(word, Opcode.LDL, "ub"), ldl_rows(cfg))

        # CHECK: the fault, the lowest-numbered first.
        mmc_ub_bad = is_mmc & (mmc["rows"] != 0) & (ub_last >= cfg.ub_rows)
        act_ub_bad = is_act & (out_rows_r != 0) & (ub_last > cfg.ub_rows - 1)
        ub_bad = word_ub_bad | mmc_ub_bad | act_ub_bad
        with m.If(check):
            with m.If(bad_opcode):
                m.d.sync += self.fault.eq(Fault.ILLEGAL_OPCODE)
            with m.Elif(bad_field | (windowed & win_bad)):
                m.d.sync += self.fault.eq(Fault.ILLEGAL_FIELD)
            with m.Elif(ub_bad):
                m.d.sync += self.fault.eq(Fault.UB_RANGE)
            with m.Elif(acc_bad):
                m.d.sync += self.fault.eq(Fault.ACC_RANGE)
            with m.Elif(wmem_bad):
                m.d.sync += self.fault.eq(Fault.WEIGHT_MEM_RANGE)
            with m.Elif(host_bad):
                m.d.sync += self.fault.eq(Fault.HOST_RANGE)
            with m.Else():
                m.d.sync += self.fault.eq(Fault.NONE)

        m.d.comb += [
            self.done.eq(done),
            self.out_rows.eq(out_rows_r),
            self.ub_last.eq(ub_last),
        ]
        return m

    @staticmethod
    def _serial_products(m, ub_bits, conv, products, clamped_already=()):
        """The geometry's products on one shift-and-add multiplier, a bit of
        the multiplier a cycle, `product_cycles` cycles each: the four of a
        convolution (``conv``) or else the last one, into their sums.
        Each of `products` is ``(a, b, start, target)``: with a `start` the
        sum begins there (a value below ``2**ub_bits + 1``), without one the
        product is added to the sum before it; with a `target` the sum is
        registered there as the product ends, without one it stays in the
        sum (until the next `start`). Each operand is clamped at
        ``2**ub_bits`` and so is each partial sum: a sum is exact below
        ``2**ub_bits`` and ``2**ub_bits`` at or above it, so a convolution's
        ends reach the UB's size exactly when the exact ones do, and the
        same words fault.

        The operands in `clamped_already` are registered clamped and are
        taken as they are. Every `b` must hold still while its product is
        made: its bits are read in place, one a step.

        Returns ``(multiply, multiplied, sum)``: a pulse that starts the
        products, a pulse in the cycle the last one is registered, and the
        sum's register."""
        limit = 1 << ub_bits
        width = ub_bits + 1

        def clamped(value):
            if any(value is operand for operand in clamped_already):
                return value
            return _clamped(Value.cast(value), ub_bits)

        def saturated(value):
            return _clamped(value, ub_bits)

        multiply = Signal()
        multiplied = Signal()
        which = Signal(range(len(products)))
        a = Signal(width)
        acc = Signal(width)
        step = Signal(range(width))
        busy = Signal()
        last = len(products) - 1

        def load(index):
            operand_a, operand_b, start, _ = products[index]
            begin = [] if start is None else [acc.eq(start)]
            return [which.eq(index), a.eq(clamped(operand_a)), *begin, step.eq(0)]

        # The multiplier's bits are read where they are held, a bit a step,
        # not loaded into a register of their own and shifted.
        b = Signal(width)
        with m.Switch(which):
            for index, (_, operand_b, _, _) in enumerate(products):
                with m.Case(index):
                    m.d.comb += b.eq(clamped(operand_b))

        with m.If(multiply):
            m.d.sync += busy.eq(1)
            with m.If(conv):
                m.d.sync += load(0)
            with m.Else():
                m.d.sync += load(last)
        with m.Elif(busy):
            sum_ = Signal(width + 1)
            m.d.comb += sum_.eq(acc + Mux(b.bit_select(step, 1), a, 0))
            m.d.sync += [acc.eq(saturated(sum_)), a.eq(saturated(a << 1)[:width]),
                         step.eq(step + 1)]
            with m.If(step == width - 1):
                with m.Switch(which):
                    for index, (*_, target) in enumerate(products):
                        with m.Case(index):
                            if target is not None:
                                m.d.sync += target.eq(saturated(sum_))
                            if index + 1 < last:
                                m.d.sync += load(index + 1)
                            else:
                                m.d.sync += busy.eq(0)
                                m.d.comb += multiplied.eq(1)
        return multiply, multiplied, acc
