"""The assembler and disassembler: syntax, round trips and error messages."""

import random
import re
from pathlib import Path

import pytest

from conftest import base_seed
from tpu import TPUConfig
from tpu.config import UP5K_PROFILE
from tpu.asm import AsmError, Raw, assemble, disassemble, format_instruction, parse
from tpu.isa import (Act, Cfg, Conv, Fault, Func, Halt, IllegalInstruction, Int, Ldl, Ldq, Mmc,
                     Nop, Opcode, Pool, Reg, Rhm, Rw, Sync, Whm, encode_program,
                     random_instruction)


DOCS = Path(__file__).resolve().parent.parent / "docs" / "isa.md"


def one(line, **kwargs):
    program = parse(line, **kwargs)
    assert len(program) == 1
    return program[0]


# --------------------------------------------------------------------------------------
# Syntax


@pytest.mark.parametrize("line, instr", [
    ("rhm ub=0, rows=16, host=0x1000", Rhm(0, 16, 0x1000)),
    ("whm ub=3, rows=1, host=0", Whm(3, 1, 0)),
    ("rw tile=5, count=2", Rw(5, 2)),
    ("mmc ub=0, rows=16, acc=0, switch, unsigned", Mmc(0, 16, 0, switch=True, unsigned=True)),
    ("mmc ub=0, rows=64, acc=0, accumulate, conv(out_w=8, col_step=1, row_step=10)",
     Mmc(0, 64, 0, accumulate=True, conv=Conv(8, 1, 10))),
    ("act acc=0, ub=100, rows=64, func=relu, pool=max, pool_size=2, pool_stride=2, in_w=8, unsigned",
     Act(0, 100, 64, func=Func.RELU, pool=Pool.MAX, pool_size=2, pool_stride=2, in_w=8,
         unsigned=True)),
    ("act acc=1, ub=2, rows=3", Act(1, 2, 3)),
    ("act acc=1, ub=2, rows=3, single_round, mlas_round",
     Act(1, 2, 3, single_round=True, mlas_round=True)),
    ("act acc=1, ub=2, rows=3, func=sigmoid, pool=global_avg",
     Act(1, 2, 3, func=Func.SIGMOID, pool=Pool.GLOBAL_AVG)),
    ("cfg reg=out_zero_point, value=-5", Cfg(Reg.OUT_ZERO_POINT, -5)),
    ("cfg reg=2, value=0x7fffffff", Cfg(Reg.CLAMP_MAX, 0x7FFFFFFF)),
    ("act acc=0, ub=0, rows=64, pool=avg, pool_size=4, pool_stride=4, in_w=8",
     Act(0, 0, 64, pool=Pool.AVG, pool_size=4, pool_stride=4, in_w=8)),
    ("int code=7", Int(7)),
    ("halt", Halt()), ("nop", Nop()), ("sync", Sync()),
    ("ldq ub=1000", Ldq(1000)), ("ldl ub=0b101", Ldl(5)),
])
def test_examples(line, instr):
    assert one(line) == instr
    assert format_instruction(instr) == line or one(format_instruction(instr)) == instr


@pytest.mark.parametrize("line", [
    "MMC UB=0, ROWS=16, ACC=0, SWITCH, UNSIGNED, CONV(OUT_W=8, COL_STEP=1, ROW_STEP=10)",
    "Mmc unsigned,switch,conv( row_step = 10 , out_w=8,col_step=1 ),acc=0,rows=16,ub=0",
    "\tmmc\tub = 0x0, rows = 0b10000 , acc=-0, switch, unsigned, conv(out_w=0x8, col_step=1, "
    "row_step=1_0)   ; trailing comment",
    "mmc ub=0, rows=1_6, acc=0, switch, unsigned, conv(out_w=+8, col_step=0B1, row_step=0XA)  # hash",
])
def test_spelling_variants(line):
    assert one(line) == Mmc(0, 16, 0, switch=True, unsigned=True, conv=Conv(8, 1, 10))


