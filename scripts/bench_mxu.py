#!/usr/bin/env python3
"""Matrix-engine measurements: MXU utilisation, simulation speed, elaboration cost.

Two modes:

* default: runs the cocotb module ``tpu.sim.bench.bench_matrix_engine`` through
  ``tpu.sim.harness.run`` for each configuration and simulator, collects the
  JSON each run writes, prints a table and saves ``build/bench/mxu.json``;
* ``--elaborate [R C]``: generates the Verilog of ``TPUConfig(rows=R,
  cols=C)`` (default 256 x 256) in a child process and reports its wall time,
  peak resident memory and Verilog size, merged into
  ``build/bench/elaborate.json``.

Examples::

    python scripts/bench_mxu.py
    python scripts/bench_mxu.py --configs 8x8 --simulators verilator
    python scripts/bench_mxu.py --elaborate 64 64
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tpu import TPUConfig
from tpu.sim.harness import BUILD_ROOT, SIMULATORS, missing_simulator, run


BENCH_MODULE = "tpu.sim.bench.bench_matrix_engine"
# Each in a simulation of its own: the design is not reset between cocotb tests.
BENCH_TESTS = ("utilisation", "sim_speed", "sim_speed_free_run")
BENCH_DIR = BUILD_ROOT / "bench"


def _shape(text):
    try:
        rows, cols = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected ROWSxCOLS, e.g. 8x8, not {text!r}")
    return rows, cols


# Simulation benchmarks ---------------------------------------------------

def run_simulation(args):
    results = {}
    for rows, cols in args.configs:
        config = TPUConfig(rows=rows, cols=cols, acc_rows=args.acc_rows)
        for simulator in args.simulators:
            key = f"{config.name}/{simulator}"
            reason = missing_simulator(simulator)
            if reason:
                print(f"{key}: skipped: {reason}", file=sys.stderr)
                continue
            out = BENCH_DIR / "runs" / f"{config.name}-{simulator}.json"
            out.parent.mkdir(parents=True, exist_ok=True)
            if set(args.tests) == set(BENCH_TESTS):
                out.unlink(missing_ok=True)      # else: add to the results already there
            env = {
                "TPU_BENCH_OUT": str(out.resolve()),
                "TPU_BENCH_TILES": str(args.tiles),
                "TPU_BENCH_CYCLES": str(args.cycles),
            }
            if args.batches:
                env["TPU_BENCH_BATCHES"] = ",".join(args.batches)
            print(f"{key}: running {BENCH_MODULE} ...", file=sys.stderr, flush=True)
            load_before = os.getloadavg()[0]
            start = time.perf_counter()
            tests = failures = 0
            for testcase in args.tests:
                ran, failed = run(config, simulator, BENCH_MODULE, testcase=testcase,
                                  seed=args.seed, extra_env=env)
                tests, failures = tests + ran, failures + failed
            elapsed = time.perf_counter() - start
            if not out.exists():
                print(f"{key}: the benchmark wrote no results (see the simulation log under "
                      f"{BUILD_ROOT / 'sim' / simulator})", file=sys.stderr)
                continue
            data = json.loads(out.read_text())
            data["tests"], data["failures"] = tests, failures
            data["run_seconds"] = round(elapsed, 2)
            # Other work on the machine slows the simulators: keep the evidence.
            data["load_average"] = [round(load_before, 2), round(os.getloadavg()[0], 2)]
            data["cpus"] = os.cpu_count()
            results[key] = data
            if failures:
                print(f"{key}: {failures} of {tests} benchmark tests FAILED", file=sys.stderr)
    return results


def _pct(value):
    return f"{100 * value:6.2f}%"


def print_simulation_table(results):
    lines = []
    util_rows = []
    speed_rows = []
    for key, data in results.items():
        for m in data.get("utilisation", []):
            util_rows.append((key, m))
        if "sim_speed" in data:
            speed_rows.append((key, data["sim_speed"], data.get("sim_speed_free_run")))
    if util_rows:
        lines.append(f"{'config/simulator':22} {'tiles':>5} {'B':>6} {'cycles':>7} {'ideal':>7} "
                     f"{'utilisation':>11} {'ideal':>7} {'steady':>7} {'ideal':>7}")
        for key, m in util_rows:
            lines.append(f"{key:22} {m['tiles']:5d} {m['batch']:6d} {m['cycles']:7d} "
                         f"{m['ideal_cycles']:7d} {_pct(m['utilisation']):>11} "
                         f"{_pct(m['ideal_utilisation'])} {_pct(m['steady_utilisation'])} "
                         f"{_pct(m['ideal_steady_utilisation'])}")
        lines.append("")
    if speed_rows:
        lines.append(f"{'config/simulator':22} {'cycles':>7} {'seconds':>8} {'cycles/s':>9} "
                     f"{'cycles/CPU-s':>12} {'free-run cycles/s':>18} {'cycles/CPU-s':>12}")
        for key, s, free in speed_rows:
            free = free or {}
            lines.append(f"{key:22} {s['cycles']:7d} {s['seconds']:8.2f} "
                         f"{s['cycles_per_second']:9.0f} {s.get('cycles_per_cpu_second', 0):12.0f} "
                         f"{free.get('cycles_per_second', 0):18.0f} "
                         f"{free.get('cycles_per_cpu_second', 0):12.0f}")
    print("\n".join(lines))


# Elaboration benchmark ---------------------------------------------------

# Runs in a child process, so that its peak memory is its own.
_CHILD = r"""
import json, resource, sys, time
rows, cols, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
start = time.perf_counter()
from tpu import TPUConfig
from tpu.hdl import generate_verilog
imported = time.perf_counter()
text = generate_verilog(TPUConfig(rows=rows, cols=cols), top="engine")
done = time.perf_counter()
with open(out, "w") as f:
    f.write(text)
