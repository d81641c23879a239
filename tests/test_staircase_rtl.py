# amaranth: UnusedElaboratable=no
"""The staircase modules that `generate_verilog` writes (`Staircase`): every
lane is its input delayed by its number of cycles, and reads 0 until it has
taken that many inputs since power-on or the last reset, for both kinds of
lane (shift register and ring) under both simulators.

A self-checking Verilog testbench drives random inputs and rare random
resets and keeps the history of the inputs to compare each lane with.
"""

import re
import shutil
import subprocess

import pytest

from conftest import base_seed
from tpu.hdl.staircase import RING_MIN_BITS, Staircase
from tpu.sim.harness import verilator_path


# (width, lanes, first, step): skews and deskews like the array's, lanes
# on both sides of RING_MIN_BITS, a ring of delay 1, and 1-bit lanes
# longer than a word.
CASES = [(9, 6, 0, 1), (20, 3, 2, -1), (1, 40, 0, 1), (32, 3, 0, 1), (40, 2, 1, 0), (9, 17, 16, -1)]
CYCLES = 3000


def _testbench(seed):
    modules, lines, checks = [], [], []
    longest = max(first + step * k for _, lanes, first, step in CASES for k in range(lanes))
    for n, (width, lanes, first, step) in enumerate(CASES):
        stairs = Staircase(width=width, lanes=lanes, first=first, step=step)
        modules.append(stairs._verilog())
        total = width * lanes
        words = -(-total // 32)
        lines += [f"  reg [{total - 1}:0] i{n}, h{n};",
                  f"  wire [{total - 1}:0] o{n};",
                  f"  reg [{total - 1}:0] hist{n} [0:{longest}];",
                  f"  {stairs.module_name} dut{n}(.clk(clk), .rst(rst), .i(i{n}), .o(o{n}));"]
        drive = f"      i{n} = {{{', '.join(['$random(seed)'] * words)}}};"
        shift = (f"        for (j = {longest}; j > 0; j = j - 1) hist{n}[j] = hist{n}[j - 1];\n"
                 f"        hist{n}[0] = i{n};")
        checks.append((drive, shift))
        for k in range(lanes):
            delay = first + step * k
            bits = f"[{k * width + width - 1}:{k * width}]"
            expected = (f"i{n}{bits}" if delay == 0 else
                        f"(since >= {delay} ? h{n}{bits} : {width}'d0)")
            fetch = "" if delay == 0 else f"h{n} = hist{n}[{delay - 1}]; "
            lines.append(f"  task check{n}_{k}; begin {fetch}if (o{n}{bits} !== {expected}) begin "
                         f"errors = errors + 1; if (errors < 10) $display(\"cycle %0d: "
                         f"staircase {n} lane {k} (delay {delay}) is %h, not %h\", cycle, "
                         f"o{n}{bits}, {expected}); end end endtask")
    calls = [f"      check{n}_{k};" for n, (_, lanes, _, _) in enumerate(CASES) for k in range(lanes)]
    return "\n".join(modules) + "\n".join([
        "module tb;",
        "  reg clk = 0, rst = 0;",
        "  integer seed, since, cycle, errors, j;",
        *lines,
        "  initial begin",
        f"    seed = {seed}; since = 0; errors = 0;",
        f"    for (cycle = 0; cycle < {CYCLES}; cycle = cycle + 1) begin",
        # Rare resets, so that the longest lanes fill between them; none at
        # first, so that the power-on state is checked too.
        "      rst = cycle > 50 && ($random(seed) & 127) == 0;",
        *[drive for drive, _ in checks],
        "      #1 clk = 1;",
        "      if (rst) since = 0;",
        "      else begin",
        "        since = since + 1;",
        *[shift for _, shift in checks],
        "      end",
        "      #1 clk = 0;",
        *calls,
        "    end",
        "    if (errors == 0) $display(\"PASS\");",
        "    else $display(\"FAIL: %0d errors\", errors);",
        "    $finish;",
        "  end",
        "endmodule\n"])


def test_cases_have_both_kinds_of_lane():
    bits = [width * (first + step * k) for width, lanes, first, step in CASES for k in range(lanes)]
    assert any(0 < b <= RING_MIN_BITS for b in bits) and any(b > RING_MIN_BITS for b in bits)


def test_long_lanes_are_rings():
    """TPU v1's activation skew (256 lanes of 9 bits, delays 0 to 255):
    no register holds more than a word, and each long lane is one ring."""
    text = Staircase(width=9, lanes=256, first=0, step=1)._verilog()
    widths = [int(msb) + 1 for msb in re.findall(r"^\s*reg \[(\d+):0\] lane\d+ =", text, re.M)]
    assert widths and max(widths) <= RING_MIN_BITS
    assert len(re.findall(r"^\s*reg \[8:0\] lane\d+ \[\d+:0\];", text, re.M)) == 256 - 1 - len(widths)
    assert len(text) < 100_000


@pytest.mark.rtl
def test_lanes_are_delayed_and_reset(simulator, tmp_path):
    seed = base_seed()
    print(f"seed {seed}: replay with TPU_SEED={seed}")
    source = tmp_path / "tb.v"
    source.write_text(_testbench(seed))
    if simulator == "icarus":
        subprocess.run(["iverilog", "-g2005", "-o", str(tmp_path / "tb.vvp"), str(source)],
                       check=True, timeout=120)
        command = ["vvp", "-n", str(tmp_path / "tb.vvp")]
    else:
        if shutil.which("make") is None:
            pytest.skip("Verilator needs make")
        subprocess.run([str(verilator_path()), "--binary", "--timing", "-Wno-fatal", "-O0",
                        # The testbench's delays are coroutines, which need C++20.
                        "-CFLAGS", "-std=gnu++20",
                        "--top-module", "tb", "--Mdir", str(tmp_path / "obj"), "-o", "tb",
                        str(source)], check=True, timeout=600, capture_output=True)
        command = [str(tmp_path / "obj" / "tb")]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert "PASS" in result.stdout, result.stdout[-2000:] + result.stderr[-2000:]
