"""The instruction set of the chip, version 1: encoding, decoding and fault rules.

Every instruction is 16 bytes, one little-endian 128-bit word: bits [7:0] are
the opcode, bits [15:8] the flags, bits [127:16] the operands of that opcode.
Every bit an opcode does not define is reserved and must be zero. The full
description, field by field, is ``docs/isa.md``.

`LAYOUTS` is the single source of truth for where each field sits: the encoder,
the decoder, the assembler, the documentation tables (`layout_markdown`) and the
RTL decoder are all derived from it.

Members
-------
ISA_VERSION, INSTRUCTION_BYTES
    The version of this format and the size of one instruction.
MAX_POOL_SIZE, MAX_POOL_COUNT
    The largest pooling window side and stride of ACT, and the most rows a
    GLOBAL_AVG averages.
Opcode, Fault, Func, Pool, Reg
    The opcodes, the fault codes, the activation functions and pooling modes of
    ACT, and the registers CFG sets.
Field, LAYOUTS, layout, layout_markdown
    The bit layout of every instruction.
Nop, Halt, Sync, Int, Rhm, Whm, Rw, Mmc, Conv, Act, Cfg, Ldq, Ldl
    One frozen dataclass per instruction; fields are validated on construction.
decode, encode_program, decode_program
    Bytes to instructions and back.
check, diagnose
    The fault a hardware decoder raises for one instruction on a `TPUConfig`.
ldq_rows, ldq_sections, ldl_rows
    UB rows read by LDQ and LDL.
random_instruction
    A random legal instruction, for tests.
Raw, operands, format_instruction
    A ``.raw`` word (any 16 bytes), the operands of an instruction class, and
    the line of assembly of an instruction (`tpu.asm` parses it back).
"""

import dataclasses
import functools
from dataclasses import dataclass
from enum import IntEnum
from typing import ClassVar


__all__ = [
    "ISA_VERSION", "INSTRUCTION_BYTES", "MAX_POOL_SIZE", "MAX_POOL_COUNT",
    "Opcode", "Fault", "Func", "Pool", "Reg",
    "Field", "LAYOUTS", "OPCODE_FIELD", "layout", "layout_markdown",
    "FieldError", "IllegalInstruction", "Instruction",
    "Nop", "Halt", "Sync", "Int", "Rhm", "Whm", "Rw", "Mmc", "Conv", "Act", "Cfg", "Ldq", "Ldl",
    "INSTRUCTIONS", "decode", "encode_program", "decode_program",
    "check", "diagnose", "ldq_rows", "ldq_sections", "ldl_rows", "random_instruction",
    "Raw", "operands", "format_instruction",
]


ISA_VERSION = 1
INSTRUCTION_BYTES = 16
INSTRUCTION_BITS = 8 * INSTRUCTION_BYTES

# Limits of the activation unit's pooling (hdl/activation_settings.py).
MAX_POOL_SIZE = 4       # largest window side k and stride s of MAX and AVG
MAX_POOL_COUNT = 4096   # most rows GLOBAL_AVG averages


class _Described(IntEnum):
    """An IntEnum whose members carry a one-line meaning: ``Member = value, "meaning"``."""

    def __new__(cls, value, meaning=""):
        member = int.__new__(cls, value)
        member._value_ = value
        member.meaning = meaning
        return member

    @property
    def keyword(self):
        """The member's name as the assembler writes it."""
        return self.name.lower()


class Opcode(_Described):
    """The opcodes of ISA version 1. Any other value of bits [7:0] is ILLEGAL_OPCODE."""

    NOP = 0x00, "do nothing"
    HALT = 0x01, "stop once all earlier instructions have completed"
    SYNC = 0x02, "wait until all earlier instructions have completed"
    INT = 0x03, "wait like SYNC, then interrupt the host with a 16-bit code"
    RHM = 0x10, "read host memory: host -> unified buffer (DMA)"
    WHM = 0x11, "write host memory: unified buffer -> host (DMA)"
    RW = 0x20, "read weights: weight memory -> weight FIFO, whole tiles"
    MMC = 0x30, "matrix multiply/convolve: UB rows -> systolic array -> accumulators"
    ACT = 0x40, "activate: accumulators -> activation unit (and pooling) -> UB"
    CFG = 0x50, "set an activation-unit register"
    LDQ = 0x51, "load the per-column quantization parameters from the UB"
    LDL = 0x52, "load the 256-byte sigmoid/tanh lookup table from the UB"

    @property
    def mnemonic(self):
        return self.keyword


