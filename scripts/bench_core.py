#!/usr/bin/env python3
"""Core measurements: MXU utilisation, the counter breakdown, and the cycle estimate.

Runs the cocotb module ``tpu.sim.bench.bench_core`` through ``tpu.sim.harness.run``
for every case (`tpu.sim.bench.bench_core.cases`), configuration and simulator,
collects the JSON each run writes (the path is passed in ``TPU_BENCH_OUT``),
prints a table and saves ``build/bench/core.json``.

Each case runs one program on the RTL core with a host that never stalls and
an instruction stream that never idles, and compares the RTL's ``cycles``
counter with `tpu.models.cycle_model.estimate_cycles`. The measuring is
`tpu.bench.core_cases`; this is its command line.

Examples::

    python scripts/bench_core.py
    python scripts/bench_core.py --configs 8x8 --simulators verilator
    python scripts/bench_core.py --cases compute memory_b2 --compute-tiles 32
"""

import argparse
import json
import sys
import time
from pathlib import Path

from tpu.bench.core_cases import format_table, run_cases
from tpu.sim.bench.bench_core import CASE_NAMES
from tpu.sim.harness import BUILD_ROOT, SIMULATORS


BENCH_DIR = BUILD_ROOT / "bench"


def _shape(text):
    try:
        rows, cols = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected ROWSxCOLS, e.g. 8x8, not {text!r}")
    return rows, cols


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
    results = run_cases(args.configs, args.simulators, args.cases, args.compute_tiles, args.seed)
    print(format_table(results))
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
