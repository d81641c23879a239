"""The cycle model against the RTL, like with like: compiled programs on the RTL
core with the ideal host of `tpu.sim.bench.bench_core` (answers at once, an
instruction stream that never idles), which is what
`tpu.models.cycle_model.estimate_cycles` models.

A run through the whole chip (`tpu.driver` over the PCIe-style link) takes
more cycles than this: the program is fetched over the link before its first
instruction, instructions then arrive at link speed, and every RHM waits for
its completions (docs/host_performance.md). `tpu.bench.rtl_chip` compares
those runs with the estimate that models the link."""

import json
import tempfile
import time
from pathlib import Path

from .common import BREAKDOWN, progress


__all__ = ["run_core", "compiled_parts"]


def compiled_parts(compiled, label):
    """``(name, program bytes)`` of every chip part of a `CompiledModel`."""
    return [(f"{label} {step.name}", bytes(step.program)) for step in compiled.steps
            if getattr(step, "program", None) is not None]


def run_core(config, simulator, name, program):
    """Run `program` (bytes) on the RTL core under `simulator`; the RTL's counters,
    the cycle model's and the wall seconds, or ``error``."""
    from ..hdl.core import COUNTERS
    from ..sim.harness import run
    from ..models.cycle_model import estimate_cycles
    progress(f"RTL core ({simulator} {config.rows}x{config.cols}, ideal host): {name}")
    estimate = estimate_cycles(config, program)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "core.json"
        env = {"TPU_BENCH_OUT": str(out),
               "TPU_BENCH_CASE": json.dumps({"name": "part", "program": "encoded",
                                             "program_hex": program.hex()})}
        start = time.monotonic()
        tests, failures = run(config, simulator, "tpu.sim.bench.bench_core",
                              testcase="bench_program", seed=1, top="core", extra_env=env)
        seconds = time.monotonic() - start
        row = {"name": name, "simulator": simulator, "rows": config.rows, "cols": config.cols,
               "estimate": estimate["cycles"], "seconds": seconds,
               "estimate_counters": {n: int(estimate["counters"][n])
                                     for n in ("cycles", *BREAKDOWN)}}
        if failures or not out.exists():
            row["error"] = ("the RTL core disagreed with the golden model" if failures
                            else "the benchmark wrote no result")
            return row
        result = json.loads(out.read_text())["part"]
    counters = result["counters"]
    row["cycles"] = int(counters["cycles"])
    row["counters"] = {n: int(counters[n]) for n in ("cycles", *BREAKDOWN)}
    row["counters_equal"] = all(int(counters[n]) == int(estimate["counters"][n]) for n in COUNTERS)
    return row
