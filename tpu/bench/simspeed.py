"""Simulation speed: simulated cycles per wall-clock second of the golden model
and the RTL simulators on the same compiled GEMM program."""

from .common import BREAKDOWN, dense_graph, progress, run_session


__all__ = ["run_simspeed", "build_chip"]


def build_chip(config, simulator):
    """Build (or reuse: the test suite's build) the whole chip's model for `simulator`;
    the seconds it took."""
    import time
    from ..hdl.verilog import CHIP_NAME, generate_verilog
    from ..sim.harness import build
    start = time.monotonic()
    build(config, simulator, toplevel=CHIP_NAME, verilog_source=generate_verilog(config, top="chip"))
    return time.monotonic() - start


def run_simspeed(config, backends, size):
    """One GEMM `size` = (M, K, N) on every backend in `backends`. The wall time
    of a simulator includes starting it (its model already built)."""
    m, k, n = size
    results = []
    for backend in backends:
        progress(f"simulation speed: GEMM M={m} K={k} N={n} on {backend} "
                 f"({config.rows}x{config.cols})")
        built = None
        if backend != "golden":
            progress(f"building (or reusing) the {config.rows}x{config.cols} chip for {backend}")
            built = build_chip(config, backend)
        report, seconds = run_session(dense_graph(k, n, seed=7), config, m, backend=backend)
        cycles = report.total.cycles
        results.append({"backend": backend, "rows": config.rows, "cols": config.cols,
                        "m": m, "k": k, "n": n, "cycles": cycles,
                        "estimate": report.total.estimate, "seconds": seconds,
                        "build_seconds": built,
                        "host_stall": int(report.total.counters.get("host_stall", 0)),
                        "counters": {name: int(report.total.counters.get(name, 0))
                                     for name in ("cycles", *BREAKDOWN)},
                        "cycles_per_second": cycles / seconds if seconds else None})
    return results
