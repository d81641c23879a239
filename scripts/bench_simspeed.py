#!/usr/bin/env python3
"""Whole-chip simulation speed through the driver: start latency and
simulated cycles per second.

The command line of `tpu.bench.driver_simspeed`, which measures (its
docstring says what: the two programs, *start* and *cycles/s*). Prints a
table and saves ``build/bench/simspeed.json``.

Examples::

    python scripts/bench_simspeed.py
    python scripts/bench_simspeed.py --shapes 8x8 --cycles 50000
    python scripts/bench_simspeed.py --backend icarus --shapes 4x4 --cycles 5000
"""

import argparse
import os
import sys

from tpu import TPUConfig
from tpu.bench.driver_simspeed import PROGRAMS, run_driver_simspeed, save


def _shape(text):
    try:
        rows, cols = (int(v) for v in text.lower().split("x"))
        return TPUConfig(rows=rows, cols=cols)
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"expected ROWSxCOLS (e.g. 16x16), not {text!r}: {error}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", nargs="+", type=_shape, default=[_shape("8x8"), _shape("16x16")],
                        metavar="ROWSxCOLS", help="array shapes (default 8x8 16x16)")
    parser.add_argument("--backend", default="verilator", choices=["verilator", "icarus"])
    parser.add_argument("--programs", nargs="+", default=list(PROGRAMS), choices=list(PROGRAMS))
    parser.add_argument("--cycles", type=int, default=200_000, help="simulated cycles per program")
    parser.add_argument("--repeat", type=int, default=1, help="timed runs per case (the best is kept)")
    parser.add_argument("--out", default=os.path.join("build", "bench", "simspeed.json"))
    args = parser.parse_args(argv)
    if args.cycles < 1 or args.repeat < 1:
        parser.error("--cycles and --repeat must be at least 1")

    rows = run_driver_simspeed(args.shapes, args.backend, args.programs, args.cycles, args.repeat,
                               log=lambda line: print(line, flush=True))
    save(rows, args.out)
    print(f"saved {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
