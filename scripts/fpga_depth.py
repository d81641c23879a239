#!/usr/bin/env python3
"""The logic depth of each block of the chip: its longest register-to-register
path in LUT levels and in carry cells, after ``synth_ecp5`` (``--family
ecp5``, the default) or ``synth_ice40`` (`tpu.fpga.logic_depth`; seconds to a
minute a block, against tens of minutes for a place and route).

    python scripts/fpga_depth.py                          # the default 8x8 chip on the ECP5
    python scripts/fpga_depth.py --profile ulx3s16 --markdown
    python scripts/fpga_depth.py --family ice40 --profile up5k --block host.core.sequencer
    python scripts/fpga_depth.py --whole                  # the whole chip flattened: paths across blocks, fan-out
    python scripts/fpga_depth.py --whole --block host.core
    python scripts/fpga_depth.py --profile ulx3s16 --wide-nets   # the host's nets of >= 32 sinks

With --wide-nets it synthesises one block (--block, default ``host``) with
the sub-blocks of --hide as black boxes (default ``core``: the host side
alone, as the board build sees it behind the core's registers) and lists
every net of at least --above sinks (32; clocks excepted): its sinks (of
them flip-flop clock enables, resets and other inputs) and the LUT levels
in front of it from a flip-flop, RAM, black box or port. A wide net driven
through several levels is what the router cannot make fast.

The configuration options are those of ``tpu verilog``. It prints a table
(Markdown with --markdown) and saves the depths as JSON.
"""

import argparse
import json
import time
from dataclasses import asdict
from pathlib import Path

from tpu.config import PROFILES, ConfigError, TPUConfig
from tpu.fpga.logic_depth import (DEPTH_BLOCKS, measure_blocks, measure_whole, measure_wide_nets,
                                  wide_nets_of_json)


def format_rows(depths, markdown):
    """The table of `depths` ({block: BlockDepth})."""
    head = ("block", "LUT levels", "carry cells", "deepest path: start", "end", "longest carry: levels")
    rows = [(block or "whole chip (glue)", str(d.levels), str(d.carry), d.by_levels.start, d.by_levels.end,
             str(d.by_carry.levels)) for block, d in depths.items()]
    if markdown:
        lines = ["| " + " | ".join(head) + " |", "|---|---:|---:|---|---|---:|"]
        lines += ["| " + " | ".join(f"`{c}`" if i in (3, 4) else c for i, c in enumerate(r)) + " |"
                  for r in rows]
    else:
        lines = [f"{'block':<28}{'levels':>8}{'carry':>8}  deepest path"]
        lines += [f"{r[0]:<28}{r[1]:>8}{r[2]:>8}  {r[3]} -> {r[4]}" for r in rows]
    return "\n".join(lines)


def format_whole(whole, markdown):
    """The report of a `WholeDepth`: its deepest path, its deepest paths across
    blocks, its nets of largest fan-out."""
    d = whole.deepest
    lines = [f"deepest path: {d.levels} levels, {d.by_levels.carry} carry cells, "
             f"{d.by_levels.start} -> {d.by_levels.end}; longest carry: {d.carry} cells"]
    if markdown:
        lines += ["", "| LUT levels | carry cells | start | end | blocks |", "|---:|---:|---|---|---|"]
        lines += [f"| {p.levels} | {p.carry} | `{p.start}` | `{p.end}` | {' -> '.join(b or 'top' for b in p.blocks)} |"
                  for p in whole.crossing]
        lines += ["", "| net | sinks | driven by |", "|---|---:|---|"]
        lines += [f"| `{f.net}` | {f.sinks} | {f.driver_type} `{f.driver}` |" for f in whole.fanout]
    else:
        lines.append("paths across blocks (levels, carry, start -> end, blocks):")
        lines += [f"  {p.levels:>3} {p.carry:>3}  {p.start} -> {p.end}\n"
                  f"           {' -> '.join(b or 'top' for b in p.blocks)}" for p in whole.crossing]
        lines.append("largest fan-out (sinks, net, driver):")
        lines += [f"  {f.sinks:>6}  {f.net}  ({f.driver_type} {f.driver})" for f in whole.fanout]
    return "\n".join(lines)


