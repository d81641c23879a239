"""Mutation testing: apply each plausible RTL bug of scripts/mutants.toml
alone, run the tests of its block, and report the mutation score and every
survivor.

    .venv/bin/python scripts/mutants.py                 # all mutants
    .venv/bin/python scripts/mutants.py seq-range-one-row dec-mmc-last-row
    .venv/bin/python scripts/mutants.py --list
    .venv/bin/python scripts/mutants.py --sample 20 --draw-seed 1
    .venv/bin/python scripts/mutants.py --sample 20 --draw-seed 1 2 3 --workers 2
    .venv/bin/python scripts/mutants.py --generated decoder-cmp-8c1f7d2e

``--sample N`` draws N mutants at random (``--draw-seed``; several seeds
make one run of their draws together, scored per seed and in all) from those
scripts/mutant_generator.py enumerates over every hdl/ file, not from the
hand-written list, and runs each against the tests of its file: the blocks
of the hand-written mutants of that file (every hdl/ file has one). Report
and console show each survivor's diff. A generated mutant no test can kill
is named, with the reason, in scripts/mutants_equivalent.toml.

Tests run under Icarus only (``-k "not verilator"``; Icarus builds take seconds), every case
of them (``TPU_LONG=1``, not the CI run's cut, docs/testing.md), with a fixed
``TPU_SEED`` (``--seed``), stopping at the first failure (``-x``), in the
order the list gives them: a generated mutant runs its file's Amaranth
simulator unit tests first (the list's ``[first]`` table), then its blocks'
tests, fastest first. So a survivor here has passed the Icarus half of its
blocks; confirm it on both simulators with ``--tests FILE...`` and
``--all-simulators`` before calling it one. ``--workers 2`` runs two mutants
at once, the second in a copy of the tree under ``build/mutants/worker-1``
with its own ``.venv`` (made once with ``make .venv/.installed``; the
sources are copied again at each run), since a mutant is applied by
rewriting its file in place. ``--resume`` keeps the verdicts of an
interrupted run's report and runs the rest. A mutant is killed
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
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LIST = ROOT / "scripts" / "mutants.toml"
EQUIVALENT = ROOT / "scripts" / "mutants_equivalent.toml"

sys.path.insert(0, str(ROOT / "scripts"))
import mutant_generator  # noqa: E402  (a file of scripts/, beside this one)


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
    for name, tests in data.get("first", {}).items():
        for test in tests:
            if not (ROOT / test.split("::")[0]).exists():
                raise SystemExit(f"mutants: error: first tests of {name}: no test file {test}")
    return blocks, mutants


def first_tests(path=LIST):
    """File -> its Amaranth-simulator unit tests, run before its blocks' tests."""
    return tomllib.loads(path.read_text()).get("first", {})


def tests_of_files(blocks, mutants, first=None):
    """File -> its ``first`` tests, then the tests of the blocks its
    hand-written mutants name, in order, once each."""
    tests = {file: list(chosen) for file, chosen in (first or {}).items()}
    for m in mutants:
        chosen = tests.setdefault(m["file"], [])
        chosen += [t for t in blocks[m["block"]] if t not in chosen]
    return tests


def load_equivalent(path=EQUIVALENT):
    """Generated mutant id -> why no test can kill it."""
    if not path.exists():
        return {}
    entries = tomllib.loads(path.read_text()).get("equivalent", [])
    reasons = {}
    for e in entries:
        if e["id"] in reasons:
            raise SystemExit(f"mutants: error: equivalent mutant {e['id']} appears twice in {path}")
        if not e.get("reason", "").strip():
            raise SystemExit(f"mutants: error: equivalent mutant {e['id']} has no reason in {path}")
        reasons[e["id"]] = e["reason"]
    return reasons


def generated_entry(g, source=None):
    """A generated mutant as run_mutant and the reports take it; `source`
    is its file's unmutated text (read from the worktree if not given: with
    several workers that file may be another mutant's at the time)."""
    source = (ROOT / g.file).read_text() if source is None else source
    return {"id": g.id, "file": g.file, "line": g.line, "kind": g.kind,
            "description": f"line {g.line}: {g.description}",
            "mutate": lambda text, g=g: mutant_generator.apply(text, g),
            "diff": mutant_generator.diff(source, g)}