me = resource.getrusage(resource.RUSAGE_SELF)
kids = resource.getrusage(resource.RUSAGE_CHILDREN)   # the Yosys process
print(json.dumps({
    "import_seconds": imported - start,
    "generate_seconds": done - imported,
    "python_max_rss_kb": me.ru_maxrss,
    "python_cpu_seconds": me.ru_utime + me.ru_stime,
    "yosys_cpu_seconds": kids.ru_utime + kids.ru_stime,
    "verilog_bytes": len(text.encode()),
    "verilog_lines": text.count("\n"),
}))
"""


def _process_tree(pid):
    """{pid: (VmRSS, VmHWM)} in KiB for `pid` and all its descendants."""
    found, stack = {}, [pid]
    while stack:
        p = stack.pop()
        if p in found:
            continue
        try:
            fields = {}
            with open(f"/proc/{p}/status") as f:
                for line in f:
                    key, _, value = line.partition(":")
                    if key in ("VmRSS", "VmHWM"):
                        fields[key] = int(value.split()[0])
            found[p] = (fields.get("VmRSS", 0), fields.get("VmHWM", 0))
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as f:
                    stack.extend(int(c) for c in f.read().split())
        except (FileNotFoundError, ProcessLookupError, PermissionError, ValueError):
            continue
    return found


def elaborate(rows, cols, *, timeout, max_rss_gb, keep_verilog):
    config = TPUConfig(rows=rows, cols=cols)   # validates the shape
    BENCH_DIR.mkdir(parents=True, exist_ok=True)
    verilog_path = BENCH_DIR / f"elaborate-{config.name}.v"
    limit_kb = int(max_rss_gb * 1024 * 1024)
    with tempfile.TemporaryFile("w+") as stdout, tempfile.TemporaryFile("w+") as stderr:
        start = time.perf_counter()
        child = subprocess.Popen([sys.executable, "-c", _CHILD, str(rows), str(cols),
                                  str(verilog_path)],
                                 stdout=stdout, stderr=stderr, start_new_session=True)
        # Sampled: the resident memory of the whole tree at once (the Python
        # process keeps its memory while Yosys runs), and each descendant's
        # own high-water mark (the Yosys process).
        peak_kb, python_hwm_kb, yosys_hwm_kb = 0, 0, 0
        stopped, status, usage, yosys_seen = None, None, None, None
        while True:
            pid, status, usage = os.wait4(child.pid, os.WNOHANG)
            if pid == child.pid:
                break
            tree = _process_tree(child.pid)
            peak_kb = max(peak_kb, sum(rss for rss, _ in tree.values()))
            python_hwm_kb = max(python_hwm_kb, tree.get(child.pid, (0, 0))[1])
            yosys_hwm_kb = max([yosys_hwm_kb] + [hwm for p, (_, hwm) in tree.items()
                                                 if p != child.pid])
            elapsed = time.perf_counter() - start
            if yosys_seen is None and len(tree) > 1:
                yosys_seen = elapsed
            if stopped is None and elapsed > timeout:
                stopped = f"stopped after {elapsed:.0f} s (limit {timeout:.0f} s)"
            elif stopped is None and peak_kb > limit_kb:
                stopped = f"stopped at {peak_kb / 2**20:.1f} GiB resident (limit {max_rss_gb} GiB)"
            if stopped is not None:
                os.killpg(child.pid, signal.SIGKILL)   # the child's own process group
            time.sleep(0.25)
        child.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - start
        stdout.seek(0)
        stderr.seek(0)
        out_text, err_text = stdout.read(), stderr.read()

    result = {
        "rows": rows, "cols": cols,
        "wall_seconds": round(wall, 2),
        "peak_tree_rss_mb": round(peak_kb / 1024, 1),       # sum over the tree, sampled
        "python_max_rss_mb": round(python_hwm_kb / 1024, 1),  # sampled VmHWM
        "yosys_max_rss_mb": round(yosys_hwm_kb / 1024, 1),    # sampled VmHWM
        "cpu_seconds": round(usage.ru_utime + usage.ru_stime, 2),
        "yosys_started_seconds": None if yosys_seen is None else round(yosys_seen, 1),
        "exit_code": child.returncode,
        "load_average": round(os.getloadavg()[0], 2),
        "cpus": os.cpu_count(),
    }
    if stopped is not None:
        result["stopped"] = stopped
    elif child.returncode != 0:
        result["error"] = err_text.strip().splitlines()[-20:]
    else:
        detail = json.loads(out_text.strip().splitlines()[-1])
        result.update({
            "generate_seconds": round(detail["generate_seconds"], 2),
            "python_max_rss_mb": round(detail["python_max_rss_kb"] / 1024, 1),
            "python_cpu_seconds": round(detail["python_cpu_seconds"], 2),
            "yosys_cpu_seconds": round(detail["yosys_cpu_seconds"], 2),
            "verilog_bytes": detail["verilog_bytes"],
            "verilog_lines": detail["verilog_lines"],
        })
    # Sampling can miss a short-lived Yosys: the tree needed at least the
    # larger of the two processes' own high-water marks.
    result["peak_tree_rss_mb"] = max(result["peak_tree_rss_mb"], result["python_max_rss_mb"],
                                     result["yosys_max_rss_mb"])
    if not keep_verilog or "verilog_bytes" not in result:
        verilog_path.unlink(missing_ok=True)
    else:
        result["verilog_path"] = str(verilog_path)
    return result


def print_elaboration(result):
    name = f"{result['rows']}x{result['cols']}"
    if "stopped" in result or "error" in result:
        why = result.get("stopped")
        if why is None:
            lines = [line.strip() for line in result["error"] if line.strip()]
            why = "failed: " + (lines[-1] if lines else f"exit code {result['exit_code']}")
            if any("operator new" in line for line in lines):
                why += " (Yosys ran out of memory: operator new aborted)"
        print(f"{name}: {why}; wall {result['wall_seconds']} s, "
              f"peak RSS {result['peak_tree_rss_mb']} MB so far")
        return
    print(f"{name}: generate_verilog {result['generate_seconds']} s "
          f"(Python {result['python_cpu_seconds']} s CPU, Yosys {result['yosys_cpu_seconds']} s CPU), "
          f"child wall {result['wall_seconds']} s; peak RSS {result['peak_tree_rss_mb']} MB "
          f"(Python {result['python_max_rss_mb']} MB, Yosys {result['yosys_max_rss_mb']} MB); "
          f"Verilog {result['verilog_bytes'] / 1e6:.1f} MB, {result['verilog_lines']} lines")


# Command line ------------------------------------------------------------

def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--configs", nargs="+", type=_shape, default=[(8, 8), (16, 16)],
                        metavar="RxC", help="array shapes to simulate (default: 8x8 16x16)")
    parser.add_argument("--simulators", nargs="+", choices=SIMULATORS, default=list(SIMULATORS),
                        help="simulators to use (default: all)")
    parser.add_argument("--acc-rows", type=int, default=512,
                        help="accumulator rows of the simulated configurations (default: 512)")
    parser.add_argument("--batches", nargs="+", metavar="B",
                        help="activation rows per tile: integers or multiples of rows such as "
                             "'4r' (default: 1 1r 4r 64r)")
    parser.add_argument("--tiles", type=int, default=8,
                        help="tiles in the tile-switch sequence (default: 8)")
    parser.add_argument("--cycles", type=int, default=20000,
                        help="cycles of the simulation-speed run (default: 20000)")
    parser.add_argument("--tests", nargs="+", choices=BENCH_TESTS, default=list(BENCH_TESTS),
                        help="benchmark tests to run (default: all)")
    parser.add_argument("--seed", type=int, default=1,
                        help="seed of the random tiles and rows (default: 1)")
    parser.add_argument("--out", type=Path, default=BENCH_DIR / "mxu.json",
                        help="where to save the results (default: build/bench/mxu.json)")
    parser.add_argument("--elaborate", nargs="*", type=int, metavar="N",
                        help="instead, measure Verilog generation of an R x C array "
                             "(default: 256 256)")
    parser.add_argument("--timeout", type=float, default=1200,
                        help="--elaborate: stop after this many seconds (default: 1200)")
    parser.add_argument("--max-rss-gb", type=float, default=20,
                        help="--elaborate: stop above this resident memory (default: 20)")
    parser.add_argument("--keep-verilog", action="store_true",
                        help="--elaborate: keep the generated file under build/bench/")
    args = parser.parse_args(argv)

    if args.elaborate is not None:
        if len(args.elaborate) not in (0, 2):
            parser.error("--elaborate takes ROWS COLS, or nothing for 256 256")
        rows, cols = args.elaborate or (256, 256)
        result = elaborate(rows, cols, timeout=args.timeout, max_rss_gb=args.max_rss_gb,
                           keep_verilog=args.keep_verilog)
        print_elaboration(result)
        path = BENCH_DIR / "elaborate.json"
        merged = json.loads(path.read_text()) if path.exists() else {}
        merged[f"{rows}x{cols}"] = result
        path.write_text(json.dumps(merged, indent=2) + "\n")
        print(f"saved {path}")
        return 0 if "verilog_bytes" in result else 1

    results = run_simulation(args)
    print_simulation_table(results)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    saved = json.loads(args.out.read_text()) if args.out.exists() else {}
    saved.update(results)
    args.out.write_text(json.dumps(saved, indent=2) + "\n")
    print(f"saved {args.out}")
    failed = sum(r["failures"] for r in results.values())
    return 1 if failed or not results else 0


if __name__ == "__main__":
    sys.exit(main())
