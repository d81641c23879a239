"""`tpu bench`: the chip measured the way the TPU v1 paper measured its own.

`run_bench(out_dir, quick=False, config=None, backends=None)` runs the suite
(GEMM sweep, roofline, models and their timelines, simulation speed, the
cycle model against the RTL core, host link, FPGA builds, design-space
sweep) and
writes ``report.md``, ``results.json`` and PNG plots into `out_dir`,
reporting progress on stderr. `backends` lists the RTL simulators to use
(default: Verilator for ``quick``, Verilator and Icarus otherwise; ``()``
for golden only).
"""

import json
import os
import platform
import time
from datetime import datetime, timezone
from pathlib import Path

from ..config import TPUConfig
from .common import progress


__all__ = ["run_bench"]

CLOCK_HZ = 100e6
NOT_INCLUDED = [
    "a trace of RTL runs (the traces are the cycle model's schedule, exact against the RTL "
    "core with an ideal host)",
    "FPGA builds (minutes to an hour each): the table shows the last ones made with "
    "`tpu build` or scripts/bench_fpga.py",
]


def _versions():
    from importlib.metadata import version
    names = ("amaranth", "numpy", "onnx", "onnxruntime", "verilator", "cocotb")
    out = [f"Python {platform.python_version()}"]
    for name in names:
        try:
            out.append(f"{name} {version(name)}")
        except Exception:
            pass
    return ", ".join(out)


def _machine():
    return f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.system()} {platform.release()}"


def _design_summary(points, config):
    bw = [p for p in points if p["parameter"] == "weight bandwidth" and p["factor"] == 4
          and p["speedup"]]
    low = [p for p in points if p["parameter"] == "weight bandwidth" and p["factor"] == 0.25
           and p["speedup"]]
    if not bw:
        return "No bandwidth points."
    text = ", ".join(f"{p['workload']} {p['speedup']:.2f}x" for p in bw)
    lows = ", ".join(f"{p['workload']} {p['speedup']:.2f}x" for p in low)
    bound = [p for p in bw if p["speedup"] >= 1.5]
    if bound:
        verdict = ("Memory-bound like the paper's applications (4x bandwidth gave it about 3x): "
                   + ", ".join(p["workload"] for p in bound) + ".")
    else:
        verdict = (
            "Unlike the paper's applications, none is memory-bound. The reference weight "
            f"memory ({config.weight_mem_bytes_per_cycle} B/cycle) already delivers one row of "
            f"weights ({config.cols} bytes) per cycle, as fast as the array can shift a tile in, "
            "so more bandwidth cannot help. TPU v1's DDR3 delivered far less than its array "
            "could take. At batch 64 each weight tile is reused over many rows and the "
            "compiler prefetches tiles into the weight FIFO during the previous tile's rows. "
            "So weight loads hide behind the matrix work, and what limits these layers is "
            "instruction and DMA overhead (non-matrix and RAW-stall cycles). At batch 1 the "
            "models do depend on weight bandwidth below the reference: 0.25x gives " + lows + ".")
    from .report import geomean_speedups
    means = "; ".join(f"{param}: " + ", ".join(f"{f:g}x -> {u:.2f}" for f, u in line)
                      for param, line in geomean_speedups(points).items())
    return (f"4x the weight-memory bandwidth gives: {text}. {verdict} Geometric mean over "
            f"the workloads (the first panel of the plot, like the paper's Figure 11): {means}.")


def _core_programs(config, graphs, gemm_program, batches):
    """(name, program bytes) run on the RTL core: the simulation-speed GEMM's and every
    chip part of the demo models at `batches` (compiled for `config`)."""
    from ..compiler.backend import compile_graph
    from .rtl_core import compiled_parts
    programs = [gemm_program]
    for name, graph in graphs.items():
        if name.startswith("demo"):
            for batch in batches:
                programs += compiled_parts(compile_graph(graph, config, batch), f"{name} b{batch}")
    return programs


def _core_cases(config, simulator):
    """`tpu.bench.core_cases` (the compute- and memory-bound programs and a dense
    layer) on `config`'s array, as rows of the suite's core runs."""
    from .common import BREAKDOWN
    from .core_cases import run_cases
    rows = []
    names = ("compute", "memory_b1", "memory_b2", "layer")
    for key, d in run_cases([(config.rows, config.cols)], [simulator], names,
                            runs_dir=None).items():
        rtl, est = d["counters"], d["estimate"]["counters"]
        rows.append({"name": f"core case {key.split('/')[-1]}", "simulator": simulator,
                     "rows": config.rows, "cols": config.cols, "cycles": rtl["cycles"],
                     "estimate": est["cycles"], "seconds": d["run_seconds"],
                     "counters": {n: rtl[n] for n in ("cycles", *BREAKDOWN)},
                     "estimate_counters": {n: est[n] for n in ("cycles", *BREAKDOWN)},
                     "counters_equal": all(rtl[n] == est[n] for n in rtl if n in est)})
        if d["failures"]:
            rows[-1]["error"] = "the RTL core disagreed with the golden model"
            del rows[-1]["cycles"]
    return rows


