"""Golden models: numpy references the RTL must equal bit for bit, and the cycle model."""