def test_names_and_numbers_for_enumerations():
    assert one("act acc=0, ub=0, rows=1, func=RELU, pool=None") == Act(0, 0, 1, func=Func.RELU)
    assert one("act acc=0, ub=0, rows=1, func=4") == Act(0, 0, 1, func=Func.TANH)
    assert one("cfg reg=Clamp_Min, value=-128") == Cfg(Reg.CLAMP_MIN, -128)


def test_comments_blank_lines_and_numbers():
    text = """
        ; a comment line
        # another
        rhm ub=0x10, rows=0b11, host=0xFFFF_FFFF_FFFF_0000   ; comment

        cfg reg=clamp_max, value=-0x80  # hex with a sign
        int code=65535
    """
    assert parse(text) == [Rhm(16, 3, 0xFFFFFFFFFFFF0000), Cfg(Reg.CLAMP_MAX, -128), Int(65535)]
    assert parse("") == [] and parse("\n ; only\n\n") == []
    assert assemble("halt\r\nnop\r\n") == Halt().encode() + Nop().encode()


def test_raw_words():
    program = parse(".raw 0x77\n.RAW 0\n.raw 340282366920938463463374607431768211455")
    assert program == [Raw(0x77), Raw(0), Raw((1 << 128) - 1)]
    data = encode_program(program)
    assert data[:16] == bytes([0x77]) + bytes(15) and data[32:] == b"\xff" * 16
    # Raw words are not checked against the configuration.
    assert assemble(".raw 0x" + "ff" * 16, config=TPUConfig()) == b"\xff" * 16


# --------------------------------------------------------------------------------------
# Round trips


@pytest.mark.parametrize("seed", [base_seed() + i for i in range(20)])
def test_random_round_trip(seed):
    print(f"seed {seed}")
    rng = random.Random(seed)
    program = [random_instruction(rng, opcode) for _ in range(10) for opcode in Opcode]
    rng.shuffle(program)
    for instr in program:
        text = format_instruction(instr)
        assert text == str(instr)
        assert one(text) == instr, f"seed {seed}: {text}"
    data = encode_program(program)
    text = disassemble(data)
    assert len(text.splitlines()) == len(program)
    assert assemble(text) == data, f"seed {seed}"


@pytest.mark.parametrize("seed", [base_seed() + 100 + i for i in range(5)])
def test_random_words_disassemble_and_reassemble_to_the_same_bytes(seed):
    print(f"seed {seed}")
    rng = random.Random(seed)
    # Legal opcodes with random operand bits: mostly illegal, some legal.
    words = []
    for _ in range(300):
        opcode = rng.choice(list(Opcode))
        bits = rng.getrandbits(120) & rng.choice([0, (1 << 120) - 1, rng.getrandbits(120)])
        words.append((bits << 8 | opcode).to_bytes(16, "little"))
    words.append(bytes([0xEE]) + bytes(15))
    data = b"".join(words)
    text = disassemble(data)
    assert assemble(text) == data, f"seed {seed}"


def test_disassembly_format():
    program = [Rhm(0, 16, 0x1000), Mmc(0, 64, 0, accumulate=True, conv=Conv(8, 1, 10)),
               Act(0, 100, 64, func=Func.RELU, pool=Pool.MAX, pool_size=2, pool_stride=2, in_w=8,
                   unsigned=True),
               Act(0, 1, 2), Cfg(Reg.OUT_ZERO_POINT, -5), Int(7), Halt()]
    assert disassemble(encode_program(program)) == (
        "rhm ub=0, rows=16, host=0x1000\n"
        "mmc ub=0, rows=64, acc=0, accumulate, conv(out_w=8, col_step=1, row_step=10)\n"
        "act acc=0, ub=100, rows=64, func=relu, pool=max, pool_size=2, pool_stride=2, in_w=8, "
        "unsigned\n"
        "act acc=0, ub=1, rows=2\n"
        "cfg reg=out_zero_point, value=-5\n"
        "int code=7\n"
        "halt\n")
    assert disassemble(b"") == ""


