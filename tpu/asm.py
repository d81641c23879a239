"""Assembler and disassembler for the instruction set (`tpu.isa`, docs/isa.md).

One instruction per line: a mnemonic, then comma-separated operands, each
``key=value``, a bare flag, or MMC's ``conv(out_w=.., col_step=.., row_step=..)``::

    rhm ub=0, rows=16, host=0x1000     ; comments start with ';' or '#'
    mmc ub=0, rows=16, acc=0, switch, unsigned
    act acc=0, ub=100, rows=16, func=relu, unsigned
    cfg reg=out_zero_point, value=-5
    .raw 0x00000000000000000000000000000077   # any 128-bit word, unchecked

Mnemonics, keys and symbolic values are case-insensitive; numbers are
decimal, ``0x`` hex or ``0b`` binary, with an optional sign and ``_``
separators. Fields with a default (flags, ``func``, ``pool``, the pooling
window) may be left out; the others are required.

Members
-------
assemble(text, filename, config) -> bytes
parse(text, filename, config) -> list of instructions
disassemble(data, strict) -> str
format_instruction(instruction) -> str
AsmError
    A line that does not assemble: ``FILE:LINE: reason``.
Raw
    A ``.raw`` word: 16 bytes given as one 128-bit number, never checked.
"""

import dataclasses
import re

from .isa import (INSTRUCTION_BYTES, INSTRUCTIONS, Conv, FieldError, IllegalInstruction,
                  Opcode, Raw, decode, diagnose, encode_program, format_instruction, operands)


__all__ = ["AsmError", "Raw", "assemble", "parse", "disassemble", "format_instruction"]


class AsmError(ValueError):
    """A line of assembly that does not assemble.

    Attributes
    ----------
    filename : str
    line : int
        1-based line number.
    reason : str
    """

    def __init__(self, filename, line, reason):
        self.filename = filename
        self.line = line
        self.reason = reason
        super().__init__(f"{filename}:{line}: {reason}")


class _LineError(Exception):
    """An error in the current line; `parse` adds file and line."""


_MNEMONICS = {op.mnemonic: INSTRUCTIONS[op] for op in Opcode}
_CONV_KEYS = tuple(f.name for f in dataclasses.fields(Conv))


_SPECS = {cls: operands(cls) for cls in INSTRUCTIONS.values()}


# --------------------------------------------------------------------------------------
# Assembling


_NUMBER = re.compile(r"([+-]?)(0x[0-9a-f]+(?:_?[0-9a-f]+)*|0b[01]+(?:_?[01]+)*|[0-9]+(?:_?[0-9]+)*)",
                     re.IGNORECASE)
# Control characters, and the Unicode line breaks other than \n: only \n (or
# \r\n) ends a line, so line numbers are those of every editor and grep.
_CONTROL = re.compile("[\\x00-\\x08\\x0a-\\x1f\\x7f-\\x9f\\u2028\\u2029]")
# The most digits a number may have: no field is wider than a .raw word's
# 128 bits (a longer literal is a mistake, and Python refuses to convert
# decimal strings of thousands of digits).
_MAX_BITS = 8 * INSTRUCTION_BYTES
_OPERAND = re.compile(r"([A-Za-z_]\w*)\s*(?:=\s*(.*)|\((.*)\))?", re.DOTALL)


def _shown(text, limit=40):
    """`text` for a message, cut short."""
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _number(text, what):
    match = _NUMBER.fullmatch(text)
    if not match:
        raise _LineError(f"bad number '{_shown(text)}' for {what}" if text else
                         f"missing value for {what}")
    sign, digits = match.groups()
    digits = digits.replace("_", "").lower()
    base = {"0x": 16, "0b": 2}.get(digits[:2], 10)
    if base != 10:
        digits = digits[2:]
    significant = digits.lstrip("0")
    # Twice the digits a 128-bit number can need: a number just too large
    # for its field gets the field's own message, an absurd one this.
    if len(significant) > {16: 64, 2: 2 * _MAX_BITS, 10: 78}[base]:
        raise _LineError(f"number '{_shown(text)}' for {what} is too large: no field is wider "
                         f"than {_MAX_BITS} bits")
    value = int(significant or "0", base)
    return -value if sign == "-" else value


