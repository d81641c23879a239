"""The instruction set: layouts, encoding, decoding, faults and range checks."""

import random
import re
from pathlib import Path

import pytest

from conftest import base_seed
from tpu import TPUConfig
from tpu.hdl import activation_settings
from tpu.isa import (INSTRUCTION_BYTES, INSTRUCTIONS, ISA_VERSION, LAYOUTS, MAX_POOL_COUNT,
                     MAX_POOL_SIZE, Act, Cfg, Conv, Fault, FieldError, Func, Halt,
                     IllegalInstruction, Int, Ldl, Ldq, Mmc, Nop, Opcode, Pool, Reg, Rhm, Rw, Sync,
                     Whm, check, decode, decode_program, diagnose, encode_program, layout,
                     layout_markdown, ldl_rows, ldq_rows, ldq_sections, random_instruction)


DOCS = Path(__file__).resolve().parent.parent / "docs" / "isa.md"


def h(text):
    """16 bytes from hex digits with spaces."""
    data = bytes.fromhex(text.replace(" ", ""))
    assert len(data) == 16, text
    return data


def word(data):
    return int.from_bytes(data, "little")


def seeds(count):
    first = base_seed()
    return [first + i for i in range(count)]


# --------------------------------------------------------------------------------------
# The table


def test_version_and_size():
    assert ISA_VERSION == 1
    assert INSTRUCTION_BYTES == 16


def test_opcodes_and_faults_are_the_specified_values():
    assert {op.name: int(op) for op in Opcode} == {
        "NOP": 0x00, "HALT": 0x01, "SYNC": 0x02, "INT": 0x03, "RHM": 0x10, "WHM": 0x11,
        "RW": 0x20, "MMC": 0x30, "ACT": 0x40, "CFG": 0x50, "LDQ": 0x51, "LDL": 0x52}
    assert {f.name: int(f) for f in Fault} == {
        "NONE": 0, "ILLEGAL_OPCODE": 1, "ILLEGAL_FIELD": 2, "UB_RANGE": 3, "ACC_RANGE": 4,
        "WEIGHT_MEM_RANGE": 5, "WEIGHT_FIFO_UNDERFLOW": 6, "HOST_RANGE": 7, "DMA_ERROR": 8,
        "WEIGHT_FIFO_OVERFLOW": 9}
    assert [int(f) for f in Func] == [0, 1, 2, 3, 4]
    assert [int(p) for p in Pool] == [0, 1, 2, 3]
    assert {r.name: int(r) for r in Reg} == {"OUT_ZERO_POINT": 0, "CLAMP_MIN": 1, "CLAMP_MAX": 2}
    assert [r.signed for r in Reg] == [True, True, True]
    assert all(f.meaning for f in Fault) and all(r.meaning for r in Reg)


def test_pooling_limits_are_the_activation_units():
    assert (MAX_POOL_SIZE, MAX_POOL_COUNT) == (4, 4096)
    assert MAX_POOL_SIZE == activation_settings.MAX_POOL_SIZE
    assert MAX_POOL_COUNT == activation_settings.MAX_POOL_COUNT
    fields = {f.name: f for f in layout(Opcode.ACT)}
    assert fields["pool_size"].legal == fields["pool_stride"].legal == (1, 4)
    assert fields["in_w"].legal == (1, 0xFFFF)


# Copied from the specification, independently of tpu/isa.py: (name, lsb, width).
SPEC_LAYOUTS = {
    Opcode.NOP: [], Opcode.HALT: [], Opcode.SYNC: [],
    Opcode.INT: [("code", 16, 16)],
    Opcode.RHM: [("ub", 16, 24), ("rows", 40, 24), ("host", 64, 64)],
    Opcode.WHM: [("ub", 16, 24), ("rows", 40, 24), ("host", 64, 64)],
    Opcode.RW: [("tile", 16, 24), ("count", 40, 24)],
    Opcode.MMC: [("accumulate", 8, 1), ("switch", 9, 1), ("unsigned", 10, 1), ("conv", 11, 1),
                 ("ub", 16, 24), ("rows", 40, 24), ("acc", 64, 16), ("out_w", 80, 16),
                 ("col_step", 96, 8), ("row_step", 104, 16)],
    Opcode.ACT: [("unsigned", 8, 1), ("single_round", 9, 1), ("mlas_round", 10, 1), ("acc", 16, 16), ("ub", 32, 24), ("rows", 56, 24),
                 ("func", 80, 4), ("pool", 84, 4), ("pool_size", 88, 4), ("pool_stride", 92, 4),
                 ("in_w", 96, 16)],
    Opcode.CFG: [("reg", 16, 8), ("value", 32, 32)],
    Opcode.LDQ: [("ub", 16, 24)],
    Opcode.LDL: [("ub", 16, 24)],
}


@pytest.mark.parametrize("opcode", list(Opcode), ids=lambda op: op.mnemonic)
def test_layout_is_the_specified_one(opcode):
    assert [(f.name, f.lsb, f.width) for f in layout(opcode)] == SPEC_LAYOUTS[opcode]
    assert layout(opcode) is LAYOUTS[opcode] is layout(INSTRUCTIONS[opcode])
    assert not any(f.signed for f in layout(opcode))