class Tree:
    """A checkout the mutants are applied in: the worktree itself, or a copy
    of its sources with its own .venv (a mutant rewrites its file in place,
    so two at once need two trees)."""

    def __init__(self, root):
        self.root = root
        self.python = sys.executable if root == ROOT else str(root / ".venv" / "bin" / "python")
        self.process = None
        self.restore = None     # (path, original text) while a mutant is applied

    @classmethod
    def copy(cls, index):
        """The copy ``build/mutants/worker-<index>``, its sources made equal
        to the worktree's (tracked and untracked, not ignored), its .venv
        made if missing."""
        root = ROOT / "build" / "mutants" / f"worker-{index}"
        files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT,
                               capture_output=True, text=True, check=True).stdout.split("\0")
        for name in filter(None, files):
            source, target = ROOT / name, root / name
            if source.is_file():
                target.parent.mkdir(parents=True, exist_ok=True)
                if not target.exists() or target.read_bytes() != source.read_bytes():
                    shutil.copy2(source, target)
        if not (root / ".venv" / ".installed").exists():
            print(f"mutants: making {root}/.venv for a second worker (once; a minute or two)", flush=True)
            subprocess.run(["make", ".venv/.installed"], cwd=root, check=True, capture_output=True)
        return cls(root)

    def stop(self):
        """Kill the running tests (their whole process group) and restore the source."""
        if self.process and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
        if self.restore:
            path, original = self.restore
            path.write_text(original)
            self.restore = None


def run_mutant(mutant, tests, *, seed, timeout, tree=None, simulators="icarus"):
    """Apply `mutant` in `tree` (default the worktree), run `tests`;
    ``(outcome, seconds, last lines)``."""
    tree = tree or Tree(ROOT)
    path = tree.root / mutant["file"]
    original = path.read_text()
    tree.restore = (path, original)
    if "mutate" in mutant:
        path.write_text(mutant["mutate"](original))
    else:
        path.write_text(original.replace(mutant["original"], mutant["replacement"], 1))
    start = time.monotonic()
    try:
        # TPU_LONG: every case of the blocks' tests, not the CI run's cut
        # (whose Icarus half is one case a test).
        env = {**os.environ, "TPU_SEED": str(seed), "PYTHONWARNINGS": "error", "TPU_LONG": "1"}
        command = [tree.python, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *tests]
        if simulators == "icarus":
            env["TPU_REGRESS_SIM"] = "icarus"
            command[-len(tests):-len(tests)] = ["-k", "not verilator"]
        # Its own process group, so that a timeout also ends the simulators
        # the tests started.
        tree.process = subprocess.Popen(command, cwd=tree.root, env=env, stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT, text=True, start_new_session=True)
        try:
            out, _ = tree.process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(tree.process.pid, signal.SIGKILL)
            tree.process.communicate()
            # Slow tests on a busy machine look the same as a hang the
            # mutant caused: not a verdict either way.
            return "timeout", time.monotonic() - start, ""
        tail = "\n".join(out.strip().splitlines()[-3:])
        if tree.process.returncode == 0:
            return "survived", time.monotonic() - start, tail
        if tree.process.returncode == 5:
            return "no tests", time.monotonic() - start, tail
        return "killed", time.monotonic() - start, tail
    finally:
        path.write_text(original)
        tree.restore = None


def _markdown(results, score, heading="Mutation testing"):
    lines = [f"# {heading}", "", f"Score: {score}", "",
             "| mutant | file | outcome | seconds | bug |", "|---|---|---|---|---|"]
    for r in results:
        lines.append(f"| {r['id']} | {r['file']} | {r['outcome']} | {r['seconds']:.0f} | {r['description']} |")
    for r in results:
        if r.get("diff") and r["outcome"] in ("survived", "timeout", "no tests", "equivalent"):
            lines += ["", f"## {r['id']} ({r['outcome']})", "", "```diff", r["diff"].rstrip(), "```"]
    return "\n".join(lines) + "\n"