def test_disassemble_illegal_words():
    data = Halt().encode() + bytes([0x77]) + bytes(15) + bytes([0x01, 0x04]) + bytes(14)
    text = disassemble(data)
    lines = text.splitlines()
    assert lines[0] == "halt"
    assert lines[1].startswith(".raw 0x" + "0" * 30 + "77  ; ILLEGAL_OPCODE: unknown opcode 0x77")
    assert lines[2].startswith(".raw 0x" + "0" * 28 + "0401  ; ILLEGAL_FIELD: halt flag bit 2")
    assert assemble(text) == data
    with pytest.raises(IllegalInstruction) as info:
        disassemble(data, strict=True)
    assert info.value.index == 1 and info.value.fault == Fault.ILLEGAL_OPCODE
    with pytest.raises(ValueError, match="16-byte instructions; 17 bytes leave 1 over"):
        disassemble(bytes(17))


def test_docs_example_assembles():
    text = DOCS.read_text()
    blocks = re.findall(r"^## Assembly$.*?^```(?:asm)?\n(.*?)^```$", text, re.M | re.S)
    assert len(blocks) == 1
    program = parse(blocks[0], filename="isa.md", config=TPUConfig())
    assert len(program) == 9
    assert assemble(disassemble(encode_program(program))) == encode_program(program)


# --------------------------------------------------------------------------------------
# Errors


