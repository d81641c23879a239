"""Bytes to instructions and back: `decode` one word, `encode_program` and
`decode_program` whole programs."""

import functools

from .codes import Fault, INSTRUCTION_BYTES, Opcode
from .layouts import LAYOUTS, OPCODE_FIELD, _condition_text, _reserved_runs
from .errors import FieldError, IllegalInstruction
from .instructions import INSTRUCTIONS


__all__ = ["decode", "encode_program", "decode_program"]


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