def _check_clean(parser):
    dirty = subprocess.run(["git", "status", "--porcelain", "hdl"], cwd=ROOT, capture_output=True,
                           text=True).stdout.strip()
    if dirty:
        parser.error(f"hdl/ has uncommitted changes; commit or stash them first:\n{dirty}")


def run_generated(args, parser, blocks, mutants):
    """The ``--sample``/``--generated`` run: like the hand-written one, over
    generated mutants, with their diffs."""
    every = mutant_generator.all_mutants(ROOT)
    equivalent = load_equivalent()
    by_id = {g.id: g for g in every}
    stale = sorted(set(equivalent) - set(by_id))
    if stale:
        print(f"mutants: warning: {len(stale)} equivalent entries name no mutant of today's hdl/: "
              f"{', '.join(stale)}", file=sys.stderr)
    seeds = {}
    if args.generated:
        unknown = [i for i in args.generated if i not in by_id]
        if unknown:
            parser.error(f"unknown generated mutant {unknown[0]} (see --list-generated)")
        chosen = [by_id[i] for i in args.generated]
    elif args.sample is not None:
        if not 0 < args.sample <= len(every):
            parser.error(f"--sample must be from 1 to {len(every)}, the generated mutants")
        chosen, seeds = [], {}
        for seed in args.draw_seed:
            for g in mutant_generator.sample(every, args.sample, seed):
                seeds.setdefault(g.id, []).append(seed)
                if len(seeds[g.id]) == 1:
                    chosen.append(g)
    else:
        chosen = every
    if args.list_generated:
        for g in chosen:
            print(f"{g.id:36} {g.file}:{g.line:<5} {g.description}")
        print(f"{len(chosen)} of {len(every)} generated mutants over {len({g.file for g in every})} files")
        return 0
    _check_clean(parser)
    tests_of = tests_of_files(blocks, mutants, first_tests())
    args.out.mkdir(parents=True, exist_ok=True)
    name = (f"sample-{args.sample}-seed-{'-'.join(map(str, args.draw_seed))}" if args.sample is not None
            else "generated")
    if args.name:
        name = args.name
    sources = {g.file: (ROOT / g.file).read_text() for g in chosen}
    done = {}
    if args.resume and (args.out / f"{name}.json").exists():
        # Verdicts of an interrupted run of the same draw are kept; its
        # timeouts run again.
        done = {r["id"]: r for r in json.loads((args.out / f"{name}.json").read_text())
                if r["outcome"] in ("killed", "survived", "equivalent", "no tests")}
    trees = [Tree(ROOT)] + [Tree.copy(k) for k in range(1, args.workers)]
    simulators = "all" if args.all_simulators else "icarus"
    results = [None] * len(chosen)
    todo = queue.Queue()
    for index, g in enumerate(chosen):
        if g.id in done:
            results[index] = done[g.id] | {"draw_seeds": seeds.get(g.id, []),
                                           "diff": mutant_generator.diff(sources[g.file], g)}
            print(f"{g.id:36} {done[g.id]['outcome']:10} {done[g.id]['seconds']:6.0f} s  (an earlier run)")
        else:
            todo.put((index, g))
    lock = threading.Lock()
    start = time.monotonic()

    def work(tree):
        while True:
            try:
                index, g = todo.get_nowait()
            except queue.Empty:
                return
            m = generated_entry(g, sources[g.file])
            if g.id in equivalent:
                outcome, seconds, tail = "equivalent", 0.0, equivalent[g.id]
            else:
                tests = args.tests or tests_of.get(g.file)
                if not tests:
                    outcome, seconds, tail = "no tests", 0.0, f"no hand-written mutant names {g.file}"
                else:
                    outcome, seconds, tail = run_mutant(m, tests, seed=args.seed, timeout=args.timeout,
                                                        tree=tree, simulators=simulators)
            with lock:
                results[index] = ({k: v for k, v in m.items() if k != "mutate"}
                                  | {"outcome": outcome, "seconds": seconds, "tail": tail,
                                     "draw_seeds": seeds.get(g.id, [])})
                print(f"{g.id:36} {outcome:10} {seconds:6.0f} s  {g.file}:{g.line} {g.description}", flush=True)
                (args.out / f"{name}.json").write_text(json.dumps([r for r in results if r], indent=1))

    failures = []

    def guarded(tree):
        try:
            work(tree)
        except BaseException as e:     # reported by the main thread, which stops the others
            failures.append(e)

    threads = [threading.Thread(target=guarded, args=(tree,), daemon=True) for tree in trees]
    for thread in threads:
        thread.start()
    try:
        while any(thread.is_alive() for thread in threads):
            if failures:
                raise failures[0]
            time.sleep(0.5)
    except BaseException:
        for tree in trees:
            tree.stop()
        raise
    results = [r for r in results if r]
    score = _score(results)
    total = time.monotonic() - start
    if len(args.draw_seed) > 1 and args.sample is not None:
        score += "".join(f"; seed {seed}: " + _score([r for r in results if seed in r["draw_seeds"]])
                         for seed in args.draw_seed)
    (args.out / f"{name}.md").write_text(_markdown(results, f"{score}; {total:.0f} s in all",
                                                   f"Generated mutants: {name}"))
    print(f"mutation score: {score} ({total:.0f} s with {args.workers} worker(s), "
          f"{total / max(1, len(results)):.0f} s a mutant)")
    for r in results:
        if r["outcome"] in ("survived", "no tests", "timeout"):
            print(f"  {r['outcome']}: {r['id']} ({r['file']}): {r['description']}\n{r['diff']}")
    return 0


