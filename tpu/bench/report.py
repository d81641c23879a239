"""The benchmark report: targets with pass/fail marks, tables, plots."""

from .common import BREAKDOWN, percent, plot_file


__all__ = ["targets", "write_markdown", "plot_gemms", "plot_design_space", "publish"]

_HEAD = {"mxu_active": "active", "weight_stall": "weight stall", "weight_shift": "weight shift",
         "non_matrix": "non-matrix", "raw_stall": "RAW stall", "host_stall": "host stall"}


def _ok(flag):
    return "PASS" if flag else "FAIL"


def targets(config, gemms, models, rtl_runs):
    """The issue's targets: (name, passed or None, detail)."""
    out = []
    golden = [g for g in gemms if g.get("backend") == "golden" and "cycles" in g]
    bound = [g for g in golden if g["m"] >= 8 * config.rows]
    if bound:
        worst = min(bound, key=lambda g: g["efficiency"])
        passed = all(g["efficiency"] >= 0.95 for g in bound)
        fails = sum(g["efficiency"] < 0.95 for g in bound)
        out.append(("MXU utilisation >= 95% of the ideal on compute-bound GEMMs (M >= 8 x rows)",
                    passed, f"{len(bound) - fails}/{len(bound)} meet it; worst "
                    f"{worst['m']}x{worst['k']}x{worst['n']}: {percent(worst['efficiency'])} "
                    f"(the fixed cost of a program, LDQ and the drain, is large beside small K x N)"))
    if config.weight_mem_bytes_per_cycle >= config.cols:
        fed = [g for g in golden if g["m"] >= config.rows]
        stalled = [g for g in fed if g["weight_stall"]]
        first = max((g["weight_stall"] for g in stalled), default=0)
        out.append(("zero weight-stall cycles when bandwidth >= cols bytes/cycle and batch >= rows",
                    not stalled, f"{len(fed) - len(stalled)}/{len(fed)} GEMMs have none; the rest "
                    f"stall at most {first} cycles each, under one tile's fill from weight memory "
                    f"(latency {config.weight_mem_latency} + {config.rows} rows + 4 cycles to "
                    f"the array): the wait for the program's first tile"
                    if stalled else f"{len(fed)} GEMMs, none stalled"))
    if rtl_runs:
        worst = max(rtl_runs, key=lambda r: abs(r["cycles"] - r["estimate"]) / r["cycles"])
        err = abs(worst["cycles"] - worst["estimate"]) / worst["cycles"]
        out.append(("golden cycle estimate within 2% of the RTL on every RTL run", err <= 0.02,
                    f"{len(rtl_runs)} run(s); worst {worst['label']}: RTL {worst['cycles']}, "
                    f"estimate {worst['estimate']} ({percent(err)}; of which host stalls "
                    f"{worst.get('host_stall', 0)} cycles: the estimate assumes an ideal host)"))
    else:
        out.append(("golden cycle estimate within 2% of the RTL on every RTL run", None,
                    "no RTL run in this suite"))
    cnn = [m for m in models if m.get("model") == "demo cnn" and m.get("batch") == 64 and "cycles" in m]
    if cnn and config.rows == 8 and config.cols == 8:
        u = cnn[0]["utilisation"]
        out.append(("demo CNN >= 80% MXU utilisation at batch 64 on 8x8", u >= 0.8,
                    f"{percent(u)} over its chip layers"))
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


def plot_design_space(out_dir, points):
    import matplotlib.pyplot as plt
    path = plot_file(out_dir, "design_space")
    params = sorted({p["parameter"] for p in points})
    fig, axes = plt.subplots(1, len(params), figsize=(4 * len(params), 3.6), squeeze=False)
    for ax, param in zip(axes[0], params):
        for w in sorted({p["workload"] for p in points}):
            sel = [p for p in points if p["parameter"] == param and p["workload"] == w and p["speedup"]]
            ax.plot([p["factor"] for p in sel], [p["speedup"] for p in sel], "o-", ms=3, label=w)
        ax.set_xscale("log", base=2); ax.set_title(param); ax.set_xlabel("x reference")
        ax.axhline(1, color="grey", lw=0.5)
    axes[0][0].set_ylabel("speed-up (cycles of reference / cycles)")
    axes[0][-1].legend(fontsize=6)
    fig.tight_layout(); fig.savefig(path, dpi=110); plt.close(fig)
    return path


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
           f"{results['clock_hz'] / 1e6:g} MHz. Suite run time {results['seconds']:.0f} s.\n",
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
               f"paper, in % of cycles.\n")
    rows = []
    for g in results["gemms"]:
        if "error" in g:
            rows.append((g["m"], g["k"], g["n"], g["backend"], "refused: " + g["error"][:60],
                         *([""] * (4 + len(BREAKDOWN)))))
            continue
        rows.append((g["m"], g["k"], g["n"], g["backend"], g["cycles"], g["estimate"],
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
                       f"{k}: `{v}`" for k, v in results["traces"].items()) + "\n")
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
               f"(`tpu.sim.models.cycle_model`, exact against the RTL). Arrays keep their weight "
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


def publish(out_dir, doc_path="docs/bench_report.md", img_dir="docs/img"):
    """Copy a run's report into the docs: ``report.md`` as `doc_path` (a generated
    page, not to be edited by hand) and its plots into `img_dir` as ``bench_*.png``."""
    import json
    import os
    import shutil
    from pathlib import Path
    out, doc, img = Path(out_dir), Path(doc_path), Path(img_dir)
    img.mkdir(parents=True, exist_ok=True)
    text = (out / "report.md").read_text()
    for name in json.loads((out / "results.json").read_text())["plots"].values():
        shutil.copyfile(out / name, img / f"bench_{name}")
        text = text.replace(f"]({name})", f"]({os.path.relpath(img / ('bench_' + name), doc.parent)})")
    for name in json.loads((out / "results.json").read_text()).get("traces", {}).values():
        if "cnn" in name:          # one timeline in the docs: the demo CNN's
            shutil.copyfile(out / name, img / f"bench_{name}")
            text = text.replace(f"`{name}`", f"[{name}]({os.path.relpath(img / ('bench_' + name), doc.parent)})")
    doc.write_text("<!-- Generated by tpu.bench.report.publish from a `tpu bench` run; "
                   "do not edit by hand. -->\n" + text)
    return doc
