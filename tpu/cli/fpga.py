"""``tpu build`` and ``tpu flash``: the whole chip on an FPGA board (docs/fpga.md).

``add_fpga_commands(subparsers, add_config_options)`` adds both commands to
the ``tpu`` command line; `main` runs them on their own.

tpu build --board icebreaker|ulx3s-85f [--rows R --cols C ...] [--baud B] [--clock-mhz F]
          [--out DIR]
    synthesis, place and route and bitstream with the YoWASP tools; prints
    and saves (``DIR/build.json``) the resources used and available and the
    Fmax of each clock; fails with a one-line error naming what does not fit
    or which clock misses its target.
tpu flash --board NAME [--bitstream FILE] [--dry-run]
    programs the board with iceprog (iCEBreaker) or openFPGALoader (ULX3S);
    ``--dry-run`` prints the command instead.
"""

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path


__all__ = ["add_fpga_commands", "main", "PROGRAMMERS", "default_out", "flash_command"]

BOARD_NAMES = ("icebreaker", "ulx3s-85f")

#: board -> (environment variable, command, Debian package, arguments before the file)
PROGRAMMERS = {
    "icebreaker": ("ICEPROG", "iceprog", "fpga-icestorm", []),
    # -m: into the FPGA's SRAM, as the ULX3S platform of amaranth-boards does.
    "ulx3s-85f": ("OPENFPGALOADER", "openFPGALoader", "openfpgaloader", ["-b", "ulx3s", "-m"]),
}
_SUFFIX = {"icebreaker": ".bin", "ulx3s-85f": ".bit"}


def _error(message):
    from .common import CommandError
    return CommandError(message)


def default_out(board, top="chip"):
    """Where `tpu build` puts a board's files unless told."""
    return Path("build") / "fpga" / (board if top == "chip" else f"{board}-{top}")


def _config(args):
    from ..config import ConfigError, TPUConfig
    values = {name: getattr(args, name) for name in TPUConfig.field_names()
              if getattr(args, name, None) is not None}
    profile = getattr(args, "profile", None)
    matrix = getattr(args, "top", "chip") == "matrix"
    if matrix and profile is None:
        # The matrix part's own sizes for the UP5K, under the options given.
        from ..hdl.matrix_part import UP5K_MATRIX_PART_FIELDS
        values = {**UP5K_MATRIX_PART_FIELDS, **values}
    try:
        config = TPUConfig.from_options(values, profile)
        if matrix:
            from ..hdl.matrix_part import check_matrix_part_config
            check_matrix_part_config(config)
        return config
    except (ConfigError, TypeError, ValueError) as error:
        raise _error(str(error)) from None


def _usage(entry):
    return "-" if entry is None else f"{entry['used']} / {entry['available']}"


def cmd_build(args):
    from ..fpga.board_top import board_clock, matrix_part_clock_hz, uart_divisor
    from ..fpga.build import (BOARDS, PROFILE_BUILD_OPTIONS, FPGAToolMissing, build_chip,
                             missing_fpga_tools)
    config = _config(args)
    profile = getattr(args, "profile", None) if args.top == "chip" else None
    for name, value in PROFILE_BUILD_OPTIONS.get((profile, args.board), {}).items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    reason = missing_fpga_tools(args.board)
    if reason:
        raise _error(reason)
    if args.clock_mhz is not None:
        wanted = args.clock_mhz * 1e6
    else:
        # Each top's default is below its own routed Fmax.
        wanted = matrix_part_clock_hz(args.board) if args.top == "matrix" else None
    try:
        clock_hz, pll = board_clock(args.board, wanted)
    except ValueError as error:
        raise _error(f"--clock-mhz: {error}") from None
    try:
        uart_divisor(clock_hz, args.baud)
    except ValueError as error:
        raise _error(f"--baud: {error}") from None
    out = Path(args.out) if args.out else default_out(args.board, args.top)
    what = "matrix part" if args.top == "matrix" else "chip"
    source = "from the oscillator" if pll is None else \
        f"made by the PLL from the {pll.input_hz / 1e6:g} MHz oscillator"
    print(f"building the {config.name} {what} for the {BOARDS[args.board].device} in {out}, "
          f"clock {clock_hz / 1e6:g} MHz {source} (synthesis, place and route: minutes to an "
          f"hour)", flush=True)
    try:
        result = build_chip(args.board, config, build_dir=out, baudrate=args.baud, top=args.top,
                            router=args.router, placer=args.placer,
                            clock_hz=clock_hz,
                            progress=lambda line: print(f"  {line}", flush=True) if line else None)
    except (FPGAToolMissing, RuntimeError) as error:
        raise _error(str(error)) from None
    (out / "build.json").write_text(json.dumps(result, indent=2) + "\n")
    print(f"took {result['seconds']:g} s; results in {out / 'build.json'}")
    if result["fits"]:
        for name, entry in result["resources"].items():
            if entry is not None:
                print(f"  {name:6} {_usage(entry)}")
        for net, clock in result["clocks"].items():
            gops = ""
            if args.top == "chip" and clock["fmax_mhz"] and clock["target_mhz"] == round(clock_hz / 1e6, 2):
                # The chip's clock: what the whole chip's array could do at its Fmax.
                gops = f", peak {peak_gops(config, clock['fmax_mhz']):.1f} GOPS at that clock " \
                       f"(2 x {config.rows} x {config.cols} x Fmax)"
            print(f"  clock {net}: {clock['fmax_mhz']} MHz (target {clock['target_mhz']} MHz){gops}")
        print(f"bitstream: {result['bitstream']}")
    if result["problem"]:
        raise _error(result["problem"])
    return 0


