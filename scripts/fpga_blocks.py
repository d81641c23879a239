#!/usr/bin/env python3
"""What each block of the chip costs on the iCE40 (LUT4s, flip-flops,
SB_MAC16s, EBRs and SPRAMs per block) or, with ``--family ecp5``, on the ECP5
(LUT4s, carry cells, flip-flops, MULT18X18Ds, DP16KDs, LUT RAMs).

The chip behind its UART bridge (``SerialChip``, ``tpu verilog --top serial``)
is written as Verilog for the family (its primitives instantiated where the
board build instantiates them), one module per Amaranth submodule, named by
its path (``tpu_serial_chip.host.core.engine``). Each block down to `depth` levels is
synthesised with ``synth_ice40 -dsp`` (``synth_ecp5`` with the board build's
LUT mapping), as the board build synthesises the
whole chip, with its listed sub-blocks as black boxes: that gives its own
logic, and a block's count is its own logic and its sub-blocks' counts. A
block's ports are kept, so nothing outside it can be optimised into it or
away from it: the total differs a little from the chip synthesised whole
(flattened).

    python scripts/fpga_blocks.py                      # the small 2x2 chip of docs/fpga.md
    python scripts/fpga_blocks.py --rows 4 --cols 4 --depth 3 --json build/blocks.json
    python scripts/fpga_blocks.py --within host --skip host.core   # the host interface alone
    python scripts/fpga_blocks.py --family ecp5 --profile ulx3s16 --depth 4   # docs/fpga.md

The configuration options are those of ``tpu verilog``; the defaults are the
small 2x2 chip of docs/fpga.md. It prints a table (Markdown with --markdown)
and saves the counts as JSON. The 2x2 chip takes about as long as one
synthesis of the whole chip (minutes).
"""

import argparse
import json
import re
import sys
import time
from pathlib import Path

from tpu.config import PROFILES, ConfigError, TPUConfig
from tpu.fpga.logic_depth import synthesise_apart
from tpu.hdl.verilog import SERIAL_NAME, generate_verilog


#: The small 2x2 chip measured in docs/fpga.md.
SMALL_CHIP = dict(rows=2, cols=2, acc_rows=64, ub_rows=256, weight_mem_tiles=16, pool_max_width=16,
                  link_dw=1, max_payload=128, max_read_request=128, read_tags=1, dma_windows=1,
                  cpl_timeout=16000000)

#: column -> the yosys cell types it counts, on the iCE40
ICE40_COLUMNS = {
    "LUT4": ("SB_LUT4",),
    "FF": ("SB_DFF", "SB_DFFE", "SB_DFFSR", "SB_DFFR", "SB_DFFS", "SB_DFFESR", "SB_DFFER",
           "SB_DFFES", "SB_DFFSS", "SB_DFFESS", "SB_DFFN", "SB_DFFNE", "SB_DFFNSR", "SB_DFFNR",
           "SB_DFFNS", "SB_DFFNESR", "SB_DFFNER", "SB_DFFNES", "SB_DFFNSS", "SB_DFFNESS"),
    "carry": ("SB_CARRY",),
    "SB_MAC16": ("SB_MAC16",),
    "EBR": ("SB_RAM40_4K",),
    "SPRAM": ("SB_SPRAM256KA",),
}

#: The same on the ECP5. nextpnr packs a LUT4 or half a CCU2C into each
#: TRELLIS_COMB, so LUT4 + 2 x CCU2C is about what a block takes of the
#: ECP5-85F's 83,640 (more after packing: LUT RAMs and routing through LUTs).
ECP5_COLUMNS = {
    "LUT4": ("LUT4",),
    "CCU2C": ("CCU2C",),
    "FF": ("TRELLIS_FF",),
    "MULT18X18D": ("MULT18X18D",),
    "DP16KD": ("DP16KD",),
    "DPR16X4": ("TRELLIS_DPR16X4",),
}

COLUMNS = {"ice40": ICE40_COLUMNS, "ecp5": ECP5_COLUMNS}


def blocks(verilog_text, depth):
    """{block: its direct sub-blocks} of the modules of `verilog_text` at most
    `depth` levels below the top, in hierarchy order. Amaranth names a
    submodule's module after its path, ``tpu_serial_chip.host.core``."""
    names = [name for name in re.findall(r"^module \\?([\w.$]+)", verilog_text, re.M)
             if name == SERIAL_NAME or name.startswith(SERIAL_NAME + ".")]
    names = sorted(name for name in names if name.count(".") <= depth)
    return {name: [child for child in names if child.startswith(name + ".")
                   and child.count(".") == name.count(".") + 1] for name in names}


def _inside(name, block):
    return name == block or name.startswith(block + ".")


def select(tree, within=None, skip=()):
    """The part of `tree` (as `blocks` gives it) to synthesise: with `within`,
    only that block and the blocks inside it; none inside one of `skip`.
    Returns ``(selected, hidden)``: the selected blocks with their selected
    sub-blocks, and each one's left-out sub-blocks (black boxes counted as
    nothing). An unknown block name is a one-line error."""
    for name in [within, *skip]:
        if name is not None and name not in tree:
            raise ValueError(f"no block {name}; the blocks are " + ", ".join(tree))
    selected = {name: [child for child in children if not any(_inside(child, s) for s in skip)]
                for name, children in tree.items()
                if (within is None or _inside(name, within)) and not any(_inside(name, s) for s in skip)}
    hidden = {name: [child for child in tree[name] if child not in selected[name]] for name in selected}
    return selected, hidden


