"""End-to-end programs on the whole core RTL, under both simulators.

A two-layer MLP, two convolutions with pooling, and one directed program per
group of instructions (`tpu.sim.stimulus.programs`), each checked against results
computed in plain integer arithmetic and against the golden model
(`sim/testbenches/tb_core_programs.py`). The fast tests at the end check the programs'
expected results against the golden model and the reference arithmetic
against the activation model, without a simulator.
"""

from pathlib import Path

import numpy as np
import pytest

from conftest import base_seed
from tpu.models import activation_model
from tpu.models.chip_model import ChipModel
from tpu.sim.harness import run
from tpu.sim.stimulus.programs import (PROGRAM_CONFIG, PROGRAMS, ChipProgram, mlp_program,
                              multiply_by_quantized_multiplier, round_average)


ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.rtl
@pytest.mark.parametrize("name", PROGRAMS)
def test_program(simulator, name, tmp_path):
    # The data of every program are fixed; the seed drives the testbench's
    # random waits on the instruction and host streams.
    seed = base_seed()
    print(f"seed {seed}: replay with TPU_SEED={seed}")
    path = tmp_path / f"{name}.npz"
    PROGRAMS[name]().save(path)
    tests, failures = run(PROGRAM_CONFIG, simulator, "tpu.sim.testbenches.tb_core_programs", testcase=name,
                          seed=seed, top="core",
                          extra_env={"TPU_PROGRAM_CASE": str(path)})
    assert tests == 1 and failures == 0, \
        f"{name} failed with seed {seed} (replay with TPU_SEED={seed})"


# Without a simulator --------------------------------------------------------------------


@pytest.mark.parametrize("name", PROGRAMS)
def test_program_on_golden_model(name, tmp_path):
    """The expected results equal the golden model's, also after a round trip
    through the file the testbench reads."""
    path = tmp_path / f"{name}.npz"
    PROGRAMS[name]().save(path)
    program, code = ChipProgram.load(path)
    model = ChipModel(program.config)
    model.weight_memory[:len(program.weights)] = program.weights
    for addr, data in program.host.items():
        model.host.write(addr, data)
    model.run(code)
    assert model.halted and model.fault == 0
    for addr, data in program.expected_host.items():
        assert model.host.read(addr, len(data)) == data, f"host bytes at 0x{addr:x}"
    for row, data in program.expected_ub.items():
        assert bytes(model.ub[row]) == data, f"UB row {row}"
    for row, values in program.expected_acc.items():
        assert model.acc[row].tolist() == values, f"accumulator row {row}"
    assert model.interrupts == program.interrupts


def test_requantization_reference():
    """The programs' bigint MultiplyByQuantizedMultiplier equals the
    activation model's, on edge cases and random values."""
    rng = np.random.default_rng(0)
    lo, hi = -(1 << 31), (1 << 31) - 1
    cases = [(x, m, s) for x in (lo, lo + 1, -1, 0, 1, hi, 3, -3, 1 << 30, -(1 << 30))
             for m in (lo, hi, 1 << 30, -(1 << 30), 0, 1)
             for s in (-32, -31, -1, 0, 1, 31)]
    cases += [(int(rng.integers(lo, hi)), int(rng.integers(lo, hi)), int(rng.integers(-32, 32)))
              for _ in range(2000)]
    for x, m, s in cases:
        assert multiply_by_quantized_multiplier(x, m, s) == \
            int(activation_model.multiply_by_quantized_multiplier(x, m, s)), (x, m, s)


def test_average_reference():
    for count in (1, 2, 3, 4, 9, 16, 36):
        for total in range(-255 * count, 256 * count, 7):
            assert round_average(total, count) == \
                int(activation_model.tflite_average(total, count)), (total, count)


def test_mlp_reference_against_floats():
    """The MLP's integer reference stays within rounding of real arithmetic."""
    r = mlp_program().reference
    scale1 = r["m1"] * 2.0 ** (r["s1"] - 31)
    acc1 = (r["x"] - r["x_zero"]) @ r["w1"] + r["b1"]
    h = np.clip(np.round(acc1 * scale1) + r["h_zero"], max(-128, r["h_zero"]), 127)
    assert np.abs(h - r["h"]).max() <= 1
    scale2 = r["m2"] * 2.0 ** (r["s2"] - 31)
    acc2 = (r["h"] - r["h_zero"]) @ r["w2"] + r["b2"]
    y = np.clip(np.round(acc2 * scale2) + r["y_zero"], -128, 127)
    assert np.abs(y - r["y"]).max() <= 1


def test_mlp_example_is_current():
    """examples/mlp.s is the MLP program's text."""
    assert (ROOT / "examples" / "mlp.s").read_text() == mlp_program().text


def test_docs_listings_are_current():
    """docs/programs.md shows the programs as they are."""
    doc = (ROOT / "docs" / "programs.md").read_text()
    for name in ("mlp", "conv_max", "conv_avg"):
        assert PROGRAMS[name]().text in doc, f"the listing of {name} in docs/programs.md is stale"
