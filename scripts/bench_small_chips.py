"""Benchmark: the MLPerf Tiny models on the smallest chips (`--profile up5k`
and the 2x2 chip of 256 unified-buffer rows, 64 accumulator rows and 16
weight tiles), compiled with bands and weight splits into hundreds to
thousands of parts, run on ``--backend`` (golden by default; verilator or
icarus for the RTL) for ``--inputs`` random int8 inputs at batch 1, every
output byte against the TFLite interpreter's reference kernels.

Prints per model and chip: the parts, the compile time (wall clock and the
process's CPU time), the cycles per inference (the chip's counters), the
run's wall time and, on a simulator, its simulated cycles per wall second
and per CPU second of the simulation process, and whether the outputs equal
TFLite's; the exit status is 1 when any differs. ``--chips`` also takes
``default`` and ``ulx3s16`` (the other chips the RTL test of
tests/test_compiler_small_chips.py runs on). On a simulator the up5k chip
runs with ``narrow_host`` 0: the simulators drive the PCIe-style host
interface, and the core behind it is the same.

    .venv/bin/python scripts/bench_small_chips.py [--models ad01_int8,kws_ref_model,...]
        [--chips up5k,2x2] [--backend golden|verilator|icarus] [--inputs 2] [--seed 1]
"""

import argparse
import dataclasses
import resource
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tpu import TPUConfig  # noqa: E402
from tpu.bench.tflite import tflite_outputs  # noqa: E402
from tpu.compiler.mlperf_tiny import MODELS, missing_reason, model_path  # noqa: E402
from tpu.config import ULX3S16_PROFILE, UP5K_PROFILE  # noqa: E402

#: the chips measured, by name
CHIPS = {"up5k": UP5K_PROFILE,
         "2x2": TPUConfig(rows=2, cols=2, ub_rows=256, acc_rows=64, weight_mem_tiles=16),
         "default": TPUConfig(), "ulx3s16": ULX3S16_PROFILE}

#: the chips measured unless --chips names others
DEFAULT_CHIPS = "up5k,2x2"


def _children_cpu():
    """CPU seconds of this process's finished children (the simulator's)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def measure(name, chip, backend, inputs, seed):
    from tpu.compiler.session import InferenceSession
    from tpu.compiler.tflite_frontend import import_tflite
    path = model_path(name)
    graph = import_tflite(path)
    rng = np.random.default_rng(seed)
    x = rng.integers(-128, 128, size=(inputs, *graph.inputs[0].model_shape[1:]), dtype=np.int8)
    config = CHIPS[chip]
    if backend != "golden" and config.narrow_host:
        # The simulators drive the PCIe-style host interface; the core (and so
        # every cycle of the program) is the same behind either host form.
        config = dataclasses.replace(config, narrow_host=0)
    wall, cpu = time.perf_counter(), time.process_time()
    session = InferenceSession(graph, backend=backend, config=config, batch=1)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    start, children = time.perf_counter(), _children_cpu()
    (got,) = session.run(None, {graph.inputs[0].model_name: x})
    ran, simulator_cpu = time.perf_counter() - start, _children_cpu() - children
    equal = np.array_equal(got.reshape(inputs, -1), tflite_outputs(path, x))
    return dict(model=name, chip=chip, parts=len(session.compiled.chip_steps), compile_s=wall,
                compile_cpu_s=cpu, cycles=session.report().cycles_per_inference, run_s=ran,
                simulator_cpu_s=simulator_cpu, equal=equal)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--chips", default=DEFAULT_CHIPS)
    parser.add_argument("--backend", default="golden", choices=["golden", "verilator", "icarus"])
    parser.add_argument("--inputs", type=int, default=2)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    bad = [c for c in args.chips.split(",") if c not in CHIPS]
    if bad:
        parser.error(f"unknown chip {bad[0]!r}: choose from {', '.join(CHIPS)}")
    bad = [m for m in args.models.split(",") if m not in MODELS]
    if bad:
        parser.error(f"unknown model {bad[0]!r}: choose from {', '.join(MODELS)}")
    ok = True
    simulated = args.backend != "golden"
    print(f"| model | chip | parts | compile (wall / CPU) | cycles per inference | "
          f"{args.backend} run ({args.inputs} inputs) | "
          + ("cycles/s (wall / simulator CPU) | " if simulated else "") + "equal to TFLite |")
    print("|---|---|---:|---:|---:|---:|" + ("---:|" if simulated else "") + "---|")
    for name in args.models.split(","):
        reason = missing_reason(name)
        if reason:
            print(f"{name}: skipped ({reason})")
            continue
        for chip in args.chips.split(","):
            r = measure(name, chip, args.backend, args.inputs, args.seed)
            ok &= r["equal"]
            rate = ""
            if simulated:
                cycles = r["cycles"] * args.inputs
                rate = (f"{cycles / r['run_s']:,.0f} / "
                        f"{cycles / max(r['simulator_cpu_s'], 1e-9):,.0f} | ")
            print(f"| {name} | {chip} | {r['parts']:,} | {r['compile_s']:.0f} s / "
                  f"{r['compile_cpu_s']:.0f} s | {r['cycles']:,.0f} | {r['run_s']:.0f} s | "
                  f"{rate}{'yes' if r['equal'] else 'NO'} |", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
