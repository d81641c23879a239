"""The bit layout of every instruction: `LAYOUTS` (opcode -> its fields) is the
single source of truth for the encoder, the decoder, the assembler, the
documentation tables (`layout_markdown`) and the RTL decoder."""

from dataclasses import dataclass

from .codes import Func, INSTRUCTION_BITS, MAX_POOL_SIZE, Opcode, Pool, Reg


__all__ = ["Field", "LAYOUTS", "OPCODE_FIELD", "layout_markdown"]


@dataclass(frozen=True)
class Field:
    """One field of an instruction word.

    Attributes
    ----------
    name : str
        The field's name (the dataclass attribute and assembler key, except for
        MMC's convolution fields, which live in `Conv`).
    lsb, width : int
        Bits ``[lsb + width - 1 : lsb]`` of the 128-bit word.
    signed : bool
        Two's complement.
    when : (str, tuple of int) or None
        The field exists only when the field named ``when[0]`` has one of the
        values ``when[1]``; otherwise its bits are reserved (must be zero).
    enum : IntEnum subclass or None
        The field's legal values are this enumeration's.
    low, high : int or None
        Legal range, inclusive, if narrower than the field's width.
    doc : str
        Meaning, for the documentation tables.
    """

    name: str
    lsb: int
    width: int
    signed: bool = False
    when: tuple | None = None
    enum: type | None = None
    low: int | None = None
    high: int | None = None
    doc: str = ""

    @property
    def msb(self):
        return self.lsb + self.width - 1

    @property
    def mask(self):
        return ((1 << self.width) - 1) << self.lsb

    @property
    def bits(self):
        """``[msb:lsb]`` (or ``[bit]`` for a 1-bit field)."""
        return f"[{self.lsb}]" if self.width == 1 else f"[{self.msb}:{self.lsb}]"

    @property
    def is_flag(self):
        """A 1-bit field in the flags byte, bits [15:8]."""
        return self.width == 1 and 8 <= self.lsb < 16

    @property
    def legal(self):
        """The legal values, inclusive, as ``(low, high)``."""
        if self.enum is not None:
            return min(self.enum), max(self.enum)
        if self.signed:
            low, high = -(1 << (self.width - 1)), (1 << (self.width - 1)) - 1
        else:
            low, high = 0, (1 << self.width) - 1
        return (low if self.low is None else self.low, high if self.high is None else self.high)

    def extract(self, word):
        """This field's value in the 128-bit `word` (sign-extended if signed)."""
        value = (word >> self.lsb) & ((1 << self.width) - 1)
        if self.signed and value >> (self.width - 1):
            value -= 1 << self.width
        return value

    def insert(self, value):
        """`value` placed at this field's bits (two's complement if negative)."""
        return (value & ((1 << self.width) - 1)) << self.lsb


def _flag(name, bit, doc):
    return Field(name, 8 + bit, 1, doc=doc)


OPCODE_FIELD = Field("opcode", 0, 8, doc="opcode")

_U24 = dict(width=24)
_CONV = ("conv", (1,))
_WINDOW = ("pool", (int(Pool.MAX), int(Pool.AVG)))