class Fault(_Described):
    """The error codes the chip stops with (status register ``error``).

    A faulting instruction has no effect: the chip stops before it, with this
    code and the instruction's index in the status registers, and interrupts
    the host.
    """

    NONE = 0, "no fault"
    ILLEGAL_OPCODE = 1, "bits [7:0] are not an opcode of this ISA version"
    ILLEGAL_FIELD = 2, ("a reserved bit or undefined flag is set, or a field has a value "
                        "its opcode does not define or the activation unit does not support")
    UB_RANGE = 3, "the instruction addresses a unified-buffer row >= ub_rows"
    ACC_RANGE = 4, "the instruction addresses an accumulator row >= acc_rows"
    WEIGHT_MEM_RANGE = 5, "RW addresses a weight tile >= weight_mem_tiles"
    WEIGHT_FIFO_UNDERFLOW = 6, "MMC with SWITCH found no tile requested by an earlier RW"
    HOST_RANGE = 7, "a DMA touches host bytes outside the windows the driver programmed"
    DMA_ERROR = 8, "the host answered a DMA read with an error completion, or timed out"
    WEIGHT_FIFO_OVERFLOW = 9, ("RW would leave more than weight_fifo_tiles + 2 tiles requested "
                               "and not yet switched to")


class Func(_Described):
    """The activation function of ACT (field ``func``)."""

    NONE = 0, "identity"
    RELU = 1, "max(q, OUT_ZERO_POINT)"
    CLAMP = 2, "min(max(q, CLAMP_MIN), CLAMP_MAX) (ReLU6 and friends)"
    SIGMOID = 3, "entry q + 128 (int8 output) or q (uint8) of the table LDL loaded"
    TANH = 4, "entry q + 128 (int8 output) or q (uint8) of the table LDL loaded"


class Pool(_Described):
    """The pooling mode of ACT (field ``pool``)."""

    NONE = 0, "one output row per accumulator row"
    MAX = 1, "k x k windows, stride s, maximum"
    AVG = 2, ("k x k windows, stride s, average: the hardware divides by the window size "
              "k x k with TFLite's rounding (no registers needed)")
    GLOBAL_AVG = 3, (f"the average of all rows (at most {MAX_POOL_COUNT}), with TFLite's "
                     f"rounding: one output row")


class Reg(_Described):
    """The activation-unit registers that CFG sets, 32 bits each, 0 after reset.

    ``Member = value, signed, "meaning"``: a signed register holds an int32, an
    unsigned one a uint32; CFG's 32-bit ``value`` field is read accordingly.

    ACT uses OUT_ZERO_POINT, CLAMP_MIN and CLAMP_MAX saturated to the 9-bit
    range -256..255: a register holding ``v`` acts as ``min(max(v, -256), 255)``.
    """

    def __new__(cls, value, signed, meaning):
        member = int.__new__(cls, value)
        member._value_ = value
        member.signed = signed
        member.meaning = meaning
        return member

    @property
    def range(self):
        """The values the register holds, ``(low, high)`` inclusive."""
        return (-(1 << 31), (1 << 31) - 1) if self.signed else (0, (1 << 32) - 1)

    @property
    def type_name(self):
        return "int32" if self.signed else "uint32"

    OUT_ZERO_POINT = 0, True, ("output zero point, added after requantization "
                               "(-128..127 for int8 output, 0..255 for uint8)")
    CLAMP_MIN = 1, True, "lower bound of func=clamp, in the quantized output domain"
    CLAMP_MAX = 2, True, "upper bound of func=clamp, in the quantized output domain"


# --------------------------------------------------------------------------------------
# Bit layout


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


def layout(what):
    """The fields of an instruction, an instruction class, an `Opcode` or an opcode value."""
    if isinstance(what, Instruction) or (isinstance(what, type) and issubclass(what, Instruction)):
        return LAYOUTS[what.OPCODE]
    return LAYOUTS[Opcode(what)]


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


# --------------------------------------------------------------------------------------
# Errors


class FieldError(ValueError):
    """An instruction field has a value this ISA does not allow.

    Attributes
    ----------
    field : str
        The field's name.
    """

    def __init__(self, field, message):
        super().__init__(message)
        self.field = field


