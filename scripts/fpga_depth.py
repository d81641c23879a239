#!/usr/bin/env python3
"""The logic depth of each block of the chip: its longest register-to-register
path in LUT levels and in carry cells, after ``synth_ecp5`` (``--family
ecp5``, the default) or ``synth_ice40`` (`tpu.fpga.logic_depth`; seconds to a
minute a block, against tens of minutes for a place and route).

    python scripts/fpga_depth.py                          # the default 8x8 chip on the ECP5
    python scripts/fpga_depth.py --profile ulx3s16 --markdown
    python scripts/fpga_depth.py --family ice40 --profile up5k --block host.core.sequencer

The configuration options are those of ``tpu verilog``. It prints a table
(Markdown with --markdown) and saves the depths as JSON.
"""

import argparse
import json
import time
from dataclasses import asdict
from pathlib import Path

from tpu.config import PROFILES, ConfigError, TPUConfig
from tpu.fpga.logic_depth import DEPTH_BLOCKS, measure_blocks


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
    depths = measure_blocks(config, args.family, args.build_dir, args.block)
    seconds = round(time.monotonic() - start, 1)
    print(format_rows(depths, args.markdown))
    print(f"(synth_{args.family} of each block of {config.name}, {seconds} s)")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"config": config.to_dict(), "family": args.family, "seconds": seconds,
                                     "blocks": {b: asdict(d) for b, d in depths.items()}}, indent=1) + "\n")


if __name__ == "__main__":
    main()
