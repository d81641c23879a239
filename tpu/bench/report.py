"""The benchmark report: targets with pass/fail marks, tables, plots."""

from .common import BREAKDOWN, percent, plot_file
from .gemm import FUNCTIONAL_MACS


__all__ = ["targets", "write_markdown", "plot_gemms", "plot_design_space", "plot_trace",
           "geomean_speedups", "design_summary", "publish", "render", "BEGIN", "END"]

_HEAD = {"mxu_active": "active", "weight_stall": "weight stall", "weight_shift": "weight shift",
         "non_matrix": "non-matrix", "raw_stall": "RAW stall", "host_stall": "host stall"}


def _ok(flag):
    return "PASS" if flag else "FAIL"


def targets(config, gemms, models, core_runs, chip_runs=()):
    """The issue's targets: (name, passed or None, detail)."""
    out = []
    golden = [g for g in gemms if g.get("backend") == "golden" and "cycles" in g]
    # Compute-bound: M >= 8 x rows as the issue says, and K and N of at least 8
    # tiles each, so that matrix work outweighs what a program pays whatever its
    # size (the pipeline's fill and drain, the LDQ, the input's and output's DMA):
    # a 64x1x1 GEMM has M >= 8 x rows and 64 MACs, and runs for its DMA.
    tall = [g for g in golden if g["m"] >= 8 * config.rows]
    bound = [g for g in tall if g["k"] >= 8 * config.rows and g["n"] >= 8 * config.cols]
    name = ("MXU utilisation >= 95% of the ideal on compute-bound GEMMs (M >= 8 x rows, "
            "K >= 8 x rows, N >= 8 x cols)")
    if tall:
        worst_tall = min(tall, key=lambda g: g["efficiency"])
        all_tall = (f"Of all {len(tall)} GEMMs with M >= 8 x rows, "
                    f"{sum(g['efficiency'] >= 0.95 for g in tall)} meet it; worst "
                    f"{worst_tall['m']}x{worst_tall['k']}x{worst_tall['n']}: "
                    f"{percent(worst_tall['efficiency'])} (the fixed cost of a program, LDQ, "
                    f"the fill and drain and the DMA of its input and output, is large beside "
                    f"a small K x N)")
        if bound:
            worst = min(bound, key=lambda g: g["efficiency"])
            fails = sum(g["efficiency"] < 0.95 for g in bound)
            out.append((name, not fails, f"{len(bound) - fails}/{len(bound)} meet it; worst "
                        f"{worst['m']}x{worst['k']}x{worst['n']}: "
                        f"{percent(worst['efficiency'])}. {all_tall}"))
        else:
            out.append((name, None, f"no GEMM of this run is that large. {all_tall}"))
    if config.weight_mem_bytes_per_cycle >= config.cols:
        # A GEMM whose weight tiles exceed the weight memory runs in parts, and the
        # runtime refills the weight memory over the host link between them: its
        # weights do not come at `cols` bytes a cycle, so it is outside the target.
        def fits(g):
            return (-(-g["k"] // config.rows)) * (-(-g["n"] // config.cols)) <= config.weight_mem_tiles
        refilled = [g for g in golden if g["m"] >= config.rows and not fits(g)]
        fed = [g for g in golden if g["m"] >= config.rows and fits(g)]
        stalled = [g for g in fed if g["weight_stall"]]
        first = max((g["weight_stall"] for g in stalled), default=0)
        hoisted = [g for g in fed if g.get("weight_stall_hoisted")]
        detail = (f"{len(fed) - len(stalled)}/{len(fed)} GEMMs have none as compiled"
                  if stalled else f"{len(fed)} GEMMs, none stalled")
        if stalled:
            detail += (f"; the rest stall at most {first} cycles, each in a part's first "
                       f"switching MMC: the compiler requests a part's first tiles just before "
                       f"that MMC, after the part's RHMs, and a tile takes latency "
                       f"{config.weight_mem_latency} + {config.rows} rows + 4 cycles from its "
                       f"RW to the array. With those RWs at the program's start "
                       f"(`tpu.bench.weight_stalls`, cycle model): {len(fed) - len(hoisted)}/"
                       f"{len(fed)} stall-free")
            if hoisted:
                sizes = ", ".join(f"{g['m']}x{g['k']}x{g['n']}" for g in hoisted)
                detail += (f", the rest ({sizes}) in parts whose input is already in the unified buffer, with no "
                           f"RHM to hide the first tile's fill behind")
        if refilled:
            worst_refilled = max(g["weight_stall"] for g in refilled)
            detail += (f". Not counted: {len(refilled)} GEMMs whose weights exceed the "
                       f"{config.weight_mem_tiles}-tile weight memory, refilled over the host link "
                       f"between program parts ({sum(not g['weight_stall'] for g in refilled)} "
                       f"without a stall, the others at most {worst_refilled} cycles: each part's "
                       f"first tile, with no RHM before it to hide behind)")
        out.append(("zero weight-stall cycles when bandwidth >= cols bytes/cycle and batch >= rows "
                    "(weights within the weight memory)", not stalled, detail))
    runs = list(core_runs) + list(chip_runs)
    ok = [r for r in runs if "cycles" in r]
    bad = [r for r in runs if "cycles" not in r]
    if ok:
        worst = max(ok, key=lambda r: abs(r["cycles"] - r["estimate"]) / r["cycles"])
        err = abs(worst["cycles"] - worst["estimate"]) / worst["cycles"]
        equal = sum(r["counters_equal"] for r in ok)
        cases = sum(r["name"].startswith("core case") for r in ok)
        n_core = sum("cycles" in r for r in core_runs)
        n_chip = sum("cycles" in r for r in chip_runs)
        kinds = "compiled: GEMMs, the demo models' parts" + (
            f"; {cases} of them the hand-written benchmark programs" if cases else "")
        detail = (f"{len(ok)} programs ({kinds}): {n_core} on the RTL core with an ideal "
                  f"host (the core-only estimate), {n_chip} through the whole chip and its "
                  f"PCIe-style link (the estimate with the link model); worst "
                  f"{worst['name']} ({worst['simulator']}): RTL {worst['cycles']}, estimate "
                  f"{worst['estimate']} ({percent(err)}); every counter equal in "
                  f"{equal}/{len(ok)}")
        if bad:
            detail += f"; {len(bad)} run(s) failed: {bad[0]['name']}: {bad[0]['error']}"
        out.append(("golden cycle estimate within 2% of the RTL on every run (the core with "
                    "an ideal host, and the whole chip through its link)",
                    err <= 0.02 and not bad, detail))
    else:
        out.append(("golden cycle estimate within 2% of the RTL on every run", None,
                    "no RTL run in this suite" + (f": {bad[0]['error']}" if bad else "")))
    cnn = [m for m in models if m.get("model") == "demo cnn" and m.get("batch") == 64 and "cycles" in m]
    if cnn and config.rows == 8 and config.cols == 8:
        # Issue 8's definition: how full the array is while the matrix unit runs.
        m = cnn[0]
        busy = m["utilisation"] * m["cycles"] / m["mxu_active"] if m.get("mxu_active") else 0
        out.append(("demo CNN >= 80% MXU utilisation while the matrix unit runs, batch 64 on 8x8",
                    busy >= 0.8, f"{percent(busy)} of the array's MACs while it runs "
                    f"({percent(m['utilisation'])} over all the cycles of its chip layers)"))
    return out


def _table(head, rows):
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def plot_gemms(out_dir, gemms):
    import matplotlib.pyplot as plt
    path = plot_file(out_dir, "gemm_utilisation")
    golden = [g for g in gemms if g.get("backend") == "golden" and "cycles" in g]
    fig, ax = plt.subplots(figsize=(7, 4))
    for kn in sorted({(g["k"], g["n"]) for g in golden}):
        sel = sorted((g for g in golden if (g["k"], g["n"]) == kn), key=lambda g: g["m"])
        ax.plot([g["m"] for g in sel], [100 * g["utilisation"] for g in sel], "o-", ms=3,
                label=f"K={kn[0]} N={kn[1]}")
    ax.set_xscale("log"); ax.set_xlabel("M (batch rows)"); ax.set_ylabel("MXU utilisation (%)")
    ax.set_ylim(0, 105); ax.legend(fontsize=6, ncol=2); ax.set_title("GEMM sweep (golden chip)")
    fig.tight_layout(); fig.savefig(path, dpi=110); plt.close(fig)
    return path


def geomean_speedups(points):
    """``{parameter: [(factor, geometric-mean speed-up over the workloads)]}`` over the
    factors every workload has a point at (the paper's Figure 11 averages likewise)."""
    import math
    out = {}
    for param in sorted({p["parameter"] for p in points}):
        sel = [p for p in points if p["parameter"] == param]
        workloads = {p["workload"] for p in sel}
        line = []
        for f in sorted({p["factor"] for p in sel}):
            ups = [p["speedup"] for p in sel if p["factor"] == f and p["speedup"]]
            if len(ups) == len(workloads):
                line.append((f, math.exp(sum(math.log(u) for u in ups) / len(ups))))
        out[param] = line
    return out


def design_summary(points, config, models=()):
    """Whether the workloads are memory-bound like the TPU v1 paper's (4x the
    weight bandwidth gave its applications about 3x) and why, from the sweep's
    `points` and the models' counters at the reference (`models`: the suite's
    model results)."""
    def at(factor):
        return [p for p in points if p["parameter"] == "weight bandwidth"
                and p["factor"] == factor and p["speedup"]]

    def listed(sel):
        return ", ".join(f"{p['workload']} {p['speedup']:.2f}x" for p in sel)

    bw = at(4)
    if not bw:
        return "No bandwidth points."
    bound = [p for p in bw if p["speedup"] >= 1.5]
    if bound:
        verdict = ("Memory-bound like the paper's applications (4x bandwidth gave them about "
                   "3x): " + ", ".join(p["workload"] for p in bound) + ".")
    else:
        best = max(bw, key=lambda p: p["speedup"])
        verdict = ("Unlike the paper's applications (4x bandwidth gave them about 3x), none is "
                   f"memory-bound: the most that 4x gives is {best['speedup']:.2f}x "
                   f"({best['workload']}).")
    B, cols, rows = config.weight_mem_bytes_per_cycle, config.cols, config.rows
    why = (f"The reference weight memory delivers {B} B/cycle, "
           + (f"at least one row of weights ({cols} bytes) per cycle, as fast as the array "
              "shifts a tile in, so more bandwidth cannot shorten a weight load"
              if B >= cols else f"less than one row of weights ({cols} bytes) per cycle")
           + f"; a tile of {rows * cols} bytes is then used for as many cycles as the batch "
           "has rows, and the compiler fetches the next tile into the weight FIFO while the "
           "array works on the current one. TPU v1's DDR3 delivered far less per cycle than "
           "its array could take.")
    shares = []
    for batch in (64, 1):
        sel = [m for m in models if m.get("batch") == batch and m.get("cycles")]
        if sel:
            shares.append(f"at batch {batch} " + ", ".join(
                f"{m['model']} {100 * m['weight_stall'] / m['cycles']:.1f}%" for m in sel))
    if shares:
        why += (" Weight-stall cycles (the MMC waiting for its tile) at the reference: "
                + "; ".join(shares) + ".")
    at64 = [m for m in models if m.get("batch") == 64 and m.get("cycles")]
    if at64:
        total = sum(m["cycles"] for m in at64)

        def share(name):
            return 100 * sum(m[name] for m in at64) / total
        why += (f" At batch 64 the models spend {share('non_matrix'):.0f}% of their cycles "
                f"without matrix work; weight stalls are {share('weight_stall'):.1f}% of all "
                f"cycles, RAW stalls {share('raw_stall'):.0f}% and host stalls "
                f"{share('host_stall'):.0f}% (each counted apart: they can overlap). More "
                "bandwidth could shorten at most the weight stalls.")
    low = at(0.25)
    slow = [p for p in low if p["speedup"] < 0.95]
    if slow:
        why += (" Below the reference bandwidth the workloads with little weight reuse slow "
                f"down: 0.25x gives {listed(low)}.")
    elif low:
        why += (" Even at 0.25x the reference bandwidth no workload slows by more than 5%: "
                f"{listed(low)}.")
    means = "; ".join(f"{param}: " + ", ".join(f"{f:g}x -> {u:.2f}" for f, u in line)
                      for param, line in geomean_speedups(points).items())
    return (f"4x the weight-memory bandwidth gives: {listed(bw)}. {verdict} {why} Geometric "
            f"mean over the workloads (the first panel of the plot, like the paper's Figure "
            f"11): {means}.")


def plot_design_space(out_dir, points):
    """Like Section 7 (Figure 11) of the TPU v1 paper: performance relative to the
    reference chip as one parameter scales, averaged over the workloads (first
    panel), then each parameter per workload."""
    import matplotlib.pyplot as plt
    path = plot_file(out_dir, "design_space")
    params = sorted({p["parameter"] for p in points})
    fig, axes = plt.subplots(1, len(params) + 1, figsize=(4 * (len(params) + 1), 3.6),
                             squeeze=False)
    ax = axes[0][0]
    for param, line in geomean_speedups(points).items():
        ax.plot([f for f, _ in line], [u for _, u in line], "o-", ms=4, label=param)
    ax.set_xscale("log", base=2); ax.set_xlabel("x reference"); ax.axhline(1, color="grey", lw=0.5)
    ax.set_title("geometric mean over the workloads", fontsize=9); ax.legend(fontsize=7)
    ax.set_ylabel("performance relative to the reference chip")
    for ax, param in zip(axes[0][1:], params):
        for w in sorted({p["workload"] for p in points}):
            sel = [p for p in points if p["parameter"] == param and p["workload"] == w and p["speedup"]]
            ax.plot([p["factor"] for p in sel], [p["speedup"] for p in sel], "o-", ms=3, label=w)
        ax.set_xscale("log", base=2); ax.set_title(param, fontsize=9); ax.set_xlabel("x reference")
        ax.axhline(1, color="grey", lw=0.5)
    axes[0][-1].legend(fontsize=6)
    fig.tight_layout(); fig.savefig(path, dpi=110); plt.close(fig)
    return path


def plot_trace(out_dir, trace_path, window=2000):
    """A picture of a trace (`tpu.bench.trace`): every track over the whole run, and
    its first `window` cycles."""
    import json
    import matplotlib.pyplot as plt
    path = plot_file(out_dir, "trace")
    data = json.loads(trace_path.read_text())
    names = {e["tid"]: e["args"]["name"] for e in data["traceEvents"] if e["name"] == "thread_name"}
    slices = [e for e in data["traceEvents"] if e["ph"] == "X"]
    end = max(e["ts"] + e["dur"] for e in slices)
    title = next(e["args"]["name"] for e in data["traceEvents"] if e["name"] == "process_name")
    fig, axes = plt.subplots(2, 1, figsize=(10, 7.5))
    for ax, (lo, hi) in zip(axes, ((0, end), (0, min(end, window)))):
        for tid, name in names.items():
            spans = [(e["ts"], e["dur"]) for e in slices if e["tid"] == tid and e["ts"] < hi]
            colour = "tab:red" if name.startswith("stall") else "tab:blue"
            if tid == 0:                 # parts: alternate shades, so their ends show
                colour = ["tab:grey", "silver"] * len(spans)
            ax.broken_barh(spans, (-tid - 0.4, 0.8), color=colour[:len(spans)]
                           if tid == 0 else colour, lw=0)
        ax.set_yticks([-t for t in names], list(names.values()), fontsize=7)
        ax.set_xlim(lo, hi)
        ax.set_xlabel("cycle")
    axes[0].set_title(f"{title}: timeline of one batch ({data['otherData'].get('batch')} "
                      f"samples, {end} cycles; cycle model schedule)", fontsize=9)
    axes[1].set_title(f"the first {min(end, window)} cycles", fontsize=9)
    fig.tight_layout(); fig.savefig(path, dpi=100); plt.close(fig)
    return path


def _weight_stall_section(results):
    cfg = results["config"]
    rows = [(f"{g['m']}x{g['k']}x{g['n']}", g["weight_stall"], g.get("weight_stall_hoisted", "-"))
            for g in results["gemms"] if "cycles" in g and g["m"] >= cfg["rows"]
            and (g["weight_stall"] or g.get("weight_stall_hoisted"))]
    text = ["\n## Weight stalls\n",
            "GEMMs of the sweep with batch >= rows that stall on weights, as compiled and with "
            "each part's first RWs moved to the program's start (`tpu.bench.weight_stalls."
            "hoist_first_reads`, cycles by the cycle model). The stalls are all in a part's "
            "first switching MMC: the compiler's RW pass (`tpu.compiler.schedule`) requests "
            "the first tiles just before it, after the part's table and input RHMs, and the "
            f"first tile needs latency {cfg['weight_mem_latency']} + {cfg['rows']} rows + 4 "
            "cycles from the RW to reach the array. RW does not block and a part's weights are "
            "loaded before it starts, so the compiler can issue them first; what is left then "
            "is parts that start their matrix work within about 20 cycles (input resident from "
            "the previous part), which only a request in the previous part could hide.\n"]
    if rows:
        text.append(_table(["GEMM", "weight stall (as compiled)", "with the first RWs hoisted"],
                           rows))
    else:
        text.append("None stalls.")
    return "\n".join(text) + "\n"


def _layers_section(results):
    """Single convolution layers (`tpu.bench.layers`) and the MLPerf Tiny models
    against TFLite (`tpu.bench.tflite`), when the run has them."""
    text = []
    conv = results.get("conv_layers") or []
    if conv:
        text.append("\n## Convolution layers (golden chip)\n")
        text.append("One compiled convolution layer of an 8x8 image at batch "
                    f"{results.get('conv_batch', 64)} (`tpu.bench.layers`, "
                    "`scripts/bench_compiler.py`); utilisation = the model's MACs over "
                    "cycles x rows x cols, of the program and of its matrix phase (first row "
                    "into the array to the last); outputs against the reference interpreter:\n")
        text.append(_table(["layer", "part", "cycles", "mxu_active", "MACs", "util (program)",
                            "util (matrix phase)", "bit-exact"],
                           [(r["layer"], r["part"], r["cycles"], r["mxu_active"], r["macs"],
                             percent(r["utilisation"]),
                             percent(r["macs"] / (r["matrix_phase"] * r["cells"]))
                             if r["matrix_phase"] else "-", "yes" if r["exact"] else "NO")
                            for r in conv]))
    tflite = results.get("tflite")
    if tflite:
        from .tflite import markdown
        text.append("\n## MLPerf Tiny through the TFLite front end\n")
        text.append("Every output byte against the TFLite interpreter's reference kernels "
                    "(`tpu.bench.tflite`, `scripts/bench_tflite.py`): "
                    + "; ".join(f"{r['model']}: reference interpreter "
                                f"{r['reference']['equal']}/{r['reference']['inputs']} inputs "
                                f"equal" for r in tflite["results"] if "reference" in r)
                    + ".\n")
        text.append(markdown(tflite["results"], tflite["backend"]))
    return "\n".join(text) + ("\n" if text else "")


def _cycle_model_section(results):
    text = ["\n## Cycle model against the RTL\n",
            "`tpu.models.cycle_model` models the core with an ideal host (data the cycle "
            "after a request, an instruction stream that never idles). Like with like, the "
            "suite runs compiled programs on the RTL core with exactly that host "
            "(`tpu.sim.bench.bench_core`, random weights and inputs, results checked against "
            "the golden model) and compares every counter:\n"]
    names = ("cycles", *BREAKDOWN)
    rows = []
    for r in results["core_runs"]:
        if "cycles" not in r:
            rows.append((r["name"], r["simulator"], "error: " + r["error"], *[""] * 4))
            continue
        err = (r["estimate"] - r["cycles"]) / r["cycles"]
        rows.append((r["name"], f"{r['simulator']} {r['rows']}x{r['cols']}", r["cycles"],
                     r["estimate"], f"{100 * err:+.2f}%",
                     "all equal" if r["counters_equal"] else ", ".join(
                         f"{n} {r['counters'][n]}/{r['estimate_counters'][n]}" for n in names
                         if r["counters"][n] != r["estimate_counters"][n]),
                     f"{r['seconds']:.1f}"))
    text.append(_table(["program", "RTL core", "RTL cycles", "estimate", "error",
                        "counters (RTL/estimate where they differ)", "seconds"], rows))
    chip = results["chip_runs"]
    if chip:
        text.append("\nThrough the whole chip (`tpu.driver` over the PCIe-style link, the "
                    "deterministic host of `open_bench_link`: completions of max_payload bytes, "
                    "in order, answering at once unless the row names a host latency) a program "
                    "takes longer: it is fetched over "
                    "the link before its first instruction, instructions then arrive at link "
                    "speed, RHMs wait for their completions and WHMs for the link. "
                    "`estimate_cycles(..., host=HostLink.of(config))` models that link "
                    "(`tpu.models.link_model`); *ideal host* is the core-only estimate, "
                    "whose difference is the link's cost:\n")
        rows = []
        for r in chip:
            if "cycles" not in r:
                rows.append((r["name"], r["simulator"], "error: " + r["error"], *[""] * 5))
                continue
            err = (r["estimate"] - r["cycles"]) / r["cycles"]
            rows.append((r["name"], f"{r['simulator']} {r['rows']}x{r['cols']}", r["cycles"],
                         r["estimate"], f"{100 * err:+.2f}%", r["core_estimate"],
                         "all equal" if r["counters_equal"] else ", ".join(
                             f"{n} {r['counters'][n]}/{r['estimate_counters'][n]}" for n in names
                             if r["counters"][n] != r["estimate_counters"][n])))
        text.append(_table(["program", "whole chip", "RTL cycles", "estimate (link)", "error",
                            "estimate (ideal host)",
                            "counters (RTL/estimate where they differ)"], rows))
    return "\n".join(text) + "\n"


def _host_section(results):
    from .host import tables
    host = results["host"]
    text = ["\n## Host link\n"]
    if not host["dma"] and not host["programs"]:
        text.append("Not run (no RTL simulator in this suite).")
        return "\n".join(text) + "\n"
    text.append("The whole chip under Verilator behind cocotbext-pcie's root complex "
                "(`tpu.bench.host`, the method of docs/host_performance.md; `host latency "
                "added` holds every completion that many cycles). " + results["host_summary"]
                + "\n")
    text.append(tables(host))
    return "\n".join(text) + "\n"


def _fpga_section(results):
    from .fpga import routed_table, table
    text = ["\n## FPGA\n"]
    if results["fpga"]:
        text.append("The last builds found under build/ (the suite builds nothing: a build "
                    "takes minutes to an hour):\n")
        text.append(table(results["fpga"]))
    else:
        text.append("No build report under build/fpga/*/build.json (`tpu build --board ...`) "
                    "or build/bench/fpga.json (scripts/bench_fpga.py) on this machine; "
                    "docs/fpga.md has the measured builds.")
    text.append("\nThe whole chip's routed builds recorded in docs/fpga.md "
                "(`tpu.fpga.routed_clocks`, which `tpu build`'s default clocks and the "
                "latency on the ULX3S above come from):\n")
    text.append(routed_table())
    return "\n".join(text) + "\n"


def _board_latency_section(results):
    from .board_latency import FPGACONVNET_SOURCE, markdown
    board = results.get("board_latency")
    if not board:
        return ""
    text = ["\n## MLPerf Tiny on the ULX3S\n"]
    routed_label, routed_mhz = board["clocks"][0]
    text.append(f"Cycles per inference at batch 1 on the 16x16 chip of `--profile ulx3s16` "
                f"(`{board['config']}`; the golden cycle model, exact against the RTL; chip "
                f"parts only, not host operators or the UART's transfers), over the routed "
                f"clock of its latest build on the ECP5-85F ({routed_mhz:g} MHz, "
                f"`tpu.fpga.routed_clocks`), issue 25's 75 MHz target and the 16x16 array's "
                f"own routed clock. Beside them: {FPGACONVNET_SOURCE}.\n")
    if board["models"]:
        text.append(markdown(board))
    if board.get("skipped"):
        text.append("\nNot run: " + "; ".join(f"{k}: {v}" for k, v in board["skipped"].items()))
    return "\n".join(text) + "\n"


def _run_time(results):
    """Wall and CPU time of a run and the load beside it, as far as the run recorded them."""
    text = f"{results['seconds']:.0f} s wall"
    cpu = results.get("cpu_seconds")
    text += (f", {cpu:.0f} s CPU (the suite's process and its simulators and builds)"
             if cpu is not None else ", CPU time not recorded")
    load = results.get("load_average")
    text += (f"; load average {load[0]:g} at the start, {load[1]:g} at the end"
             if load else "; load average not recorded")
    return text + "."


def write_markdown(results, plots):
    """The report as Markdown text."""
    cfg = results["config"]
    out = [f"# Benchmark report\n",
           f"Command: `{results['command']}`  ",
           f"Date: {results['date']}  ",
           f"Machine: {results['machine']}  ",
           f"Versions: {results['versions']}  ",
           f"Chip: {cfg['rows']}x{cfg['cols']} array, {cfg['acc_rows']} accumulator rows, "
           f"weight memory {cfg['weight_mem_bytes_per_cycle']} B/cycle "
           f"(latency {cfg['weight_mem_latency']}), clock stated as "
           f"{results['clock_hz'] / 1e6:g} MHz.  ",
           f"Run time: {_run_time(results)}\n",
           "## Targets\n"]
    out.append(_table(["target", "result", "detail"],
                      [(t[0], "n/a" if t[1] is None else _ok(t[1]), t[2]) for t in results["targets"]]))
    out.append("\n## GEMM sweep\n")
    out.append(f"Single Dense layers compiled by the compiler for the chip above with a "
               f"{results['gemm_ub_rows']}-row unified buffer (the sweep's largest layers hold "
               f"two M tiles of input and output), run on the golden chip (counters exact "
               f"against the RTL) and on Verilator where the backend says so. "
               f"`ideal` = M x ceil(K/rows) x ceil(N/cols) cycles; `eff` = ideal / cycles; "
               f"`util` = MACs / (cycles x rows x cols). Breakdown as Table 3 of the TPU v1 "
               f"paper, in % of cycles."
               + (f" The {sum(g.get('arithmetic') is False for g in results['gemms'])} GEMMs "
                  f"marked * skip the golden chip's arithmetic (more than "
                  f"{FUNCTIONAL_MACS:,} MACs): their counters are the same cycle model's, "
                  f"which the golden chip reports." if any(g.get("arithmetic") is False
                                                         for g in results["gemms"]) else "")
               + "\n")
    rows = []
    for g in results["gemms"]:
        if "error" in g:
            rows.append((g["m"], g["k"], g["n"], g["backend"], "refused: " + g["error"][:60],
                         *([""] * (4 + len(BREAKDOWN)))))
            continue
        rows.append((g["m"], g["k"], g["n"],
                     g["backend"] + ("*" if g.get("arithmetic") is False else ""),
                     g["cycles"], g["estimate"],
                     g["ideal_cycles"], percent(g["utilisation"]), percent(g["efficiency"]),
                     *(percent(g[b] / g["cycles"]) for b in BREAKDOWN)))
    out.append(_table(["M", "K", "N", "backend", "cycles", "estimate", "ideal", "util", "eff",
                       *(_HEAD[b] for b in BREAKDOWN)], rows))
    out.append(f"\n![GEMM utilisation]({plots['gemm_utilisation']})\n")
    out.append("## Roofline\n")
    out.append(f"Ops (2 x MACs) per cycle against ops per byte of weights moved into the "
               f"array (weight_shift x cols). Ridge point {results['ridge_point']:g} ops/byte "
               f"= 2 x rows x cols / weight bandwidth.\n")
    out.append(f"![roofline]({plots['roofline']})\n")
    out.append("## Models (golden chip)\n")
    if results["models_skipped"]:
        out.append("Not run: " + "; ".join(f"{k}: {v}" for k, v in results["models_skipped"].items()) + "\n")
    rows = []
    for m in results["models"]:
        if "error" in m:
            rows.append((m["model"], m["batch"], "", "error: " + m["error"][:80], *([""] * 9)))
            continue
        rows.append((m["model"], m["batch"], m["compiled_batch"], m["cycles"],
                     percent(m["utilisation"]), f"{m['cycles_per_inference']:.0f}",
                     f"{m['inferences_per_second']:,.0f}",
                     *(percent(m[b] / m["cycles"]) if m["cycles"] else "-" for b in BREAKDOWN)))
    out.append(_table(["model", "batch", "compiled batch", "cycles", "util", "cycles/inference",
                       f"inferences/s at {results['clock_hz'] / 1e6:g} MHz",
                       *(_HEAD[b] for b in BREAKDOWN)], rows))
    out.append("\nPer layer (chip parts; host steps are not timed):\n")
    rows = []
    for m in results["models"]:
        for layer in m.get("layers", []):
            if layer["where"] != "chip":
                continue
            rows.append((m["model"], m["batch"], layer["name"], layer["cycles"], layer["estimate"],
                         layer["macs"], percent(layer["utilisation"]),
                         *(layer[b] for b in BREAKDOWN)))
    out.append(_table(["model", "batch", "layer", "cycles", "estimate", "MACs", "util",
                       *(_HEAD[b] for b in BREAKDOWN)], rows))
    if results.get("traces"):
        out.append("\nTimelines (Chrome/Perfetto trace-event JSON, open at ui.perfetto.dev; one "
                   "track per unit, 1 us on the timeline = 1 cycle): " + ", ".join(
                       f"{k}: `{v}`" for k, v in results["traces"].items()) + ". Tracks: the "
                   "program parts; instruction issue (decode done to issue: a wide slice is a "
                   "wait); RHM, WHM, RW, MMC, ACT and control, each instruction from its issue "
                   "to the cycle its unit is done; the weight FIFO (each tile from its request "
                   "to its capture in the array); the array (the rows of each MMC); and the "
                   "stalls by cause (RAW hazard, unit busy, weight, host). The schedule is the "
                   "cycle model's, which equals the RTL core with an ideal host (below). "
                   "`tpu run MODEL --trace FILE` writes the same for any model.\n")
        if plots.get("trace"):
            out.append(f"![timeline]({plots['trace']})\n")
    out.append(_layers_section(results))
    out.append(_weight_stall_section(results))
    out.append(_cycle_model_section(results))
    out.append(_host_section(results))
    out.append(_board_latency_section(results))
    out.append(_fpga_section(results))
    if results.get("timings"):
        total = sum(results["timings"].values())
        out.append("\n## Where the run's time went\n")
        out.append(f"Wall seconds per part of this run ({total / 60:.1f} minutes in all; "
                   "the first run on a machine also builds the Verilator and Icarus models, "
                   "later runs reuse them):\n")
        out.append(_table(["part", "seconds", "share"],
                          [(name, f"{sec:.0f}", percent(sec / total) if total else "-")
                           for name, sec in results["timings"].items()]))
    out.append("\n## Simulation speed\n")
    out.append("Simulated cycles per wall-clock second on the same compiled GEMM program "
               "(a simulator's time includes starting it, its model already built).\n")
    out.append(_table(["backend", "array", "M x K x N", "cycles", "seconds",
                       "build or reuse (s)", "cycles/s"],
                      [(s["backend"], f"{s['rows']}x{s['cols']}", f"{s['m']}x{s['k']}x{s['n']}",
                        s["cycles"], f"{s['seconds']:.2f}",
                        "-" if s.get("build_seconds") is None else f"{s['build_seconds']:.1f}", f"{s['cycles_per_second']:,.0f}")
                       for s in results["simspeed"]]))
    sweep = [g for g in results["gemms"] if g.get("backend") == "golden" and g.get("seconds")]
    if sweep:
        big = max(sweep, key=lambda g: g["cycles"])
        out.append(f"\nThe program above is short, so starting a run dominates its time; the "
                   f"golden chip on the sweep's longest GEMM ({big['m']}x{big['k']}x{big['n']}, "
                   f"{big['cycles']} cycles in {big['seconds']:.2f} s) simulates "
                   f"{big['cycles'] / big['seconds']:,.0f} cycles/s.\n")
    golden = {(s["rows"], s["cols"]): s for s in results["simspeed"] if s["backend"] == "golden"}
    rtl = [s for s in results["simspeed"] if s["backend"] != "golden"]
    if rtl:
        out.append("\nThe same program's counters on the RTL and on the golden chip (the cycle "
                   "model's):\n")
        names = ("cycles", *BREAKDOWN)
        rows = []
        for s in rtl:
            g = golden.get((s["rows"], s["cols"]))
            rows.append((f"{s['backend']} {s['rows']}x{s['cols']}",
                         *(s["counters"][n] for n in names)))
            if g:
                rows.append((f"golden {g['rows']}x{g['cols']}", *(g["counters"][n] for n in names)))
        out.append(_table(["run", *(_HEAD.get(n, n) for n in names)], rows))
    out.append("\n## Design space (cycle model)\n")
    out.append(f"Each workload (models at batch 64 and 1) compiled for chips varied one parameter at a "
               f"time around the chip above (with the GEMM sweep's {results['gemm_ub_rows']}-row "
               f"unified buffer), its parts' cycles added up by the cycle model "
               f"(`tpu.models.cycle_model`, exact against the RTL). Arrays keep their weight "
               f"bandwidth at the same bytes per column.\n")
    out.append(results["design_summary"] + "\n")
    rows = [(p["workload"], p["parameter"], f"{p['factor']:g}",
             f"{p['rows']}x{p['cols']}", p["acc_rows"], p["weight_mem_bytes_per_cycle"],
             p["cycles"] if p["cycles"] else "refused",
             f"{p['speedup']:.2f}" if p["speedup"] else "-") for p in results["design_space"]]
    out.append(_table(["workload", "varied", "x", "array", "acc rows", "weight B/cycle",
                       "cycles", "speed-up"], rows))
    out.append(f"\n![design space]({plots['design_space']})\n")
    out.append("## Not included\n")
    out.append("\n".join(f"* {x}" for x in results["not_included"]) + "\n")
    return "\n".join(out)


BEGIN = "<!-- tpu bench: begin (generated by tpu.bench.report.publish from results.json) -->"
END = "<!-- tpu bench: end -->"


def summary_markdown(results, report_link, img_prefix):
    """The section of docs/benchmarks.md a run generates: how it ran, its targets and
    its plots (`img_prefix` + plot file), the full report at `report_link`."""
    cfg = results["config"]
    out = [f"Generated from `results.json` of the run below, not retyped. The full report: "
           f"[{report_link}]({report_link}).\n",
           f"* Command: `{results['command']}`",
           f"* Date: {results['date']}",
           f"* Run time: {_run_time(results)}",
           f"* Machine: {results['machine']}",
           f"* Versions: {results['versions']}",
           f"* Chip: {cfg['rows']}x{cfg['cols']} array, {cfg['acc_rows']} accumulator rows, "
           f"weight memory {cfg['weight_mem_bytes_per_cycle']} B/cycle (latency "
           f"{cfg['weight_mem_latency']}), clock stated as {results['clock_hz'] / 1e6:g} MHz\n"]
    out.append(_table(["target", "result", "detail"],
                      [(t[0], "n/a" if t[1] is None else _ok(t[1]), t[2])
                       for t in results["targets"]]))
    out.append("\n" + results["design_summary"] + "\n")
    if results.get("host_summary"):
        out.append("Host link: " + results["host_summary"] + "\n")
    for name, file in results["plots"].items():
        out.append(f"![{name.replace('_', ' ')}]({img_prefix}{file})\n")
    return "\n".join(out)


def publish(out_dir, doc_path="docs/bench_report.md", img_dir="docs/img", summary_path=None):
    """Copy a run's report into the docs: ``report.md`` as `doc_path` (a generated
    page, not to be edited by hand), its plots into `img_dir` as ``bench_*.png``, the
    demo CNN's timeline beside them, and with `summary_path` (docs/benchmarks.md) the
    section between its `BEGIN` and `END` lines regenerated from ``results.json``."""
    import json
    import os
    import shutil
    from pathlib import Path
    out, doc, img = Path(out_dir), Path(doc_path), Path(img_dir)
    img.mkdir(parents=True, exist_ok=True)
    results = json.loads((out / "results.json").read_text())
    text = (out / "report.md").read_text()
    for name in results["plots"].values():
        shutil.copyfile(out / name, img / f"bench_{name}")
        text = text.replace(f"]({name})", f"]({os.path.relpath(img / ('bench_' + name), doc.parent)})")
    for name in results.get("traces", {}).values():
        if "cnn" in name:          # one timeline in the docs: the demo CNN's
            shutil.copyfile(out / name, img / f"bench_{name}")
            text = text.replace(f"`{name}`", f"[{name}]({os.path.relpath(img / ('bench_' + name), doc.parent)})")
    doc.write_text("<!-- Generated by tpu.bench.report.publish from a `tpu bench` run; "
                   "do not edit by hand. -->\n" + text)
    summary = Path(summary_path) if summary_path else None
    if summary is not None:
        page = summary.read_text()
        if BEGIN not in page or END not in page:
            raise ValueError(f"{summary}: no lines {BEGIN!r} and {END!r} to put the run between")
        head, rest = page.split(BEGIN, 1)
        tail = rest.split(END, 1)[1]
        prefix = os.path.relpath(img, summary.parent) + "/bench_"
        section = summary_markdown(results, os.path.relpath(doc, summary.parent), prefix)
        summary.write_text(head + BEGIN + "\n" + section + "\n" + END + tail)
    return doc


def render(out_dir):
    """Redo a run's plots, targets and ``report.md`` from its ``results.json`` (no
    measuring: the numbers are the run's); returns the results."""
    import json
    from pathlib import Path
    from ..config import TPUConfig
    from . import roofline
    from .host import summary
    out = Path(out_dir)
    results = json.loads((out / "results.json").read_text())
    config = TPUConfig(**results["config"])
    gconfig = config.replace(ub_rows=results["gemm_ub_rows"])
    plots = {"gemm_utilisation": plot_gemms(out, results["gemms"]).name,
             "roofline": roofline.plot_roofline(out, gconfig, roofline.points(
                 results["gemms"], results["models"])).name,
             "design_space": plot_design_space(out, results["design_space"]).name}
    traces = results.get("traces", {})
    if traces:
        plots["trace"] = plot_trace(out, out / next(
            (v for k, v in traces.items() if "cnn" in k), next(iter(traces.values())))).name
    results["plots"] = plots
    results["targets"] = [list(t) for t in targets(config, results["gemms"], results["models"],
                                                   results["core_runs"], results["chip_runs"])]
    results["host_summary"] = summary(results["host"])
    results["design_summary"] = design_summary(results["design_space"], config,
                                               results["models"])
    (out / "results.json").write_text(json.dumps(results, indent=1, default=float) + "\n")
    (out / "report.md").write_text(write_markdown(results, plots) + "\n")
    return results


def time_log_cpu_seconds(text):
    """User plus system seconds from the output of ``/usr/bin/time -v`` (the
    CPU time of a run saved before the suite recorded its own); ValueError
    naming what is missing."""
    import re
    found = {}
    for what in ("User", "System"):
        match = re.search(rf"^\s*{what} time \(seconds\):\s*([0-9.]+)\s*$", text, re.M)
        if not match:
            raise ValueError(f"no '{what} time (seconds)' line of /usr/bin/time -v in the log")
        found[what] = float(match.group(1))
    return found["User"] + found["System"]


def publish_run(out_dir, time_log=None, docs="docs"):
    """Render a run again with this code's targets and summaries, then `publish` it
    into `docs` (``bench_report.md``, ``img/bench_*``, the section of
    ``benchmarks.md``). `time_log`: the ``/usr/bin/time -v`` output the run was
    measured with, for its CPU time when the run did not record it."""
    import json
    from pathlib import Path
    out = Path(out_dir)
    if time_log is not None:
        results = json.loads((out / "results.json").read_text())
        if results.get("cpu_seconds") is None:
            results["cpu_seconds"] = time_log_cpu_seconds(Path(time_log).read_text())
            (out / "results.json").write_text(json.dumps(results, indent=1, default=float) + "\n")
    render(out)
    docs = Path(docs)
    return publish(out, docs / "bench_report.md", docs / "img", docs / "benchmarks.md")