def run_bench(out_dir, quick=False, config=None, backends=None, gemm_sizes=None,
              model_batches=None, include_models=True, command=None, host=None,
              core_batches=None):
    """Run the suite; returns the results dict (also in ``out_dir/results.json``).
    `gemm_sizes`, `model_batches`, `include_models`, `host` (False: no host-link
    runs) and `core_batches` (the demo models' batches on the RTL core) shrink it
    (tests); `command` is what the report names as the command that ran it."""
    from . import design_space, fpga, gemm, host as host_link, models as model_suite, report
    from . import roofline, simspeed
    from .common import dense_graph
    from .rtl_core import run_core
    started = time.monotonic()
    config = config or TPUConfig()
    if not isinstance(config, TPUConfig):
        raise TypeError(f"config must be a TPUConfig, not {config!r}")
    if backends is None:
        backends = ("verilator",) if quick else ("verilator", "icarus")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    gconfig = gemm.gemm_config(config)

    # (a) GEMM sweep on golden
    gemm_results = gemm.run_gemms(gconfig, quick, sizes=gemm_sizes)

    # (c) models
    graphs, skipped = ({}, {"all": "not requested"})
    if include_models:
        progress("loading models (the demo's are trained and cached under build/demo once)")
        graphs, skipped = model_suite.load_models(quick)
    model_results = model_suite.run_models(graphs, config, model_batches or model_suite.BATCHES,
                                           CLOCK_HZ)

    # timelines: one Perfetto trace per model at batch 64 (the cycle model's schedule)
    from ..compiler.backend import compile_graph
    from .trace import write_trace
    traces = {}
    for m in model_results:
        if m.get("batch") == 64 and m.get("cycles"):
            file = f"trace_{m['model'].replace(' ', '_')}.json"
            progress(f"trace of {m['model']} at batch {m['compiled_batch']}: {file}")
            write_trace(out / file, compile_graph(graphs[m["model"]],
                                                 model_suite.model_config(m["model"], config),
                                                 m["compiled_batch"]),
                        m["model"])
            traces[m["model"]] = file

    # (d) simulation speed: golden and the simulators on one program through the whole
    # chip (host link included); the full run adds a 16x16 chip
    rtl_size = (2 * config.rows, 2 * config.rows, config.cols)
    speed_configs = [config] if quick else [config, config.replace(rows=16, cols=16)]
    speed = []
    for c in speed_configs:
        speed += simspeed.run_simspeed(c, ("golden", *backends), rtl_size)

    # the cycle model against the RTL core (ideal host), like with like: the same GEMM
    # program and the demo models' parts
    core_runs = []
    if backends:
        m, k, n = rtl_size
        gemm_program = (f"GEMM {m}x{k}x{n}",
                        bytes(compile_graph(dense_graph(k, n, seed=7), config, m).steps[0].program))
        batches = core_batches if core_batches is not None else ((8,) if quick else (8, 64))
        for name, program in _core_programs(config, graphs, gemm_program, batches):
            for simulator in (backends if name == gemm_program[0] else backends[:1]):
                core_runs.append(run_core(config, simulator, name, program))
        if not quick:      # and the hand-written benchmark programs of docs/core_performance.md
            core_runs += _core_cases(config, backends[0])

    # host link (DMA throughput, the host's share of run time) on the whole chip
    host_results = {"dma": [], "programs": []}
    if backends and host is not False:
        preset = host_link.QUICK if quick else {**host_link.FULL,
                                                "sizes": [64, 1024, 16384, 262144]}
        host_results = host_link.run_all([host_link.link_config(c, config)
                                          for c in preset["configs"][:1]],
                                         preset["sizes"], preset["latencies"],
                                         preset["programs"], backends[:1], runs_dir=out / "runs")

    # FPGA: the builds already made
    fpga_rows = fpga.find_builds()

    # (e) design space on the cycle model
    on_chip = {m["model"] for m in model_results if m.get("cycles")}
    workloads = {}
    for name, g in graphs.items():
        if name in on_chip:        # batch 64 reuses each weight tile; batch 1 hardly does
            workloads[f"{name} b64"] = (g, 64)
            workloads[f"{name} b1"] = (g, 1)
    big = 8 * config.rows
    workloads[f"GEMM {big}x{big}x{big}"] = (dense_graph(big, big), big)
    design = design_space.sweep(workloads, gconfig, progress)

    # (b) roofline and the report
    progress("writing the report and plots")
    plots = {"gemm_utilisation": report.plot_gemms(out, gemm_results).name,
             "roofline": roofline.plot_roofline(out, gconfig,
                                                roofline.points(gemm_results, model_results)).name,
             "design_space": report.plot_design_space(out, design).name}
    if traces:
        plots["trace"] = report.plot_trace(out, out / next(
            (v for k, v in traces.items() if "cnn" in k), next(iter(traces.values())))).name
    command = command or ("tpu bench" + (" --quick" if quick else "") + f" --out {out_dir}")
    chip_runs = [s for s in speed if s["backend"] != "golden"]
    results = {
        "command": command,
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": _machine(), "versions": _versions(),
        "config": config.to_dict(), "gemm_ub_rows": gconfig.ub_rows, "clock_hz": CLOCK_HZ,
        "quick": quick, "gemms": gemm_results, "ridge_point": roofline.ridge_point(gconfig),
        "models": model_results, "models_skipped": skipped, "simspeed": speed,
        "core_runs": core_runs, "chip_runs": chip_runs, "host": host_results,
        "host_summary": host_link.summary(host_results), "fpga": fpga_rows,
        "design_space": design, "design_summary": _design_summary(design, config),
        "not_included": NOT_INCLUDED + (["Icarus and 16x16 simulation speed (full run only)"]
                                        if quick else []),
        "plots": plots, "traces": traces,
    }
    results["targets"] = [list(t) for t in report.targets(config, gemm_results, model_results,
                                                          core_runs, chip_runs)]
    results["seconds"] = time.monotonic() - started
    (out / "results.json").write_text(json.dumps(results, indent=1, default=float) + "\n")
    (out / "report.md").write_text(report.write_markdown(results, plots) + "\n")
    progress(f"done in {results['seconds']:.0f} s: {out / 'report.md'}")
    return results
