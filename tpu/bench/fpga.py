"""The FPGA table: the last `tpu build` of each board (``build/fpga/BOARD/build.json``,
written by `tpu.cli.fpga`) and the last `scripts/bench_fpga.py` run of the
matrix unit alone (``build/bench/fpga.json``). The suite builds nothing (a build
takes minutes to an hour) and reports the ones already made; `build_mxus` is
what scripts/bench_fpga.py runs to make the matrix unit's."""

import datetime
import json
import re
from pathlib import Path


__all__ = ["find_builds", "table", "routed_table", "mxu_table", "DEFAULT_RUNS", "parse_run",
           "text_table", "build_mxus", "save_mxus", "load_mxus"]

# The UP5K has 8 DSPs and yosys gives each 8x8 multiply a whole SB_MAC16, so
# a 4x4 array (16 multiplies) is tried both ways; likewise the ECP5-85F has
# 156 MULT18X18D and a 16x16 array has 256 multiplies.
#: The reference measurements of the matrix unit alone, ``BOARD:ROWSxCOLS:MULTIPLIERS``.
DEFAULT_RUNS = ["icebreaker:4x4:dsp", "icebreaker:4x4:nodsp",
                "ulx3s-85f:8x8:dsp", "ulx3s-85f:8x8:nodsp",
                "ulx3s-85f:16x16:dsp", "ulx3s-85f:16x16:nodsp"]


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


def routed_table():
    """Markdown of the whole chip's routed builds recorded in docs/fpga.md
    (`tpu.fpga.routed_clocks.ROUTED_CHIPS`), with each chip's peak GOPS at
    its routed clock and the clock `tpu build` now gives it by default."""
    from ..fpga.board_top import default_clock_hz
    from ..fpga.routed_clocks import ROUTED_CHIPS
    head = ["board", "chip", "array", "target MHz", "routed Fmax MHz", "peak GOPS at Fmax",
            "date", "tree", "default clock MHz now", "where"]
    lines = ["| " + " | ".join(head) + " |", "|---|---|---|" + "---:|" * 3 + "---|---|---:|---|"]
    for r in ROUTED_CHIPS:
        lines.append("| " + " | ".join(str(x) for x in (
            r.board, r.chip, f"{r.rows}x{r.cols}", f"{r.target_mhz:g}", f"{r.fmax_mhz:g}",
            f"{2 * r.rows * r.cols * r.fmax_mhz / 1000:.1f}", r.date, r.commit or "-",
            f"{default_clock_hz(r.board, r.profile) / 1e6:.4g}", r.source)) + " |")
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
                else "DSP" if r.get("dsp") else "logic") + _controls(r)
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


# -- the matrix unit alone on a board (scripts/bench_fpga.py) ----------------

def parse_run(text):
    """'board:RxC[:dsp|nodsp|mix|mix3|band3|dual]' -> (board, rows, cols, kind); ValueError naming
    what is wrong."""
    from ..fpga.build import BOARDS
    match = re.fullmatch(r"([\w-]+):(\d+)x(\d+)(?::(dsp|nodsp|mix3|mix|band3|dual))?", text)
    if not match:
        raise ValueError(f"{text!r} is not BOARD:ROWSxCOLS[:dsp|nodsp|mix|mix3|band3|dual]")
    board, rows, cols, dsp = match.groups()
    if board not in BOARDS:
        raise ValueError(f"unknown board {board!r}: choose one of {', '.join(BOARDS)}")
    rows, cols = int(rows), int(cols)
    if not (1 <= rows <= 256 and 1 <= cols <= 256):
        raise ValueError(f"{text!r}: rows and cols must be in 1..256")
    return board, rows, cols, dsp or "dsp"


def _controls(result):
    """How the weight controls were copied, for the multipliers column."""
    fanout = result.get("control_fanout")
    if not fanout:
        return ""
    return ", controls per row" if fanout == 1 else f", controls per {fanout} rows"


def _kind(result):
    if result.get("multipliers", "auto") != "auto":
        return result["multipliers"] + _controls(result)
    return ("dsp" if result["dsp"] else "nodsp") + _controls(result)


