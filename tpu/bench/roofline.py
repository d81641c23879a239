"""Roofline like Figure 5 of the TPU v1 paper: ops per cycle against operational
intensity (ops per weight byte moved into the array), the roof at
``2 x rows x cols`` ops per cycle, the slope the weight-memory bandwidth."""

from .common import plot_file


__all__ = ["ridge_point", "points", "plot_roofline"]


def ridge_point(config):
    """Ops per weight byte at which the weight bandwidth stops limiting."""
    return 2 * config.rows * config.cols / config.weight_mem_bytes_per_cycle


def points(gemms, models):
    """(label, intensity, ops per cycle, kind) of every GEMM and model chip layer."""
    out = []
    for g in gemms:
        if g.get("intensity") and g.get("backend") == "golden":
            out.append((f"{g['m']}x{g['k']}x{g['n']}", g["intensity"], g["ops_per_cycle"], "GEMM"))
    for m in models:
        for layer in m.get("layers", []):
            if layer["where"] == "chip" and layer["weight_bytes"] and layer["cycles"] and layer["macs"]:
                out.append((f"{m['model']} b{m['batch']} {layer['name']}",
                            2 * layer["macs"] / layer["weight_bytes"],
                            2 * layer["macs"] / layer["cycles"], m["model"]))
    return out


def plot_roofline(out_dir, config, pts):
    import matplotlib.pyplot as plt
    path = plot_file(out_dir, "roofline")
    peak = 2 * config.rows * config.cols
    ridge = ridge_point(config)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    xs = [p[1] for p in pts] or [1.0]
    lo, hi = min(min(xs), ridge) / 2, max(max(xs), ridge) * 2
    ax.plot([lo, ridge, hi], [lo * config.weight_mem_bytes_per_cycle, peak, peak], "k-",
            label=f"roof: {peak} ops/cycle, {config.weight_mem_bytes_per_cycle} weight B/cycle")
    ax.axvline(ridge, color="grey", ls=":", label=f"ridge point {ridge:g} ops/byte")
    for kind in sorted({p[3] for p in pts}):
        sel = [p for p in pts if p[3] == kind]
        ax.scatter([p[1] for p in sel], [p[2] for p in sel], s=14, label=kind)
    ax.set_xscale("log"); ax.set_yscale("log")
    ax.set_xlabel("operational intensity (ops per weight byte)")
    ax.set_ylabel("achieved ops per cycle")
    ax.set_title(f"Roofline, {config.rows}x{config.cols} array (golden chip)")
    ax.legend(fontsize=7)
    fig.tight_layout(); fig.savefig(path, dpi=110); plt.close(fig)
    return path
