"""``tpu selftest``: the chip's own checks (`tpu.selftest`) on a backend.

tpu selftest [--backend golden|icarus|verilator|serial] [--check NAME ...] [--list]
             [--seed N] [--port PORT --baud BAUD --clock-mhz MHZ] [config options]

Each check runs on a freshly opened device; a check that cannot apply to
the configuration is reported as not for it, with the reason. Exit status 0
when every check that applies passes, 1 when one fails, 2 for bad options.
"""

from .common import (EXIT_CHIP_ERROR, EXIT_OK, CommandError, _add_config_options, _config_from,
                     _positive_count, _seed_option, _simulator)
from .model import _positive_float, _serial_options


__all__ = ["add_selftest_command", "cmd_selftest"]


def cmd_selftest(args):
    from ..selftest import CHECKS, selftest, why_not
    config = _config_from(args)
    if args.list:
        for name, check in CHECKS.items():
            reason = why_not(name, config)
            doc = _summary(check.__doc__)
            print(f"{name:<18} {doc}" + (f" [not for this configuration: {reason}]" if reason else ""))
        return EXIT_OK
    names = list(dict.fromkeys(args.check)) if args.check else list(CHECKS)
    unknown = [name for name in names if name not in CHECKS]
    if unknown:
        raise CommandError(f"unknown check {', '.join(unknown)}; the checks are {', '.join(CHECKS)}")
    if args.check:
        for name in names:
            reason = why_not(name, config)
            if reason:
                raise CommandError(f"check {name} cannot run on {config.name} as given: {reason}")
    options = _backend_options(args)
    print(f"selftest of {config.name} on the {args.backend} backend: {len(names)} "
          f"check{'s' if len(names) != 1 else ''}", flush=True)
    if args.backend in ("icarus", "verilator"):
        print(f"the {args.backend} model of the chip is built on first use, or reused if built "
              f"before (a Verilator build takes minutes)", flush=True)

    def log(outcome):
        if outcome.kind == "pass":
            print(f"pass  {outcome.name} ({outcome.seconds:.1f} s)", flush=True)
        elif outcome.kind == "skip":
            print(f"skip  {outcome.name}: not for this configuration: {outcome.message}", flush=True)
        else:
            print(f"FAIL  {outcome.name} ({outcome.seconds:.1f} s): {outcome.message[:300]}",
                  flush=True)

    outcomes = selftest(args.backend, config, names, log=log, **options)
    counts = {kind: sum(o.kind == kind for o in outcomes) for kind in ("pass", "fail", "skip")}
    note = f", {counts['skip']} not for this configuration" if counts["skip"] else ""
    print(f"{counts['pass']} passed, {counts['fail']} failed{note}")
    return EXIT_CHIP_ERROR if counts["fail"] else EXIT_OK


def _summary(doc, width=90):
    """The first sentence of a docstring, on one line of at most `width` characters."""
    text = " ".join(doc.split()).split(". ")[0].rstrip(".")
    return text if len(text) <= width else text[:width - 3].rsplit(" ", 1)[0] + " ..."


def _backend_options(args):
    if args.backend == "serial":
        options = _serial_options(args)
    elif args.port is not None:
        raise CommandError(f"--port {args.port} is for --backend serial, not --backend {args.backend}")
    else:
        options = {}
    if args.seed is not None:
        if args.backend not in ("icarus", "verilator"):
            raise CommandError(f"--seed draws a simulated host's timing: it is for --backend "
                                 f"icarus or verilator, not {args.backend}")
        options["seed"] = args.seed
    if args.backend in ("icarus", "verilator"):
        _simulator(args.backend)
    return options


def add_selftest_command(commands):
    """Add ``selftest`` to the ``tpu`` parser's sub-commands."""
    p = commands.add_parser(
        "selftest", help="check a chip (a board or a simulation) with its own checks",
        description="Run the chip's checks (registers, programs, faults, DMA, interrupts, the "
                    "driver's contract: tpu.selftest) through the driver on a backend: the golden "
                    "model, the chip's RTL under Icarus or Verilator, or a board over its serial "
                    "port. Each check runs on a freshly opened device; a check that cannot apply "
                    "to the configuration says why.")
    p.add_argument("--backend", default="golden", choices=["golden", "icarus", "verilator", "serial"],
                   help="golden model (default), the chip's RTL under a simulator, or a board "
                        "over its serial port")
    p.add_argument("--check", action="append", metavar="NAME",
                   help="run only this check (repeatable; --list names them)")
    p.add_argument("--list", action="store_true", help="list the checks and exit")
    _seed_option(p, "simulation backends: draws the host's timing; default 1")
    p.add_argument("--port", metavar="PORT",
                   help="--backend serial: the board's serial port (e.g. /dev/ttyUSB1) or a "
                        "pyserial URL")
    p.add_argument("--baud", type=_positive_count, default=115200, metavar="BAUD",
                   help="--backend serial: the UART's bit rate, as built (default 115200)")
    p.add_argument("--clock-mhz", type=_positive_float, default=100.0, metavar="MHZ",
                   help="--backend serial: the board's chip clock (default 100; 12 on the "
                        "iCEBreaker)")
    _add_config_options(p)
    p.set_defaults(func=cmd_selftest)
