"""Design-space sweep like Section 7 of the TPU v1 paper, on the golden cycle
model (`tpu.models.cycle_model`, exact against the RTL): compile each workload
for a varied chip and add up the compiler's per-part cycle estimates.

Varied one at a time around the reference chip: weight-memory bandwidth from
0.25x to 4x, the array from 4x4 to 32x32 (bandwidth scaled with the columns
so it stays the same multiple of one row of weights per cycle), accumulator
rows halved and doubled."""

from ..compiler.backend import compile_graph
from ..compiler.errors import CompileError


__all__ = ["variants", "sweep"]

BANDWIDTH_FACTORS = (0.25, 0.5, 1, 2, 4)
ARRAYS = (4, 8, 16, 32)
ACC_FACTORS = (0.5, 1, 2)


def variants(config):
    """(parameter, factor, config) for every point of the sweep."""
    out = []
    for f in BANDWIDTH_FACTORS:
        out.append(("weight bandwidth", f, config.replace(
            weight_mem_bytes_per_cycle=max(1, round(config.weight_mem_bytes_per_cycle * f)))))
    for size in ARRAYS:
        scale = size / config.rows
        out.append(("array", scale, config.replace(
            rows=size, cols=size,
            weight_mem_bytes_per_cycle=max(1, round(config.weight_mem_bytes_per_cycle * scale)))))
    for f in ACC_FACTORS:
        out.append(("accumulator rows", f, config.replace(acc_rows=int(config.acc_rows * f))))
    return out


def estimated_cycles(graph, config, batch):
    """Cycles of one batch on `config` by the cycle model (the chip parts' programs),
    or None (with the reason) when the compiler refuses the chip."""
    try:
        compiled = compile_graph(graph, config, batch)
    except CompileError as error:
        return None, str(error)
    total = 0
    for step in compiled.steps:
        estimate = getattr(step, "estimated_cycles", None)
        if estimate is None:
            estimate = getattr(step, "estimate", None)
        if estimate is None:
            continue
        total += int(estimate["cycles"] if isinstance(estimate, dict) else estimate)
    return total, None


def sweep(workloads, config, progress):
    """`workloads`: name -> (graph, batch). Returns a list of points with the
    cycles and the speed-up over the reference chip."""
    base = {}
    points = []
    todo = variants(config)
    for name, (graph, batch) in workloads.items():
        progress(f"design space: {name} on {len(todo)} chip variants (cycle model)")
        for parameter, factor, variant in todo:
            cycles, reason = estimated_cycles(graph, variant, batch)
            if variant == config:
                base[name] = cycles
            points.append({"workload": name, "batch": batch, "parameter": parameter,
                           "factor": factor, "rows": variant.rows, "cols": variant.cols,
                           "acc_rows": variant.acc_rows,
                           "weight_mem_bytes_per_cycle": variant.weight_mem_bytes_per_cycle,
                           "cycles": cycles, "skipped": reason})
    for p in points:
        b = base.get(p["workload"])
        p["speedup"] = b / p["cycles"] if b and p["cycles"] else None
    return points