def test_every_opcode_has_a_class():
    assert set(INSTRUCTIONS) == set(Opcode)
    for opcode, cls in INSTRUCTIONS.items():
        assert cls.OPCODE == opcode and cls.__name__.upper() == opcode.name


def test_docs_hold_every_layout_table():
    text = DOCS.read_text()
    for opcode in Opcode:
        assert layout_markdown(opcode) in text, f"docs/isa.md is out of date for {opcode.name}"
    for table in (Fault, Reg, Func, Pool):
        for member in table:
            assert member.meaning in text, member
    assert "pool_divisor" not in text.lower()
    # The pooling limits of the range-check table.
    assert "| ACT | ILLEGAL_FIELD | `pool` `max` or `avg`: `in_w <= pool_max_width`" in text
    assert f"| ACT | ILLEGAL_FIELD | `pool` `global_avg`: `rows <= {MAX_POOL_COUNT}`" in text
    assert "`min(max(v, -256), 255)`" in text


# --------------------------------------------------------------------------------------
# Golden encodings, computed by hand from the layout


GOLDEN = [
    (Nop(), "00 00 000000 000000 0000000000000000"),
    (Halt(), "01 00 000000 000000 0000000000000000"),
    (Sync(), "02 00 000000 000000 0000000000000000"),
    (Int(0xBEEF), "03 00 efbe 00000000 0000000000000000"),
    (Rhm(ub=0x123456, rows=0x10, host=0x1122334455667788), "10 00 563412 100000 8877665544332211"),
    (Whm(ub=1, rows=2, host=0x1000), "11 00 010000 020000 0010000000000000"),
    (Rw(tile=0xABCDEF, count=0x000102), "20 00 efcdab 020100 0000000000000000"),
    (Mmc(ub=5, rows=16, acc=0x0203, accumulate=True, switch=True, unsigned=True),
     "30 07 050000 100000 0302 000000000000"),
    (Mmc(ub=0, rows=64, acc=0, accumulate=True, conv=Conv(out_w=8, col_step=1, row_step=10)),
     "30 09 000000 400000 0000 0800 01 0a00 00"),
    (Act(acc=0x0102, ub=100, rows=64, func=Func.RELU, pool=Pool.MAX, pool_size=2, pool_stride=2,
         in_w=8, unsigned=True),
     "40 01 0201 640000 400000 11 22 0800 0000"),
    (Act(acc=0, ub=0xFFFFFF, rows=5, func=Func.TANH, pool=Pool.GLOBAL_AVG),
     "40 00 0000 ffffff 050000 34 00 0000 0000"),
    (Act(acc=1, ub=2, rows=3, single_round=True, mlas_round=True),
     "40 06 0100 020000 030000 00 00 0000 0000"),
    (Cfg(Reg.OUT_ZERO_POINT, -5), "50 00 00 00 fbffffff 0000000000000000"),
    (Cfg(Reg.CLAMP_MAX, 0x12345678), "50 00 02 00 78563412 0000000000000000"),
    (Cfg(Reg.CLAMP_MIN, -(1 << 31)), "50 00 01 00 00000080 0000000000000000"),
    (Cfg(Reg.CLAMP_MAX, -2), "50 00 02 00 feffffff 0000000000000000"),
    (Ldq(ub=0x0A0B0C), "51 00 0c0b0a 000000 0000000000000000"),
    (Ldl(ub=7), "52 00 070000 000000 0000000000000000"),
]
def test_act_golden_with_an_image():
    # 16 image rows of 65535 pixels, 4x4 windows, stride 1.
    instr = Act(acc=3, ub=4, rows=16 * 0xFFFF, func=Func.CLAMP, pool=Pool.AVG, pool_size=4,
                pool_stride=1, in_w=0xFFFF)
    # rows = 16 x 0xffff = 0x0ffff0 -> f0 ff 0f; func 2 | pool 2 << 4 = 0x22;
    # size 4 | stride 1 << 4 = 0x14
    expected = h("40 00 0300 040000 f0ff0f 22 14 ffff 0000")
    assert instr.encode() == expected
    assert decode(expected) == instr
    assert instr.output_shape == (13, 0xFFFF - 3)
    # 4 x 4 windows, stride 4: size 4 | stride 4 << 4 = 0x44
    instr = Act(acc=0, ub=0, rows=64, pool=Pool.MAX, pool_size=4, pool_stride=4, in_w=8)
    assert instr.encode() == h("40 00 0000 000000 400000 10 44 0800 0000")
    assert instr.output_shape == (2, 2)


@pytest.mark.parametrize("instr, expected", GOLDEN, ids=lambda x: getattr(x, "mnemonic", ""))
def test_golden_encoding(instr, expected):
    assert instr.encode() == h(expected)
    assert decode(h(expected)) == instr