def peak_gops(config, mhz):
    """The array's peak rate at `mhz`: a multiply and an add per PE per cycle."""
    return 2 * config.rows * config.cols * mhz / 1000


def flash_command(board, bitstream):
    """The programmer's command line for `bitstream` on `board`."""
    variable, command, _, arguments = PROGRAMMERS[board]
    return [os.environ.get(variable, command), *arguments, str(bitstream)]


def cmd_flash(args):
    board = args.board
    top = getattr(args, "top", "chip")
    name = "tpu_chip" if top == "chip" else "tpu_matrix_part"
    bitstream = Path(args.bitstream) if args.bitstream else \
        default_out(board, top) / f"{name}{_SUFFIX[board]}"
    if not bitstream.is_file():
        raise _error(f"no bitstream {bitstream}: build one with 'tpu build --board {board}"
                     f"{'' if top == 'chip' else ' --top ' + top}' "
                     f"or name it with --bitstream")
    if bitstream.suffix != _SUFFIX[board]:
        raise _error(f"{bitstream} is not a {_SUFFIX[board]} bitstream, which the {board} takes")
    command = flash_command(board, bitstream)
    if args.dry_run:
        print(shlex.join(command))
        return 0
    variable, _, package, _ = PROGRAMMERS[board]
    if shutil.which(command[0]) is None:
        raise _error(f"the programmer {command[0]} was not found: install it (Debian: apt-get "
                     f"install {package}) or set {variable} to its path")
    run = subprocess.run(command)
    if run.returncode:
        raise _error(f"{shlex.join(command)} failed with exit status {run.returncode}: is the "
                     f"{board} connected, powered and free?")
    return 0


def add_fpga_commands(subparsers, add_config_options):
    """Add ``build`` and ``flash`` to `subparsers` (an argparse subparsers
    action); `add_config_options(parser)` adds the chip configuration options."""
    from ..fpga.build import PLACERS
    p = subparsers.add_parser("build", help="build the chip's bitstream for an FPGA board",
                              description="Synthesise, place and route the whole chip behind its "
                                          "UART bridge for a board and write its bitstream.")
    p.add_argument("--board", required=True, choices=BOARD_NAMES, help="the board")
    add_config_options(p)
    p.add_argument("--top", choices=("chip", "matrix"), default="chip",
                   help="the whole chip (default), or its matrix part alone (the array, "
                        "accumulators, weight memory and UB behind the UART: what fits the UP5K)")
    p.add_argument("--baud", type=int, default=115200, metavar="B",
                   help="the UART's bit rate (default 115200)")
    p.add_argument("--clock-mhz", type=float, metavar="MHZ",
                   help="the chip's clock (default: below the chip's routed Fmax, or a clock "
                        "its latest tree was built at and met, "
                        "tpu.fpga.routed_clocks: 12 on the icebreaker, its oscillator, whose "
                        "PLL makes 16 to 275 MHz from it within 1%%; 18.75 "
                        "on the ulx3s-85f, made by its PLL from the 25 MHz oscillator, and "
                        "50 with --profile ulx3s16, by the same PLL; the matrix part's: "
                        "23.625 on the icebreaker, by its PLL, and 25 on the ulx3s-85f)")
    p.add_argument("--router", choices=("router1", "router2"),
                   help="nextpnr's router (default: nextpnr's own, router1, and router2 with "
                        "--profile ulx3s16; router2 routes a large chip much faster)")
    p.add_argument("--placer", choices=PLACERS,
                   help="nextpnr's placer (default: nextpnr's own, heap, and static with "
                        "--profile ulx3s16; static spreads a large chip more evenly)")
    p.add_argument("--out", metavar="DIR", help="build directory (default build/fpga/BOARD)")
    p.set_defaults(func=cmd_build)

    p = subparsers.add_parser("flash", help="program an FPGA board with a built bitstream")
    p.add_argument("--board", required=True, choices=BOARD_NAMES, help="the board")
    p.add_argument("--bitstream", metavar="FILE",
                   help="the bitstream (default: what 'tpu build' wrote for the board and --top)")
    p.add_argument("--top", choices=("chip", "matrix"), default="chip",
                   help="which build's bitstream is the default: the whole chip's or the matrix part's")
    p.add_argument("--dry-run", action="store_true", help="print the command, do not run it")
    p.set_defaults(func=cmd_flash)


def main(argv=None):
    """Run ``build`` or ``flash`` alone, with the ``tpu`` command line's errors."""
    from .common import CommandError, _add_config_options, _Parser
    parser = _Parser(prog="tpu")
    add_fpga_commands(parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser),
                      _add_config_options)
    try:
        args = parser.parse_args(argv)
        if args.command is None:
            parser.print_help()
            return 2
        return args.func(args)
    except CommandError as error:
        print(f"tpu: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