def _score(results):
    scored = [r for r in results if r["outcome"] not in ("equivalent", "no tests", "timeout")]
    killed = sum(r["outcome"].startswith("killed") for r in scored)
    return f"{killed} of {len(scored)} killed ({100 * killed / max(1, len(scored)):.0f}%)"


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
    parser.add_argument("--sample", type=int, metavar="N",
                        help="draw N generated mutants at random instead of the hand-written list")
    parser.add_argument("--draw-seed", type=int, nargs="+", default=[1],
                        help="seed(s) of the --sample draw (default 1)")
    parser.add_argument("--generated", nargs="+", metavar="ID", help="run these generated mutants")
    parser.add_argument("--list-generated", action="store_true",
                        help="list the generated mutants (of --sample, if given) and exit")
    parser.add_argument("--tests", nargs="+", metavar="TEST",
                        help="run these tests (pytest arguments) instead of each block's; e.g. whole "
                             "test files, to confirm a survivor of a block's narrowed selection")
    parser.add_argument("--workers", type=int, default=1,
                        help="generated mutants run at once, each in its own tree (default 1)")
    parser.add_argument("--all-simulators", action="store_true",
                        help="run the tests under every simulator, not Icarus alone: to confirm a survivor")
    parser.add_argument("--name", help="report name under --out (default sample-N-seed-S)")
    parser.add_argument("--resume", action="store_true",
                        help="keep the verdicts of an interrupted run's report of the same name; run the rest")
    args = parser.parse_args(argv)
    if args.workers < 1:
        parser.error("--workers must be at least 1")
    blocks, mutants = load()
    if args.sample is not None or args.generated or args.list_generated:
        return run_generated(args, parser, blocks, mutants)
    if args.list:
        for m in mutants:
            print(f"{m['id']:32} {m['file']:28} {m['description']}")
        print(f"{len(mutants)} mutants over {len({m['file'] for m in mutants})} files")
        return 0
    unknown = set(args.ids) - {m["id"] for m in mutants}
    if unknown:
        parser.error(f"unknown mutant {sorted(unknown)[0]} (see --list)")
    _check_clean(parser)
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
    score = _score(results)
    (args.out / "report.md").write_text(_markdown(results, score))
    print(f"mutation score: {score}")
    for r in results:
        if r["outcome"] in ("survived", "no tests", "timeout"):
            print(f"  {r['outcome']}: {r['id']} ({r['file']}): {r['description']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
