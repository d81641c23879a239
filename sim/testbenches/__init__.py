"""cocotb testbenches, one per RTL unit or top level; the harness runs them."""
