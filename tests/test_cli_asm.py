"""`tpu asm` and `tpu disasm`: files in and out, and one-line errors."""

import subprocess
import sys

import pytest

from tpu.isa import Halt, Mmc, Rhm, encode_program


PROGRAM = """\
; load, multiply, store
rw  tile=0, count=1
rhm ub=0, rows=16, host=0x1000
mmc ub=0, rows=16, acc=0, switch, unsigned
act acc=0, ub=100, rows=16, func=relu
whm ub=100, rows=16, host=0x2000
halt
"""


def tpu(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "tpu.cli", *args], capture_output=True,
                          timeout=120, cwd=cwd)


def assert_one_line_error(result, *fragments):
    stderr = result.stderr.decode()
    assert result.returncode == 2, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("tpu: error: ")
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    assert "Traceback" not in stderr
    return lines[0]


@pytest.fixture
def source(tmp_path):
    path = tmp_path / "prog.s"
    path.write_text(PROGRAM)
    return path


def test_asm_then_disasm(source):
    result = tpu("asm", str(source))
    assert result.returncode == 0, result.stderr
    binary = source.with_suffix(".bin")
    data = binary.read_bytes()
    assert len(data) == 6 * 16
    assert data[16:32] == Rhm(0, 16, 0x1000).encode()
    assert data[32:48] == Mmc(0, 16, 0, switch=True, unsigned=True).encode()
    assert data[-16:] == Halt().encode()
    assert f"wrote {binary} (6 instructions, 96 bytes, range-checked for 8x8)" in result.stderr.decode()

    result = tpu("disasm", str(binary))
    assert result.returncode == 0, result.stderr
    text = result.stdout.decode()
    assert text.splitlines() == [
        "rw tile=0, count=1",
        "rhm ub=0, rows=16, host=0x1000",
        "mmc ub=0, rows=16, acc=0, switch, unsigned",
        "act acc=0, ub=100, rows=16, func=relu",
        "whm ub=100, rows=16, host=0x2000",
        "halt",
    ]
    again = source.parent / "again.s"
    again.write_text(text)
    result = tpu("asm", str(again), "-o", str(source.parent / "out" / "again.bin"))
    assert result.returncode == 0, result.stderr
    assert (source.parent / "out" / "again.bin").read_bytes() == data


def test_asm_to_stdout_and_disasm_to_file(source, tmp_path):
    result = tpu("asm", str(source), "-o", "-")
    assert result.returncode == 0, result.stderr
    assert len(result.stdout) == 96
    binary = tmp_path / "p.bin"
    binary.write_bytes(result.stdout)
    result = tpu("disasm", str(binary), "-o", str(tmp_path / "p.txt"))
    assert result.returncode == 0 and result.stdout == b""
    assert (tmp_path / "p.txt").read_text().splitlines()[-1] == "halt"


def test_asm_error_is_file_and_line(source):
    source.write_text(PROGRAM.replace("rows=16, acc=0", "rows=16, acc=0, bogus"))
    line = assert_one_line_error(tpu("asm", str(source)))
    assert line == (f"tpu: error: {source}:4: unknown field 'bogus' for mmc "
                    f"(fields: ub, rows, acc, accumulate, switch, unsigned, conv(...))")
    assert not source.with_suffix(".bin").exists()


@pytest.mark.parametrize("text, fragments", [
    ("halt\nfrob\n", [":2: unknown mnemonic 'frob'"]),
    ("rhm ub=0, rows=1\n", [":1: missing field 'host' for rhm"]),
    ("int code=0x10000\n", [":1: int code = 65536 is out of range 0..65535"]),
    ("int code=1x\n", [":1: bad number '1x' for code"]),
    ("rhm ub=2047, rows=2, host=0\n", [":1: rhm UB rows 2047..2048 are out of range", "[UB_RANGE]"]),
])
def test_asm_errors(tmp_path, text, fragments):
    path = tmp_path / "bad.s"
    path.write_text(text)
    assert_one_line_error(tpu("asm", str(path)), str(path), *fragments)


def test_asm_range_check_follows_the_configuration(tmp_path):
    path = tmp_path / "big.s"
    path.write_text("rhm ub=4000, rows=16, host=0\n")
    assert_one_line_error(tpu("asm", str(path)), ":1:", "there are 2048 (ub_rows)", "UB_RANGE")
    assert tpu("asm", str(path), "--ub-rows", "4096").returncode == 0
    assert tpu("asm", str(path), "--no-check").returncode == 0
    assert_one_line_error(tpu("asm", str(path), "--ub-rows", "16", "--rows", "300"),
                          "TPUConfig.rows = 300")
    # host bytes depend on the array's rows
    path.write_text("rhm ub=0, rows=1, host=0xffff_ffff_ffff_fff8\n")
    assert tpu("asm", str(path), "--rows", "8").returncode == 0
    assert_one_line_error(tpu("asm", str(path), "--rows", "16"), "HOST_RANGE")


