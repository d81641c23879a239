"""FPGA builds: boards, synthesis, place and route, flashing."""
