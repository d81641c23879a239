"""Core measurements: MXU utilisation, the counter breakdown, and the cycle
estimate, on the benchmark cases of `tpu.sim.bench.bench_core` (docs/core_performance.md).

Runs the cocotb module ``tpu.sim.bench.bench_core`` through ``tpu.sim.harness.run``
for every case, configuration and simulator and collects the JSON each run
writes. Each case runs one program on the RTL core with a host that never
stalls and an instruction stream that never idles, and compares the RTL's
``cycles`` counter with `tpu.models.cycle_model.estimate_cycles`.
`scripts/bench_core.py` is its command line.
"""

import json
import os
import time
from pathlib import Path

from ..sim.bench.bench_core import CASE_NAMES, cases
from ..sim.harness import BUILD_ROOT, missing_simulator, run
from .common import percent_column as _pct, progress


__all__ = ["run_cases", "format_table", "BENCH_MODULE"]

BENCH_MODULE = "tpu.sim.bench.bench_core"
BENCH_DIR = BUILD_ROOT / "bench"


def run_cases(configs, simulators, names=CASE_NAMES, compute_tiles=128, seed=1, runs_dir=None):
    """Every case of `names` on every ``(rows, cols)`` of `configs` and simulator:
    ``{"CONFIG/SIMULATOR/CASE": result}`` (`tpu.sim.bench.bench_core`'s JSON, with
    the run's seconds and load)."""
    runs_dir = Path(runs_dir or BENCH_DIR / "runs")
    results = {}
    for rows, cols in configs:
        for name, config, case in cases(rows, cols, names=names, compute_tiles=compute_tiles):
            for simulator in simulators:
                key = f"{config.name}/{simulator}/{name}"
                reason = missing_simulator(simulator)
                if reason:
                    progress(f"{key}: skipped: {reason}")
                    continue
                out = runs_dir / f"core-{config.name}-{simulator}-{name}.json"
                out.parent.mkdir(parents=True, exist_ok=True)
                out.unlink(missing_ok=True)
                env = {"TPU_BENCH_OUT": str(out.resolve()), "TPU_BENCH_CASE": json.dumps(case)}
                progress(f"{key}: running {BENCH_MODULE} ...")
                start = time.perf_counter()
                tests, failures = run(config, simulator, BENCH_MODULE, testcase="bench_program",
                                      seed=seed, top="core", extra_env=env)
                elapsed = time.perf_counter() - start
                if not out.exists():
                    progress(f"{key}: the benchmark wrote no results (see the simulation log "
                             f"under {BUILD_ROOT / 'sim' / simulator})")
                    continue
                data = json.loads(out.read_text())[name]
                data["tests"], data["failures"] = tests, failures
                data["run_seconds"] = round(elapsed, 2)
                data["load_average"] = round(os.getloadavg()[0], 2)
                results[key] = data
                if failures:
                    progress(f"{key}: FAILED (the RTL disagreed with the golden model)")
    return results


def format_table(results):
    """The results of `run_cases` as a text table, with what differs from the estimate."""
    short = {"mxu_active": "active", "weight_stall": "w_stall", "weight_shift": "w_shift",
             "non_matrix": "non_mx", "raw_stall": "raw", "host_stall": "host"}
    from ..hdl.core import COUNTERS
    names = [n for n in COUNTERS if n in short]
    head = (f"{'config/simulator/case':34} {'T':>4} {'B':>4} {'cycles':>7} {'estimate':>8} "
            f"{'error':>7} {'matrix':>8} {'program':>8} " +
            " ".join(f"{short[n]:>7}" for n in names) + f" {'sec':>6}")
    lines = [head, "-" * len(head)]
    for key, d in results.items():
        c = d["counters"]
        case = d["case"]
        tiles = case.get("tiles") or case.get("blocks", 0) * case.get("k_tiles", 0)
        lines.append(
            f"{key:34} {tiles:4d} {case.get('batch', 0):4d} "
            f"{c['cycles']:7d} {d['estimate']['cycles']:8d} "
            f"{100 * d['estimate_error']:+6.2f}% {_pct(d['utilisation']['matrix_phase'])} "
            f"{_pct(d['utilisation']['program'])} " +
            " ".join(f"{c[n]:7d}" for n in names) + f" {d['run_seconds']:6.1f}")
    lines.append("")
    lines.append("matrix: MXU utilisation from the first row into the array to the last; "
                 "program: useful MACs / (rows x cols x cycles).")
    lines.append("estimate: tpu.models.cycle_model.estimate_cycles; error = (estimate - RTL) / RTL.")
    mismatched = [(key, n, d["counters"][n], d["estimate"]["counters"][n])
                  for key, d in results.items() for n in COUNTERS
                  if d["counters"][n] != d["estimate"]["counters"][n]]
    if mismatched:
        lines.append("counters where the estimate differs from the RTL:")
        lines.extend(f"  {key}: {n} RTL {rtl}, estimate {est}" for key, n, rtl, est in mismatched)
    else:
        lines.append("every estimated counter equals the RTL's.")
    return "\n".join(lines)