def test_missing_and_unreadable_files(tmp_path):
    assert_one_line_error(tpu("asm", str(tmp_path / "nope.s")),
                          f"cannot read {tmp_path / 'nope.s'}: No such file or directory")
    assert_one_line_error(tpu("disasm", str(tmp_path / "nope.bin")),
                          f"cannot read {tmp_path / 'nope.bin'}: No such file or directory")
    assert_one_line_error(tpu("asm", str(tmp_path)), f"cannot read {tmp_path}")
    assert_one_line_error(tpu("asm"), "the following arguments are required: FILE")
    assert_one_line_error(tpu("disasm"), "the following arguments are required: FILE")


def test_binary_given_to_asm(tmp_path):
    path = tmp_path / "prog.bin"
    path.write_bytes(encode_program([Rhm(0, 1, 0), Halt()]))
    assert_one_line_error(tpu("asm", str(path)), f"{path}:1: control character 0x10")
    path.write_bytes(b"\xff\xfe" + bytes(14))
    assert_one_line_error(tpu("asm", str(path)), f"{path}: not UTF-8 text")


def test_asm_does_not_overwrite_its_source(tmp_path):
    path = tmp_path / "prog.bin"
    path.write_text("halt\n")
    assert_one_line_error(tpu("asm", str(path)), "would overwrite the source")
    assert path.read_text() == "halt\n"


def test_unwritable_output(source, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert_one_line_error(tpu("asm", str(source), "-o", str(blocker / "x.bin")), "cannot write")


def test_disasm_errors(tmp_path):
    path = tmp_path / "odd.bin"
    path.write_bytes(bytes(20))
    assert_one_line_error(tpu("disasm", str(path)),
                          f"{path}: a program is a whole number of 16-byte instructions; "
                          f"20 bytes leave 4 over")
    path.write_bytes(Halt().encode() + bytes([0x01, 0x80]) + bytes(14))
    result = tpu("disasm", str(path))
    assert result.returncode == 0
    assert result.stdout.decode().splitlines()[1].startswith(
        ".raw 0x" + "0" * 28 + "8001  ; ILLEGAL_FIELD: halt flag bit 7 (bit 15)")
    assert_one_line_error(tpu("disasm", "--strict", str(path)),
                          f"{path}: instruction 1 (offset 0x10): halt flag bit 7", "[ILLEGAL_FIELD]")


def test_empty_program(tmp_path):
    """A source with no instructions, or an empty binary, is an error, not an
    empty output."""
    path = tmp_path / "empty.s"
    path.write_text("; nothing\n")
    assert_one_line_error(tpu("asm", str(path)), "holds no instructions")
    assert not path.with_suffix(".bin").exists()
    path.write_text("")
    assert_one_line_error(tpu("asm", str(path)), "is empty")
    binary = tmp_path / "empty.bin"
    binary.write_bytes(b"")
    assert_one_line_error(tpu("disasm", str(binary)), "is empty")


def test_help_lists_the_commands():
    result = tpu("--help")
    assert result.returncode == 0
    out = result.stdout.decode()
    assert "asm" in out and "disasm" in out
    result = tpu("asm", "--help")
    assert result.returncode == 0 and b"--no-check" in result.stdout


def test_asm_pooling_width_follows_the_configuration(tmp_path):
    path = tmp_path / "pool.s"
    path.write_text("act acc=0, ub=0, rows=64, pool=max, pool_size=2, pool_stride=2, in_w=32\n")
    assert tpu("asm", str(path)).returncode == 0                      # pool_max_width 64
    assert tpu("asm", str(path), "--pool-max-width", "32").returncode == 0
    assert_one_line_error(tpu("asm", str(path), "--pool-max-width", "31"), ":1:",
                          "act in_w = 32 is wider than the pooling line buffer: "
                          "pool_max_width = 31", "[ILLEGAL_FIELD]")
    assert tpu("asm", str(path), "--pool-max-width", "31", "--no-check").returncode == 0
    assert_one_line_error(tpu("asm", str(path), "--pool-max-width", "65536"),
                          "TPUConfig.pool_max_width = 65536 is out of range")
    path.write_text("act acc=0, ub=0, rows=4097, pool=global_avg\n")
    assert_one_line_error(tpu("asm", str(path), "--acc-rows", "65536"), ":1:",
                          "at most 4096 rows (MAX_POOL_COUNT)", "[ILLEGAL_FIELD]")
    path.write_text("act acc=0, ub=0, rows=4096, pool=global_avg\n")
    assert tpu("asm", str(path), "--acc-rows", "4096").returncode == 0
