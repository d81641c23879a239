"""Properties of the instruction set and the assembler, checked with Hypothesis:
encoding round trips, a decoder that is total over 128-bit words, and an
assembler that answers any text with instructions or an `AsmError` naming
the file and line, never with another exception."""

import random

import pytest
from hypothesis import example, given, settings, strategies as st

from tpu import TPUConfig
from tpu.asm import AsmError, assemble, disassemble, format_instruction, parse
from tpu.isa import (INSTRUCTION_BYTES, IllegalInstruction, Instruction, Nop, Opcode, check, decode,
                     decode_program, diagnose, encode_program, random_instruction)


FAST = settings(max_examples=300, deadline=None)
CONFIGS = [TPUConfig(), TPUConfig(rows=4, cols=8, acc_rows=64, ub_rows=256, weight_mem_tiles=16)]

words = st.integers(0, (1 << 8 * INSTRUCTION_BYTES) - 1).map(
    lambda w: w.to_bytes(INSTRUCTION_BYTES, "little"))
# Words with a real opcode in the low byte reach the field checks more often.
opcode_words = st.tuples(st.sampled_from([int(op) for op in Opcode]),
                         st.integers(0, (1 << 8 * (INSTRUCTION_BYTES - 1)) - 1)).map(
    lambda t: (t[0] | t[1] << 8).to_bytes(INSTRUCTION_BYTES, "little"))
instructions = st.builds(random_instruction, st.randoms(use_true_random=False),
                         st.sampled_from(list(Opcode)))


@FAST
@given(st.one_of(words, opcode_words))
@example(bytes(16))
@example(b"\xff" * 16)
def test_decode_is_total(data):
    """Every 16-byte word decodes to an instruction that encodes back to it,
    or is an IllegalInstruction; check() agrees and never raises."""
    try:
        instruction = decode(data)
    except IllegalInstruction as error:
        assert check(data, CONFIGS[0]) == error.fault
        return
    assert isinstance(instruction, Instruction)
    assert instruction.encode() == data
    for config in CONFIGS:
        fault, message = diagnose(instruction, config)
        assert fault == check(data, config) and bool(message) == bool(fault)


@FAST
@given(instructions)
def test_instruction_round_trips(instruction):
    """encode/decode and format/parse give back the same instruction."""
    data = instruction.encode()
    assert decode(data) == instruction
    line = format_instruction(instruction)
    assert parse(line) == [instruction]
    assert assemble(line.upper() if "0x" not in line else line) == data


@FAST
@given(st.lists(st.one_of(words, opcode_words), max_size=8).map(b"".join))
def test_any_bytes_disassemble_and_reassemble(data):
    """Any whole number of words disassembles to text that assembles back to
    the same bytes (illegal words as .raw lines)."""
    text = disassemble(data)
    assert assemble(text) == data
    assert len(text.split("\n")) - 1 == len(data) // INSTRUCTION_BYTES
    try:
        program = decode_program(data)
    except IllegalInstruction as error:
        assert 0 <= error.index < len(data) // INSTRUCTION_BYTES
    else:
        assert encode_program(program) == data


@pytest.mark.parametrize("value", [16, 1, None, "halt", [0] * 16, 1.5])
def test_decode_takes_only_bytes(value):
    """bytes(16) is sixteen zeros, so an int must not be taken as a length."""
    with pytest.raises(TypeError, match="needs bytes"):
        decode(value)
    with pytest.raises(TypeError, match="needs bytes"):
        decode_program(value)
    with pytest.raises(TypeError, match="disassemble needs bytes"):
        disassemble(value)


@pytest.mark.parametrize("config", [None, "8x8", 8, {}])
def test_diagnose_needs_a_config(config):
    for instruction in (Nop(), Nop().encode()):
        with pytest.raises(TypeError, match="diagnose needs a TPUConfig"):
            diagnose(instruction, config)


