"""What the commands of the ``tpu`` command line share: the exit statuses,
the errors `tpu.cli.commands.main` prints as one line, the parser that
raises them, and the helpers for options and files. The sub-command modules
(`tpu.cli.commands`, `.model`, `.bench`, `.fpga`) import from here and this
module from none of them; its underscore names are internal to `tpu.cli`."""

import argparse
from pathlib import Path

from ..config import PROFILES, TPUConfig, ConfigError


__all__ = ["CommandError", "ChipError", "EXIT_OK", "EXIT_CHIP_ERROR", "EXIT_USAGE"]

EXIT_OK, EXIT_CHIP_ERROR, EXIT_USAGE = 0, 1, 2


class CommandError(Exception):
    """A user-facing error: printed as one line, exit status 2."""


class ChipError(CommandError):
    """The chip (or a simulation of it) reported an error: one line, exit status 1."""
    exit_status = EXIT_CHIP_ERROR


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        # One line, naming what was wrong, instead of usage plus message.
        raise CommandError(f"{message} (see '{self.prog} --help')")


# Shared helpers ------------------------------------------------------------------------


def _add_config_options(parser):
    group = parser.add_argument_group("chip configuration")
    group.add_argument("--profile", metavar="NAME",
                       help="start from a board profile (" + ", ".join(sorted(PROFILES))
                       + ": docs/fpga.md); the options below override its values")
    for name in TPUConfig.field_names():
        group.add_argument(f"--{name.replace('_', '-')}", dest=name, type=int, metavar="N",
                           help=f"{TPUConfig.describe(name)}; default {getattr(TPUConfig(), name)}")


def _config_from(args):
    values = {name: getattr(args, name) for name in TPUConfig.field_names()
              if getattr(args, name, None) is not None}
    try:
        return TPUConfig.from_options(values, getattr(args, "profile", None))
    except (ConfigError, TypeError) as error:
        raise CommandError(str(error)) from None


def _given_config_options(args):
    """The configuration options given on the command line, as they were spelt."""
    given = [f"--{name.replace('_', '-')} {getattr(args, name)}" for name in TPUConfig.field_names()
             if getattr(args, name, None) is not None]
    profile = getattr(args, "profile", None)
    return ([f"--profile {profile}"] if profile else []) + given


def _top_option(parser, default_help, serial=False):
    from ..hdl.verilog import DEFAULT_TOP, TOPS
    # The serial chip has no testbenches of its own in `tpu sim` (tests/test_serial_link_rtl.py).
    choices = [t for t in TOPS if serial or t != "serial"]
    parser.add_argument("--top", choices=choices, default=DEFAULT_TOP,
                        help=f"{default_help}: the chip with its PCIe-style host interface "
                             f"(default), the core behind row-level DMA ports, or the matrix "
                             f"engine alone" + (", or the chip behind its UART link (serial)"
                                                if serial else ""))


def _check_memory(config, top):
    """Refuse, before building, a design this machine has too little memory for."""
    from ..estimate import available_memory, elaboration_memory, format_bytes
    need = elaboration_memory(config, top)
    have = available_memory()
    if have is not None and need > have:
        raise CommandError(f"generating the {top} of this configuration would need about "
                           f"{format_bytes(need)} of memory, and {format_bytes(have)} is "
                           f"available; choose smaller sizes (the estimate is in docs/verilog.md)")


def _input_path(name, what):
    """The path of an existing, readable, non-empty file `name`."""
    if not name:
        raise CommandError(f"the {what} path is empty")
    path = Path(name)
    if path.is_dir():
        raise CommandError(f"cannot read {path}: Is a directory, not a {what}")
    if not path.exists():
        raise CommandError(f"cannot read {path}: No such file or directory")
    return path


def _read(path, text, what="file"):
    try:
        data = path.read_bytes()
    except OSError as error:
        raise CommandError(f"cannot read {path}: {error.strerror}") from None
    if not data:
        raise CommandError(f"{path} is empty: it holds no {what}")
    if not text:
        return data
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise CommandError(f"{path}: not UTF-8 text (byte 0x{data[error.start]:02x} at offset "
                           f"{error.start}); is it a binary? (try 'tpu disasm')") from None


def _output_path(name, inputs=(), what="output", outputs=()):
    """The path `name` for writing, refused if empty, a directory, or the
    same file as one of `inputs` or `outputs` (`tpu.output_files`)."""
    from ..output_files import OutputRefused, check_outputs
    if name is not None and not name:
        raise CommandError(f"the {what} path is empty")
    path = Path(name)
    try:
        check_outputs([*((f"the {what}", o) for o in outputs), (f"the {what}", path)],
                      [("the input", source) for source in inputs])
    except OutputRefused as error:
        raise CommandError(str(error)) from None
    return path


def _write(path, data):
    """Write exactly `path` (missing directories created), whole or not at all."""
    from ..output_files import write_output
    try:
        write_output(path, data)
    except OSError as error:
        raise CommandError(f"cannot write {path}: {error.strerror or error}") from None


def _seed(text):
    try:
        value = int(text, 0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid seed {text!r}: not an integer") from None
    if not 0 <= value < 1 << 32:
        raise argparse.ArgumentTypeError(f"seed {value} is out of range 0..{(1 << 32) - 1}")
    return value


def _seed_option(parser, default):
    parser.add_argument("--seed", type=_seed, help=f"random seed, 0..2**32-1 ({default})")


def _simulator(name):
    from ..sim.harness import missing_simulator
    reason = missing_simulator(name)
    if reason:
        raise CommandError(reason)


def _positive_count(text):
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, not {text!r}")
    return value
