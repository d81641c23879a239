"""`tpu bench`: the chip measured the way the TPU v1 paper measured its own.

`run_bench(out_dir, quick=False, config=None, backends=None)` runs the suite
(GEMM sweep, roofline, models and their timelines, simulation speed, the
cycle model against the RTL core, host link, FPGA builds, MLPerf Tiny's
latency on the ULX3S's routed clock, design-space sweep) and
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


def _cpu_seconds():
    """User and system CPU seconds of this process and its finished children (the
    simulators, the Verilator builds): the suite's CPU time, whatever else runs."""
    import resource
    return sum(r.ru_utime + r.ru_stime for r in (resource.getrusage(resource.RUSAGE_SELF),
                                                  resource.getrusage(resource.RUSAGE_CHILDREN)))


def _load_average():
    """The machine's 1-minute load average (how much else ran beside the suite)."""
    return round(os.getloadavg()[0], 2)


def _machine():
    return f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.system()} {platform.release()}"


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


class _Laps:
    """Where the suite's time goes: wall seconds per part, in order."""

    def __init__(self):
        self.seconds = {}
        self._last = time.monotonic()

    def lap(self, name):
        now = time.monotonic()
        self.seconds[name] = now - self._last
        self._last = now


def _chip_row(speed):
    """A simulation-speed run of the whole chip as a row of the cycle model's comparison."""
    from .common import BREAKDOWN
    counters, link = speed["counters"], speed["link_counters"]
    return {"name": f"GEMM {speed['m']}x{speed['k']}x{speed['n']}", "simulator": speed["backend"],
            "rows": speed["rows"], "cols": speed["cols"], "cycles": speed["cycles"],
            "estimate": speed["link_estimate"], "core_estimate": speed["estimate"],
            "seconds": speed["seconds"], "counters": counters, "estimate_counters": link,
            "counters_equal": all(counters[n] == link[n] for n in ("cycles", *BREAKDOWN))}


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
    load_start = _load_average()
    config = config or TPUConfig()
    if not isinstance(config, TPUConfig):
        raise TypeError(f"config must be a TPUConfig, not {config!r}")
    if backends is None:
        backends = ("verilator",) if quick else ("verilator", "icarus")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    gconfig = gemm.gemm_config(config)

    laps = _Laps()

    # (a) GEMM sweep on golden
    gemm_results = gemm.run_gemms(gconfig, quick, sizes=gemm_sizes)
    laps.lap("GEMM sweep (golden)")

    # (c) models
    graphs, skipped = ({}, {"all": "not requested"})
    if include_models:
        progress("loading models (the demo's are trained and cached under build/demo once)")
        graphs, skipped = model_suite.load_models(quick)
    model_results = model_suite.run_models(graphs, config, model_batches or model_suite.BATCHES,
                                           CLOCK_HZ)
    laps.lap("models (golden)")

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
    laps.lap("timelines")

    # (d) simulation speed: golden and the simulators on one program through the whole
    # chip (host link included); the full run adds a 16x16 chip
    rtl_size = (2 * config.rows, 2 * config.rows, config.cols)
    speed_configs = [config] if quick else [config, config.replace(rows=16, cols=16)]
    speed = []
    for c in speed_configs:
        speed += simspeed.run_simspeed(c, ("golden", *backends), rtl_size)
    laps.lap("simulation speed (builds the chip models)")

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
    laps.lap("cycle model against the RTL core (builds the core models)")

    # the cycle model with its link model against the whole chip: the demo models'
    # parts (the simulation-speed GEMM is already one such run) and, in the full run,
    # that GEMM again behind a host 200 cycles late (the link model off its default)
    chip_models = []
    if backends:
        from .rtl_chip import run_chip
        for name, graph in graphs.items():
            if name.startswith("demo"):
                for batch in (core_batches if core_batches is not None else (8,)):
                    chip_models += run_chip(config, backends[0], name, graph, batch)
        if not quick:
            m, k, n = rtl_size
            chip_models += run_chip(config, backends[0], f"GEMM {m}x{k}x{n}, host latency 200",
                                    dense_graph(k, n, seed=7), m, latency=200)
    laps.lap("cycle model against the whole chip (demo models)")

    # host link (DMA throughput, the host's share of run time) on the whole chip
    host_results = {"dma": [], "programs": []}
    if backends and host is not False:
        preset = host_link.QUICK if quick else {**host_link.FULL,
                                                "sizes": [64, 1024, 16384, 262144]}
        host_results = host_link.run_all([host_link.link_config(c, config)
                                          for c in preset["configs"][:1]],
                                         preset["sizes"], preset["latencies"],
                                         preset["programs"], backends[:1], runs_dir=out / "runs")
    laps.lap("host link")

    # single convolution layers (golden), and in the full run the MLPerf Tiny models
    # against TFLite (reference interpreter, and a few inputs on the golden chip)
    from .layers import conv_layers
    progress("convolution layers on the golden chip")
    conv_batch = 8 if quick else 64
    conv = conv_layers(conv_batch, log=lambda line: None) if include_models else []
    tflite = None
    if include_models and not quick:
        from .tflite import run_tflite
        progress("MLPerf Tiny models against TFLite (reference interpreter, golden chip)")
        results_t, _ = run_tflite(reference=20, chip=2, sizes=(config.rows,), backend="golden",
                                  log=progress)
        tflite = {"backend": "golden", "results": results_t} if results_t else None
    laps.lap("convolution layers" + ("" if quick else ", MLPerf Tiny against TFLite"))

    # FPGA: the builds already made, and MLPerf Tiny's latency on the ULX3S's routed clock
    fpga_rows = fpga.find_builds()
    board = None
    if include_models:
        from .board_latency import board_latency, load_tiny_models
        progress("MLPerf Tiny latency on the ULX3S (cycle model)")
        tiny, tiny_skipped = load_tiny_models()
        board = {**board_latency(tiny), "skipped": tiny_skipped}

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
    laps.lap("design space (cycle model)")

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
    chip_runs = [_chip_row(s) for s in speed if s["backend"] != "golden"] + chip_models
    results = {
        "command": command,
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": _machine(), "versions": _versions(),
        "config": config.to_dict(), "gemm_ub_rows": gconfig.ub_rows, "clock_hz": CLOCK_HZ,
        "quick": quick, "gemms": gemm_results, "ridge_point": roofline.ridge_point(gconfig),
        "models": model_results, "models_skipped": skipped, "simspeed": speed,
        "core_runs": core_runs, "chip_runs": chip_runs, "host": host_results,
        "conv_layers": conv, "conv_batch": conv_batch, "tflite": tflite,
        "host_summary": host_link.summary(host_results), "fpga": fpga_rows,
        "board_latency": board,
        "design_space": design,
        "design_summary": report.design_summary(design, config, model_results),
        "not_included": NOT_INCLUDED + (["Icarus and 16x16 simulation speed (full run only)"]
                                        if quick else []),
        "plots": plots, "traces": traces,
    }
    results["targets"] = [list(t) for t in report.targets(config, gemm_results, model_results,
                                                          core_runs, chip_runs)]
    laps.lap("report and plots")
    results["timings"] = laps.seconds
    results["seconds"] = time.monotonic() - started
    results["cpu_seconds"] = _cpu_seconds()
    results["load_average"] = [load_start, _load_average()]
    (out / "results.json").write_text(json.dumps(results, indent=1, default=float) + "\n")
    (out / "report.md").write_text(report.write_markdown(results, plots) + "\n")
    progress(f"done in {results['seconds']:.0f} s: {out / 'report.md'}")
    return results