class IllegalInstruction(ValueError):
    """An instruction word the hardware rejects with ILLEGAL_OPCODE or ILLEGAL_FIELD.

    Attributes
    ----------
    fault : Fault
    message : str
        What is wrong, naming the field or bits.
    field : str or None
        The bad field, if it has a name.
    index : int or None
        Index of the instruction in its program (set by `decode_program`).
    """

    def __init__(self, fault, message, field=None, index=None):
        self.fault = Fault(fault)
        self.message = message
        self.field = field
        self.index = index
        super().__init__(str(self))

    def __str__(self):
        where = ""
        if self.index is not None:
            where = f"instruction {self.index} (offset 0x{self.index * INSTRUCTION_BYTES:x}): "
        return f"{where}{self.message} [{self.fault.name}]"


# --------------------------------------------------------------------------------------
# Assembly text of one instruction (tpu.asm parses it)


@dataclass(frozen=True)
class Raw:
    """A ``.raw`` word: any 16 bytes, written as one little-endian 128-bit number.

    Lets a program hold words the assembler would refuse (tests of the fault
    logic, or the output of the disassembler for an illegal instruction).
    """

    word: int

    def __post_init__(self):
        if not isinstance(self.word, int) or isinstance(self.word, bool):
            raise TypeError(f".raw word must be an int, not {self.word!r}")
        if not 0 <= self.word < 1 << (8 * INSTRUCTION_BYTES):
            raise ValueError(f".raw word 0x{self.word:x} is out of range: 0..2**128-1")

    @classmethod
    def from_bytes(cls, data):
        return cls(int.from_bytes(data, "little"))

    def encode(self):
        return self.word.to_bytes(INSTRUCTION_BYTES, "little")


@functools.cache
def operands(cls):
    """The operands of instruction class `cls`: name -> (kind, required, layout field)."""
    by_name = {f.name: f for f in cls.layout()}
    spec = {}
    for f in dataclasses.fields(cls):
        field = by_name[f.name]
        if f.name in cls._COMPOSITE:
            kind = "group"
        elif field.is_flag:
            kind = "flag"
        elif field.enum is not None:
            kind = "enum"
        else:
            kind = "int"
        spec[f.name] = (kind, f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING,
                        field)
    return spec


def format_instruction(instruction):
    """One line of assembly for `instruction` (or a `Raw` word); fields at their default are left out."""
    if isinstance(instruction, Raw):
        return f".raw 0x{instruction.word:0{2 * INSTRUCTION_BYTES}x}"
    spec = operands(type(instruction))
    parts = []
    for f in dataclasses.fields(instruction):
        value = getattr(instruction, f.name)
        if f.default is not dataclasses.MISSING and value == f.default:
            continue
        kind = spec[f.name][0]
        if kind == "flag":
            parts.append(f.name)
        elif kind == "group":
            inner = ", ".join(f"{key.name}={getattr(value, key.name)}"
                              for key in dataclasses.fields(value))
            parts.append(f"{f.name}({inner})")
        elif kind == "enum":
            parts.append(f"{f.name}={value.keyword}")
        elif f.metadata.get("hex"):
            parts.append(f"{f.name}=0x{value:x}")
        else:
            parts.append(f"{f.name}={value}")
    return instruction.mnemonic + (" " + ", ".join(parts) if parts else "")


# --------------------------------------------------------------------------------------
# Instructions


class Instruction:
    """Base of the instruction dataclasses.

    Subclasses are frozen dataclasses whose attributes are the fields of their
    layout (flags as ``bool``, enumerated fields as their `IntEnum`). They are
    validated on construction: `TypeError` for a value of the wrong type,
    `FieldError` (a `ValueError`) naming the field and its range otherwise.
    """

    OPCODE: ClassVar[Opcode]
    # Layout fields that are not plain attributes (MMC's conv flag is its `Conv`).
    _COMPOSITE: ClassVar[tuple] = ()

    @property
    def opcode(self):
        return self.OPCODE

    @property
    def mnemonic(self):
        return self.OPCODE.mnemonic

    @classmethod
    def layout(cls):
        return LAYOUTS[cls.OPCODE]

    def __post_init__(self):
        self._normalize()
        self._validate()

    def __str__(self):
        return format_instruction(self)

    def _normalize(self):
        """Type-check the attributes named like layout fields; enum values become members."""
        for f in self.layout():
            if f.name in self._COMPOSITE or not hasattr(self, f.name):
                continue
            value = getattr(self, f.name)
            if f.is_flag:
                if not isinstance(value, bool):
                    raise TypeError(f"{self.mnemonic} {f.name} must be a bool, not {value!r}")
            elif f.enum is not None:
                object.__setattr__(self, f.name, _to_enum(self.mnemonic, f, value))
            elif not isinstance(value, int) or isinstance(value, bool):
                raise TypeError(f"{self.mnemonic} {f.name} must be an int, not {value!r}")

    def fields(self):
        """The raw value of every layout field, by name (flags as 0/1)."""
        return {f.name: int(getattr(self, f.name)) for f in self.layout()}

    @classmethod
    def _from_fields(cls, values):
        kwargs = {}
        for f in cls.layout():
            kwargs[f.name] = bool(values[f.name]) if f.is_flag else values[f.name]
        return cls(**kwargs)

    def _validate(self):
        fields = self.layout()
        values = self.fields()
        for f in fields:
            value = values[f.name]
            if f.when is not None and values[f.when[0]] not in f.when[1]:
                if value:
                    raise FieldError(f.name, f"{self.mnemonic} {f.name} = {value} is reserved "
                                             f"(must be 0) unless {_condition_text(f, fields)}")
                continue
            low, high = f.legal
            if not low <= value <= high:
                raise FieldError(f.name, f"{self.mnemonic} {f.name} = {value} is out of range "
                                         f"{low}..{high} ({f.width} bits)")
        self._validate_more()

    def _validate_more(self):
        """Checks across fields, for subclasses."""

    def encode(self):
        """The 16 bytes of this instruction."""
        word = int(self.OPCODE)
        values = self.fields()
        for f in self.layout():
            word |= f.insert(values[f.name])
        return word.to_bytes(INSTRUCTION_BYTES, "little")


