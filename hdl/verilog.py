"""Verilog generation for a configuration."""

from amaranth.back import verilog

from ..config import TPUConfig


__all__ = ["generate_verilog", "TOP_NAME", "CORE_NAME", "CHIP_NAME", "SERIAL_NAME", "TOPS"]

TOP_NAME = "tpu_matrix_engine"
CORE_NAME = "tpu_core"
CHIP_NAME = "tpu_chip"
SERIAL_NAME = "tpu_serial_chip"

#: What can be generated: the chip with its host interface, the core behind
#: its row-level DMA ports, or the matrix engine alone; "serial" is the chip
#: behind its UART bridge (docs/serial_link.md).
TOPS = {"chip": CHIP_NAME, "core": CORE_NAME, "engine": TOP_NAME, "serial": SERIAL_NAME}


def generate_verilog(config=TPUConfig(), *, top="engine", name=None):
    """Verilog text of `top` ("chip", "core" or "engine") built for `config`.

    The top module is `name` (by default ``tpu_chip``, ``tpu_core`` or
    ``tpu_matrix_engine``), with a clock ``clk`` and a synchronous
    active-high reset ``rst``.
    """
    from .core import TPUCore
    from .host_interface import HostInterface
    from .matrix_engine import MatrixEngine
    from .serial_chip import SerialChip
    if top not in TOPS:
        raise ValueError(f"unknown top {top!r}: choose one of {', '.join(TOPS)}")
    design = {"chip": HostInterface, "core": TPUCore, "engine": MatrixEngine,
              "serial": SerialChip}[top](config)
    return verilog.convert(design, name=name or TOPS[top], emit_src=False)
