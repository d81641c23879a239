"""Verilog generation for a configuration."""

from amaranth.back import verilog

from ..config import TPUConfig


__all__ = ["generate_verilog", "TOP_NAME", "CORE_NAME", "TOPS"]

TOP_NAME = "tpu_matrix_engine"
CORE_NAME = "tpu_core"

#: What can be generated: the whole core, or the matrix engine alone.
TOPS = {"core": CORE_NAME, "engine": TOP_NAME}


def generate_verilog(config=TPUConfig(), *, top="engine", name=None):
    """Verilog text of `top` ("core" or "engine") built for `config`.

    The top module is `name` (by default ``tpu_core`` or
    ``tpu_matrix_engine``), with a clock ``clk`` and a synchronous
    active-high reset ``rst``.
    """
    from .core import TPUCore
    from .matrix_engine import MatrixEngine
    if top not in TOPS:
        raise ValueError(f"unknown top {top!r}: choose one of {', '.join(TOPS)}")
    design = TPUCore(config) if top == "core" else MatrixEngine(config)
    return verilog.convert(design, name=name or TOPS[top], emit_src=False)
