"""Instruction decoder: legality and range checks, generated from the ISA table."""

import functools

from amaranth import *
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ..config import TPUConfig
from ..isa import LAYOUTS, MAX_POOL_COUNT, Fault, Opcode, Pool, ldl_rows, ldq_rows, INSTRUCTION_BITS
from .bounded_product import bounded_product
from .device_family import is_ecp5, is_ice40
from .serial_divider import SerialDivider, divider_cycles
from .window import DmaWindows, inside_a_window


__all__ = ["InstructionDecoder", "field", "decode_cycles"]


def _fields(opcode):
    return {f.name: f for f in LAYOUTS[Opcode(opcode)]}


def _values(word, opcode):
    return {f.name: f.extract(word) for f in LAYOUTS[opcode]}


def decode_cycles(word):
    """Cycles from `InstructionDecoder`'s ``start`` to its ``done`` for the
    128-bit `word` (an int, or its 16 bytes), legal or not.

    2 for most words. An MMC with CONV and rows divides ``rows - 1`` by
    ``out_w``: ``3 + divider_cycles(rows - 1)``. An ACT with MAX or AVG
    pooling and rows divides ``rows`` by ``in_w`` (``in_h``, the quotient):
    ``3 + divider_cycles(rows)`` when the rows are not whole image rows of at
    least ``pool_size`` x ``pool_size`` pixels (the instruction faults),
    else two more divisions, of ``in_h - pool_size`` and of ``in_w -
    pool_size`` by the stride, and 4 cycles around them.
    """
    return _decode_cycles(word if isinstance(word, int) else int.from_bytes(word, "little"))


