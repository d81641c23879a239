"""Simulation speed: simulated cycles per wall-clock second of the golden model
and the RTL simulators on the same compiled GEMM program."""

from .common import dense_graph, progress, run_session


__all__ = ["run_simspeed"]


def run_simspeed(config, backends, size):
    """One GEMM `size` = (M, K, N) on every backend in `backends`. The wall time
    of a simulator includes starting it (its model already built)."""
    m, k, n = size
    results = []
    for backend in backends:
        progress(f"simulation speed: GEMM M={m} K={k} N={n} on {backend} "
                 f"({config.rows}x{config.cols})")
        report, seconds = run_session(dense_graph(k, n, seed=7), config, m, backend=backend)
        cycles = report.total.cycles
        results.append({"backend": backend, "rows": config.rows, "cols": config.cols,
                        "m": m, "k": k, "n": n, "cycles": cycles,
                        "estimate": report.total.estimate, "seconds": seconds,
                        "cycles_per_second": cycles / seconds if seconds else None})
    return results