# opcode -> the fields of its word other than the opcode, in bit order. Every bit
# not covered (and every conditional field whose condition does not hold) is reserved.
LAYOUTS = {
    Opcode.NOP: (),
    Opcode.HALT: (),
    Opcode.SYNC: (),
    Opcode.INT: (
        Field("code", 16, 16, doc="code reported to the host with the interrupt"),
    ),
    Opcode.RHM: (
        Field("ub", 16, **_U24, doc="first UB row written"),
        Field("rows", 40, **_U24, doc="UB rows copied; rows x config.rows bytes"),
        Field("host", 64, 64, doc="host byte address of the first byte read"),
    ),
    Opcode.WHM: (
        Field("ub", 16, **_U24, doc="first UB row read"),
        Field("rows", 40, **_U24, doc="UB rows copied; rows x config.rows bytes"),
        Field("host", 64, 64, doc="host byte address of the first byte written"),
    ),
    Opcode.RW: (
        Field("tile", 16, **_U24, doc="first weight-memory tile"),
        Field("count", 40, **_U24, doc="tiles pushed into the weight FIFO, in order"),
    ),
    Opcode.MMC: (
        _flag("accumulate", 0, "add to the accumulator rows (else overwrite them)"),
        _flag("switch", 1, "use the next weight tile from the FIFO, from this instruction on"),
        _flag("unsigned", 2, "activations are uint8 (else int8)"),
        _flag("conv", 3, "convolution addressing (out_w, col_step, row_step)"),
        Field("ub", 16, **_U24, doc="UB row of activation row 0"),
        Field("rows", 40, **_U24, doc="activation rows B"),
        Field("acc", 64, 16, doc="accumulator row of activation row 0; row b goes to acc + b"),
        Field("out_w", 80, 16, when=_CONV, low=1, doc="conv: activation rows per output row"),
        Field("col_step", 96, 8, when=_CONV, doc="conv: UB rows between neighbouring outputs"),
        Field("row_step", 104, 16, when=_CONV, doc="conv: UB rows between output rows"),
    ),
    Opcode.ACT: (
        _flag("unsigned", 0, "output uint8 (else int8)"),
        _flag("single_round", 1, "requantize with one rounding, `(x * multiplier + "
              "2**(30 - shift)) >> (31 - shift)` (TFLite's FULLY_CONNECTED), "
              "else TFLite's double-rounding MultiplyByQuantizedMultiplier"),
        _flag("mlas_round", 2, "requantize as ONNX Runtime's MLAS does in float32 (one "
              "rounding, single_round or not): `multiplier` is a float32 scale's 24-bit "
              "significand << 7; a column whose multiplier is not (magnitude outside "
              "[2**30, 2**31) or low 7 bits set) rounds as single_round"),
        Field("acc", 16, 16, doc="first accumulator row read"),
        Field("ub", 32, **_U24, doc="first UB row written"),
        Field("rows", 56, **_U24, doc="accumulator rows read"),
        Field("func", 80, 4, enum=Func, doc="activation function: " +
              ", ".join(f"{int(m)} {m.keyword}" for m in Func)),
        Field("pool", 84, 4, enum=Pool, doc="pooling: " +
              ", ".join(f"{int(m)} {m.keyword}" for m in Pool)),
        Field("pool_size", 88, 4, when=_WINDOW, low=1, high=MAX_POOL_SIZE,
              doc="window k: k x k rows"),
        Field("pool_stride", 92, 4, when=_WINDOW, low=1, high=MAX_POOL_SIZE,
              doc="window stride s"),
        Field("in_w", 96, 16, when=_WINDOW, low=1, doc="width in pixels of the image the rows "
                                                         "form, at most config.pool_max_width"),
    ),
    Opcode.CFG: (
        Field("reg", 16, 8, enum=Reg, doc="register: " +
              ", ".join(f"{int(m)} {m.keyword}" for m in Reg)),
        Field("value", 32, 32, doc="new value of the register (two's complement for a "
                                   "signed register)"),
    ),
    Opcode.LDQ: (
        Field("ub", 16, **_U24, doc="first UB row of the quantization table"),
    ),
    Opcode.LDL: (
        Field("ub", 16, **_U24, doc="first UB row of the lookup table"),
    ),
}


def _check_layouts():
    """The table is consistent: no overlaps, flags in [15:8], conditions resolvable."""
    for opcode, fields in LAYOUTS.items():
        names = {f.name: f for f in fields}
        assert len(names) == len(fields), opcode
        used = OPCODE_FIELD.mask
        for f in fields:
            assert f.is_flag or f.lsb >= 16, (opcode, f.name)
            assert f.msb < INSTRUCTION_BITS and not used & f.mask, (opcode, f.name)
            used |= f.mask
            if f.when is not None:
                assert names[f.when[0]].when is None, (opcode, f.name)
            if f.enum is not None:
                assert sorted(f.enum) == list(range(len(f.enum))), (opcode, f.name)
                assert max(f.enum) < 1 << f.width, (opcode, f.name)


_check_layouts()


def _condition_text(field, fields):
    name, values = field.when
    ref = next(f for f in fields if f.name == name)
    if ref.is_flag:
        return f"{name.upper()} is set"
    shown = [ref.enum(v).keyword if ref.enum else str(v) for v in values]
    return f"{name} is {' or '.join(shown)}"


def _reserved_runs(fields):
    """Maximal runs of bits no field of `fields` covers, as (lsb, msb)."""
    used = OPCODE_FIELD.mask
    for f in fields:
        used |= f.mask
    runs, start = [], None
    for bit in range(INSTRUCTION_BITS + 1):
        free = bit < INSTRUCTION_BITS and not used >> bit & 1
        if bit == 16 and start is not None:     # the flags byte is a run of its own
            runs.append((start, 15))
            start = None
        if free and start is None:
            start = bit
        elif not free and start is not None:
            runs.append((start, bit - 1))
            start = None
    return runs


def layout_markdown(opcode):
    """The bit-layout table of `opcode` as Markdown (the tables in docs/isa.md)."""
    opcode = Opcode(opcode)
    fields = LAYOUTS[opcode]
    rows = [(0, "[7:0]", "opcode", "8", f"0x{int(opcode):02x}")]
    for f in fields:
        doc = f.doc
        lo, hi = f.legal
        if f.is_flag:
            what = f"flag {f.lsb - 8}"
        else:
            what = f"{f.width}{', signed' if f.signed else ''}"
            if f.enum is None and (f.low is not None or f.high is not None):
                doc += f"; {lo}..{hi}"
            elif f.enum is not None:
                doc += "; others illegal"
        if f.when is not None:
            doc += f" (only when {_condition_text(f, fields)}; reserved otherwise)"
        rows.append((f.lsb, f.bits, f.name, what, doc))
    for lsb, msb in _reserved_runs(fields):
        bits = f"[{lsb}]" if lsb == msb else f"[{msb}:{lsb}]"
        what = "reserved flags" if msb < 16 else "reserved"
        rows.append((lsb, bits, f"*{what}*", "", "must be zero"))
    rows.sort()
    lines = ["| bits | field | width | meaning |", "|---|---|---|---|"]
    lines += [f"| {bits} | {name} | {what} | {doc} |" for _, bits, name, what, doc in rows]
    return "\n".join(lines)
