"""The cycle model against the whole chip: compiled models run through `tpu.driver`
on the RTL of the chip behind its PCIe-style link, with the deterministic host of
`tpu.sim.bench.bench_host.open_bench_link` (``host_latency``), part by part
against `estimate_cycles(..., host=HostLink.of(config, latency))`, which models
that link (program fetch by DMA, RHM completions, WHM writes)."""

import time

from .common import BREAKDOWN, progress, random_feed


__all__ = ["run_chip", "HOST_LATENCY"]

#: the host latency of the suite's whole-chip runs (cycles added to every read)
HOST_LATENCY = 0


def run_chip(config, simulator, label, graph, batch, latency=HOST_LATENCY):
    """Run `graph` at `batch` on the whole chip under `simulator`; one row per chip
    part: the RTL's counters and the link-aware estimate's, or ``error``."""
    from ..compiler.session import InferenceSession
    from ..models.cycle_model import HostLink, estimate_cycles
    progress(f"whole chip ({simulator} {config.rows}x{config.cols}, host latency {latency}): "
             f"{label} at batch {batch}")
    start = time.monotonic()
    try:
        session = InferenceSession(graph, backend=simulator, config=config, batch=batch,
                                   host_latency=latency)
        session.run(None, random_feed(graph, batch))
    except Exception as error:        # a failed run is a row of the report, not the end of it
        return [{"name": f"{label} b{batch}", "simulator": simulator, "rows": config.rows,
                 "cols": config.cols, "error": f"{type(error).__name__}: {error}"}]
    seconds = time.monotonic() - start
    programs = {s.name: bytes(s.program) for s in session.compiled.steps
                if getattr(s, "program", None) is not None}
    link = HostLink.of(config, latency)
    rows = []
    for part in session.last_profile[0]:
        if part["name"] not in programs:
            continue
        counters = {n: int(v) for n, v in part["counters"].items()}
        estimate = estimate_cycles(config, programs[part["name"]], host=link)["counters"]
        rows.append({"name": f"{label} b{batch} {part['name']}", "simulator": simulator,
                     "rows": config.rows, "cols": config.cols, "host_latency": latency,
                     "cycles": counters["cycles"], "estimate": estimate["cycles"],
                     "core_estimate": estimate_cycles(config, programs[part["name"]])["cycles"],
                     "seconds": seconds,
                     "counters": {n: counters[n] for n in ("cycles", *BREAKDOWN)},
                     "estimate_counters": {n: estimate[n] for n in ("cycles", *BREAKDOWN)},
                     "counters_equal": all(counters[n] == estimate[n] for n in estimate)})
    return rows
