#!/usr/bin/env python3
"""Synthesise, place and route the Matrix Multiply Unit on FPGA boards and
tabulate utilisation and Fmax.

By default it runs the reference measurements: a 4x4 array on the iCEBreaker
(iCE40 UP5K), and 8x8 and 16x16 arrays on the ULX3S-85F (ECP5-85F), each with
and without DSP blocks. Choose others with --run, e.g.

    python scripts/bench_fpga.py --run icebreaker:2x2 --run ulx3s-85f:12x12:nodsp

The last field says where the multipliers go: "dsp" (plain `*`, which
synthesis maps to DSP blocks), "nodsp" (logic), "mix" (ECP5: the 156
MULT18X18D instantiated with their registers, logic for the other PEs) or
"mix3" (the same with three-cycle multipliers). --router router2 picks
nextpnr's faster router for large arrays, --placer static its placer that
spreads a large design more evenly; --control-fanout N copies each column's
weight shift and capture once per N rows.

Results are printed as a table and saved as JSON (build/bench/fpga.json by
default); --markdown prints the table for docs/fpga.md (with each critical
path's start and end), and --from-json FILE (repeatable) tabulates saved
results without building anything. A design that does not fit is a result ("fits": false, with
nextpnr's reason), not an error. The first build is slow: the WebAssembly
tools are compiled once, then cached.

(The command line of `tpu.bench.fpga`, which builds and tabulates.)
"""

import argparse
import sys
from pathlib import Path

from tpu.bench.fpga import (DEFAULT_RUNS, build_mxus, load_mxus, mxu_table, parse_run, save_mxus,
                            text_table)
from tpu.fpga.build import BOARDS, PLACERS, FPGAToolMissing


def _run(text):
    try:
        return parse_run(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n\n", 1)[1])
    parser.add_argument("--run", action="append", type=_run,
                        metavar="BOARD:RxC[:dsp|nodsp|mix|mix3|band3|dual]",
                        help=f"a build to run; repeatable (default: {' '.join(DEFAULT_RUNS)}); "
                             f"boards: {', '.join(BOARDS)}")
    parser.add_argument("--router", choices=("router1", "router2"),
                        help="nextpnr's router (default: nextpnr's own, router1)")
    parser.add_argument("--placer", choices=PLACERS,
                        help="nextpnr's placer (default: nextpnr's own, heap)")
    parser.add_argument("--control-fanout", type=int, metavar="N",
                        help="copy each column's weight shift and capture register once per N "
                             "rows (default: one register per column)")
    parser.add_argument("--build-dir", type=Path, default=Path("build/bench/fpga"),
                        help="parent of the per-build directories (default: %(default)s)")
    parser.add_argument("--json", type=Path, default=Path("build/bench/fpga.json"),
                        help="where to save the results (default: %(default)s)")
    parser.add_argument("--markdown", action="store_true",
                        help="print the results as the Markdown table of docs/fpga.md")
    parser.add_argument("--from-json", action="append", type=Path, metavar="FILE",
                        help="tabulate the results saved in FILE (repeatable); builds nothing")
    args = parser.parse_args(argv)
    if args.from_json:
        if args.run:
            parser.error("--from-json builds nothing, so it takes no --run")
        try:
            results = load_mxus(args.from_json)
        except ValueError as error:
            parser.error(f"--from-json {error}")
        print(mxu_table(results) if args.markdown else text_table(results))
        return 0
    runs = args.run or [parse_run(text) for text in DEFAULT_RUNS]
    try:
        results = build_mxus(runs, args.build_dir, log=lambda line: print(line, flush=True),
                             router=args.router, control_fanout=args.control_fanout,
                             placer=args.placer)
    except (FPGAToolMissing, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print()
    print(mxu_table(results) if args.markdown else text_table(results))
    save_mxus(results, args.json)
    print(f"\nsaved {args.json}")
    return 0

if __name__ == "__main__":
    sys.exit(main())