def synthesise(config, build_dir, depth, within=None, skip=(), family="ice40"):
    """{block: {column: n}} for the blocks of the serial chip of `config`
    built for `family` ("ice40" or "ecp5");
    with `within` (a block's full name), only it and the blocks inside it;
    blocks inside one of `skip` are black boxes counted as nothing."""
    build_dir.mkdir(parents=True, exist_ok=True)
    source = build_dir / f"{SERIAL_NAME}.v"
    text = generate_verilog(config, top="serial", family=family)
    source.write_text(text)
    try:
        tree, hidden = select(blocks(text, depth), within, skip)
    except ValueError as error:
        sys.exit(f"fpga_blocks: {error} (at --depth {depth})")
    # The source read once, each block synthesised apart from the others
    # (`synthesise_apart`), its sub-blocks black boxes, names hidden.
    jobs = [(name, children + hidden[name], [f"tee -q -o stat{n}.json stat -json"])
            for n, (name, children) in enumerate(tree.items())]
    try:
        synthesise_apart(build_dir, source.name, jobs, family, hide_names=True)
    except RuntimeError as error:
        sys.exit(f"fpga_blocks: {error}")
    columns = COLUMNS[family]
    own = {}
    for n, name in enumerate(tree):
        modules = json.loads((build_dir / f"stat{n}.json").read_text())["modules"]
        cells = modules.get("\\" + name, modules.get(name, {})).get("num_cells_by_type", {})
        own[name] = {column: sum(cells.get(t, 0) for t in types) for column, types in columns.items()}

    def total(name):
        counts = dict(own[name])
        for child in tree[name]:
            for column, n in total(child).items():
                counts[column] += n
        return counts

    return {name: total(name) for name in tree}


def format_rows(totals, markdown):
    """The table of `totals`, a block's name indented by its depth."""
    columns = list(next(iter(totals.values()))) if totals else []
    lines = []
    if markdown:
        lines.append("| block | " + " | ".join(columns) + " |")
        lines.append("|---" + "|---:" * len(columns) + "|")
    else:
        lines.append(f"{'block':<40}" + "".join(f"{c:>11}" for c in columns))
    for name, counts in totals.items():
        level = name.count(".")
        label = name.rsplit(".", 1)[-1] if level else "whole chip"
        if markdown:
            lines.append(f"| {'&nbsp;' * 4 * level}{label} | "
                         + " | ".join(f"{counts[c]:,}" for c in columns) + " |")
        else:
            lines.append(f"{'  ' * level + label:<40}" + "".join(f"{counts[c]:>11}" for c in columns))
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    for name in TPUConfig.field_names():
        parser.add_argument("--" + name.replace("_", "-"), type=int, metavar="N",
                            help=TPUConfig.describe(name))
    parser.add_argument("--profile", default="small", choices=["small", "none", *PROFILES],
                        help="the chip the options above change: the small 2x2 chip of docs/fpga.md "
                             "(default), TPUConfig's defaults (none) or a board profile")
    parser.add_argument("--family", default="ice40", choices=list(COLUMNS),
                        help="the FPGA family to build and synthesise for (default ice40)")
    parser.add_argument("--depth", type=int, default=5, help="levels of blocks to list (default 5)")
    parser.add_argument("--within", metavar="BLOCK",
                        help="only this block and the blocks inside it (e.g. host)")
    parser.add_argument("--skip", metavar="BLOCK", action="append", default=[],
                        help="leave this block out: a black box counted as nothing (e.g. host.core)")
    parser.add_argument("--markdown", action="store_true", help="print a Markdown table")
    parser.add_argument("--build-dir", type=Path, default=Path("build/bench/fpga_blocks"))
    parser.add_argument("--json", type=Path, default=Path("build/bench/fpga_blocks.json"))
    args = parser.parse_args(argv)
    values = {name: getattr(args, name) for name in TPUConfig.field_names()
              if getattr(args, name) is not None}
    try:
        if args.profile == "small":
            config = TPUConfig(**{**SMALL_CHIP, **values})
        else:
            config = TPUConfig.from_options(values, None if args.profile == "none" else args.profile)
    except ConfigError as error:
        parser.error(str(error))

    start = time.monotonic()
    full = lambda name: name if name.startswith(SERIAL_NAME) else f"{SERIAL_NAME}.{name}"
    totals = synthesise(config, args.build_dir, args.depth,
                        within=full(args.within) if args.within else None,
                        skip=[full(name) for name in args.skip], family=args.family)
    seconds = round(time.monotonic() - start, 1)
    print(format_rows(totals, args.markdown))
    synth = "synth_ice40 -dsp" if args.family == "ice40" else "synth_ecp5"
    print(f"({synth} of each block of {config.name}, {seconds} s)")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"config": config.to_dict(), "family": args.family, "seconds": seconds,
                                     "blocks": totals}, indent=1) + "\n")


if __name__ == "__main__":
    main()
