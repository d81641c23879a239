"""One frozen dataclass per instruction, validated on construction;
`INSTRUCTIONS` maps each opcode to its class; `ldq_rows`,
`ldq_sections` and `ldl_rows` give the UB rows LDQ and LDL read."""

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

from .codes import Func, INSTRUCTION_BYTES, Opcode, Pool, Reg
from .layouts import LAYOUTS, _condition_text
from .errors import FieldError
from .text import format_instruction


__all__ = ["layout", "Instruction", "Nop", "Halt", "Sync", "Int", "Rhm", "Whm", "Rw", "Mmc", "Conv",
           "Act", "Cfg", "Ldq", "Ldl", "INSTRUCTIONS", "ldq_rows", "ldq_sections", "ldl_rows"]


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
        # (a compiled model has millions of instructions: the usual case, every
        # value already of its type, is checked from `_plan`; anything else
        # takes the full path, which converts or names the error)
        for name, is_flag, enum in _plan(type(self))[0]:
            value = getattr(self, name)
            if value.__class__ is not (bool if is_flag else enum or int):
                self._normalize_fully()
                return

    def _normalize_fully(self):
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
        return {name: int(getattr(self, name)) for name, _, _ in _plan(type(self))[2]}

    @classmethod
    def _from_fields(cls, values):
        kwargs = {}
        for f in cls.layout():
            kwargs[f.name] = bool(values[f.name]) if f.is_flag else values[f.name]
        return cls(**kwargs)

    def _validate(self):
        values = self.fields()
        for name, when, low, high in _plan(type(self))[1]:
            value = values[name]
            if when is not None and values[when[0]] not in when[1]:
                if value:
                    self._validate_fully()
                continue
            if not low <= value <= high:
                self._validate_fully()
        self._validate_more()

    def _validate_fully(self):
        """`_validate` naming the first field that is wrong."""
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
        # (kept: a program is encoded, then its words decoded for timing)
        encoded = self.__dict__.get("_encoded")
        if encoded is None:
            word = int(self.OPCODE)
            places = _plan(type(self))[2]
            if type(self).fields is Instruction.fields:
                # (`fields` is each attribute as an int: read them directly)
                for name, mask, lsb in places:      # (`Field.insert` of each)
                    word |= (int(getattr(self, name)) & mask) << lsb
            else:
                values = self.fields()
                for name, mask, lsb in places:
                    word |= (values[name] & mask) << lsb
            encoded = word.to_bytes(INSTRUCTION_BYTES, "little")
            object.__setattr__(self, "_encoded", encoded)
        return encoded


_PLANS = {}


def _plan(cls):
    """What `Instruction._normalize`, `_validate` and `encode` check and
    place for class `cls`, worked out once: ``(name, is_flag, enum)`` of
    the attributes to type-check, ``(name, when, low, high)`` of every
    field, ``(name, mask, lsb)`` of every field."""
    plan = _PLANS.get(cls)
    if plan is None:
        fields = LAYOUTS[cls.OPCODE]
        attributes = {f.name for f in dataclasses.fields(cls)}
        typed = tuple((f.name, f.is_flag, f.enum) for f in fields
                      if f.name not in cls._COMPOSITE and (f.name in attributes
                                                           or hasattr(cls, f.name)))
        plan = _PLANS[cls] = (typed, tuple((f.name, f.when, *f.legal) for f in fields),
                              tuple((f.name, (1 << f.width) - 1, f.lsb) for f in fields))
    return plan


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


_CONV_RANGES = []


def _conv_ranges():
    """``(name, (low, high))`` of MMC's convolution fields."""
    if not _CONV_RANGES:
        fields = {f.name: f for f in LAYOUTS[Opcode.MMC]}
        _CONV_RANGES.extend((name, fields[name].legal) for name in _CONV_FIELDS)
    return _CONV_RANGES


@dataclass(frozen=True)
class Conv:
    """MMC's convolution addressing: activation row ``b`` comes from UB row
    ``ub + (b // out_w) * row_step + (b % out_w) * col_step``."""
    out_w: int
    col_step: int
    row_step: int

    def __post_init__(self):
        for name, (low, high) in _conv_ranges():
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool):
                raise TypeError(f"conv {name} must be an int, not {value!r}")
            if not low <= value <= high:
                fields = {f.name: f for f in LAYOUTS[Opcode.MMC]}
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
        if conv is None:
            return {"accumulate": int(self.accumulate), "switch": int(self.switch),
                    "unsigned": int(self.unsigned), "conv": 0,
                    "ub": self.ub, "rows": self.rows, "acc": self.acc,
                    "out_w": 0, "col_step": 0, "row_step": 0}
        return {"accumulate": int(self.accumulate), "switch": int(self.switch),
                "unsigned": int(self.unsigned), "conv": 1,
                "ub": self.ub, "rows": self.rows, "acc": self.acc,
                "out_w": conv.out_w, "col_step": conv.col_step, "row_step": conv.row_step}

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
    mlas_round: bool = False

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


def layout(what):
    """The fields of an instruction, an instruction class, an `Opcode` or an opcode value."""
    if isinstance(what, Instruction) or (isinstance(what, type) and issubclass(what, Instruction)):
        return LAYOUTS[what.OPCODE]
    return LAYOUTS[Opcode(what)]


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