def _strip_comment(line):
    cut = [i for i in (line.find(";"), line.find("#")) if i >= 0]
    return line[:min(cut)] if cut else line


def _split(text):
    """Top-level comma-separated items of `text` (commas inside parentheses stay)."""
    if not text.strip():
        return []
    items, depth, start = [], 0, 0
    for i, char in enumerate(text):
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
            if depth < 0:
                raise _LineError("unbalanced ')'")
        elif char == "," and depth == 0:
            items.append(text[start:i])
            start = i + 1
    if depth:
        raise _LineError("unbalanced '('")
    items.append(text[start:])
    items = [item.strip() for item in items]
    if not all(items):
        raise _LineError("empty operand (a stray comma?)")
    return items


def _keyed(items, where):
    """(key, value or None, group or None) of each operand; keys lowercased, no duplicates."""
    seen = set()
    out = []
    for item in items:
        match = _OPERAND.fullmatch(item)
        if not match:
            raise _LineError(f"cannot parse operand '{_shown(item)}' of {where}: "
                             f"expected key=value or a flag")
        key, value, group = match.groups()
        key = key.lower()
        if key in seen:
            raise _LineError(f"duplicate field '{_shown(key)}' in {where}")
        seen.add(key)
        out.append((key, None if value is None else value.strip(), group))
    return out


def _parse_conv(group, mnemonic):
    where = f"{mnemonic} conv(...)"
    values = {}
    for key, value, inner in _keyed(_split(group), where):
        if key not in _CONV_KEYS:
            raise _LineError(f"unknown field '{_shown(key)}' in {where} (fields: {', '.join(_CONV_KEYS)})")
        if value is None:
            raise _LineError(f"field '{key}' in {where} needs a value: {key}=N")
        values[key] = _number(value, f"conv {key}")
    missing = [key for key in _CONV_KEYS if key not in values]
    if missing:
        raise _LineError(f"missing field{'s' if len(missing) > 1 else ''} "
                         f"{', '.join(repr(k) for k in missing)} in {where}")
    try:
        return Conv(**values)
    except (ValueError, TypeError) as error:
        raise _LineError(str(error)) from None


def _describe_operands(spec):
    shown = []
    for name, (kind, _, _) in spec.items():
        shown.append(f"{name}(...)" if kind == "group" else name)
    return ", ".join(shown)


def _parse_line(code):
    head, rest = (code.split(None, 1) + [""])[:2]
    mnemonic = head.lower()
    if mnemonic == ".raw":
        if not rest.strip():
            raise _LineError(".raw needs a value: .raw 0x<32 hex digits>")
        try:
            return Raw(_number(rest.strip(), ".raw"))
        except ValueError as error:
            raise _LineError(str(error)) from None
    if mnemonic.startswith("."):
        raise _LineError(f"unknown directive '{_shown(head)}'")
    cls = _MNEMONICS.get(mnemonic)
    if cls is None:
        raise _LineError(f"unknown mnemonic '{_shown(head)}'")
    spec = _SPECS[cls]
    kwargs = {}
    for key, value, group in _keyed(_split(rest), mnemonic):
        if key not in spec:
            known = f"fields: {_describe_operands(spec)}" if spec else "it has no operands"
            raise _LineError(f"unknown field '{_shown(key)}' for {mnemonic} ({known})")
        kind, _, field = spec[key]
        if kind == "flag":
            if value is not None or group is not None:
                raise _LineError(f"'{key}' is a flag: write it alone, without a value")
            kwargs[key] = True
        elif kind == "group":
            if group is None:
                raise _LineError(f"'{key}' needs its parameters: "
                                 f"{key}({', '.join(k + '=N' for k in _CONV_KEYS)})")
            kwargs[key] = _parse_conv(group, mnemonic)
        elif value is None:
            raise _LineError(f"field '{key}' needs a value: {key}=N")
        elif kind == "enum" and not _NUMBER.fullmatch(value):
            try:
                kwargs[key] = field.enum[value.upper()]
            except KeyError:
                choices = ", ".join(m.keyword for m in field.enum)
                raise _LineError(f"unknown {key} '{_shown(value)}' (one of {choices})") from None
        else:
            kwargs[key] = _number(value, key)
    missing = [name for name, (_, required, _) in spec.items() if required and name not in kwargs]
    if missing:
        raise _LineError(f"missing field{'s' if len(missing) > 1 else ''} "
                         f"{', '.join(repr(k) for k in missing)} for {mnemonic}")
    try:
        return cls(**kwargs)
    except (FieldError, ValueError, TypeError) as error:
        raise _LineError(str(error)) from None


