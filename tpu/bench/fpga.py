"""The FPGA table: the last `tpu build` of each board (``build/fpga/BOARD/build.json``,
written by `tpu.cli_fpga`) and the last `scripts/bench_fpga.py` run of the
matrix unit alone (``build/bench/fpga.json``). Nothing is built here: a build
takes minutes to an hour, so the suite reports the ones already made."""

import json
from pathlib import Path


__all__ = ["find_builds", "table"]


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