def test_enums_are_enums_after_construction_and_decoding():
    act = Act(0, 0, 1, func=1, pool="none")
    assert act.func is Func.RELU and act.pool is Pool.NONE
    cfg = decode(Cfg(2, 7).encode())
    assert cfg.reg is Reg.CLAMP_MAX and cfg.value == 7
    assert Cfg("clamp_max", 1).reg is Reg.CLAMP_MAX


# --------------------------------------------------------------------------------------
# Random round trips


@pytest.mark.parametrize("seed", seeds(20))
def test_random_round_trip(seed):
    print(f"seed {seed}")
    rng = random.Random(seed)
    program = []
    for _ in range(20):
        for opcode in Opcode:
            instr = random_instruction(rng, opcode)
            assert instr.opcode == opcode
            data = instr.encode()
            assert len(data) == INSTRUCTION_BYTES
            assert decode(data) == instr, f"seed {seed}: {instr!r}"
            assert data[0] == opcode
            values = instr.fields()
            for f in instr.layout():
                assert f.extract(word(data)) == values[f.name], f"seed {seed}: {instr!r} {f.name}"
            program.append(instr)
    rng.shuffle(program)
    data = encode_program(program)
    assert len(data) == 16 * len(program)
    assert decode_program(data) == program


@pytest.mark.parametrize("seed", seeds(5))
def test_random_instructions_are_legal_under_the_pooling_limits(seed):
    print(f"seed {seed}")
    rng = random.Random(seed)
    widest = TPUConfig(pool_max_width=0xFFFF)
    global_rows = set()
    windows = set()
    for _ in range(2000):
        act = random_instruction(rng, Opcode.ACT)
        assert check(act, widest) != Fault.ILLEGAL_FIELD, f"seed {seed}: {act!r}"
        if act.windowed:
            windows.add((act.pool_size, act.pool_stride))
        if act.pool == Pool.GLOBAL_AVG:
            assert act.rows <= MAX_POOL_COUNT, f"seed {seed}: {act!r}"
            global_rows.add(act.rows)
    assert {0, MAX_POOL_COUNT} <= global_rows
    # Every legal window size and stride comes up, and nothing beyond them.
    assert {size for size, _ in windows} == {1, 2, 3, 4}, f"seed {seed}: sizes {windows}"
    assert {stride for _, stride in windows} == {1, 2, 3, 4}, f"seed {seed}: strides {windows}"


def test_random_instruction_covers_the_ends_of_ranges():
    rng = random.Random(0)
    seen = {}
    for _ in range(2000):
        instr = random_instruction(rng, Opcode.RHM)
        for name in ("ub", "rows", "host"):
            seen.setdefault(name, set()).add(getattr(instr, name))
    assert 0 in seen["host"] and (1 << 64) - 1 in seen["host"]
    assert 0 in seen["ub"] and (1 << 24) - 1 in seen["ub"]


# --------------------------------------------------------------------------------------
# Decoding illegal words


def test_unknown_opcodes():
    for value in range(256):
        data = bytes([value]) + bytes(15)
        if value in set(Opcode):
            assert decode(data).opcode == value
            continue
        with pytest.raises(IllegalInstruction) as info:
            decode(data)
        assert info.value.fault == Fault.ILLEGAL_OPCODE
        assert info.value.field == "opcode"
        assert f"0x{value:02x}" in str(info.value)


# A legal instance of each opcode with its conditional fields inactive, and one
# with them active.
BASES = [Nop(), Halt(), Sync(), Int(1), Rhm(1, 2, 3), Whm(1, 2, 3), Rw(1, 2),
         Mmc(1, 2, 3, switch=True), Mmc(1, 2, 3, conv=Conv(1, 2, 3)),
         Act(1, 2, 3, func=Func.RELU), Act(1, 2, 4, pool=Pool.MAX, pool_size=1, pool_stride=1, in_w=2),
         Act(1, 2, 3, pool=Pool.GLOBAL_AVG), Cfg(Reg.CLAMP_MAX, 6), Ldq(1), Ldl(1)]


@pytest.mark.parametrize("base", BASES, ids=repr)
def test_every_reserved_bit_is_illegal_field(base):
    data = base.encode()
    values = base.fields()
    defined = 0xFF
    for f in base.layout():
        if f.when is None or values[f.when[0]] in f.when[1]:
            defined |= f.mask
    flips = 0
    for bit in range(8, 128):
        bad = (word(data) ^ (1 << bit)).to_bytes(16, "little")
        if defined >> bit & 1:
            continue
        flips += 1
        with pytest.raises(IllegalInstruction) as info:
            decode(bad)
        assert info.value.fault == Fault.ILLEGAL_FIELD
        message = str(info.value)
        assert base.mnemonic in message
        conditional = [f for f in base.layout() if f.mask >> bit & 1]
        if conditional:
            assert info.value.field == conditional[0].name
            assert "reserved" in message and conditional[0].name in message
        elif bit < 16:
            assert f"flag bit {bit - 8}" in message
        else:
            assert re.search(r"reserved bits \[\d+(:\d+)?\]", message), message
    assert flips > 0