def parse(text, filename="<input>", config=None):
    """The instructions (and `Raw` words) in assembly `text`.

    With a `TPUConfig` `config`, every instruction (but ``.raw`` words) must also
    pass `tpu.isa.check` on that configuration.

    Raises
    ------
    AsmError
        Naming `filename`, the line and the reason.
    """
    if not isinstance(text, str):
        raise TypeError(f"assembly must be text (str), not {type(text).__name__}")
    program = []
    # A byte-order mark some editors put first is not part of the first line.
    text = text[1:] if text.startswith("\ufeff") else text
    for number, line in enumerate(text.split("\n"), 1):
        if line.endswith("\r"):
            line = line[:-1]
        code = _strip_comment(line)
        # Looked for before strip(), which takes Unicode line breaks for spaces.
        control = _CONTROL.search(code)
        code = code.strip()
        if not code and not control:
            continue
        try:
            if control:
                char = ord(control.group())
                if char > 0xFF:
                    raise _LineError(f"line separator U+{char:04X} in the text (only \\n ends a line)")
                raise _LineError(f"control character 0x{char:02x} in the text (is this a binary file?)")
            instruction = _parse_line(code)
            if config is not None and not isinstance(instruction, Raw):
                fault, message = diagnose(instruction, config)
                if fault:
                    raise _LineError(f"{message} [{fault.name}]")
        except _LineError as error:
            raise AsmError(filename, number, str(error)) from None
        program.append(instruction)
    return program


def assemble(text, filename="<input>", config=None):
    """The bytes of assembly `text`; see `parse`."""
    return encode_program(parse(text, filename, config))


# --------------------------------------------------------------------------------------
# Disassembling


def disassemble(data, strict=False):
    """Assembly text for the program `data`; it assembles back to the same bytes.

    An illegal instruction becomes a ``.raw`` line with a comment naming its
    fault, or, with `strict`, raises `IllegalInstruction` (its `index` set).

    Raises
    ------
    ValueError
        The length of `data` is not a multiple of 16.
    """
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError(f"disassemble needs bytes, not {type(data).__name__}")
    data = bytes(data)
    if len(data) % INSTRUCTION_BYTES:
        raise ValueError(f"a program is a whole number of {INSTRUCTION_BYTES}-byte instructions; "
                         f"{len(data)} bytes leave {len(data) % INSTRUCTION_BYTES} over")
    lines = []
    for index in range(len(data) // INSTRUCTION_BYTES):
        chunk = data[index * INSTRUCTION_BYTES:(index + 1) * INSTRUCTION_BYTES]
        try:
            lines.append(format_instruction(decode(chunk)))
        except IllegalInstruction as error:
            if strict:
                raise IllegalInstruction(error.fault, error.message, error.field, index) from None
            lines.append(f"{format_instruction(Raw.from_bytes(chunk))}  "
                         f"; {error.fault.name}: {error.message}")
    return "".join(line + "\n" for line in lines)
