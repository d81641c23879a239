"""Everything that simulates the chip, by part:

- ``harness``: builds simulator models of the RTL and runs cocotb testbenches;
- ``suites``: the named testcases `tpu sim` runs for each top level;
- ``models``: numpy golden models the RTL must equal bit for bit;
- ``testbenches``: cocotb testbenches, one per unit or top level;
- ``tops``: small RTL wrappers that put one unit behind a testbench's streams;
- ``host``: the other end of the chip's streams (TLP link, PCIe root complex,
  UART host) and the driver's simulator backends;
- ``stimulus``: the fixed program library and the random program generator;
- ``bench``: cocotb benchmarks, not run by the test suite.
"""