def test_mlas_round_with_and_without_single_round():
    # Flag 2 rounds once whether flag 1 is set or not (no condition for the
    # decoder to check); flag 3 stays reserved.
    for flags, single in (("04", False), ("06", True)):
        act = decode(h(f"40 {flags} 0000 000000 010000 00 00 0000 0000"))
        assert act.mlas_round and act.single_round == single
        assert check(act, TPUConfig()) == Fault.NONE
    assert Act(acc=0, ub=0, rows=1, mlas_round=True).encode() == h("40 04 0000 000000 010000 00 00 0000 0000")
    with pytest.raises(IllegalInstruction, match=r"act flag bit 3"):
        decode(h("40 08 0000 000000 010000 00 00 0000 0000"))


def test_reserved_bits_name_their_range():
    with pytest.raises(IllegalInstruction, match=r"cfg reserved bits \[31:24\] must be 0"):
        decode(h("50 00 00 80 00000000 0000000000000000"))
    with pytest.raises(IllegalInstruction, match=r"rw reserved bits \[127:64\]"):
        decode(h("20 00 000000 000000 0000000000000001"))
    with pytest.raises(IllegalInstruction, match=r"mmc field out_w \[95:80\] = 2 is reserved .* CONV"):
        decode(h("30 00 000000 000000 0000 0200 00 0000 00"))
    with pytest.raises(IllegalInstruction, match=r"act field in_w \[111:96\] .* pool is max or avg"):
        decode(h("40 00 0000 000000 000000 30 00 0100 0000"))
    with pytest.raises(IllegalInstruction, match=r"halt flag bit 7 \(bit 15\)"):
        decode(h("01 80 000000 000000 0000000000000000"))


@pytest.mark.parametrize("data, field", [
    ("40 00 0000 000000 010000 05 00 0000 0000", "func"),         # func 5
    ("40 00 0000 000000 010000 0f 00 0000 0000", "func"),         # func 15
    ("40 00 0000 000000 010000 40 00 0000 0000", "pool"),         # pool 4
    ("40 00 0000 000000 010000 10 01 0100 0000", "pool_stride"),  # max, size 1, stride 0
    ("40 00 0000 000000 010000 10 10 0100 0000", "pool_size"),    # max, size 0, stride 1
    ("40 00 0000 000000 010000 20 11 0000 0000", "in_w"),         # avg, in_w 0
    ("40 00 0000 000000 030000 10 11 0200 0000", "rows"),         # 3 rows, in_w 2
    ("40 00 0000 000000 040000 10 13 0200 0000", "pool_size"),    # 3x3 window, 2x2 image
    ("40 00 0000 000000 010000 10 15 0100 0000", "pool_size"),    # max, size 5, stride 1
    ("40 00 0000 000000 010000 20 1f 0100 0000", "pool_size"),    # avg, size 15
    ("40 00 0000 000000 010000 10 51 0100 0000", "pool_stride"),  # max, size 1, stride 5
    ("40 00 0000 000000 010000 20 f1 0100 0000", "pool_stride"),  # avg, stride 15
    ("30 08 000000 010000 0000 0000 01 0100 00", "out_w"),        # conv, out_w 0
    ("50 00 03 00 00000000 0000000000000000", "reg"),             # reg 3 (once pool_divisor_mult)
    ("50 00 04 00 00000000 0000000000000000", "reg"),             # reg 4
    ("50 00 05 00 00000000 0000000000000000", "reg"),             # reg 5
    ("50 00 ff 00 00000000 0000000000000000", "reg"),             # reg 255
])
def test_illegal_field_values(data, field):
    with pytest.raises(IllegalInstruction) as info:
        decode(h(data))
    assert info.value.fault == Fault.ILLEGAL_FIELD
    assert info.value.field == field
    assert field in str(info.value)
    assert check(h(data), TPUConfig()) == Fault.ILLEGAL_FIELD


@pytest.mark.parametrize("pool", [Pool.MAX, Pool.AVG])
def test_window_sizes_and_strides_above_4_are_illegal(pool):
    for size in range(16):
        for stride in range(16):
            data = h(f"40 00 0000 000000 100000 {int(pool) << 4:02x} {stride:x}{size:x} "
                     f"0400 0000")
            if 1 <= size <= 4 and 1 <= stride <= 4:
                act = decode(data)
                assert (act.pool_size, act.pool_stride) == (size, stride)
                continue
            with pytest.raises(IllegalInstruction) as info:
                decode(data)
            assert info.value.fault == Fault.ILLEGAL_FIELD
            assert info.value.field == ("pool_size" if not 1 <= size <= 4 else "pool_stride")
            assert "out of range 1..4" in str(info.value)


def test_zero_rows_need_no_image():
    act = Act(0, 0, 0, pool=Pool.MAX, pool_size=4, pool_stride=4, in_w=1)
    assert decode(act.encode()) == act
    assert act.output_rows == 0


