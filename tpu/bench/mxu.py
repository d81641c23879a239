"""Matrix-engine measurements: MXU utilisation and simulation speed of the
engine alone (`tpu.sim.bench.bench_matrix_engine`), and the cost of
elaborating a large array (wall time, peak memory, Verilog size).
`scripts/bench_mxu.py` is its command line.
"""

import json
import os
import signal
import subprocess
import sys
import tempfile
import time

from ..config import TPUConfig
from ..sim.harness import BUILD_ROOT, missing_simulator, run
from .common import percent_column as _pct, progress


__all__ = ["run_simulation", "simulation_table", "elaborate", "elaboration_text", "BENCH_TESTS"]

BENCH_MODULE = "tpu.sim.bench.bench_matrix_engine"
# Each in a simulation of its own: the design is not reset between cocotb tests.
BENCH_TESTS = ("utilisation", "sim_speed", "sim_speed_free_run")
BENCH_DIR = BUILD_ROOT / "bench"


# Simulation benchmarks ---------------------------------------------------

def run_simulation(configs, simulators, *, acc_rows=512, tests=BENCH_TESTS, tiles=8,
                   cycles=20000, batches=None, seed=1):
    """`tpu.sim.bench.bench_matrix_engine`'s `tests` on every ``(rows, cols)`` of
    `configs` and simulator: ``{"CONFIG/SIMULATOR": results}``."""
    results = {}
    for rows, cols in configs:
        config = TPUConfig(rows=rows, cols=cols, acc_rows=acc_rows)
        for simulator in simulators:
            key = f"{config.name}/{simulator}"
            reason = missing_simulator(simulator)
            if reason:
                progress(f"{key}: skipped: {reason}")
                continue
            out = BENCH_DIR / "runs" / f"{config.name}-{simulator}.json"
            out.parent.mkdir(parents=True, exist_ok=True)
            if set(tests) == set(BENCH_TESTS):
                out.unlink(missing_ok=True)      # else: add to the results already there
            env = {
                "TPU_BENCH_OUT": str(out.resolve()),
                "TPU_BENCH_TILES": str(tiles),
                "TPU_BENCH_CYCLES": str(cycles),
            }
            if batches:
                env["TPU_BENCH_BATCHES"] = ",".join(batches)
            progress(f"{key}: running {BENCH_MODULE} ...")
            load_before = os.getloadavg()[0]
            start = time.perf_counter()
            ran_total = failures = 0
            for testcase in tests:
                ran, failed = run(config, simulator, BENCH_MODULE, testcase=testcase,
                                  seed=seed, extra_env=env)
                ran_total, failures = ran_total + ran, failures + failed
            elapsed = time.perf_counter() - start
            if not out.exists():
                progress(f"{key}: the benchmark wrote no results (see the simulation log under "
                         f"{BUILD_ROOT / 'sim' / simulator})")
                continue
            data = json.loads(out.read_text())
            data["tests"], data["failures"] = ran_total, failures
            data["run_seconds"] = round(elapsed, 2)
            # Other work on the machine slows the simulators: keep the evidence.
            data["load_average"] = [round(load_before, 2), round(os.getloadavg()[0], 2)]
            data["cpus"] = os.cpu_count()
            results[key] = data
            if failures:
                progress(f"{key}: {failures} of {ran_total} benchmark tests FAILED")
    return results


def simulation_table(results):
    """The results of `run_simulation` as text tables."""
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
    return "\n".join(lines)


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


def process_tree(pid):
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
            tree = process_tree(child.pid)
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


def elaboration_text(result):
    """One line on an `elaborate` result."""
    name = f"{result['rows']}x{result['cols']}"
    if "stopped" in result or "error" in result:
        why = result.get("stopped")
        if why is None:
            lines = [line.strip() for line in result["error"] if line.strip()]
            why = "failed: " + (lines[-1] if lines else f"exit code {result['exit_code']}")
            if any("operator new" in line for line in lines):
                why += " (Yosys ran out of memory: operator new aborted)"
        return (f"{name}: {why}; wall {result['wall_seconds']} s, "
                f"peak RSS {result['peak_tree_rss_mb']} MB so far")
    return (f"{name}: generate_verilog {result['generate_seconds']} s "
          f"(Python {result['python_cpu_seconds']} s CPU, Yosys {result['yosys_cpu_seconds']} s CPU), "
          f"child wall {result['wall_seconds']} s; peak RSS {result['peak_tree_rss_mb']} MB "
          f"(Python {result['python_max_rss_mb']} MB, Yosys {result['yosys_max_rss_mb']} MB); "
            f"Verilog {result['verilog_bytes'] / 1e6:.1f} MB, {result['verilog_lines']} lines")
