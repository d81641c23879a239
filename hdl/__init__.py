"""Amaranth RTL of the accelerator."""

from .systolic_array import SystolicArray
from .accumulators import Accumulators
from .matrix_engine import MatrixEngine, ActivationRow
from .activation_pipeline import ActivationPipeline
from .core import TPUCore
from .verilog import generate_verilog

__all__ = ["SystolicArray", "Accumulators", "MatrixEngine", "ActivationRow", "ActivationPipeline",
           "TPUCore", "generate_verilog"]