@functools.lru_cache(maxsize=1 << 14)
def _decode_cycles(word):
    # Cached: programs repeat their words.
    opcode = word & 0xFF
    if opcode == Opcode.MMC:
        mmc = _values(word, Opcode.MMC)
        if mmc["conv"] and mmc["rows"]:
            return 3 + divider_cycles(mmc["rows"] - 1)
    elif opcode == Opcode.ACT:
        act = _values(word, Opcode.ACT)
        rows, in_w, k = act["rows"], act["in_w"], act["pool_size"]
        if act["pool"] in (Pool.MAX, Pool.AVG) and rows:
            cycles = 3 + divider_cycles(rows)
            if in_w == 0 or rows % in_w or rows // in_w < k or in_w < k:
                return cycles
            return cycles + 4 + divider_cycles(rows // in_w - k) + divider_cycles(in_w - k)
    return 2


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
    cycles as the dividend has bits; `decode_cycles` gives the cycles from
    ``start`` to ``done`` of every word: 2 but for an MMC with CONV (one
    division) and an ACT with windowed pooling (up to three).

    Members
    -------
    start : In(1)
        A new ``word`` is presented (and held until the next start).
    word : In(128)
    windows : In(DmaWindows(config))
        Sampled in the cycle after ``start``: the host interface must not
        change them while an instruction is being decoded or waits to issue.
    done : Out(1)
        ``fault`` and the derived values below are valid for ``word``.
    fault : Out(4)
        The lowest-numbered `tpu.isa.Fault` the instruction breaks, or NONE.
    ub_last : Out(25)
        MMC: the largest UB row read; ACT: the largest UB row written.
    out_rows : Out(24)
        ACT: the UB rows written.
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
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self._config
        word = self.word
        opcode = word[:8]

        # Configuration-independent legality, from the layout table.
        legal_opcode = Signal()
        illegal_field = Signal()
        for op, fields in LAYOUTS.items():
            with m.If(opcode == int(op)):
                m.d.comb += legal_opcode.eq(1)
                by_name = {f.name: f for f in fields}
                # Conditional fields are checked below: zero when inactive.
                defined = 0xFF
                for f in fields:
                    defined |= f.mask
                reserved = ((1 << INSTRUCTION_BITS) - 1) & ~defined
                bad = [(word & reserved) != 0] if reserved else []
                for f in fields:
                    value = word[f.lsb:f.lsb + f.width]
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
                    cond_value = word[cond.lsb:cond.lsb + cond.width]
                    active = Cat(*[cond_value == v for v in f.when[1]]).any()
                    inactive_bits = value != 0
                    bad.append(Mux(active, Cat(*checks).any() if checks else 0, inactive_bits))
                if bad:
                    m.d.comb += illegal_field.eq(Cat(*bad).any())

        # Geometry that needs division, done on the serial divider.
        m.submodules.div = div = SerialDivider(24)
        act = {name: field(word, Opcode.ACT, name) for name in _fields(Opcode.ACT)}
        mmc = {name: field(word, Opcode.MMC, name) for name in _fields(Opcode.MMC)}
        is_act = opcode == Opcode.ACT
        is_mmc = opcode == Opcode.MMC
        windowed = is_act & ((act["pool"] == Pool.MAX) | (act["pool"] == Pool.AVG)) & (act["rows"] != 0)
        conv = is_mmc & mmc["conv"] & (mmc["rows"] != 0)

        # RHM and WHM: inside one DMA window. The comparisons are wide
        # (65-bit window end) and would sit on the issue path, so the result
        # is registered with the geometry, which RHM and WHM do not need.
        dma = {name: field(word, Opcode.RHM, name) for name in _fields(Opcode.RHM)}
        dma_end = dma["host"] + dma["rows"] * cfg.rows
        inside = inside_a_window(m, self.windows, dma["host"], dma["rows"] * cfg.rows)
        outside_windows = Signal()

        in_h = Signal(24)
        win_bad = Signal()
        out_h = Signal(24)
        out_w = Signal(24)
        conv_y = Signal(24)
        conv_x = Signal(24)
        geometry_done = Signal()

        with m.FSM():
            with m.State("IDLE"):
                with m.If(self.start):
                    m.d.sync += [geometry_done.eq(0), win_bad.eq(0)]
                    m.next = "START"
            with m.State("START"):
                m.d.sync += outside_windows.eq(~inside)
                with m.If(windowed):
                    m.d.comb += [div.start.eq(1), div.dividend.eq(act["rows"]),
                                 div.divisor.eq(act["in_w"])]
                    m.next = "IN_H"
                with m.Elif(conv):
                    m.d.comb += [div.start.eq(1), div.dividend.eq(mmc["rows"] - 1),
                                 div.divisor.eq(mmc["out_w"])]
                    m.next = "CONV"
                with m.Else():
                    m.d.sync += geometry_done.eq(1)
                    m.next = "IDLE"
            with m.State("CONV"):
                with m.If(div.done):
                    m.d.sync += [conv_y.eq(div.quotient), conv_x.eq(div.remainder),
                                 geometry_done.eq(1)]
                    m.next = "IDLE"
            with m.State("IN_H"):
                with m.If(div.done):
                    m.d.sync += in_h.eq(div.quotient)
                    k = act["pool_size"]
                    with m.If((div.remainder != 0) | (div.quotient < k) | (act["in_w"] < k)):
                        m.d.sync += [win_bad.eq(1), geometry_done.eq(1)]
                        m.next = "IDLE"
                    with m.Else():
                        m.next = "OUT_H_START"
            with m.State("OUT_H_START"):
                m.d.comb += [div.start.eq(1), div.dividend.eq(in_h - act["pool_size"]),
                             div.divisor.eq(act["pool_stride"])]
                m.next = "OUT_H"
            with m.State("OUT_H"):
                with m.If(div.done):
                    m.d.sync += out_h.eq(div.quotient + 1)
                    m.next = "OUT_W_START"
            with m.State("OUT_W_START"):
                m.d.comb += [div.start.eq(1), div.dividend.eq(act["in_w"] - act["pool_size"]),
                             div.divisor.eq(act["pool_stride"])]
                m.next = "OUT_W"
            with m.State("OUT_W"):
                with m.If(div.done):
                    m.d.sync += [out_w.eq(div.quotient + 1), geometry_done.eq(1)]
                    m.next = "IDLE"

        # The geometry's products only matter below the UB's size (at or above
        # it the instruction faults): on an iCE40, whose 8 DSP blocks the
        # array needs, they are bounded products in logic. On an ECP5 only
        # with the array in DSP bands, which leave too few blocks for them:
        # otherwise the 9 MULT18X18D they take cost less logic as soft PEs.
        if is_ice40(platform) or (is_ecp5(platform) and cfg.dsp_bands):
            ub_bits = cfg.ub_rows.bit_length()

            def product(a, b):
                # `conv_y - 1` and `out_w - 1` are signed, and used only
                # where they are not negative: their unsigned bits.
                a = Value.cast(a)
                return bounded_product(a[:-1] if a.shape().signed else a, b, ub_bits)
        else:
            def product(a, b):
                return a * b

        # ACT output rows.
        out_rows = Signal(24)
        with m.If(act["rows"] == 0):
            m.d.comb += out_rows.eq(0)
        with m.Elif(act["pool"] == Pool.GLOBAL_AVG):
            m.d.comb += out_rows.eq(1)
        with m.Elif(windowed):
            m.d.comb += out_rows.eq(product(out_h, out_w))
        with m.Else():
            m.d.comb += out_rows.eq(act["rows"])

        # MMC: the largest UB row read.
        mmc_last = Signal(48)
        with m.If(conv):
            if is_ice40(platform):
                # (conv_y - 1) * row_step as one product less; the bounded
                # one stays exact or at least the UB's size (an operand
                # clamped at 2**ub_bits: (2**ub_bits - 1) * row_step).
                rows_part = product(conv_y, mmc["row_step"])
                row_step = Mux(mmc["row_step"] >> ub_bits, 1 << ub_bits, mmc["row_step"])
                full_rows_part = rows_part - row_step
            else:
                rows_part = conv_y * mmc["row_step"]
                full_rows_part = (conv_y - 1) * mmc["row_step"]
            tail = rows_part + product(conv_x, mmc["col_step"])
            full = full_rows_part + product(mmc["out_w"] - 1, mmc["col_step"])
            with m.If((conv_y != 0) & (full > tail)):
                m.d.comb += mmc_last.eq(mmc["ub"] + full)
            with m.Else():
                m.d.comb += mmc_last.eq(mmc["ub"] + tail)
        with m.Else():
            m.d.comb += mmc_last.eq(mmc["ub"] + mmc["rows"] - 1)

        # Range faults.
        def span_bad(first, count, size):
            return (count != 0) & ((first + count) > size)

        ub_bad = Signal()
        acc_bad = Signal()
        wmem_bad = Signal()
        host_bad = Signal()
        with m.Switch(opcode):
            with m.Case(Opcode.RHM, Opcode.WHM):
                m.d.comb += [
                    ub_bad.eq(span_bad(dma["ub"], dma["rows"], cfg.ub_rows)),
                    host_bad.eq((dma["rows"] != 0) & ((dma_end > (1 << 64)) | outside_windows)),
                ]
            with m.Case(Opcode.RW):
                rw = {name: field(word, Opcode.RW, name) for name in _fields(Opcode.RW)}
                m.d.comb += wmem_bad.eq(span_bad(rw["tile"], rw["count"], cfg.weight_mem_tiles))
            with m.Case(Opcode.MMC):
                m.d.comb += [
                    ub_bad.eq((mmc["rows"] != 0) & (mmc_last >= cfg.ub_rows)),
                    acc_bad.eq(span_bad(mmc["acc"], mmc["rows"], cfg.acc_rows)),
                ]
            with m.Case(Opcode.ACT):
                m.d.comb += [
                    ub_bad.eq(span_bad(act["ub"], out_rows, cfg.ub_rows)),
                    acc_bad.eq(span_bad(act["acc"], act["rows"], cfg.acc_rows)),
                ]
            with m.Case(Opcode.LDQ):
                m.d.comb += ub_bad.eq(field(word, Opcode.LDQ, "ub") + ldq_rows(cfg) > cfg.ub_rows)
            with m.Case(Opcode.LDL):
                m.d.comb += ub_bad.eq(field(word, Opcode.LDL, "ub") + ldl_rows(cfg) > cfg.ub_rows)

        # Limits of the activation unit this chip was built with.
        unsupported = Signal()
        m.d.comb += unsupported.eq(is_act & (
            (windowed & (act["in_w"] > cfg.pool_max_width)) |
            ((act["pool"] == Pool.GLOBAL_AVG) & (act["rows"] > MAX_POOL_COUNT))))

        with m.If(~legal_opcode):
            m.d.comb += self.fault.eq(Fault.ILLEGAL_OPCODE)
        with m.Elif(illegal_field | (windowed & win_bad) | unsupported):
            m.d.comb += self.fault.eq(Fault.ILLEGAL_FIELD)
        with m.Elif(ub_bad):
            m.d.comb += self.fault.eq(Fault.UB_RANGE)
        with m.Elif(acc_bad):
            m.d.comb += self.fault.eq(Fault.ACC_RANGE)
        with m.Elif(wmem_bad):
            m.d.comb += self.fault.eq(Fault.WEIGHT_MEM_RANGE)
        with m.Elif(host_bad):
            m.d.comb += self.fault.eq(Fault.HOST_RANGE)

        # Illegal words skip the geometry: their fields mean nothing.
        m.d.comb += [
            self.done.eq(geometry_done),
            self.out_rows.eq(out_rows),
            self.ub_last.eq(Mux(is_act, act["ub"] + out_rows - 1, mmc_last)),
        ]
        return m
