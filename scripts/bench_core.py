#!/usr/bin/env python3
"""Core measurements: MXU utilisation, the counter breakdown, and the cycle estimate.

Runs the cocotb module ``tpu.sim.bench.bench_core`` through ``tpu.sim.harness.run``
for every case (`tpu.sim.bench.bench_core.cases`), configuration and simulator,
collects the JSON each run writes (the path is passed in ``TPU_BENCH_OUT``),
prints a table and saves ``build/bench/core.json``.

Each case runs one program on the RTL core with a host that never stalls and
an instruction stream that never idles, and compares the RTL's ``cycles``
counter with `tpu.sim.models.cycle_model.estimate_cycles`.

Examples::

    python scripts/bench_core.py
    python scripts/bench_core.py --configs 8x8 --simulators verilator
    python scripts/bench_core.py --cases compute memory_b2 --compute-tiles 32
"""

import argparse
import json
import os
import sys
import time
from pathlib import Path

from amaranth.back import verilog

from tpu.hdl.core import COUNTERS, TPUCore
from tpu.sim.bench.bench_core import CASE_NAMES, TOP, cases
from tpu.sim.harness import BUILD_ROOT, SIMULATORS, missing_simulator, run


BENCH_MODULE = "tpu.sim.bench.bench_core"
BENCH_DIR = BUILD_ROOT / "bench"


def _shape(text):
    try:
        rows, cols = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected ROWSxCOLS, e.g. 8x8, not {text!r}")
    return rows, cols


_SOURCES = {}


def _source(config):
    if config not in _SOURCES:
        _SOURCES[config] = verilog.convert(TPUCore(config), name=TOP, emit_src=False)
    return _SOURCES[config]


def run_cases(args):
    results = {}
    for rows, cols in args.configs:
        for name, config, case in cases(rows, cols, names=args.cases,
                                        compute_tiles=args.compute_tiles):
            for simulator in args.simulators:
                key = f"{config.name}/{simulator}/{name}"
                reason = missing_simulator(simulator)
                if reason:
                    print(f"{key}: skipped: {reason}", file=sys.stderr)
                    continue
                out = BENCH_DIR / "runs" / f"core-{config.name}-{simulator}-{name}.json"
                out.parent.mkdir(parents=True, exist_ok=True)
                out.unlink(missing_ok=True)
                env = {"TPU_BENCH_OUT": str(out.resolve()), "TPU_BENCH_CASE": json.dumps(case)}
                print(f"{key}: running {BENCH_MODULE} ...", file=sys.stderr, flush=True)
                start = time.perf_counter()
                tests, failures = run(config, simulator, BENCH_MODULE, testcase="bench_program",
                                      seed=args.seed, toplevel=TOP,
                                      verilog_source=_source(config), extra_env=env)
                elapsed = time.perf_counter() - start
                if not out.exists():
                    print(f"{key}: the benchmark wrote no results (see the simulation log "
                          f"under {BUILD_ROOT / 'sim' / simulator})", file=sys.stderr)
                    continue
                data = json.loads(out.read_text())[name]
                data["tests"], data["failures"] = tests, failures
                data["run_seconds"] = round(elapsed, 2)
                data["load_average"] = round(os.getloadavg()[0], 2)
                results[key] = data
                if failures:
                    print(f"{key}: FAILED (the RTL disagreed with the golden model)",
                          file=sys.stderr)
    return results


def _pct(value):
    return f"{100 * value:6.2f}%"


def print_table(results):
    short = {"mxu_active": "active", "weight_stall": "w_stall", "weight_shift": "w_shift",
             "non_matrix": "non_mx", "raw_stall": "raw", "host_stall": "host"}
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
    lines.append("estimate: tpu.sim.models.cycle_model.estimate_cycles; error = (estimate - RTL) / RTL.")
    mismatched = [(key, n, d["counters"][n], d["estimate"]["counters"][n])
                  for key, d in results.items() for n in COUNTERS
                  if d["counters"][n] != d["estimate"]["counters"][n]]
    if mismatched:
        lines.append("counters where the estimate differs from the RTL:")
        lines.extend(f"  {key}: {n} RTL {rtl}, estimate {est}" for key, n, rtl, est in mismatched)
    else:
        lines.append("every estimated counter equals the RTL's.")
    print("\n".join(lines))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--configs", nargs="+", type=_shape, default=[(8, 8), (16, 16)],
                        metavar="RxC", help="array shapes (default: 8x8 16x16)")
    parser.add_argument("--simulators", nargs="+", choices=SIMULATORS, default=list(SIMULATORS),
                        help="simulators to use (default: all)")
    parser.add_argument("--cases", nargs="+", choices=CASE_NAMES, default=list(CASE_NAMES),
                        help="benchmark cases (default: all)")
    parser.add_argument("--compute-tiles", type=int, default=128,
                        help="weight tiles of the compute-bound case (default: 128)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", type=Path, default=BENCH_DIR / "core.json",
                        help="where to save the results (default: build/bench/core.json)")
    args = parser.parse_args(argv)

    start = time.perf_counter()
    results = run_cases(args)
    print_table(results)
    print(f"total {time.perf_counter() - start:.0f} s")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"saved {args.out}")
    bad = [key for key, d in results.items() if d["failures"] or abs(d["estimate_error"]) > 0.05]
    if bad:
        print(f"failed, or estimate off by more than 5%: {', '.join(bad)}", file=sys.stderr)
    return 1 if bad or not results else 0


if __name__ == "__main__":
    sys.exit(main())
