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
nextpnr's faster router for large arrays.

Results are printed as a table and saved as JSON (build/bench/fpga.json by
default); --markdown prints the table for docs/fpga.md (with each critical
path's start and end), and --from-json FILE (repeatable) tabulates saved
results without building anything. A design that does not fit is a result ("fits": false, with
nextpnr's reason), not an error. The first build is slow: the WebAssembly
tools are compiled once, then cached.
"""

import argparse
import datetime
import json
import re
import sys
from pathlib import Path

from tpu.bench.fpga import mxu_table
from tpu.fpga.build import BOARDS, FPGAToolMissing, build_mxu, missing_fpga_tools, tool_versions


# The UP5K has 8 DSPs and yosys gives each 8x8 multiply a whole SB_MAC16, so
# a 4x4 array (16 multiplies) is tried both ways; likewise the ECP5-85F has
# 156 MULT18X18D and a 16x16 array has 256 multiplies.
DEFAULT_RUNS = ["icebreaker:4x4:dsp", "icebreaker:4x4:nodsp",
                "ulx3s-85f:8x8:dsp", "ulx3s-85f:8x8:nodsp",
                "ulx3s-85f:16x16:dsp", "ulx3s-85f:16x16:nodsp"]


def parse_run(text):
    """'board:RxC[:dsp|nodsp|mix|mix3]' -> (board, rows, cols, kind)."""
    match = re.fullmatch(r"([\w-]+):(\d+)x(\d+)(?::(dsp|nodsp|mix3|mix))?", text)
    if not match:
        raise argparse.ArgumentTypeError(f"{text!r} is not BOARD:ROWSxCOLS[:dsp|nodsp|mix|mix3]")
    board, rows, cols, dsp = match.groups()
    if board not in BOARDS:
        raise argparse.ArgumentTypeError(f"unknown board {board!r}: "
                                         f"choose one of {', '.join(BOARDS)}")
    rows, cols = int(rows), int(cols)
    if not (1 <= rows <= 256 and 1 <= cols <= 256):
        raise argparse.ArgumentTypeError(f"{text!r}: rows and cols must be in 1..256")
    return board, rows, cols, dsp or "dsp"


def _count(cells):
    return f"{cells['used']}/{cells['available']}" if cells else "-"


def _kind(result):
    if result.get("multipliers", "auto") != "auto":
        return result["multipliers"]
    return "dsp" if result["dsp"] else "nodsp"


def _gops(result):
    return 2 * result["rows"] * result["cols"] * result["fmax_mhz"] / 1000


def format_table(results):
    header = ["board", "array", "mult", "fits", "logic", "FFs", "DSP blocks", "RAM", "Fmax MHz",
              "GOPS", "time s"]
    rows = []
    for r in results:
        if r["fits"]:
            rows.append([r["board"], f"{r['rows']}x{r['cols']}", _kind(r), "yes",
                         _count(r["logic"]), _count(r["ffs"]), _count(r["dsp_blocks"]),
                         _count(r["ram_blocks"]), f"{r['fmax_mhz']:.1f}", f"{_gops(r):.1f}",
                         f"{r['seconds']:.0f}"])
        else:
            needed = r.get("needed", {})
            dsp_cell = {"icebreaker": "ICESTORM_DSP", "ulx3s-85f": "MULT18X18D"}.get(r["board"])
            logic_cell = {"icebreaker": "ICESTORM_LC", "ulx3s-85f": "TRELLIS_COMB"}.get(r["board"])
            rows.append([r["board"], f"{r['rows']}x{r['cols']}", _kind(r), "NO",
                         _count(needed.get(logic_cell)), "-", _count(needed.get(dsp_cell)),
                         "-", "-", "-", f"{r['seconds']:.0f}"])
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    lines = ["  ".join(str(x).ljust(w) for x, w in zip(line, widths)) for line in [header, *rows]]
    lines.insert(1, "  ".join("-" * w for w in widths))
    for r in results:
        if not r["fits"]:
            lines.append(f"{r['board']} {r['rows']}x{r['cols']} dsp={r['dsp']} "
                         f"does not fit: {r['reason']}")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n\n", 1)[1])
    parser.add_argument("--run", action="append", type=parse_run,
                        metavar="BOARD:RxC[:dsp|nodsp|mix|mix3]",
                        help=f"a build to run; repeatable (default: {' '.join(DEFAULT_RUNS)}); "
                             f"boards: {', '.join(BOARDS)}")
    parser.add_argument("--router", choices=("router1", "router2"),
                        help="nextpnr's router (default: nextpnr's own, router1)")
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
        results = []
        for path in args.from_json:
            try:
                results += json.loads(path.read_text())["results"]
            except (OSError, ValueError, KeyError) as error:
                parser.error(f"--from-json {path}: not a saved bench_fpga result ({error})")
        print(mxu_table(results) if args.markdown else format_table(results))
        return 0
    runs = args.run or [parse_run(text) for text in DEFAULT_RUNS]

    for board in dict.fromkeys(board for board, *_ in runs):
        reason = missing_fpga_tools(board)
        if reason:
            print(f"error: {reason}", file=sys.stderr)
            return 1

    results = []
    for board, rows, cols, kind in runs:
        tag = f"{board}_{rows}x{cols}_{kind}"
        print(f"building {tag} ...", flush=True)
        try:
            result = build_mxu(board, rows, cols, build_dir=args.build_dir / tag,
                               dsp=kind != "nodsp",
                               multipliers=kind if kind.startswith("mix") else "auto",
                               router=args.router)
        except (FPGAToolMissing, ValueError) as error:
            print(f"error: {error}", file=sys.stderr)
            return 1
        if result["fits"]:
            print(f"  fits: {result['fmax_mhz']:.1f} MHz ({_gops(result):.1f} GOPS), "
                  f"logic {_count(result['logic'])}, DSP {_count(result['dsp_blocks'])} "
                  f"({result['seconds']:.0f} s)", flush=True)
        else:
            print(f"  does not fit: {result['reason']} ({result['seconds']:.0f} s)", flush=True)
        results.append(result)

    print()
    print(mxu_table(results) if args.markdown else format_table(results))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({
        "date": datetime.date.today().isoformat(),
        "tools": tool_versions(),
        "results": results,
    }, indent=2) + "\n")
    print(f"\nsaved {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
