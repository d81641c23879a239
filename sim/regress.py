"""Random regressions at scale: the configurations they run on, and the
summary of their reports.

`tests/test_regress.py` runs the programs (batches of `random_batch` in
``tb_core`` per simulation, and ``tb_dma``'s error cases), sharded over the
cores by pytest-xdist; each batch appends JSON lines to a report in the
regression's directory. ``python -m tpu.sim.regress DIR`` (``make regress``
calls it) reads them and writes ``DIR/summary.md`` and ``DIR/summary.json``:
programs run and failed per configuration, each failure with the command
that replays it, and the functional coverage of `tpu.sim.stimulus.coverage`
(bins hit, how often, and every bin missed).
"""

import json
import sys
from collections import Counter
from pathlib import Path

from ..config import TPUConfig
from .stimulus.coverage import all_bins


__all__ = ["CONFIGS", "config_named", "summarize"]

#: The configurations a regression runs on, by name (rows x cols): small
#: memories keep the runs fast and the range edges close.
CONFIGS = {
    "4x4": TPUConfig(rows=4, cols=4, acc_rows=32, ub_rows=64, weight_mem_tiles=8, weight_fifo_tiles=2,
                     weight_mem_latency=3, weight_mem_bytes_per_cycle=4, pool_max_width=8),
    "8x8": TPUConfig(rows=8, cols=8, acc_rows=48, ub_rows=64, weight_mem_tiles=8, weight_fifo_tiles=3,
                     weight_mem_latency=9, weight_mem_bytes_per_cycle=8, pool_max_width=8),
    "16x16": TPUConfig(rows=16, cols=16, acc_rows=64, ub_rows=96, weight_mem_tiles=6,
                       weight_fifo_tiles=2, weight_mem_latency=5, weight_mem_bytes_per_cycle=16,
                       pool_max_width=8),
}


def config_named(name):
    """The `CONFIGS` entry `name`; a clear error for any other."""
    if name not in CONFIGS:
        raise ValueError(f"unknown regression configuration {name!r}: choose from {', '.join(CONFIGS)}")
    return CONFIGS[name]


def _replay(record):
    """The command that replays the batch up to the failing program."""
    first, failed = record["first_seed"], record["seed"]
    count = failed - first + 1
    return (f"TPU_SEED={first} TPU_REGRESS_PROGRAMS={count} TPU_REGRESS_BATCH={count} "
            f"TPU_REGRESS_CONFIGS={record['config']} TPU_REGRESS_SIM={record['simulator']} "
            f"PYTHONWARNINGS=error .venv/bin/python -m pytest tests/test_regress.py -k core_batch")


def summarize(directory):
    """Read the reports in `directory`; write and return the summary (a dict)."""
    directory = Path(directory)
    records = []
    for path in sorted(directory.glob("*.jsonl")):
        # A batch stopped before its end leaves its lines unannotated:
        # ``<kind>-<configuration>-<first seed>.jsonl`` names them.
        kind, name, first = path.stem.split("-")
        for line in path.read_text().splitlines():
            if line.strip():
                record = json.loads(line)
                record.setdefault("config", name)
                record.setdefault("first_seed", int(first))
                record.setdefault("simulator", "verilator")
                records.append(record)
    per_config = {}
    hits = Counter()
    for r in records:
        c = per_config.setdefault(r["config"], {"programs": 0, "failed": 0, "faults": Counter(),
                                                "seeds": [], "dma_runs": 0, "bins": Counter()})
        if r.get("kind") == "dma":
            c["dma_runs"] += 1
        else:
            c["programs"] += 1
            c["faults"][r.get("fault", "NONE")] += 1
            if r.get("seed") is not None:
                c["seeds"].append(r["seed"])
        c["failed"] += not r["passed"]
        c["bins"].update(r["bins"])
        hits.update(r["bins"])
    expected = all_bins()
    failures = [{**r, "replay": _replay(r) if r.get("seed") is not None else r.get("replay")}
                for r in records if not r["passed"]]
    summary = {
        "configs": {name: {"programs": c["programs"], "failed": c["failed"], "dma_runs": c["dma_runs"],
                           "seeds": _ranges(c["seeds"]), "faults": dict(c["faults"]),
                           "bins_hit": len(set(c["bins"]) & expected),
                           "bins_missed": sorted(expected - set(c["bins"]))}
                    for name, c in sorted(per_config.items())},
        "bins": len(expected),
        "bins_hit": len(set(hits) & expected),
        "missed": sorted(expected - set(hits)),
        "hits": dict(sorted(hits.items())),
        "failures": failures,
    }
    (directory / "summary.json").write_text(json.dumps(summary, indent=1))
    (directory / "summary.md").write_text(_markdown(summary))
    return summary


def _ranges(seeds):
    """Seeds as ``first-last`` runs."""
    out = []
    for s in sorted(set(seeds)):
        if out and s == out[-1][1] + 1:
            out[-1][1] = s
        else:
            out.append([s, s])
    return [f"{a}-{b}" if a != b else str(a) for a, b in out]


def _markdown(summary):
    lines = ["# Regression summary", "",
             "| configuration | programs | failed | DMA runs | faulting programs | bins hit |",
             "|---|---|---|---|---|---|"]
    for name, c in summary["configs"].items():
        faulting = sum(n for f, n in c["faults"].items() if f != "NONE")
        lines.append(f"| {name} | {c['programs']} | {c['failed']} | {c['dma_runs']} | {faulting} | "
                     f"{c['bins_hit']} of {summary['bins']} |")
    lines += ["", f"Coverage: {summary['bins_hit']} of {summary['bins']} bins hit over all configurations.", ""]
    if summary["missed"]:
        lines += ["Missed: " + ", ".join(f"`{b}`" for b in summary["missed"]), ""]
    lines += ["## Failures", ""]
    if not summary["failures"]:
        lines.append("None.")
    for f in summary["failures"]:
        lines += [f"- {f['config']}, seed {f.get('seed')}: {f['failure']}", f"  replay: `{f['replay']}`"]
    groups = Counter(b.split(":")[0] for b in summary["hits"])
    lines += ["", "## Bins", "", "| group | bins hit |", "|---|---|"]
    lines += [f"| {g} | {n} |" for g, n in sorted(groups.items())]
    lines += ["", "| bin | hits |", "|---|---|"]
    lines += [f"| `{b}` | {n} |" for b, n in summary["hits"].items()]
    return "\n".join(lines) + "\n"


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m tpu.sim.regress DIR", file=sys.stderr)
        return 2
    if not Path(argv[0]).is_dir():
        print(f"regress: error: no regression directory {argv[0]}", file=sys.stderr)
        return 2
    summary = summarize(argv[0])
    print(Path(argv[0]) / "summary.md")
    for name, c in summary["configs"].items():
        print(f"{name}: {c['programs']} programs, {c['failed']} failed, {c['dma_runs']} DMA runs, "
              f"{c['bins_hit']} of {summary['bins']} bins")
    print(f"coverage: {summary['bins_hit']} of {summary['bins']} bins; missed: {len(summary['missed'])}")
    return 1 if summary["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
