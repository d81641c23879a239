"""Everything that simulates the RTL, by part (the numpy golden models it is
checked against are `tpu.models`, below the driver and the compiler):

- ``harness``: builds simulator models of the RTL and runs cocotb testbenches;
- ``build_progress``: the progress of a Verilator build, read from its directory;
- ``suites``: the named testcases `tpu sim` runs for each top level;
- ``testbenches``: cocotb testbenches, one per unit or top level;
- ``tops``: small RTL wrappers that put one unit behind a testbench's streams;
- ``host``: the other end of the chip's streams (TLP link, PCIe root complex,
  UART host) and the driver's simulator backends;
- ``stimulus``: the fixed program library and the random program generator;
- ``bench``: cocotb benchmarks, not run by the test suite.
"""