def _to_enum(mnemonic, field, value):
    enum = field.enum
    if isinstance(value, str):
        try:
            return enum[value.upper()]
        except KeyError:
            pass
    elif isinstance(value, int) and not isinstance(value, bool):
        try:
            return enum(value)
        except ValueError:
            pass
    else:
        raise TypeError(f"{mnemonic} {field.name} must be a {enum.__name__} or an int, not {value!r}")
    choices = ", ".join(f"{m.keyword} ({int(m)})" for m in enum)
    raise FieldError(field.name, f"{mnemonic} {field.name} = {value!r} is not one of {choices}")


@dataclass(frozen=True)
class Nop(Instruction):
    """NOP: do nothing."""
    OPCODE: ClassVar[Opcode] = Opcode.NOP


@dataclass(frozen=True)
class Halt(Instruction):
    """HALT: stop once all earlier instructions have completed."""
    OPCODE: ClassVar[Opcode] = Opcode.HALT


@dataclass(frozen=True)
class Sync(Instruction):
    """SYNC: wait until all earlier instructions have completed."""
    OPCODE: ClassVar[Opcode] = Opcode.SYNC


@dataclass(frozen=True)
class Int(Instruction):
    """INT: wait like SYNC, then interrupt the host with `code`."""
    OPCODE: ClassVar[Opcode] = Opcode.INT
    code: int


@dataclass(frozen=True)
class Rhm(Instruction):
    """RHM: copy ``rows * config.rows`` bytes from host address `host` into UB rows
    ``ub .. ub + rows - 1``."""
    OPCODE: ClassVar[Opcode] = Opcode.RHM
    ub: int
    rows: int
    host: int = dataclasses.field(metadata={"hex": True})


@dataclass(frozen=True)
class Whm(Instruction):
    """WHM: copy UB rows ``ub .. ub + rows - 1`` to host address `host`."""
    OPCODE: ClassVar[Opcode] = Opcode.WHM
    ub: int
    rows: int
    host: int = dataclasses.field(metadata={"hex": True})


@dataclass(frozen=True)
class Rw(Instruction):
    """RW: push weight-memory tiles ``tile .. tile + count - 1`` into the weight FIFO."""
    OPCODE: ClassVar[Opcode] = Opcode.RW
    tile: int
    count: int


_CONV_FIELDS = ("out_w", "col_step", "row_step")


