"""Simulation speed: simulated cycles per wall-clock second of the golden model
and the RTL simulators on the same compiled GEMM program. The simulators run
the whole chip behind the deterministic host (`tpu.bench.rtl_chip.HOST_LATENCY`),
so each run also checks the cycle model of the host link (``link_estimate``)."""

from .common import BREAKDOWN, dense_graph, progress, run_compiled
from .rtl_chip import HOST_LATENCY


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
    from ..models.cycle_model import HostLink, estimate_cycles
    m, k, n = size
    results = []
    for backend in backends:
        progress(f"simulation speed: GEMM M={m} K={k} N={n} on {backend} "
                 f"({config.rows}x{config.cols})")
        built = None
        if backend != "golden":
            progress(f"building (or reusing) the {config.rows}x{config.cols} chip for {backend}")
            built = build_chip(config, backend)
        options = {} if backend == "golden" else {"host_latency": HOST_LATENCY}
        report, seconds, compiled = run_compiled(dense_graph(k, n, seed=7), config, m,
                                                 backend=backend, **options)
        cycles = report.total.cycles
        link = [estimate_cycles(config, bytes(s.program), host=HostLink.of(config, HOST_LATENCY))
                for s in compiled.steps if getattr(s, "program", None) is not None]
        results.append({"backend": backend, "rows": config.rows, "cols": config.cols,
                        "m": m, "k": k, "n": n, "cycles": cycles,
                        "estimate": report.total.estimate, "seconds": seconds,
                        "link_estimate": sum(e["cycles"] for e in link),
                        "link_counters": {name: sum(e["counters"][name] for e in link)
                                          for name in ("cycles", *BREAKDOWN)},
                        "build_seconds": built,
                        "host_stall": int(report.total.counters.get("host_stall", 0)),
                        "counters": {name: int(report.total.counters.get(name, 0))
                                     for name in ("cycles", *BREAKDOWN)},
                        "cycles_per_second": cycles / seconds if seconds else None})
    return results
