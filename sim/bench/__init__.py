"""Benchmarks of the RTL (throughput, latency, host link); not run by the test suite."""