def _gops(result):
    return 2 * result["rows"] * result["cols"] * result["fmax_mhz"] / 1000


def text_table(results):
    """The plain-text table of `build_mxus` results, with why each one that does not
    fit does not."""
    header = ["board", "array", "mult", "fits", "logic", "FFs", "DSP blocks", "RAM", "Fmax MHz",
              "GOPS", "time s"]
    rows = []
    for r in results:
        if r["fits"]:
            rows.append([r["board"], f"{r['rows']}x{r['cols']}", _kind(r), "yes",
                         _usage(r["logic"]), _usage(r["ffs"]), _usage(r["dsp_blocks"]),
                         _usage(r["ram_blocks"]), f"{r['fmax_mhz']:.1f}", f"{_gops(r):.1f}",
                         f"{r['seconds']:.0f}"])
        else:
            needed = r.get("needed", {})
            dsp_cell = {"icebreaker": "ICESTORM_DSP", "ulx3s-85f": "MULT18X18D"}.get(r["board"])
            logic_cell = {"icebreaker": "ICESTORM_LC", "ulx3s-85f": "TRELLIS_COMB"}.get(r["board"])
            rows.append([r["board"], f"{r['rows']}x{r['cols']}", _kind(r), "NO",
                         _usage(needed.get(logic_cell)), "-", _usage(needed.get(dsp_cell)),
                         "-", "-", "-", f"{r['seconds']:.0f}"])
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    lines = ["  ".join(str(x).ljust(w) for x, w in zip(line, widths)) for line in [header, *rows]]
    lines.insert(1, "  ".join("-" * w for w in widths))
    for r in results:
        if not r["fits"]:
            lines.append(f"{r['board']} {r['rows']}x{r['cols']} dsp={r['dsp']} "
                         f"does not fit: {r['reason']}")
    return "\n".join(lines)


def build_mxus(runs, build_dir, log=print, router=None, control_fanout=None, placer=None):
    """Synthesise, place and route the matrix unit for each ``(board, rows, cols,
    kind)`` of `runs` (under ``build_dir/BOARD_RxC_KIND``, ``_fN`` added for a
    `control_fanout`) with nextpnr's `router` and `placer` (None: its defaults); the
    `build_mxu` results.
    A design that does not fit is a result; a missing tool raises FPGAToolMissing
    before anything is built."""
    from ..fpga.build import FPGAToolMissing, build_mxu, missing_fpga_tools
    for board in dict.fromkeys(board for board, *_ in runs):
        reason = missing_fpga_tools(board)
        if reason:
            raise FPGAToolMissing(reason)
    results = []
    for board, rows, cols, kind in runs:
        tag = f"{board}_{rows}x{cols}_{kind}" + (f"_f{control_fanout}" if control_fanout else "")
        log(f"building {tag} ...")
        result = build_mxu(board, rows, cols, build_dir=Path(build_dir) / tag,
                           dsp=kind != "nodsp",
                           multipliers=kind if kind not in ("dsp", "nodsp") else "auto", router=router,
                           control_fanout=control_fanout, placer=placer)
        if result["fits"]:
            log(f"  fits: {result['fmax_mhz']:.1f} MHz ({_gops(result):.1f} GOPS), "
                f"logic {_usage(result['logic'])}, DSP {_usage(result['dsp_blocks'])} "
                f"({result['seconds']:.0f} s)")
        else:
            log(f"  does not fit: {result['reason']} ({result['seconds']:.0f} s)")
        results.append(result)
    return results


def save_mxus(results, path):
    """Write `build_mxus` results to `path` with the date and the tools' versions."""
    from ..fpga.build import tool_versions
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({
        "date": datetime.date.today().isoformat(),
        "tools": tool_versions(),
        "results": results,
    }, indent=2) + "\n")


def load_mxus(paths):
    """The results saved by `save_mxus` in each of `paths`, one list; ValueError
    naming a file that is not such a result."""
    results = []
    for path in paths:
        try:
            results += json.loads(Path(path).read_text())["results"]
        except (OSError, ValueError, KeyError, TypeError) as error:
            raise ValueError(f"{path}: not a saved bench_fpga result ({error})") from None
    return results
