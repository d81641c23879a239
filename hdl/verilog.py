"""Verilog generation for a configuration."""

from amaranth.back import verilog

from ..config import TPUConfig
from .matrix_engine import MatrixEngine


__all__ = ["generate_verilog", "TOP_NAME"]

TOP_NAME = "tpu_matrix_engine"


def generate_verilog(config=TPUConfig(), *, name=TOP_NAME):
    """Verilog text of the matrix engine built for `config`.

    The top module is `name`, with a clock ``clk`` and a synchronous
    active-high reset ``rst``.
    """
    engine = MatrixEngine(config)
    return verilog.convert(engine, name=name, emit_src=False)
