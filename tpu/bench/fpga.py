"""The FPGA table: the last `tpu build` of each board (``build/fpga/BOARD/build.json``,
written by `tpu.cli_fpga`) and the last `scripts/bench_fpga.py` run of the
matrix unit alone (``build/bench/fpga.json``). Nothing is built here: a build
takes minutes to an hour, so the suite reports the ones already made."""

import json
from pathlib import Path


__all__ = ["find_builds", "table", "mxu_table"]


def _usage(entry):
    return f"{entry['used']}/{entry['available']}" if entry else "-"


def find_builds(root="build"):
    """Rows of the table, one per build found under `root` (an empty list: none)."""
    root = Path(root)
    rows = []
    for path in sorted(root.glob("fpga/*/build.json")):
        try:
            r = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        cfg = r.get("config", {})
        res = r.get("resources", {})
        clocks = r.get("clocks", {})
        rows.append({"what": "chip (tpu build)", "board": r.get("board"), "device": r.get("device"),
                     "array": f"{cfg.get('rows')}x{cfg.get('cols')}", "fits": r.get("fits"),
                     "logic": _usage(res.get("logic")), "ffs": _usage(res.get("ffs")),
                     "dsp": _usage(res.get("dsp")), "ram": _usage(res.get("ram")),
                     "fmax_mhz": min((c["fmax_mhz"] for c in clocks.values()), default=None),
                     "target_mhz": r.get("clock_mhz"), "problem": r.get("problem"),
                     "seconds": r.get("seconds"), "file": str(path)})
    bench = root / "bench" / "fpga.json"
    if bench.exists():
        try:
            data = json.loads(bench.read_text())
        except ValueError:
            data = {}
        for r in data.get("results", []):
            rows.append({"what": f"matrix unit ({'DSP' if r.get('dsp') else 'no DSP'}, "
                                 f"scripts/bench_fpga.py {data.get('date', '')})",
                         "board": r.get("board"), "device": r.get("device"),
                         "array": f"{r.get('rows')}x{r.get('cols')}", "fits": r.get("fits"),
                         "logic": _usage(r.get("logic")), "ffs": _usage(r.get("ffs")),
                         "dsp": _usage(r.get("dsp_blocks")), "ram": _usage(r.get("ram_blocks")),
                         "fmax_mhz": r.get("fmax_mhz"), "target_mhz": r.get("constraint_mhz"),
                         "problem": r.get("reason"), "seconds": r.get("seconds"),
                         "file": str(bench)})
    return rows


def table(rows):
    """Markdown of `find_builds`'s rows."""
    head = ["build", "board", "array", "fits", "logic", "FFs", "DSP", "RAM", "Fmax MHz",
            "target MHz", "problem"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        lines.append("| " + " | ".join(str(x) for x in (
            r["what"], r["board"], r["array"], "yes" if r["fits"] else "NO", r["logic"], r["ffs"],
            r["dsp"], r["ram"], "-" if r["fmax_mhz"] is None else f"{r['fmax_mhz']:.1f}",
            "-" if r["target_mhz"] is None else f"{r['target_mhz']:g}",
            r["problem"] or "")) + " |")
    return "\n".join(lines)


def _cell(port):
    return f"`{port}`" if port else "-"


def mxu_table(results):
    """Markdown of `scripts/bench_fpga.py` results (``build_mxu`` dicts):
    per build the logic, FFs, DSP and RAM blocks, Fmax, peak GOPS (``2 x rows
    x cols x Fmax``), build time and the critical path's start and end."""
    head = ["FPGA", "array", "multipliers", "fits", "logic", "FFs", "DSP", "RAM", "Fmax MHz",
            "peak GOPS", "build time", "critical path start", "critical path end"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * 4 + "---:|" * 7 + "---|" * 2]
    for r in results:
        kind = (r["multipliers"] if r.get("multipliers", "auto") != "auto"
                else "DSP" if r.get("dsp") else "logic")
        minutes = f"{r['seconds'] / 60:.0f} min" if r.get("seconds") is not None else "-"
        if r.get("fits"):
            path = r.get("critical_path") or {}
            fmax = r["fmax_mhz"]
            cells = ["yes", _usage(r.get("logic")), _usage(r.get("ffs")),
                     _usage(r.get("dsp_blocks")), _usage(r.get("ram_blocks")), f"{fmax:.1f}",
                     f"{2 * r['rows'] * r['cols'] * fmax / 1000:.1f}", minutes,
                     _cell(path.get("start")), _cell(path.get("end"))]
        else:
            needed = r.get("needed", {})
            cells = ["NO"] + [_usage(needed.get(c)) for c in ("TRELLIS_COMB", "TRELLIS_FF",
                                                              "MULT18X18D", "DP16KD")]
            cells += ["-", "-", minutes, r.get("reason", "-"), ""]
        lines.append("| " + " | ".join([r.get("device", r["board"]), f"{r['rows']}x{r['cols']}",
                                         kind, *cells]) + " |")
    return "\n".join(lines)