def test_decode_wrong_length():
    with pytest.raises(ValueError, match="16 bytes, not 15"):
        decode(bytes(15))
    with pytest.raises(ValueError, match="16 bytes, not 17"):
        decode(bytes(17))


def test_decode_program_errors():
    with pytest.raises(ValueError, match=r"16-byte instructions; 40 bytes leave 8 over"):
        decode_program(bytes(40))
    assert decode_program(b"") == []
    data = Nop().encode() + Halt().encode() + bytes([0x77]) + bytes(15)
    with pytest.raises(IllegalInstruction) as info:
        decode_program(data)
    assert info.value.index == 2 and info.value.fault == Fault.ILLEGAL_OPCODE
    assert "instruction 2 (offset 0x20)" in str(info.value)
    with pytest.raises(TypeError, match="instruction 1"):
        encode_program([Nop(), "halt"])


# --------------------------------------------------------------------------------------
# Construction


def _out_of_range_cases():
    """(class, kwargs, field) for just below and just above every field's range."""
    base = {Int: dict(code=0), Rhm: dict(ub=0, rows=0, host=0), Whm: dict(ub=0, rows=0, host=0),
            Rw: dict(tile=0, count=0), Mmc: dict(ub=0, rows=0, acc=0),
            Act: dict(acc=0, ub=0, rows=0), Cfg: dict(reg=Reg.OUT_ZERO_POINT, value=0),
            Ldq: dict(ub=0), Ldl: dict(ub=0)}
    cases = []
    for cls, kwargs in base.items():
        for f in cls.layout():
            if f.name not in kwargs or (cls is Cfg and f.name == "value"):
                continue    # CFG's value: by register, tested in test_construction_errors
            low, high = f.legal
            for bad in (low - 1, high + 1):
                cases.append((cls, {**kwargs, f.name: bad}, f.name, low, high))
    window = dict(acc=0, ub=0, rows=0, pool=Pool.MAX, pool_size=1, pool_stride=1, in_w=1)
    for name in ("pool_size", "pool_stride", "in_w"):
        high = 4 if name != "in_w" else 0xFFFF
        cases.append((Act, {**window, name: 0}, name, 1, high))
        cases.append((Act, {**window, name: high + 1}, name, 1, high))
    return cases


@pytest.mark.parametrize("cls, kwargs, field, low, high", _out_of_range_cases(),
                         ids=lambda x: x.__name__ if isinstance(x, type) else None)
def test_out_of_range_field_is_value_error(cls, kwargs, field, low, high):
    with pytest.raises(ValueError) as info:
        cls(**kwargs)
    assert isinstance(info.value, FieldError) and info.value.field == field
    message = str(info.value)
    assert field in message
    if field not in ("func", "pool", "reg"):
        assert f"{low}..{high}" in message


def test_construction_errors():
    with pytest.raises(ValueError, match=r"mmc conv out_w = 0 is out of range 1..65535"):
        Conv(0, 1, 1)
    with pytest.raises(ValueError, match=r"conv col_step = 256 is out of range 0..255"):
        Conv(1, 256, 1)
    with pytest.raises(ValueError, match=r"act pool_size = 2 is reserved \(must be 0\) unless pool"):
        Act(0, 0, 4, pool=Pool.GLOBAL_AVG, pool_size=2)
    with pytest.raises(ValueError, match=r"act rows = 10 is not a multiple of in_w = 4"):
        Act(0, 0, 10, pool=Pool.AVG, pool_size=2, pool_stride=2, in_w=4)
    with pytest.raises(ValueError, match=r"act pool_size = 3 is larger than the 2x4 image"):
        Act(0, 0, 8, pool=Pool.AVG, pool_size=3, pool_stride=2, in_w=4)
    with pytest.raises(ValueError, match=r"act func = 'swish' is not one of none \(0\), relu \(1\)"):
        Act(0, 0, 1, func="swish")
    with pytest.raises(ValueError, match=r"act pool_size = 5 is out of range 1..4"):
        Act(0, 0, 64, pool=Pool.MAX, pool_size=5, pool_stride=1, in_w=8)
    with pytest.raises(ValueError, match=r"act pool_stride = 5 is out of range 1..4"):
        Act(0, 0, 64, pool=Pool.AVG, pool_size=2, pool_stride=5, in_w=8)
    with pytest.raises(ValueError, match=r"cfg reg = 5 is not one of"):
        Cfg(5, 0)
    with pytest.raises(ValueError, match=r"cfg reg = 3 is not one of out_zero_point \(0\), "
                                         r"clamp_min \(1\), clamp_max \(2\)$"):
        Cfg(3, 0)
    with pytest.raises(ValueError, match=r"cfg reg = 'pool_divisor_mult' is not one of"):
        Cfg("pool_divisor_mult", 0)
    with pytest.raises(ValueError, match=r"cfg value = 2147483648 is out of range "
                                         r"-2147483648..2147483647 \(clamp_min is int32\)"):
        Cfg(Reg.CLAMP_MIN, 1 << 31)
    with pytest.raises(ValueError, match=r"cfg value = -2147483649 is out of range "
                                         r"-2147483648..2147483647 \(out_zero_point is int32\)"):
        Cfg(Reg.OUT_ZERO_POINT, -(1 << 31) - 1)
    with pytest.raises(ValueError, match=r"cfg value = 4294967295 is out of range"):
        Cfg(Reg.CLAMP_MAX, (1 << 32) - 1)