@dataclass(frozen=True)
class Conv:
    """MMC's convolution addressing: activation row ``b`` comes from UB row
    ``ub + (b // out_w) * row_step + (b % out_w) * col_step``."""
    out_w: int
    col_step: int
    row_step: int

    def __post_init__(self):
        fields = {f.name: f for f in LAYOUTS[Opcode.MMC]}
        for name in _CONV_FIELDS:
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool):
                raise TypeError(f"conv {name} must be an int, not {value!r}")
            low, high = fields[name].legal
            if not low <= value <= high:
                raise FieldError(name, f"mmc conv {name} = {value} is out of range "
                                       f"{low}..{high} ({fields[name].width} bits)")

    def offset(self, b):
        """UB row of activation row `b`, relative to the MMC's `ub`."""
        return (b // self.out_w) * self.row_step + (b % self.out_w) * self.col_step


@dataclass(frozen=True)
class Mmc(Instruction):
    """MMC: multiply `rows` activation rows by the current weight tile into the
    accumulators: row ``b`` is read from UB row `ub_row(b)` and its sums go to
    accumulator row ``acc + b``."""
    OPCODE: ClassVar[Opcode] = Opcode.MMC
    _COMPOSITE: ClassVar[tuple] = ("conv",)
    ub: int
    rows: int
    acc: int
    accumulate: bool = False
    switch: bool = False
    unsigned: bool = False
    conv: Conv | None = None

    def _normalize(self):
        if self.conv is not None and not isinstance(self.conv, Conv):
            raise TypeError(f"mmc conv must be a Conv or None, not {self.conv!r}")
        super()._normalize()

    def fields(self):
        conv = self.conv
        return {
            "accumulate": int(self.accumulate), "switch": int(self.switch),
            "unsigned": int(self.unsigned), "conv": int(conv is not None),
            "ub": self.ub, "rows": self.rows, "acc": self.acc,
            **{name: getattr(conv, name) if conv else 0 for name in _CONV_FIELDS},
        }

    @classmethod
    def _from_fields(cls, values):
        conv = Conv(*(values[name] for name in _CONV_FIELDS)) if values["conv"] else None
        return cls(values["ub"], values["rows"], values["acc"], accumulate=bool(values["accumulate"]),
                   switch=bool(values["switch"]), unsigned=bool(values["unsigned"]), conv=conv)

    def ub_row(self, b):
        """The UB row activation row `b` is read from."""
        return self.ub + (self.conv.offset(b) if self.conv else b)

    @property
    def last_ub_row(self):
        """The largest UB row this instruction reads (None if `rows` is 0)."""
        if self.rows == 0:
            return None
        if self.conv is None:
            return self.ub + self.rows - 1
        # Offsets grow with b inside an output row; the largest is at the end of the
        # last (partial) output row or of the last full one before it.
        last = self.rows - 1
        candidates = [last]
        if last >= self.conv.out_w:
            candidates.append((last // self.conv.out_w) * self.conv.out_w - 1)
        return self.ub + max(self.conv.offset(b) for b in candidates)


@dataclass(frozen=True)
class Act(Instruction):
    """ACT: read accumulator rows ``acc .. acc + rows - 1`` through the activation
    unit (and pooling) into UB rows from `ub` on, one UB row per result row.

    With ``pool`` MAX or AVG the rows form an image ``in_h x in_w`` pixels
    (``in_h = rows // in_w``, row-major) and the result is an ``out_h x out_w``
    image with ``out = (in - pool_size) // pool_stride + 1``, written row-major.
    GLOBAL_AVG writes one row.

    Two limits of the activation unit are checked by `check` rather than on
    construction: ``in_w <= config.pool_max_width`` for MAX and AVG, and
    ``rows <= MAX_POOL_COUNT`` for GLOBAL_AVG (ILLEGAL_FIELD otherwise).
    """
    OPCODE: ClassVar[Opcode] = Opcode.ACT
    acc: int
    ub: int
    rows: int
    func: Func = Func.NONE
    pool: Pool = Pool.NONE
    pool_size: int = 0
    pool_stride: int = 0
    in_w: int = 0
    unsigned: bool = False
    single_round: bool = False

    @property
    def windowed(self):
        return self.pool in (Pool.MAX, Pool.AVG)

    def _validate_more(self):
        if not self.windowed or self.rows == 0:
            return
        if self.rows % self.in_w:
            raise FieldError("rows", f"act rows = {self.rows} is not a multiple of in_w = "
                                     f"{self.in_w}: windowed pooling reads whole image rows")
        in_h = self.rows // self.in_w
        if self.pool_size > min(in_h, self.in_w):
            raise FieldError("pool_size", f"act pool_size = {self.pool_size} is larger than "
                                          f"the {in_h}x{self.in_w} image")

    @property
    def output_shape(self):
        """``(out_h, out_w)`` of windowed pooling; ``(rows, 1)`` without pooling,
        ``(1, 1)`` for GLOBAL_AVG; ``(0, 0)`` when `rows` is 0."""
        if self.rows == 0:
            return (0, 0)
        if self.pool == Pool.NONE:
            return (self.rows, 1)
        if self.pool == Pool.GLOBAL_AVG:
            return (1, 1)
        in_h = self.rows // self.in_w
        return tuple((n - self.pool_size) // self.pool_stride + 1 for n in (in_h, self.in_w))

    @property
    def output_rows(self):
        """UB rows written: ``ub .. ub + output_rows - 1``."""
        out_h, out_w = self.output_shape
        return out_h * out_w


@dataclass(frozen=True)
class Cfg(Instruction):
    """CFG: set activation-unit register `reg` (a `Reg`) to `value`, an int32 or
    a uint32 as the register is signed or not."""
    OPCODE: ClassVar[Opcode] = Opcode.CFG
    reg: Reg
    value: int

    def _normalize(self):
        super()._normalize()
        low, high = self.reg.range
        if not low <= self.value <= high:
            raise FieldError("value", f"cfg value = {self.value} is out of range {low}..{high} "
                                      f"({self.reg.keyword} is {self.reg.type_name})")

    def fields(self):
        return {"reg": int(self.reg), "value": self.value & 0xFFFFFFFF}

    @classmethod
    def _from_fields(cls, values):
        reg = _to_enum("cfg", LAYOUTS[Opcode.CFG][0], values["reg"])
        value = values["value"]
        if reg.signed and value >> 31:
            value -= 1 << 32
        return cls(reg, value)


@dataclass(frozen=True)
class Ldq(Instruction):
    """LDQ: load the per-column bias, multiplier and shift from `ldq_rows` UB rows from `ub` on."""
    OPCODE: ClassVar[Opcode] = Opcode.LDQ
    ub: int


@dataclass(frozen=True)
class Ldl(Instruction):
    """LDL: load the 256-byte sigmoid/tanh lookup table from `ldl_rows` UB rows from `ub` on."""
    OPCODE: ClassVar[Opcode] = Opcode.LDL
    ub: int


# opcode -> instruction class
INSTRUCTIONS = {cls.OPCODE: cls for cls in
                (Nop, Halt, Sync, Int, Rhm, Whm, Rw, Mmc, Act, Cfg, Ldq, Ldl)}
assert set(INSTRUCTIONS) == set(Opcode) == set(LAYOUTS)


def _ceil_div(a, b):
    return -(-a // b)


def ldq_rows(config):
    """UB rows LDQ reads: the int32 biases, the int32 multipliers and the int8
    shifts of the `config.cols` columns, each section starting at a new row."""
    return 2 * _ceil_div(4 * config.cols, config.rows) + _ceil_div(config.cols, config.rows)


def ldq_sections(config):
    """Row offsets of the bias, multiplier and shift sections of LDQ's table."""
    words = _ceil_div(4 * config.cols, config.rows)
    return (0, words, 2 * words)


def ldl_rows(config):
    """UB rows LDL reads: the 256-byte lookup table."""
    return _ceil_div(256, config.rows)


# --------------------------------------------------------------------------------------
# Decoding


def _reserved_message(opcode, fields, values, bad):
    bit = (bad & -bad).bit_length() - 1
    for f in fields:
        if f.mask >> bit & 1:
            return f.name, (f"{opcode.mnemonic} field {f.name} {f.bits} = {values[f.name]} is "
                            f"reserved (must be 0) unless {_condition_text(f, fields)}")
    if bit < 16:
        return None, f"{opcode.mnemonic} flag bit {bit - 8} (bit {bit}) is not defined and must be 0"
    for lsb, msb in _reserved_runs(fields):
        if lsb <= bit <= msb:
            value = (bad >> lsb) & ((1 << (msb - lsb + 1)) - 1)
            bits = f"[{lsb}]" if lsb == msb else f"[{msb}:{lsb}]"
            return None, f"{opcode.mnemonic} reserved bits {bits} must be 0 (are 0x{value:x})"
    raise AssertionError("unreachable")


def _as_bytes(data, what):
    """`data` as bytes, if it is bytes-like (``bytes(16)`` would make zeros of an int)."""
    if isinstance(data, (bytes, bytearray, memoryview)):
        return bytes(data)
    raise TypeError(f"{what} needs bytes (bytes, bytearray or memoryview), not "
                    f"{type(data).__name__} {data!r:.60}")


def decode(data):
    """The instruction in the 16 bytes `data` (bytes, bytearray or memoryview).

    Raises
    ------
    TypeError
        `data` is not bytes-like.
    ValueError
        `data` is not 16 bytes long.
    IllegalInstruction
        The opcode is unknown (ILLEGAL_OPCODE), or a reserved bit is set or a
        field has an illegal value (ILLEGAL_FIELD); the message names the field.
    """
    data = _as_bytes(data, "decode")
    if len(data) != INSTRUCTION_BYTES:
        raise ValueError(f"an instruction is {INSTRUCTION_BYTES} bytes, not {len(data)}")
    return _decode_word(data)


@functools.lru_cache(maxsize=1 << 16)
def _decode_word(data):
    """`decode` of 16 bytes, cached: instructions are frozen, and programs
    (the runs of one compiled model above all) repeat their words."""
    word = int.from_bytes(data, "little")
    try:
        opcode = Opcode(word & 0xFF)
    except ValueError:
        raise IllegalInstruction(Fault.ILLEGAL_OPCODE, f"unknown opcode 0x{word & 0xFF:02x}",
                                 field="opcode") from None
    fields = LAYOUTS[opcode]
    values = {f.name: f.extract(word) for f in fields}
    defined = OPCODE_FIELD.mask
    for f in fields:
        if f.when is None or values[f.when[0]] in f.when[1]:
            defined |= f.mask
    bad = word & ~defined
    if bad:
        field, message = _reserved_message(opcode, fields, values, bad)
        raise IllegalInstruction(Fault.ILLEGAL_FIELD, message, field=field)
    try:
        return INSTRUCTIONS[opcode]._from_fields(values)
    except FieldError as error:
        raise IllegalInstruction(Fault.ILLEGAL_FIELD, str(error), field=error.field) from None


def encode_program(instructions):
    """The bytes of a list of instructions (anything with ``encode() -> 16 bytes``)."""
    out = bytearray()
    for index, instruction in enumerate(instructions):
        encode = None if isinstance(instruction, str) else getattr(instruction, "encode", None)
        data = encode() if encode is not None else None
        if not isinstance(data, bytes) or len(data) != INSTRUCTION_BYTES:
            raise TypeError(f"instruction {index} is not an instruction: {instruction!r}")
        out += data
    return bytes(out)


def decode_program(data):
    """The instructions in `data`, a multiple of 16 bytes.

    Raises
    ------
    ValueError
        The length is not a multiple of 16.
    IllegalInstruction
        An instruction is illegal; its `index` says which.
    """
    data = _as_bytes(data, "decode_program")
    if len(data) % INSTRUCTION_BYTES:
        raise ValueError(f"a program is a whole number of {INSTRUCTION_BYTES}-byte instructions; "
                         f"{len(data)} bytes leave {len(data) % INSTRUCTION_BYTES} over")
    program = []
    for index in range(len(data) // INSTRUCTION_BYTES):
        try:
            program.append(decode(data[index * INSTRUCTION_BYTES:(index + 1) * INSTRUCTION_BYTES]))
        except IllegalInstruction as error:
            raise IllegalInstruction(error.fault, error.message, error.field, index) from None
    return program


# --------------------------------------------------------------------------------------
# Random instructions, for tests


def _pick(rng, low, high):
    """A value in ``low..high``, often at or near an end of the range."""
    r = rng.random()
    if r < 0.15:
        return low
    if r < 0.3:
        return high
    if r < 0.5:
        return rng.randint(low, min(high, low + 16))
    return rng.randint(low, high)


def random_instruction(rng, opcode=None):
    """A random legal instruction (of `opcode`, or of a random opcode).

    `rng` is a `random.Random`. Field values are often at the ends of their
    ranges. The instruction decodes, and a GLOBAL_AVG reads at most
    `MAX_POOL_COUNT` rows; the checks against a configuration (`check`: the
    ranges, and ``in_w <= pool_max_width``) are not applied.
    """
    opcode = Opcode(opcode) if opcode is not None else rng.choice(list(Opcode))
    fields = LAYOUTS[opcode]
    values = {}
    for f in sorted(fields, key=lambda f: f.when is not None):
        active = f.when is None or values[f.when[0]] in f.when[1]
        values[f.name] = _pick(rng, *f.legal) if active else 0
    if opcode == Opcode.ACT and values["pool"] in (Pool.MAX, Pool.AVG) and values["rows"]:
        # A whole image at least as large as the window.
        in_w = values["in_w"] = min(values["in_w"], (1 << 24) - 1)
        max_h = ((1 << 24) - 1) // in_w
        size = values["pool_size"] = min(values["pool_size"], in_w, max_h)
        values["rows"] = in_w * _pick(rng, size, max_h)
    if opcode == Opcode.ACT and values["pool"] == Pool.GLOBAL_AVG:
        values["rows"] = _pick(rng, 0, MAX_POOL_COUNT)
    return INSTRUCTIONS[opcode]._from_fields(values)


# --------------------------------------------------------------------------------------
# Range checks against a configuration


def _span(mnemonic, what, first, count, size, size_name, fault):
    """A fault if rows ``first .. first + count - 1`` do not fit in ``0 .. size - 1``."""
    if count and first + count > size:
        return (fault, f"{mnemonic} {what} rows {first}..{first + count - 1} are out of range: "
                       f"there are {size} ({size_name})")
    return None


def diagnose(instruction, config):
    """`check` with an explanation: ``(Fault, message)``; the message is empty for NONE."""
    from .config import TPUConfig
    if not isinstance(config, TPUConfig):
        raise TypeError(f"diagnose needs a TPUConfig to check the instruction against, "
                        f"not {config!r}")
    if isinstance(instruction, (bytes, bytearray, memoryview)):
        try:
            instruction = decode(instruction)
        except IllegalInstruction as error:
            return error.fault, str(error)
    if not isinstance(instruction, Instruction):
        raise TypeError(f"not an instruction: {instruction!r}")
    m = instruction.mnemonic
    ub, acc = config.ub_rows, config.acc_rows
    faults = []
    match instruction:
        case Rhm() | Whm():
            faults.append(_span(m, "UB", instruction.ub, instruction.rows, ub, "ub_rows",
                                Fault.UB_RANGE))
            nbytes = instruction.rows * config.rows
            if nbytes and instruction.host + nbytes > 1 << 64:
                faults.append((Fault.HOST_RANGE, f"{m} host bytes 0x{instruction.host:x} + {nbytes} "
                                                 f"run past the 64-bit address space"))
        case Rw():
            faults.append(_span(m, "weight tile", instruction.tile, instruction.count,
                                config.weight_mem_tiles, "weight_mem_tiles", Fault.WEIGHT_MEM_RANGE))
        case Mmc():
            if instruction.rows:
                last = instruction.last_ub_row
                if last >= ub:
                    faults.append((Fault.UB_RANGE, f"{m} reads UB row {last}, out of range: "
                                                   f"there are {ub} (ub_rows)"))
            faults.append(_span(m, "accumulator", instruction.acc, instruction.rows, acc, "acc_rows",
                                Fault.ACC_RANGE))
        case Act():
            if instruction.windowed and instruction.rows and instruction.in_w > config.pool_max_width:
                faults.append((Fault.ILLEGAL_FIELD,
                               f"{m} in_w = {instruction.in_w} is wider than the pooling line "
                               f"buffer: pool_max_width = {config.pool_max_width}"))
            if instruction.pool == Pool.GLOBAL_AVG and instruction.rows > MAX_POOL_COUNT:
                faults.append((Fault.ILLEGAL_FIELD,
                               f"{m} rows = {instruction.rows} is too many for global_avg: "
                               f"it averages at most {MAX_POOL_COUNT} rows (MAX_POOL_COUNT)"))
            faults.append(_span(m, "accumulator", instruction.acc, instruction.rows, acc, "acc_rows",
                                Fault.ACC_RANGE))
            faults.append(_span(m, "UB", instruction.ub, instruction.output_rows, ub, "ub_rows",
                                Fault.UB_RANGE))
        case Ldq():
            faults.append(_span(m, "UB", instruction.ub, ldq_rows(config), ub, "ub_rows",
                                Fault.UB_RANGE))
        case Ldl():
            faults.append(_span(m, "UB", instruction.ub, ldl_rows(config), ub, "ub_rows",
                                Fault.UB_RANGE))
    faults = [f for f in faults if f is not None]
    return min(faults) if faults else (Fault.NONE, "")


def check(instruction, config):
    """The `Fault` a hardware decoder raises for `instruction` on a chip of `config`.

    `instruction` is an `Instruction` or its 16 bytes (then ILLEGAL_OPCODE and
    ILLEGAL_FIELD from decoding are possible too). Only what one instruction in
    isolation determines is checked: UB, accumulator and weight-memory ranges,
    a host range that wraps past 2**64, and the pooling limits of ACT, which
    are ILLEGAL_FIELD: ``in_w > config.pool_max_width`` for MAX or AVG with
    rows, ``rows > MAX_POOL_COUNT`` for GLOBAL_AVG. An instruction whose row or
    tile count is 0 addresses nothing and never faults on a range. When several
    faults apply, the lowest code wins. WEIGHT_FIFO_UNDERFLOW, HOST_RANGE
    against the DMA windows and DMA_ERROR depend on the run and are raised
    while it executes (HOST_RANGE against the windows still before the RHM or
    WHM starts, after the faults checked here: see
    `tpu.sim.models.chip_model.ChipModel`).
    """
    return diagnose(instruction, config)[0]
