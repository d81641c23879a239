"""Amaranth RTL of the accelerator."""

from .systolic_array import SystolicArray
from .accumulators import Accumulators
from .matrix_engine import MatrixEngine, ActivationRow
from .verilog import generate_verilog

__all__ = ["SystolicArray", "Accumulators", "MatrixEngine", "ActivationRow", "generate_verilog"]