@pytest.mark.parametrize("make", [
    lambda: Rhm("0", 1, 2), lambda: Rhm(0, 1.0, 2), lambda: Rw(True, 1),
    lambda: Mmc(0, 1, 0, accumulate=1), lambda: Mmc(0, 1, 0, conv=(1, 1, 1)),
    lambda: Conv(1, 1, "1"), lambda: Act(0, 0, 1, func=1.0), lambda: Cfg(None, 0),
])
def test_wrong_types_are_type_errors(make):
    with pytest.raises(TypeError):
        make()


def test_instructions_are_frozen_and_hashable():
    mmc = Mmc(0, 1, 0)
    with pytest.raises(AttributeError):
        mmc.rows = 2
    assert len({Mmc(0, 1, 0), Mmc(0, 1, 0), Nop(), Nop()}) == 2


# --------------------------------------------------------------------------------------
# Derived quantities


def test_ldq_and_ldl_rows():
    # (rows, cols) -> (LDQ rows, LDL rows), by hand.
    for (rows, cols), (ldq, ldl) in {
            (8, 8): (9, 32), (1, 1): (9, 256), (256, 256): (9, 1), (3, 5): (16, 86),
            (4, 8): (18, 64), (16, 4): (3, 16), (2, 256): (1152, 128)}.items():
        config = TPUConfig(rows=rows, cols=cols)
        assert ldq_rows(config) == ldq, (rows, cols)
        assert ldl_rows(config) == ldl, (rows, cols)
    assert ldq_sections(TPUConfig(rows=3, cols=5)) == (0, 7, 14)


