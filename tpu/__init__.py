"""An open TPU-v1-class inference accelerator.

Sub-packages: `tpu.hdl` (Amaranth RTL), `tpu.models` (numpy golden models
and the cycle model), `tpu.sim` (the cocotb harness, testbenches and
simulation backends), `tpu.fpga` (board builds).
"""

from .config import TPUConfig, ConfigError

__all__ = ["TPUConfig", "ConfigError"]
__version__ = "0.1.0"
