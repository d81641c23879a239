"""The MLPerf Tiny models on the smallest chips: ``--profile up5k`` and a
2x2 chip of 256 unified-buffer rows, 64 accumulator rows and 16 weight
tiles. Every layer streams in bands or is split by N and K into hundreds
to thousands of parts, and each model runs on the golden chip equal to
TFLite's reference kernels (2 random inputs, seeds printed). The same
models run on the whole chip's RTL under Verilator on those chips, the
default chip and ``--profile ulx3s16`` (2 random inputs each; from about a
minute for ad01 on the default chip to hours for the models of millions of
cycles on the smallest chips).

Each model compiles for about a minute or more, so these run when asked:
``TPU_LONG_MODELS=1`` (docs/compiler.md lists the measured cycles and
compile times). The mechanisms they rely on have fast tests in
tests/test_compiler_bands.py."""

import os
import resource
import time

import numpy as np
import pytest

from tpu import TPUConfig
from tpu.compiler.mlperf_tiny import MODELS
from tpu.compiler.session import InferenceSession
from tpu.compiler.tflite_frontend import import_tflite
from tpu.config import ULX3S16_PROFILE, UP5K_PROFILE
from tpu.sim.harness import missing_simulator

from conftest import base_seed
from test_tflite_frontend import random_inputs, tflite_run, tiny_model

#: the environment variable that runs the long model tests
LONG_VARIABLE = "TPU_LONG_MODELS"

long_models = pytest.mark.skipif(not os.environ.get(LONG_VARIABLE),
                                 reason=f"compiles for minutes: set {LONG_VARIABLE}=1")

#: the 2x2 chip of issue 26 (the up5k profile's memories, the default chip's
#: host interface and activation unit)
SMALL_2X2 = TPUConfig(rows=2, cols=2, ub_rows=256, acc_rows=64, weight_mem_tiles=16)

CHIPS = {"up5k": UP5K_PROFILE, "2x2": SMALL_2X2}

#: the chips the models run on under Verilator
RTL_CHIPS = {"default": TPUConfig(), "ulx3s16": ULX3S16_PROFILE, **CHIPS}


@long_models
@pytest.mark.parametrize("chip", list(CHIPS))
@pytest.mark.parametrize("name", list(MODELS))
def test_model_on_a_small_chip_equals_tflite(name, chip):
    path = tiny_model(name)
    graph = import_tflite(path)
    seed = base_seed()
    print(f"seed {seed}")
    x = random_inputs(graph, 2, seed)
    start = time.perf_counter()
    session = InferenceSession(graph, backend="golden", config=CHIPS[chip], batch=1)
    compiled = time.perf_counter() - start
    (got,) = session.run(None, {graph.inputs[0].model_name: x})
    want = tflite_run(path, x)
    np.testing.assert_array_equal(got.reshape(len(x), -1), want.reshape(len(x), -1))
    report = session.report()
    print(f"{name} on {chip}: {len(session.compiled.chip_steps)} parts, compiled in "
          f"{compiled:.0f} s, {report.cycles_per_inference} cycles per inference")


@long_models
@pytest.mark.parametrize("chip", list(RTL_CHIPS))
@pytest.mark.parametrize("name", list(MODELS))
def test_model_on_the_chip_rtl_equals_tflite(name, chip, monkeypatch):
    """Item 3 of the compiler's targets: each model's compiled program on the
    whole chip (host interface, DMA, core) simulated by Verilator."""
    reason = missing_simulator("verilator")
    if reason:
        pytest.skip(reason)
    # Runs of hundreds of thousands to millions of cycles: the model the tpu
    # commands use (its per-cycle C++ at -O2), not the suite's unoptimised one.
    monkeypatch.delenv("TPU_VERILATOR_OPT", raising=False)
    path = tiny_model(name)
    graph = import_tflite(path)
    seed = base_seed()
    print(f"seed {seed}")
    x = random_inputs(graph, 2, seed)
    session = InferenceSession(graph, backend="verilator", config=RTL_CHIPS[chip], batch=1)
    start, cpu = time.perf_counter(), _children_cpu()
    (got,) = session.run(None, {graph.inputs[0].model_name: x})
    ran, cpu = time.perf_counter() - start, _children_cpu() - cpu
    np.testing.assert_array_equal(got.reshape(len(x), -1), tflite_run(path, x).reshape(len(x), -1))
    cycles = session.report().cycles_per_inference
    # The simulator's CPU time too: on a shared machine the wall clock says
    # more about the load than about the simulation.
    print(f"{name} on {chip} under Verilator: 2 inputs in {ran:.0f} s ({cpu:.1f} s of the "
          f"simulator's CPU), {cycles:.0f} cycles per inference, {2 * cycles / ran:.0f} simulated "
          f"cycles per second ({2 * cycles / cpu:.0f} per CPU second)")


def _children_cpu():
    """CPU seconds of this process's finished children (the simulator's run)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


@pytest.mark.parametrize("name, parts", [("ad01_int8", 4128), ("kws_ref_model", 1196)])
def test_model_compiles_for_up5k(name, parts):
    """In the suite (seconds of compiling, no run): ad01's dense outputs a
    part at a time and KWS's K-split layers with as many M tiles a part as
    the accumulators hold, in the parts the long test above runs."""
    from tpu.compiler.backend import compile_graph
    compiled = compile_graph(import_tflite(tiny_model(name)), UP5K_PROFILE, 1)
    assert len(compiled.chip_steps) == parts
