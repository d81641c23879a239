#!/usr/bin/env python3
"""Matrix-engine measurements: MXU utilisation, simulation speed, elaboration cost.

Two modes:

* default: runs the cocotb module ``tpu.sim.bench.bench_matrix_engine`` through
  ``tpu.sim.harness.run`` for each configuration and simulator, collects the
  JSON each run writes, prints a table and saves ``build/bench/mxu.json``;
* ``--elaborate [R C]``: generates the Verilog of ``TPUConfig(rows=R,
  cols=C)`` (default 256 x 256) in a child process and reports its wall time,
  peak resident memory and Verilog size, merged into
  ``build/bench/elaborate.json``.

Examples::

    python scripts/bench_mxu.py
    python scripts/bench_mxu.py --configs 8x8 --simulators verilator
    python scripts/bench_mxu.py --elaborate 64 64

The measuring is `tpu.bench.mxu`; this is its command line.
"""

import argparse
import json
import sys
from pathlib import Path

from tpu.bench.mxu import BENCH_TESTS, elaborate, elaboration_text, run_simulation, simulation_table
from tpu.sim.harness import BUILD_ROOT, SIMULATORS


BENCH_DIR = BUILD_ROOT / "bench"


def _shape(text):
    try:
        rows, cols = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected ROWSxCOLS, e.g. 8x8, not {text!r}")
    return rows, cols


# Command line ------------------------------------------------------------

def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--configs", nargs="+", type=_shape, default=[(8, 8), (16, 16)],
                        metavar="RxC", help="array shapes to simulate (default: 8x8 16x16)")
    parser.add_argument("--simulators", nargs="+", choices=SIMULATORS, default=list(SIMULATORS),
                        help="simulators to use (default: all)")
    parser.add_argument("--acc-rows", type=int, default=512,
                        help="accumulator rows of the simulated configurations (default: 512)")
    parser.add_argument("--batches", nargs="+", metavar="B",
                        help="activation rows per tile: integers or multiples of rows such as "
                             "'4r' (default: 1 1r 4r 64r)")
    parser.add_argument("--tiles", type=int, default=8,
                        help="tiles in the tile-switch sequence (default: 8)")
    parser.add_argument("--cycles", type=int, default=20000,
                        help="cycles of the simulation-speed run (default: 20000)")
    parser.add_argument("--tests", nargs="+", choices=BENCH_TESTS, default=list(BENCH_TESTS),
                        help="benchmark tests to run (default: all)")
    parser.add_argument("--seed", type=int, default=1,
                        help="seed of the random tiles and rows (default: 1)")
    parser.add_argument("--out", type=Path, default=BENCH_DIR / "mxu.json",
                        help="where to save the results (default: build/bench/mxu.json)")
    parser.add_argument("--elaborate", nargs="*", type=int, metavar="N",
                        help="instead, measure Verilog generation of an R x C array "
                             "(default: 256 256)")
    parser.add_argument("--timeout", type=float, default=1200,
                        help="--elaborate: stop after this many seconds (default: 1200)")
    parser.add_argument("--max-rss-gb", type=float, default=20,
                        help="--elaborate: stop above this resident memory (default: 20)")
    parser.add_argument("--keep-verilog", action="store_true",
                        help="--elaborate: keep the generated file under build/bench/")
    args = parser.parse_args(argv)

    if args.elaborate is not None:
        if len(args.elaborate) not in (0, 2):
            parser.error("--elaborate takes ROWS COLS, or nothing for 256 256")
        rows, cols = args.elaborate or (256, 256)
        result = elaborate(rows, cols, timeout=args.timeout, max_rss_gb=args.max_rss_gb,
                           keep_verilog=args.keep_verilog)
        print(elaboration_text(result))
        path = BENCH_DIR / "elaborate.json"
        merged = json.loads(path.read_text()) if path.exists() else {}
        merged[f"{rows}x{cols}"] = result
        path.write_text(json.dumps(merged, indent=2) + "\n")
        print(f"saved {path}")
        return 0 if "verilog_bytes" in result else 1

    results = run_simulation(args.configs, args.simulators, acc_rows=args.acc_rows,
                             tests=args.tests, tiles=args.tiles, cycles=args.cycles,
                             batches=args.batches, seed=args.seed)
    print(simulation_table(results))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    saved = json.loads(args.out.read_text()) if args.out.exists() else {}
    saved.update(results)
    args.out.write_text(json.dumps(saved, indent=2) + "\n")
    print(f"saved {args.out}")
    failed = sum(r["failures"] for r in results.values())
    return 1 if failed or not results else 0


if __name__ == "__main__":
    sys.exit(main())
