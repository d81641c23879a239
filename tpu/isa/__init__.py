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

Modules
-------
The package holds one module a part, each importing only those before it:
`codes` (the numbers and enumerations), `layouts` (the bit layouts), `errors`,
`text` (the assembly text of one instruction), `instructions`, `decoding`,
`random_instructions` and `range_checks`. Import the names from `tpu.isa`.
"""

from .codes import (ISA_VERSION, INSTRUCTION_BYTES, MAX_POOL_SIZE, MAX_POOL_COUNT, Opcode, Fault,
                    Func, Pool, Reg, INSTRUCTION_BITS)
from .layouts import Field, LAYOUTS, OPCODE_FIELD, layout_markdown
from .errors import FieldError, IllegalInstruction
from .text import Raw, operands, format_instruction
from .instructions import (layout, Instruction, Nop, Halt, Sync, Int, Rhm, Whm, Rw, Mmc, Conv, Act,
                           Cfg, Ldq, Ldl, INSTRUCTIONS, ldq_rows, ldq_sections, ldl_rows)
from .decoding import decode, encode_program, decode_program
from .random_instructions import random_instruction
from .range_checks import check, diagnose


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
