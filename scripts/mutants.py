"""Mutation testing: apply each plausible RTL bug of scripts/mutants.toml
alone, run the tests of its block, and report the mutation score and every
survivor.

    .venv/bin/python scripts/mutants.py                 # all mutants
    .venv/bin/python scripts/mutants.py seq-range-one-row dec-mmc-last-row
    .venv/bin/python scripts/mutants.py --list

Tests run under Icarus only (``-k "not verilator"``; Icarus builds take seconds) with a fixed
``TPU_SEED`` (``--seed``), stopping at the first failure. A mutant is killed
when a test fails (or the design no longer elaborates), survives when all
pass; one marked ``equivalent`` in the list is reported apart and left out of
the score; one whose tests outrun ``--timeout`` is reported as a timeout,
neither killed nor survived (a slow machine and a hang look alike). The
source file is restored after each mutant, also on Ctrl-C or SIGTERM.
Results go to ``build/mutants/report.json`` and ``report.md``. This takes
hours for the whole list: it is a benchmark, not part of the test suite.
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LIST = ROOT / "scripts" / "mutants.toml"


def load(path=LIST):
    """The blocks and the mutants, checked: every original occurs once, every
    test file exists."""
    data = tomllib.loads(path.read_text())
    blocks, mutants = data["blocks"], data["mutant"]
    seen = set()
    for m in mutants:
        if m["id"] in seen:
            raise SystemExit(f"mutants: error: mutant id {m['id']} appears twice in {path}")
        seen.add(m["id"])
        if m["block"] not in blocks:
            raise SystemExit(f"mutants: error: mutant {m['id']}: unknown block {m['block']!r}")
        count = (ROOT / m["file"]).read_text().count(m["original"])
        if count != 1:
            raise SystemExit(f"mutants: error: mutant {m['id']}: its original text occurs {count} "
                             f"times in {m['file']}, not once")
    for name, tests in blocks.items():
        for test in tests:
            if not (ROOT / test.split("::")[0]).exists():
                raise SystemExit(f"mutants: error: block {name}: no test file {test}")
    return blocks, mutants


def run_mutant(mutant, tests, *, seed, timeout):
    """Apply `mutant`, run `tests`; ``(outcome, seconds, last lines)``."""
    path = ROOT / mutant["file"]
    original = path.read_text()
    path.write_text(original.replace(mutant["original"], mutant["replacement"], 1))
    start = time.monotonic()
    try:
        env = {**os.environ, "TPU_SEED": str(seed), "PYTHONWARNINGS": "error", "TPU_REGRESS_SIM": "icarus"}
        command = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider",
                   "-k", "not verilator", *tests]
        try:
            done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True,
                                  timeout=timeout)
        except subprocess.TimeoutExpired:
            # Slow tests on a busy machine look the same as a hang the
            # mutant caused: not a verdict either way.
            return "timeout", time.monotonic() - start, ""
        tail = "\n".join(done.stdout.strip().splitlines()[-3:])
        if done.returncode == 0:
            return "survived", time.monotonic() - start, tail
        if done.returncode == 5:
            return "no tests", time.monotonic() - start, tail
        return "killed", time.monotonic() - start, tail
    finally:
        path.write_text(original)


def _markdown(results, score):
    lines = ["# Mutation testing", "", f"Score: {score}", "",
             "| mutant | file | outcome | seconds | bug |", "|---|---|---|---|---|"]
    for r in results:
        lines.append(f"| {r['id']} | {r['file']} | {r['outcome']} | {r['seconds']:.0f} | {r['description']} |")
    return "\n".join(lines) + "\n"


def _stop(signum, frame):
    raise KeyboardInterrupt


def main(argv=None):
    # Started in the background, a shell ignores SIGINT for us: let SIGINT
    # and SIGTERM both stop the run the same way, restoring the source.
    signal.signal(signal.SIGINT, _stop)
    signal.signal(signal.SIGTERM, _stop)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("ids", nargs="*", help="mutants to run (default: all)")
    parser.add_argument("--list", action="store_true", help="list the mutants and exit")
    parser.add_argument("--seed", type=int, default=1, help="TPU_SEED of the tests (default 1)")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds per mutant (default 1800)")
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "mutants", help="report directory")
    parser.add_argument("--tests", nargs="+", metavar="TEST",
                        help="run these tests (pytest arguments) instead of each block's; e.g. whole "
                             "test files, to confirm a survivor of a block's narrowed selection")
    args = parser.parse_args(argv)
    blocks, mutants = load()
    if args.list:
        for m in mutants:
            print(f"{m['id']:32} {m['file']:28} {m['description']}")
        print(f"{len(mutants)} mutants over {len({m['file'] for m in mutants})} files")
        return 0
    unknown = set(args.ids) - {m["id"] for m in mutants}
    if unknown:
        parser.error(f"unknown mutant {sorted(unknown)[0]} (see --list)")
    dirty = subprocess.run(["git", "status", "--porcelain", "hdl"], cwd=ROOT, capture_output=True,
                           text=True).stdout.strip()
    if dirty:
        parser.error(f"hdl/ has uncommitted changes; commit or stash them first:\n{dirty}")
    chosen = [m for m in mutants if not args.ids or m["id"] in args.ids]
    args.out.mkdir(parents=True, exist_ok=True)
    results = []
    for m in chosen:
        if m.get("equivalent"):
            outcome, seconds, tail = "equivalent", 0.0, m["equivalent"]
        else:
            tests = args.tests or blocks[m["block"]]
            outcome, seconds, tail = run_mutant(m, tests, seed=args.seed, timeout=args.timeout)
        results.append({**m, "outcome": outcome, "seconds": seconds, "tail": tail})
        print(f"{m['id']:32} {outcome:18} {seconds:6.0f} s  {m['description']}", flush=True)
        (args.out / "report.json").write_text(json.dumps(results, indent=1))
    scored = [r for r in results if r["outcome"] not in ("equivalent", "no tests", "timeout")]
    killed = sum(r["outcome"].startswith("killed") for r in scored)
    score = f"{killed} of {len(scored)} killed ({100 * killed / max(1, len(scored)):.0f}%)"
    (args.out / "report.md").write_text(_markdown(results, score))
    print(f"mutation score: {score}")
    for r in results:
        if r["outcome"] in ("survived", "no tests", "timeout"):
            print(f"  {r['outcome']}: {r['id']} ({r['file']}): {r['description']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