@pytest.mark.parametrize("seed", seeds(5))
def test_conv_last_ub_row_is_the_largest_address(seed):
    print(f"seed {seed}")
    rng = random.Random(seed)
    for _ in range(300):
        conv = Conv(rng.randint(1, 12), rng.randint(0, 20), rng.randint(0, 50))
        mmc = Mmc(rng.randint(0, 100), rng.randint(0, 60), 0, conv=conv)
        rows = [mmc.ub_row(b) for b in range(mmc.rows)]
        assert mmc.last_ub_row == (max(rows) if rows else None), f"seed {seed}: {mmc!r}"
        assert rows == [mmc.ub + (b // conv.out_w) * conv.row_step + (b % conv.out_w) * conv.col_step
                        for b in range(mmc.rows)]
    assert [Mmc(5, 3, 0).ub_row(b) for b in range(3)] == [5, 6, 7]


@pytest.mark.parametrize("act, shape", [
    (Act(0, 0, 64), (64, 1)),
    (Act(0, 0, 0), (0, 0)),
    (Act(0, 0, 64, pool=Pool.GLOBAL_AVG), (1, 1)),
    (Act(0, 0, 64, pool=Pool.MAX, pool_size=2, pool_stride=2, in_w=8), (4, 4)),
    (Act(0, 0, 35, pool=Pool.MAX, pool_size=3, pool_stride=2, in_w=7), (2, 3)),
    (Act(0, 0, 12, pool=Pool.AVG, pool_size=3, pool_stride=1, in_w=3), (2, 1)),
    (Act(0, 0, 12, pool=Pool.AVG, pool_size=3, pool_stride=4, in_w=3), (1, 1)),
    (Act(0, 0, 100, pool=Pool.AVG, pool_size=4, pool_stride=3, in_w=10), (3, 3)),
])
def test_act_output_shape(act, shape):
    assert act.output_shape == shape
    assert act.output_rows == shape[0] * shape[1]


# --------------------------------------------------------------------------------------
# Range checks


SMALL = TPUConfig(rows=4, cols=8, ub_rows=100, acc_rows=64, weight_mem_tiles=10,
                  pool_max_width=8)
TOP = 1 << 64

RANGE_CASES = [
    # UB rows of RHM/WHM: 0..99
    (Rhm(99, 1, 0), Fault.NONE), (Rhm(99, 2, 0), Fault.UB_RANGE),
    (Rhm(0, 100, 0), Fault.NONE), (Rhm(0, 101, 0), Fault.UB_RANGE),
    (Rhm(100, 0, 0), Fault.NONE), (Rhm(0xFFFFFF, 0, TOP - 1), Fault.NONE),
    (Rhm(100, 1, 0), Fault.UB_RANGE), (Whm(98, 3, 0), Fault.UB_RANGE), (Whm(97, 3, 0), Fault.NONE),
    # host bytes: rows x 4 bytes must end at or before 2**64
    (Rhm(0, 2, TOP - 8), Fault.NONE), (Rhm(0, 2, TOP - 7), Fault.HOST_RANGE),
    (Whm(0, 1, TOP - 4), Fault.NONE), (Whm(0, 1, TOP - 1), Fault.HOST_RANGE),
    (Rhm(99, 2, TOP - 1), Fault.UB_RANGE),             # both: the lower code
    # weight tiles 0..9
    (Rw(9, 1), Fault.NONE), (Rw(9, 2), Fault.WEIGHT_MEM_RANGE), (Rw(0, 10), Fault.NONE),
    (Rw(0, 11), Fault.WEIGHT_MEM_RANGE), (Rw(10, 0), Fault.NONE), (Rw(10, 1), Fault.WEIGHT_MEM_RANGE),
    # MMC: UB rows 0..99, accumulator rows 0..63
    (Mmc(99, 1, 0), Fault.NONE), (Mmc(99, 2, 0), Fault.UB_RANGE), (Mmc(0, 64, 0), Fault.NONE),
    (Mmc(0, 65, 0), Fault.ACC_RANGE), (Mmc(63, 1, 63), Fault.NONE), (Mmc(0, 2, 63), Fault.ACC_RANGE),
    (Mmc(0, 1, 64), Fault.ACC_RANGE), (Mmc(0, 0, 0xFFFF), Fault.NONE), (Mmc(100, 0, 0), Fault.NONE),
    (Mmc(99, 2, 63), Fault.UB_RANGE),                   # both: the lower code
    # MMC conv: 3x4 outputs, rows 10 apart, columns 2 apart: largest row ub + 20 + 6
    (Mmc(73, 12, 0, conv=Conv(4, 2, 10)), Fault.NONE),
    (Mmc(74, 12, 0, conv=Conv(4, 2, 10)), Fault.UB_RANGE),
    # a partial last output row, b = 0..9 with out_w 4: the largest offset is at b = 7
    # (end of the last full output row) or b = 9 (end of the partial one)
    (Mmc(2, 10, 0, conv=Conv(4, 29, 10)), Fault.NONE),      # b = 7: 2 + 10 + 87 = 99
    (Mmc(3, 10, 0, conv=Conv(4, 29, 10)), Fault.UB_RANGE),  # 100
    (Mmc(0, 10, 0, conv=Conv(4, 30, 10)), Fault.UB_RANGE),  # b = 7: 10 + 90 = 100
    (Mmc(38, 10, 0, conv=Conv(4, 1, 30)), Fault.NONE),      # b = 9: 38 + 60 + 1 = 99
    (Mmc(39, 10, 0, conv=Conv(4, 1, 30)), Fault.UB_RANGE),  # 100
    (Mmc(0, 64, 0, conv=Conv(1, 0, 0)), Fault.NONE),     # every row is UB row 0
    # ACT: accumulator rows read, UB rows written
    (Act(0, 36, 64), Fault.NONE), (Act(0, 37, 64), Fault.UB_RANGE), (Act(1, 0, 64), Fault.ACC_RANGE),
    (Act(63, 99, 1), Fault.NONE), (Act(64, 0, 1), Fault.ACC_RANGE), (Act(64, 100, 0), Fault.NONE),
    (Act(0, 99, 64, pool=Pool.GLOBAL_AVG), Fault.NONE),
    (Act(0, 100, 64, pool=Pool.GLOBAL_AVG), Fault.UB_RANGE),
    (Act(0, 96, 16, pool=Pool.MAX, pool_size=2, pool_stride=2, in_w=4), Fault.NONE),
    (Act(0, 97, 16, pool=Pool.MAX, pool_size=2, pool_stride=2, in_w=4), Fault.UB_RANGE),
    (Act(1, 100, 64), Fault.UB_RANGE),                  # both: the lower code
    # ACT pooling limits: in_w <= pool_max_width = 8 for max/avg, rows <= 4096 for global_avg
    (Act(0, 0, 16, pool=Pool.MAX, pool_size=2, pool_stride=2, in_w=8), Fault.NONE),
    (Act(0, 0, 18, pool=Pool.MAX, pool_size=2, pool_stride=2, in_w=9), Fault.ILLEGAL_FIELD),
    (Act(0, 0, 9, pool=Pool.AVG, pool_size=1, pool_stride=1, in_w=9), Fault.ILLEGAL_FIELD),
    (Act(0, 0, 0, pool=Pool.AVG, pool_size=1, pool_stride=1, in_w=0xFFFF), Fault.NONE),
    (Act(60, 99, 18, pool=Pool.AVG, pool_size=1, pool_stride=1, in_w=9),
     Fault.ILLEGAL_FIELD),                              # and UB_RANGE, ACC_RANGE: the lowest
    (Act(0, 0, 64, pool=Pool.NONE), Fault.NONE),        # no window: in_w is not used
    (Act(0, 99, 64, pool=Pool.GLOBAL_AVG), Fault.NONE),
    (Act(0, 0, 4097, pool=Pool.GLOBAL_AVG), Fault.ILLEGAL_FIELD),  # and ACC_RANGE
    # LDQ reads 2*ceil(32/4) + ceil(8/4) = 18 rows, LDL ceil(256/4) = 64
    (Ldq(82), Fault.NONE), (Ldq(83), Fault.UB_RANGE),
    (Ldl(36), Fault.NONE), (Ldl(37), Fault.UB_RANGE),
    # no ranges
    (Nop(), Fault.NONE), (Halt(), Fault.NONE), (Sync(), Fault.NONE), (Int(0xFFFF), Fault.NONE),
    (Cfg(Reg.OUT_ZERO_POINT, -1), Fault.NONE),
]


@pytest.mark.parametrize("instr, fault", RANGE_CASES, ids=repr)
def test_check_at_the_boundaries(instr, fault):
    assert check(instr, SMALL) == fault
    assert check(instr.encode(), SMALL) == fault
    found, message = diagnose(instr, SMALL)
    assert found == fault
    assert bool(message) == (fault != Fault.NONE)
    if fault != Fault.NONE:
        assert instr.mnemonic in message


def test_check_names_the_configuration_field():
    assert "ub_rows" in diagnose(Rhm(99, 2, 0), SMALL)[1]
    assert "acc_rows" in diagnose(Mmc(0, 65, 0), SMALL)[1]
    assert "weight_mem_tiles" in diagnose(Rw(9, 2), SMALL)[1]
    assert "64-bit" in diagnose(Rhm(0, 1, TOP - 1), SMALL)[1]


def test_pooling_limits():
    big = TPUConfig(ub_rows=1 << 20, acc_rows=1 << 16, pool_max_width=0xFFFF)
    for rows, fault in [(1, Fault.NONE), (4096, Fault.NONE), (4097, Fault.ILLEGAL_FIELD),
                        ((1 << 16), Fault.ILLEGAL_FIELD), ((1 << 24) - 1, Fault.ILLEGAL_FIELD)]:
        act = Act(0, 0, rows, func=Func.RELU, pool=Pool.GLOBAL_AVG)
        assert check(act, big) == check(act.encode(), big) == fault, rows
    assert diagnose(Act(0, 0, 4097, pool=Pool.GLOBAL_AVG), big) == (
        Fault.ILLEGAL_FIELD, "act rows = 4097 is too many for global_avg: it averages at most "
                             "4096 rows (MAX_POOL_COUNT)")
    # in_w up to pool_max_width; the widest configuration takes every in_w.
    line = Act(0, 0, 0xFFFF, pool=Pool.MAX, pool_size=1, pool_stride=1, in_w=0xFFFF)
    assert check(line, big.replace(pool_max_width=0xFFFF)) == Fault.NONE
    assert check(line, big.replace(pool_max_width=0xFFFE)) == Fault.ILLEGAL_FIELD
    for width in (1, 2, 64):
        config = big.replace(pool_max_width=width)
        for in_w in (width, width + 1):
            act = Act(0, 0, 4 * in_w, pool=Pool.AVG, pool_size=1, pool_stride=1, in_w=in_w)
            expected = Fault.NONE if in_w <= width else Fault.ILLEGAL_FIELD
            assert check(act, config) == check(act.encode(), config) == expected, (width, in_w)
    fault, message = diagnose(Act(0, 0, 65, pool=Pool.AVG, pool_size=1, pool_stride=1, in_w=65),
                              TPUConfig())
    assert fault == Fault.ILLEGAL_FIELD
    assert message == ("act in_w = 65 is wider than the pooling line buffer: "
                       "pool_max_width = 64")
    # A decoding fault comes first: 5 x 5 windows are ILLEGAL_FIELD on any configuration.
    data = h("40 00 0000 000000 400000 10 15 4000 0000")     # max, size 5, in_w 64, 64 rows
    fault, message = diagnose(data, TPUConfig())
    assert fault == Fault.ILLEGAL_FIELD and "pool_size = 5 is out of range 1..4" in message


def test_check_raw_words():
    assert check(bytes([0x99]) + bytes(15), SMALL) == Fault.ILLEGAL_OPCODE
    assert check(h("01 01 000000 000000 0000000000000000"), SMALL) == Fault.ILLEGAL_FIELD
    fault, message = diagnose(bytearray(h("01 01 000000 000000 0000000000000000")), SMALL)
    assert fault == Fault.ILLEGAL_FIELD and "flag bit 0" in message
    with pytest.raises(TypeError):
        check("halt", SMALL)


def test_check_against_the_largest_configuration():
    big = TPUConfig(ub_rows=1 << 20, acc_rows=1 << 16, weight_mem_tiles=1 << 20)
    assert check(Rhm((1 << 20) - 1, 1, 0), big) == Fault.NONE
    assert check(Rhm(1 << 20, 1, 0), big) == Fault.UB_RANGE
    assert check(Mmc(0, 1 << 16, 0), big) == Fault.NONE
    assert check(Act(0xFFFF, 0, 1), big) == Fault.NONE
    assert check(Rw((1 << 20) - 1, 1), big) == Fault.NONE
