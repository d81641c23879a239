"""An open TPU-v1-class inference accelerator.

Sub-packages: `tpu.hdl` (Amaranth RTL), `tpu.sim` (golden models and the
cocotb harness), `tpu.fpga` (board builds).
"""

from .config import TPUConfig, ConfigError

__all__ = ["TPUConfig", "ConfigError"]
__version__ = "0.1.0"