def format_wide(nets, markdown, least=0):
    """The table of `nets` (`WideNet`s) with `least` LUT levels or more."""
    nets = [n for n in nets if n.levels >= least]
    if markdown:
        lines = ["| net | sinks | enables / resets / other | LUT levels | from | e.g. |",
                 "|---|---:|---|---:|---|---|"]
        lines += [f"| `{n.net}` | {n.sinks} | {n.enables} / {n.resets} / {n.others} | {n.levels} | "
                  f"`{n.start}` | `{n.example}` |" for n in nets]
    else:
        lines = [f"{'kind':<5}{'sinks':>6}{'CE':>6}{'LSR':>6}{'other':>6}{'levels':>7}  net"]
        lines += [f"{n.kind:<5}{n.sinks:>6}{n.enables:>6}{n.resets:>6}{n.others:>6}{n.levels:>7}  {n.net}\n"
                  f"{'':36}from {n.start}; e.g. {n.example}" for n in nets]
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    for name in TPUConfig.field_names():
        parser.add_argument("--" + name.replace("_", "-"), type=int, metavar="N",
                            help=TPUConfig.describe(name))
    parser.add_argument("--profile", choices=list(PROFILES), help="a board profile the options change")
    parser.add_argument("--family", default="ecp5", choices=["ecp5", "ice40"])
    parser.add_argument("--block", action="append", metavar="BLOCK", choices=list(DEPTH_BLOCKS),
                        help="only this block (repeatable; default every block)")
    parser.add_argument("--whole", action="store_true",
                        help="the whole chip (or the one --block) flattened, no black boxes: its deepest "
                             "paths across blocks and its nets of largest fan-out")
    parser.add_argument("--wide-nets", action="store_true",
                        help="the nets of one block (--block, default host) with --above sinks or more and "
                             "the LUT levels in front of each")
    parser.add_argument("--hide", default="core", metavar="CHILD[,CHILD]",
                        help="with --wide-nets: the sub-blocks kept as black boxes (default core; '' none)")
    parser.add_argument("--above", type=int, default=32, metavar="N",
                        help="with --wide-nets: the least sinks of a net listed (default 32)")
    parser.add_argument("--reuse", action="store_true",
                        help="with --wide-nets: list from the netlist a run left in --build-dir, no synthesis")
    parser.add_argument("--least-levels", type=int, default=0, metavar="N",
                        help="with --wide-nets: list only the nets with N LUT levels or more in front")
    parser.add_argument("--markdown", action="store_true", help="print a Markdown table")
    parser.add_argument("--build-dir", type=Path, default=Path("build/bench/fpga_depth"))
    parser.add_argument("--json", type=Path, default=Path("build/bench/fpga_depth.json"))
    args = parser.parse_args(argv)
    values = {name: getattr(args, name) for name in TPUConfig.field_names()
              if getattr(args, name) is not None}
    try:
        config = TPUConfig.from_options(values, args.profile)
    except ConfigError as error:
        parser.error(str(error))
    start = time.monotonic()
    if args.wide_nets:
        if args.block and len(args.block) > 1:
            parser.error("--wide-nets takes one --block at most")
        block = (args.block or ["host"])[0]
        if args.reuse:
            from tpu.hdl.verilog import SERIAL_NAME
            nets = wide_nets_of_json(args.build_dir / "wide.json",
                                     f"{SERIAL_NAME}.{block}" if block else SERIAL_NAME, args.above)
        else:
            nets = measure_wide_nets(config, args.family, args.build_dir, block,
                                     tuple(h for h in args.hide.split(",") if h), args.above)
        seconds = round(time.monotonic() - start, 1)
        print(format_wide(nets, args.markdown, args.least_levels))
        print(f"(synth_{args.family} of {block or 'the whole chip'} of {config.name}, "
              f"black boxes: {args.hide or 'none'}, {seconds} s)")
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"config": config.to_dict(), "family": args.family, "seconds": seconds,
                                         "block": block, "hide": args.hide,
                                         "wide_nets": [asdict(n) for n in nets]}, indent=1) + "\n")
        return
    if args.whole:
        if args.block and len(args.block) > 1:
            parser.error("--whole takes one --block at most")
        whole = measure_whole(config, args.family, args.build_dir, (args.block or [""])[0])
        seconds = round(time.monotonic() - start, 1)
        print(format_whole(whole, args.markdown))
        print(f"(synth_{args.family} of {(args.block or ['the whole chip'])[0]} of {config.name}, "
              f"flattened, {seconds} s)")
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"config": config.to_dict(), "family": args.family, "seconds": seconds,
                                         "whole": asdict(whole)}, indent=1) + "\n")
        return
    depths = measure_blocks(config, args.family, args.build_dir, args.block)
    seconds = round(time.monotonic() - start, 1)
    print(format_rows(depths, args.markdown))
    print(f"(synth_{args.family} of each block of {config.name}, {seconds} s)")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"config": config.to_dict(), "family": args.family, "seconds": seconds,
                                     "blocks": {b: asdict(d) for b, d in depths.items()}}, indent=1) + "\n")


if __name__ == "__main__":
    main()
