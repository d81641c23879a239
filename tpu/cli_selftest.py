"""``tpu selftest``: the chip's own checks (`tpu.selftest`) on a backend.

tpu selftest [--backend golden|icarus|verilator|serial] [--check NAME ...] [--list]
             [--seed N] [--port PORT --baud BAUD --clock-mhz MHZ] [config options]

Each check runs on a freshly opened device; a check that cannot apply to
the configuration is reported as not for it, with the reason. Exit status 0
when every check that applies passes, 1 when one fails, 2 for bad options.
"""

import argparse


__all__ = ["add_selftest_command", "cmd_selftest"]


def _command_error(message):
    from .cli import CommandError
    return CommandError(message)


def cmd_selftest(args, config):
    from .selftest import CHECKS, selftest, why_not
    if args.list:
        for name, check in CHECKS.items():
            reason = why_not(name, config)
            doc = _summary(check.__doc__)
            print(f"{name:<18} {doc}" + (f" [not for this configuration: {reason}]" if reason else ""))
        return 0
    names = list(dict.fromkeys(args.check)) if args.check else list(CHECKS)
    unknown = [name for name in names if name not in CHECKS]
    if unknown:
        raise _command_error(f"unknown check {', '.join(unknown)}; the checks are {', '.join(CHECKS)}")
    if args.check:
        for name in names:
            reason = why_not(name, config)
            if reason:
                raise _command_error(f"check {name} cannot run on {config.name} as given: {reason}")
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
    return 1 if counts["fail"] else 0


def _summary(doc, width=90):
    """The first sentence of a docstring, on one line of at most `width` characters."""
    text = " ".join(doc.split()).split(". ")[0].rstrip(".")
    return text if len(text) <= width else text[:width - 3].rsplit(" ", 1)[0] + " ..."


def _backend_options(args):
    if args.backend == "serial":
        from .cli_model import _serial_options
        options = _serial_options(args)
    elif args.port is not None:
        raise _command_error(f"--port {args.port} is for --backend serial, not --backend {args.backend}")
    else:
        options = {}
    if args.seed is not None:
        if args.backend not in ("icarus", "verilator"):
            raise _command_error(f"--seed draws a simulated host's timing: it is for --backend "
                                 f"icarus or verilator, not {args.backend}")
        options["seed"] = args.seed
    if args.backend in ("icarus", "verilator"):
        from .sim.harness import missing_simulator
        reason = missing_simulator(args.backend)
        if reason:
            raise _command_error(reason)
    return options


def _positive_number(kind):
    def parse(text):
        try:
            value = kind(text)
        except ValueError:
            value = 0
        if not value > 0:
            raise argparse.ArgumentTypeError(f"must be a positive number, not {text!r}")
        return value
    return parse


def _seed(text):
    try:
        value = int(text, 0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid seed {text!r}: not an integer") from None
    if not 0 <= value < 1 << 32:
        raise argparse.ArgumentTypeError(f"seed {value} is out of range 0..{(1 << 32) - 1}")
    return value


def add_selftest_command(commands, add_config_options, config_from):
    """Add ``selftest`` to the ``tpu`` parser's sub-commands; `config_from(args)`
    gives the configuration the options name."""
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
    p.add_argument("--seed", type=_seed,
                   help="simulation backends: draws the host's timing (default 1)")
    p.add_argument("--port", metavar="PORT",
                   help="--backend serial: the board's serial port (e.g. /dev/ttyUSB1) or a "
                        "pyserial URL")
    p.add_argument("--baud", type=_positive_number(int), default=115200, metavar="BAUD",
                   help="--backend serial: the UART's bit rate, as built (default 115200)")
    p.add_argument("--clock-mhz", type=_positive_number(float), default=100.0, metavar="MHZ",
                   help="--backend serial: the board's chip clock (default 100; 12 on the "
                        "iCEBreaker)")
    add_config_options(p)
    p.set_defaults(func=lambda args: cmd_selftest(args, config_from(args)))
