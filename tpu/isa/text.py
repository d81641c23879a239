"""The assembly text of one instruction: `format_instruction` writes the line
`tpu.asm` parses back, `Raw` is a ``.raw`` word (any 16 bytes) and
`operands` gives the operands of an instruction class."""

import dataclasses
import functools
from dataclasses import dataclass

from .codes import INSTRUCTION_BYTES


__all__ = ["Raw", "operands", "format_instruction"]


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