ERRORS = [
    ("frobnicate ub=0", "unknown mnemonic 'frobnicate'"),
    (".word 5", "unknown directive '.word'"),
    ("rhm ub=0, rows=16", "missing field 'host' for rhm"),
    ("rhm ub=0", "missing fields 'rows', 'host' for rhm"),
    ("rhm ub=0, rows=16, host=0, bogus=1", "unknown field 'bogus' for rhm (fields: ub, rows, host)"),
    ("halt now", "unknown field 'now' for halt (it has no operands)"),
    ("mmc ub=0, rows=1, acc=0, conv(out_w=1, col_step=1, row_step=1, depth=2)",
     "unknown field 'depth' in mmc conv(...)"),
    ("rhm ub=0, rows=16, host=0, UB=1", "duplicate field 'ub' in rhm"),
    ("mmc ub=0, rows=1, acc=0, switch, switch", "duplicate field 'switch' in mmc"),
    ("mmc ub=0, rows=1, acc=0, conv(out_w=1, out_w=2, col_step=1, row_step=1)",
     "duplicate field 'out_w' in mmc conv(...)"),
    ("rhm ub=0x1000000, rows=1, host=0", "rhm ub = 16777216 is out of range 0..16777215 (24 bits)"),
    ("rhm ub=-1, rows=1, host=0", "rhm ub = -1 is out of range 0..16777215"),
    ("rhm ub=0, rows=1, host=0x1_0000_0000_0000_0000",
     "rhm host = 18446744073709551616 is out of range 0..18446744073709551615 (64 bits)"),
    ("cfg reg=out_zero_point, value=0x80000000", "cfg value = 2147483648 is out of range "
                                                 "-2147483648..2147483647"),
    ("int code=65536", "int code = 65536 is out of range 0..65535"),
    ("mmc ub=0, rows=1, acc=0, conv(out_w=0, col_step=1, row_step=1)",
     "mmc conv out_w = 0 is out of range 1..65535"),
    ("act acc=0, ub=0, rows=8, pool=max, pool_size=16, pool_stride=1, in_w=4",
     "act pool_size = 16 is out of range 1..4"),
    ("act acc=0, ub=0, rows=25, pool=max, pool_size=5, pool_stride=1, in_w=5",
     "act pool_size = 5 is out of range 1..4"),
    ("act acc=0, ub=0, rows=25, pool=avg, pool_size=2, pool_stride=5, in_w=5",
     "act pool_stride = 5 is out of range 1..4"),
    ("act acc=0, ub=0, rows=10, pool=avg, pool_size=2, pool_stride=2, in_w=4",
     "act rows = 10 is not a multiple of in_w = 4"),
    ("act acc=0, ub=0, rows=8, pool=max", "act pool_size = 0 is out of range 1..4"),
    ("act acc=0, ub=0, rows=8, pool_size=2", "act pool_size = 2 is reserved (must be 0) unless pool"),
    ("act acc=0, ub=0, rows=1, func=7", "act func = 7 is not one of none (0), relu (1)"),
    ("act acc=0, ub=0, rows=1, func=relux", "unknown func 'relux' (one of none, relu, clamp, "
                                            "sigmoid, tanh)"),
    ("cfg reg=zero_point, value=0", "unknown reg 'zero_point' (one of out_zero_point, clamp_min"),
    ("cfg reg=9, value=0", "cfg reg = 9 is not one of out_zero_point (0)"),
    ("cfg reg=3, value=0", "cfg reg = 3 is not one of out_zero_point (0), clamp_min (1), "
                           "clamp_max (2)"),
    ("cfg reg=pool_divisor_shift, value=0", "unknown reg 'pool_divisor_shift' (one of "
                                            "out_zero_point, clamp_min, clamp_max)"),
    ("rhm ub=12a, rows=1, host=0", "bad number '12a' for ub"),
    ("rhm ub=0x, rows=1, host=0", "bad number '0x' for ub"),
    ("rhm ub=0b2, rows=1, host=0", "bad number '0b2' for ub"),
    ("rhm ub=1__0, rows=1, host=0", "bad number '1__0' for ub"),
    ("rhm ub=--1, rows=1, host=0", "bad number '--1' for ub"),
    ("rhm ub=, rows=1, host=0", "missing value for ub"),
    ("rhm ub, rows=1, host=0", "field 'ub' needs a value: ub=N"),
    ("mmc ub=0, rows=1, acc=0, switch=1", "'switch' is a flag: write it alone, without a value"),
    ("mmc ub=0, rows=1, acc=0, conv", "'conv' needs its parameters: "
                                      "conv(out_w=N, col_step=N, row_step=N)"),
    ("mmc ub=0, rows=1, acc=0, conv(out_w=1, col_step=1)", "missing field 'row_step' in mmc conv(...)"),
    ("mmc ub=0, rows=1, acc=0, conv(out_w=1, col_step=1, row_step=1",
     "unbalanced '('"),
    ("mmc ub=0, rows=1, acc=0, unsigned)", "unbalanced ')'"),
    ("rhm ub=0,, rows=1, host=0", "empty operand (a stray comma?)"),
    ("rhm ub=0, rows=1, host=0,", "empty operand (a stray comma?)"),
    ("rhm ub=0 rows=1, host=0", "bad number '0 rows=1' for ub"),
    ("rhm 5, rows=1, host=0", "cannot parse operand '5' of rhm"),
    (".raw", ".raw needs a value"),
    (".raw 0x1" + "0" * 32, ".raw word 0x1" + "0" * 32 + " is out of range: 0..2**128-1"),
    (".raw -1", "is out of range: 0..2**128-1"),
    ("halt \x01", "control character 0x01 in the text (is this a binary file?)"),
]


@pytest.mark.parametrize("line, reason", ERRORS, ids=[e[0] for e in ERRORS])
def test_error_names_file_line_and_reason(line, reason):
    text = "; header\n\nnop\n" + line + "\nhalt\n"
    with pytest.raises(AsmError) as info:
        assemble(text, filename="prog.s")
    error = info.value
    assert error.filename == "prog.s" and error.line == 4
    assert reason in error.reason, error.reason
    assert str(error) == f"prog.s:4: {error.reason}"
    assert "\n" not in str(error)


