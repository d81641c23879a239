"""Golden models, cocotb testbenches and the harness that builds and runs them."""
