"""GEMM sweep: single Dense layers ``(M, K) x (K, N)`` compiled by the compiler and
run on the golden chip (a few on Verilator), MXU utilisation from the chip's
counters against the ideal, and TPU v1's counter breakdown (Table 3)."""

import math

from .common import BREAKDOWN, dense_graph, progress, run_compiled, run_session
from .weight_stalls import compare


__all__ = ["gemm_sizes", "ideal_cycles", "run_gemms", "gemm_config", "gemm_point",
           "GEMM_UB_ROWS"]

#: the unified buffer of the sweep's chip: a Dense layer holds two M tiles of its input
#: and output at once, which for K, N up to 64 x rows is more than the default 2048 rows
GEMM_UB_ROWS = 1 << 17


def gemm_config(config):
    """The chip the sweep runs on: `config` with a unified buffer of at least `GEMM_UB_ROWS`."""
    return config.replace(ub_rows=max(config.ub_rows, GEMM_UB_ROWS))


def gemm_sizes(config, quick):
    """The (M, K, N) points of the sweep: 1 to 64 x rows, multiples of the array
    and not."""
    r, c = config.rows, config.cols
    if quick:
        ms = (1, r + 3, 8 * r, 8 * r + 5, 64 * r)
        ks = (r, 3 * r + 5, 8 * r)
        ns = (c, 8 * c)
    else:
        ms = (1, r - 1, r, r + 3, 8 * r, 8 * r + 5, 32 * r, 64 * r)
        ks = (1, r, r + 3, 8 * r, 8 * r + 5, 64 * r)
        ns = (1, c, c + 3, 8 * c, 64 * c)
    return [(m, k, n) for m in ms for k in ks for n in ns if m >= 1 and k >= 1 and n >= 1]


def ideal_cycles(config, m, k, n):
    """Cycles of the matrix work alone: each of M rows through every (K, N) tile."""
    return m * math.ceil(k / config.rows) * math.ceil(n / config.cols)


def weight_bytes(config, counters):
    """Bytes moved from weight memory into the array: one tile per `rows` shift cycles."""
    return counters.get("weight_shift", 0) * config.cols


def gemm_point(config, m, k, n, report, backend, seconds, compiled=None):
    """The sweep's record of one GEMM run; with `compiled`, also its weight stalls
    with the first RWs of each part hoisted (`tpu.bench.weight_stalls`)."""
    row = report.total
    counters = {name: int(row.counters.get(name, 0)) for name in BREAKDOWN}
    ideal = ideal_cycles(config, m, k, n)
    macs = m * k * n
    wbytes = weight_bytes(config, counters)
    return {"m": m, "k": k, "n": n, "backend": backend, "cycles": row.cycles,
            "estimate": row.estimate, "macs": macs, "ideal_cycles": ideal,
            "utilisation": macs / (row.cycles * config.rows * config.cols),
            "ideal_utilisation": macs / (ideal * config.rows * config.cols),
            "efficiency": ideal / row.cycles,
            "ops_per_cycle": 2 * macs / row.cycles,
            "weight_bytes": wbytes,
            "intensity": 2 * macs / wbytes if wbytes else None,
            "seconds": seconds, **counters,
            **({"weight_stall_hoisted": sum(p["hoisted_weight_stall"]
                                            for p in compare(config, compiled))}
               if compiled is not None else {})}


#: GEMMs with more MACs than this are not run through the golden chip's arithmetic:
#: their counters are the golden chip's all the same (it takes them from the cycle
#: model), and the arithmetic of the largest took most of a full run's golden time
FUNCTIONAL_MACS = 1 << 21


class _Estimated:
    """A report's ``total`` from the cycle model alone, for a compiled GEMM."""

    def __init__(self, config, compiled):
        from ..models.cycle_model import estimate_cycles
        counters = {}
        for step in compiled.steps:
            if getattr(step, "program", None) is not None:
                for name, value in estimate_cycles(config, bytes(step.program))["counters"].items():
                    counters[name] = counters.get(name, 0) + value
        self.cycles = self.estimate = counters["cycles"]
        self.counters = counters


def _estimate_only(graph, config, batch):
    """``(report, seconds, compiled)`` like `run_compiled`, from the cycle model."""
    import time
    from types import SimpleNamespace
    from ..compiler.backend import compile_graph
    start = time.monotonic()
    compiled = compile_graph(graph, config, batch)
    total = _Estimated(config, compiled)
    return SimpleNamespace(total=total), time.monotonic() - start, compiled


def run_gemms(config, quick, verilator_sizes=(), sizes=None, functional_macs=FUNCTIONAL_MACS):
    """Every sweep point (`sizes`, default `gemm_sizes`) on golden (those above
    `functional_macs` MACs by the cycle model alone, ``"arithmetic": False``), and
    `verilator_sizes` on Verilator too."""
    results = []
    sizes = gemm_sizes(config, quick) if sizes is None else sizes
    for i, (m, k, n) in enumerate(sizes):
        arithmetic = functional_macs is None or m * k * n <= functional_macs
        progress(f"GEMM {i + 1}/{len(sizes)}: M={m} K={k} N={n} on golden"
                 + ("" if arithmetic else " (counters only: the cycle model)"))
        try:
            run = run_compiled if arithmetic else _estimate_only
            report, seconds, compiled = run(dense_graph(k, n, seed=i), config, m)
        except Exception as error:         # a size the compiler refuses is reported
            results.append({"m": m, "k": k, "n": n, "backend": "golden",
                            "error": f"{type(error).__name__}: {error}"})
            continue
        results.append({**gemm_point(config, m, k, n, report, "golden", seconds, compiled),
                        "arithmetic": arithmetic})
    for m, k, n in verilator_sizes:
        progress(f"GEMM M={m} K={k} N={n} on verilator (the chip's model is built once)")
        report, seconds = run_session(dense_graph(k, n, seed=99), config, m, backend="verilator")
        results.append(gemm_point(config, m, k, n, report, "verilator", seconds))
    return results