def test_default_file_name():
    with pytest.raises(AsmError, match=r"^<input>:1: unknown mnemonic 'x'$"):
        parse("x")


SMALL = TPUConfig(rows=4, cols=8, ub_rows=100, acc_rows=64, weight_mem_tiles=10)


@pytest.mark.parametrize("line, fault, fragment", [
    ("rhm ub=99, rows=2, host=0", Fault.UB_RANGE, "rhm UB rows 99..100 are out of range: there are "
                                                  "100 (ub_rows)"),
    ("rhm ub=0, rows=1, host=0xffff_ffff_ffff_fffd", Fault.HOST_RANGE, "64-bit address space"),
    ("rw tile=9, count=2", Fault.WEIGHT_MEM_RANGE, "weight tile rows 9..10"),
    ("mmc ub=0, rows=65, acc=0", Fault.ACC_RANGE, "accumulator rows 0..64"),
    ("mmc ub=3, rows=10, acc=0, conv(out_w=4, col_step=29, row_step=10)", Fault.UB_RANGE,
     "mmc reads UB row 100"),
    ("act acc=0, ub=97, rows=16, pool=max, pool_size=2, pool_stride=2, in_w=4", Fault.UB_RANGE,
     "act UB rows 97..100"),
    ("act acc=0, ub=0, rows=130, pool=avg, pool_size=2, pool_stride=2, in_w=65",
     Fault.ILLEGAL_FIELD, "act in_w = 65 is wider than the pooling line buffer: "
                          "pool_max_width = 64"),
    ("act acc=0, ub=0, rows=4097, pool=global_avg", Fault.ILLEGAL_FIELD,
     "act rows = 4097 is too many for global_avg: it averages at most 4096 rows"),
    ("ldq ub=83", Fault.UB_RANGE, "ldq UB rows 83..100"),
    ("ldl ub=37", Fault.UB_RANGE, "ldl UB rows 37..100"),
])
def test_range_checks_with_a_configuration(line, fault, fragment):
    parse(line)       # legal without a configuration
    with pytest.raises(AsmError) as info:
        parse("nop\n" + line, filename="p.s", config=SMALL)
    assert info.value.line == 2
    assert fragment in info.value.reason
    assert info.value.reason.endswith(f"[{fault.name}]")


def test_in_range_program_passes_the_check():
    text = ("rhm ub=96, rows=4, host=0\nrw tile=0, count=10\nmmc ub=0, rows=64, acc=0, switch\n"
            "act acc=0, ub=36, rows=64\nldq ub=82\nldl ub=36\nrhm ub=0xffffff, rows=0, host=0\n"
            "act acc=0, ub=0, rows=64, pool=max, pool_size=1, pool_stride=4, in_w=64\n"
            "act acc=0, ub=0, rows=0, pool=avg, pool_size=1, pool_stride=1, in_w=65535\n")
    assert len(parse(text, config=SMALL)) == 9


@pytest.mark.parametrize("flags", ["mlas_round", "single_round, mlas_round"])
def test_mlas_round_needs_a_chip_that_rounds_so(flags):
    line = f"act acc=0, ub=0, rows=4, {flags}"
    assert len(parse(line, config=SMALL)) == 1                       # mlas_rounding 1
    for config in (SMALL.replace(mlas_rounding=0), UP5K_PROFILE):
        with pytest.raises(AsmError) as info:
            parse("nop\n" + line, filename="p.s", config=config)
        assert info.value.line == 2
        assert "act mlas_round: this chip's requantizers do not round as ONNX Runtime's MLAS does " \
               "(mlas_rounding = 0)" in info.value.reason
        assert info.value.reason.endswith("[ILLEGAL_FIELD]")
    assert len(parse("act acc=0, ub=0, rows=4, single_round", config=UP5K_PROFILE)) == 1
