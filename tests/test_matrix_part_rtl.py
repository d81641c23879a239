"""The matrix part (the chip's matrix unit alone behind its UART, for the
iCE40 UP5K: docs/fpga.md, "What fits the UP5K"), driven by the host's
`MatrixPart` over `SerialLink` and an independent UART model, against the
matrix engine's golden model, under both simulators: random weights,
activations, multiplies and idle gaps on the line, with damaged frames; the
commands it must refuse and the frames it must never act on. Also generated
for the iCE40 (the array on dual 8 x 8 SB_MAC16s) with yosys's models of
the primitives; and the iCEBreaker build's part started without a reset,
whose LEDs and UART line must never be X or Z.
"""

import os

import pytest

from conftest import base_seed
from tpu import TPUConfig
from tpu.fpga.board_top import BOARD_OSCILLATOR_HZ, serial_options
from tpu.fpga.gate_level import ice40_primitive_models
from tpu.hdl.matrix_part import UP5K_MATRIX_PART_FIELDS
from tpu.hdl.serial_matrix_part import MATRIX_PART_NAME, generate_matrix_part_verilog, part_retransmit_cycles
from tpu.sim.harness import run


#: The matrix part as simulated: a 4x4 array, small memories (so a test is short).
PART = TPUConfig(rows=4, cols=4, acc_rows=32, ub_rows=64, weight_mem_tiles=8, weight_fifo_tiles=2,
                 weight_mem_latency=3)

#: A part of another shape: rows and columns differ, a PE alone on its SB_MAC16.
ODD_PART = TPUConfig(rows=2, cols=3, acc_rows=16, ub_rows=32, weight_mem_tiles=4, weight_fifo_tiles=1,
                     weight_mem_latency=0)


def _ops(suite):
    """Random multiplies of a run: `suite` (few, so the suite stays short) unless
    TPU_PART_OPS asks for more (e.g. 20 for a longer run)."""
    return os.environ.get("TPU_PART_OPS", str(suite))


def _run(simulator, testcase, *, family=None, config=PART, **env):
    seed = base_seed()
    print(f"seed {seed}: replay with TPU_SEED={seed}")
    source = generate_matrix_part_verilog(config, family=family)
    if family:
        source += ice40_primitive_models(source)
    tests, failures = run(config, simulator, "tpu.sim.testbenches.tb_matrix_part", testcase=testcase,
                          seed=seed, toplevel=MATRIX_PART_NAME, verilog_source=source, extra_env=env)
    assert tests == 1 and failures == 0, f"{testcase} {env} failed with seed {seed}"


@pytest.mark.rtl
def test_random_matmuls(simulator):
    # A short run damages a larger share of frames, so that some are damaged.
    ops = _ops(3)
    _run(simulator, "random_matmuls", TPU_PART_OPS=ops,
         TPU_SERIAL_FRAME_RATE="0.1" if int(ops) < 5 else "0.05")


@pytest.mark.rtl
def test_refused(simulator):
    _run(simulator, "refused")


@pytest.mark.rtl
def test_random_matmuls_ice40(simulator):
    _run(simulator, "random_matmuls", family="ice40", TPU_PART_OPS=_ops(2))


@pytest.mark.rtl
def test_random_matmuls_2x3_ice40(simulator):
    """A 2x3 array for the iCE40: each row's third PE alone on an SB_MAC16."""
    _run(simulator, "random_matmuls", family="ice40", config=ODD_PART, TPU_PART_OPS=_ops(2))


def _icebreaker_part():
    """The matrix part `tpu build --board icebreaker --top matrix` builds: its
    default sizes, for the iCE40, with the UART divisor, retransmit time and
    LED hold of the 12 MHz board at 115200 baud; (Verilog with the
    primitives' models, divisor)."""
    options = serial_options(BOARD_OSCILLATOR_HZ["icebreaker"], 115200, part_retransmit_cycles)
    source = generate_matrix_part_verilog(TPUConfig(**UP5K_MATRIX_PART_FIELDS), family="ice40", **options)
    return source + ice40_primitive_models(source), options["divisor"]


@pytest.mark.rtl
def test_power_up_without_reset(simulator):
    """The iCEBreaker's part started as an FPGA starts (no reset pulse,
    flip-flops at their initial values): busy, error, link error and the
    UART line are 0 or 1 in every cycle, idle and through its first frames
    (docs/fpga.md, "Power-up without a reset")."""
    seed = base_seed()
    print(f"seed {seed}: replay with TPU_SEED={seed}")
    source, divisor = _icebreaker_part()
    config = TPUConfig(**UP5K_MATRIX_PART_FIELDS)
    tests, failures = run(config, simulator, "tpu.sim.testbenches.tb_matrix_part", testcase="power_up",
                          seed=seed, toplevel=MATRIX_PART_NAME, verilog_source=source,
                          extra_env={"TPU_PART_DIVISOR": str(divisor)})
    assert tests == 1 and failures == 0, f"power_up failed with seed {seed}"
