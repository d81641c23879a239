"""The ``tpu`` command line (the commands: `tpu.cli.commands`).

`tpu.cli.common` holds what the commands share (errors, exit statuses, option
and file helpers); `tpu.cli.commands` the parser, `main` and the chip's
commands; `.model`, `.bench` and `.fpga` the families of commands beside
them. Each imports only from modules below it, never from this package."""

from .common import EXIT_CHIP_ERROR, EXIT_OK, EXIT_USAGE, ChipError, CommandError
from .commands import main

__all__ = ["main", "CommandError", "ChipError", "EXIT_OK", "EXIT_CHIP_ERROR", "EXIT_USAGE"]