# --------------------------------------------------------------------------------------
# The assembler never fails with anything but AsmError at FILE:LINE


# Text made of the assembler's own vocabulary, so that most lines get far
# into the parser rather than failing at the first character.
_TOKENS = ([op.mnemonic for op in Opcode] + [".raw", ".x", "conv(", ")", "(", ",", "=", " ", "\t",
           "ub", "rows", "host", "acc", "tile", "count", "code", "func", "pool", "reg", "value",
           "switch", "unsigned", "relu", "max", "out_w", "col_step", "row_step", "in_w",
           "0x", "0b", "-", "+", "_", "0", "1", "7", "255", "65536", "4294967296", "9" * 50,
           "f" * 40, ";", "#", "\n", "\r\n", "\r", "\x0c", "\x85", "\u2028", "\x00", "é", "١"])
asm_text = st.one_of(st.text(max_size=200),
                     st.lists(st.sampled_from(_TOKENS), max_size=60).map("".join))


def _line_count(text):
    return text.count("\n") + 1


@settings(max_examples=500, deadline=None)
@given(asm_text, st.sampled_from([None] + CONFIGS))
@example("ub=1" + "1" * 5000, None)
@example("rhm ub=" + "1" * 5000 + ", rows=1, host=0", None)
@example("int code=0x" + "f" * 5000, None)
@example(".raw " + "9" * 5000, None)
@example("nop\x0chalt\nhalt", None)
@example("nop\u2028halt", None)
@example("nop\n\x85\nhalt", None)
@example("nop\r\nbad\r\n", None)
def test_any_text_assembles_or_names_its_line(text, config):
    try:
        program = parse(text, "any.s", config)
    except AsmError as error:
        assert error.filename == "any.s"
        # A line 0 or past the end would be wrong (and line 0 would make the
        # check below read the last line instead).
        assert 1 <= error.line <= _line_count(text), (error.line, text)
        assert str(error).startswith(f"any.s:{error.line}: ")
        assert "\n" not in str(error) and len(str(error)) < 400, str(error)
        # The line named is the one at fault: it fails on its own too.
        line = text.split("\n")[error.line - 1]
        with pytest.raises(AsmError):
            parse(line, "any.s", config)
        return
    assert encode_program(program) == assemble(text, "any.s", config)


def test_only_newline_ends_a_line():
    """Form feed, NEL and the Unicode separators are not line breaks (that
    would shift line numbers against every editor): they are errors, on the
    line where they stand."""
    for separator, name in (("\x0c", "0x0c"), ("\x85", "0x85"), ("\u2028", "U+2028"),
                            ("\u2029", "U+2029"), ("\x0b", "0x0b"), ("\r", "0x0d")):
        with pytest.raises(AsmError) as info:
            parse(f"nop\nnop{separator}halt\nhalt\n", "f.s")
        assert info.value.line == 2 and name in info.value.reason, info.value
    assert parse("nop\r\nhalt\r\n") == parse("nop\nhalt\n")
    assert parse("\ufeffnop\nhalt") == parse("nop\nhalt")


def test_absurd_literals():
    with pytest.raises(AsmError, match=r"^a\.s:2: number '1111.*too large"):
        parse("nop\nrhm ub=" + "1" * 5000 + ", rows=1, host=0", "a.s")
    with pytest.raises(AsmError, match=r"^a\.s:1: .*out of range"):
        parse("int code=" + "9" * 60, "a.s")
    # Leading zeros are not digits of the value.
    assert parse("int code=0x" + "0" * 5000 + "7") == parse("int code=7")


def test_parse_takes_only_text():
    with pytest.raises(TypeError, match="must be text"):
        parse(b"nop")


def test_random_instructions_use_a_seed():
    """The strategy draws from Hypothesis's own seeded Random: a replay is exact."""
    rng = random.Random(1)
    assert random_instruction(rng) == random_instruction(random.Random(1))
