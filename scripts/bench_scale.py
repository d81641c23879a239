#!/usr/bin/env python3
"""Large configurations: the cost of generating their Verilog, and a
multi-tile GEMM through the sequencer on the Verilator model of the chip.

Two modes:

* ``convert``: for each array size R, generates the Verilog of ``top``
  (default ``chip``) for TPU v1's proportions (R x R array, 16 R
  accumulator rows, 384 R unified-buffer rows: 4096 and 98304 at 256) in a
  child process, and reports its wall time, CPU time, peak resident memory
  of the process tree (Python and Yosys) and the size of the Verilog;
* ``gemm``: builds the Verilator model of the chip of one such configuration
  (or reuses it), runs a GEMM of several weight tiles (K and N each larger
  than the array) through `tpu.driver` (RHM, RW, MMC with accumulation, ACT,
  WHM), compares its output with the golden model bit for bit and reports
  the build time, the run time and the simulated cycles per second.

Results are merged into ``build/bench/scale.json``.

Examples::

    python scripts/bench_scale.py convert --sizes 8 16 32
    python scripts/bench_scale.py convert --sizes 256 --top engine
    python scripts/bench_scale.py gemm --size 64
"""

import argparse
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tpu import TPUConfig
from tpu.bench.mxu import process_tree
from tpu.sim.harness import BUILD_ROOT


BENCH_DIR = BUILD_ROOT / "bench"
RESULTS = BENCH_DIR / "scale.json"
GIB = 1 << 30


def v1_config(size, **changes):
    """TPU v1's proportions at array size `size`: 4096 accumulator rows and
    96K unified-buffer rows at 256, scaled with the array below it."""
    return TPUConfig(rows=size, cols=size, acc_rows=16 * size, ub_rows=384 * size,
                     weight_mem_tiles=64, **changes)


def _save(key, result):
    BENCH_DIR.mkdir(parents=True, exist_ok=True)
    data = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    data[key] = result
    RESULTS.write_text(json.dumps(data, indent=2) + "\n")


# Conversion ---------------------------------------------------------------

# Runs in a child process, so that its peak memory is its own.
_CHILD = r"""
import json, resource, sys, time
config, top, out = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3]
from tpu import TPUConfig
from tpu.hdl.verilog import generate_verilog
start = time.perf_counter()
text = generate_verilog(TPUConfig(**config), top=top)
done = time.perf_counter()
with open(out, "w") as f:
    f.write(text)
me = resource.getrusage(resource.RUSAGE_SELF)
kids = resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"generate_seconds": done - start,
                  "python_cpu_seconds": me.ru_utime + me.ru_stime,
                  "yosys_cpu_seconds": kids.ru_utime + kids.ru_stime,
                  "python_max_rss_kb": me.ru_maxrss, "yosys_max_rss_kb": kids.ru_maxrss,
                  "verilog_bytes": len(text.encode()), "verilog_lines": text.count("\n")}))
"""


def _tree_rss_kb(pid):
    """Resident KiB of `pid` and all its descendants."""
    return sum(rss for rss, _ in process_tree(pid).values())


def convert(config, top, *, timeout, max_gib, keep):
    """Generate `top` of `config` in a child process, watching its memory."""
    BENCH_DIR.mkdir(parents=True, exist_ok=True)
    path = BENCH_DIR / f"scale-{top}-{config.name}.v"
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        start = time.perf_counter()
        child = subprocess.Popen([sys.executable, "-c", _CHILD, json.dumps(config.to_dict()), top,
                                  str(path)], stdout=out, stderr=err, start_new_session=True)
        peak_kb, stopped = 0, None
        while True:
            pid, status, usage = os.wait4(child.pid, os.WNOHANG)
            if pid == child.pid:
                break
            peak_kb = max(peak_kb, _tree_rss_kb(child.pid))
            elapsed = time.perf_counter() - start
            if stopped is None and elapsed > timeout:
                stopped = f"stopped after {elapsed:.0f} s (limit {timeout:.0f} s)"
            elif stopped is None and peak_kb > max_gib * (1 << 20):
                stopped = f"stopped at {peak_kb / (1 << 20):.1f} GiB (limit {max_gib} GiB)"
            if stopped:
                os.killpg(child.pid, signal.SIGKILL)
            time.sleep(0.2)
        wall = time.perf_counter() - start
        out.seek(0)
        err.seek(0)
        out_text, err_text = out.read(), err.read()
    code = os.waitstatus_to_exitcode(status)
    result = {"top": top, "config": config.to_dict(), "wall_seconds": round(wall, 1),
              "cpu_seconds": round(usage.ru_utime + usage.ru_stime, 1),
              "peak_tree_mib": round(peak_kb / 1024), "load_average": round(os.getloadavg()[0], 1)}
    if stopped:
        result["stopped"] = stopped
    elif code:
        result["error"] = (err_text.strip().splitlines() or [f"exit status {code}"])[-1]
    else:
        detail = json.loads(out_text.strip().splitlines()[-1])
        result.update({
            "generate_seconds": round(detail["generate_seconds"], 1),
            "python_cpu_seconds": round(detail["python_cpu_seconds"], 1),
            "yosys_cpu_seconds": round(detail["yosys_cpu_seconds"], 1),
            # Sampling can miss a short peak: the tree held at least either process's own.
            "peak_tree_mib": max(round(peak_kb / 1024), detail["python_max_rss_kb"] // 1024,
                                 detail["yosys_max_rss_kb"] // 1024),
            "python_max_mib": detail["python_max_rss_kb"] // 1024,
            "yosys_max_mib": detail["yosys_max_rss_kb"] // 1024,
            "verilog_mb": round(detail["verilog_bytes"] / 1e6, 2),
            "verilog_lines": detail["verilog_lines"],
        })
        if keep:
            result["verilog"] = str(path)
    if not keep:
        path.unlink(missing_ok=True)
    return result


def print_conversion(result):
    name = f"{result['top']} {result['config']['rows']}x{result['config']['cols']}"
    if "generate_seconds" not in result:
        print(f"{name}: {result.get('stopped') or result.get('error')}; "
              f"wall {result['wall_seconds']} s, peak {result['peak_tree_mib']} MiB", flush=True)
        return
    print(f"{name}: {result['generate_seconds']} s (Python {result['python_cpu_seconds']} s CPU, "
          f"Yosys {result['yosys_cpu_seconds']} s CPU), peak {result['peak_tree_mib']} MiB "
          f"(Python {result['python_max_mib']}, Yosys {result['yosys_max_mib']}), "
          f"Verilog {result['verilog_mb']} MB in {result['verilog_lines']} lines; "
          f"load {result['load_average']}", flush=True)


# GEMM through the sequencer ------------------------------------------------

# The GEMM's shape in tiles and batch rows; the simulation process reads them
# from its environment, which it inherits.
K_TILES = int(os.environ.get("TPU_SCALE_K_TILES", "2"))
N_TILES = int(os.environ.get("TPU_SCALE_N_TILES", "2"))
BATCH = int(os.environ.get("TPU_SCALE_BATCH", "0"))    # 0: one row per array row
SEED = 12


def gemm_program(cfg, batch, x_addr, y_addr):
    """Assembly of ``Y = X @ W`` for X of ``batch x (K_TILES rows)`` uint8 and W of
    ``K_TILES x N_TILES`` tiles (tile ``n * K_TILES + k``), requantized by
    the LDQ table at the UB row after X."""
    ldq = K_TILES * batch
    out = ldq + 2 * -(-4 * cfg.cols // cfg.rows) + -(-cfg.cols // cfg.rows)
    lines = [f"rhm ub=0, rows={out}, host={x_addr:#x}",
             f"ldq ub={ldq}",
             f"rw tile=0, count={K_TILES * N_TILES}"]
    for n in range(N_TILES):
        for k in range(K_TILES):
            lines.append(f"mmc ub={k * batch}, rows={batch}, acc={n * batch}, switch, unsigned"
                         + (", accumulate" if k else ""))
    for n in range(N_TILES):
        lines.append(f"act acc={n * batch}, ub={out + n * batch}, rows={batch}")
    lines += [f"whm ub={out}, rows={N_TILES * batch}, host={y_addr:#x}", "halt"]
    return "\n".join(lines)


def gemm_operands(cfg, batch):
    """(X, W tiles, LDQ table bytes) of the benchmark, from a fixed seed."""
    import numpy as np
    rng = np.random.default_rng(SEED)
    x = rng.integers(0, 256, (batch, K_TILES * cfg.rows), dtype=np.uint8)
    w = rng.integers(-128, 128, (K_TILES * cfg.rows, N_TILES * cfg.cols), dtype=np.int8)
    tiles = np.stack([w[k * cfg.rows:(k + 1) * cfg.rows, n * cfg.cols:(n + 1) * cfg.cols]
                      for n in range(N_TILES) for k in range(K_TILES)])
    acc = x.astype(np.int64) @ w.astype(np.int64)
    # A right shift that brings the sums into int8's range, so that the
    # output shows the sums rather than saturation.
    shift = max(0, int(np.ceil(np.log2(max(1, np.abs(acc).max()) / 127))))
    section = -(-4 * cfg.cols // cfg.rows) * cfg.rows
    table = bytearray(2 * section + -(-cfg.cols // cfg.rows) * cfg.rows)
    table[section:section + 4 * cfg.cols] = np.full(cfg.cols, (1 << 31) - 1, "<i4").tobytes()
    table[2 * section:2 * section + cfg.cols] = np.full(cfg.cols, -shift, np.int8).tobytes()
    return x, tiles, bytes(table)


async def gemm_main(device):
    """Runs the benchmark GEMM on `device`: its output and what it cost."""
    import numpy as np
    cfg = device.config
    batch = BATCH or cfg.rows
    x, tiles, table = gemm_operands(cfg, batch)
    # X's K slices one after the other, then the LDQ table.
    slices = b"".join(x[:, k * cfg.rows:(k + 1) * cfg.rows].tobytes() for k in range(K_TILES))
    x_buf = device.alloc(len(slices) + len(table))
    y_buf = device.alloc(N_TILES * batch * cfg.rows)
    device.write(x_buf, slices + table)
    start, link_start = time.perf_counter(), device.link.time()
    await device.load_weights(tiles, timeout=10.0)
    loaded, link_loaded = time.perf_counter(), device.link.time()
    result = await device.run(gemm_program(cfg, batch, x_buf.addr, y_buf.addr), timeout=10.0)
    done, link_done = time.perf_counter(), device.link.time()
    out = np.frombuffer(device.read(y_buf), np.int8).reshape(N_TILES, batch, cfg.rows)
    hz = device.link.clock_hz
    return {"output": np.concatenate(list(out[:, :, :cfg.cols]), axis=1).tobytes(),
            "halted": result.halted, "counters": result.counters,
            "load_cycles": round((link_loaded - link_start) * hz),
            "load_seconds": loaded - start,
            "run_cycles": round((link_done - link_loaded) * hz),
            "run_seconds": done - loaded}


class _PeakSampler:
    """Samples the resident size of this process's descendants (not itself)
    every half second while in its ``with`` block; the peak in `peak_kb`."""

    def __init__(self):
        import threading
        self.peak_kb, self._stop = 0, threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self):
        me = os.getpid()
        while not self._stop.wait(0.5):
            self.peak_kb = max(self.peak_kb, _tree_rss_kb(me) - _tree_rss_kb_self(me))

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def _tree_rss_kb_self(pid):
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))


def gemm(config, *, seed):
    """Build (or reuse) the chip's Verilator model, run the GEMM on it and on
    the golden model; the measurements, with ``bit_exact``."""
    import tpu.hdl.verilog
    from tpu.driver import run
    from tpu.sim.harness import _hierarchical, build
    result = {"config": config.to_dict(), "k_tiles": K_TILES, "n_tiles": N_TILES,
              "batch": BATCH or config.rows, "load_average": [round(os.getloadavg()[0], 1)],
              "generate_seconds": 0}
    # The model is built as the driver finds it (by configuration, so that
    # its Verilog is generated once); the generation inside is timed apart.
    generate = tpu.hdl.verilog.generate_verilog

    def timed_generate(*args, **kwargs):
        begin = time.perf_counter()
        try:
            return generate(*args, **kwargs)
        finally:
            result["generate_seconds"] = round(time.perf_counter() - begin, 1)

    tpu.hdl.verilog.generate_verilog = timed_generate
    sampler = _PeakSampler()
    start, before = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
    try:
        with sampler:
            model = build(config, "verilator", top="chip")
    finally:
        tpu.hdl.verilog.generate_verilog = generate
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    # 0 when reused
    result["build_seconds"] = round(time.perf_counter() - start - result["generate_seconds"], 1)
    if result["build_seconds"] > 1:
        # Verilator and the compiler are child processes (as is Yosys, when
        # the Verilog is generated): their CPU time and their peak together.
        result["build_cpu_seconds"] = round(after.ru_utime + after.ru_stime
                                            - before.ru_utime - before.ru_stime, 1)
        result["build_peak_children_mib"] = sampler.peak_kb // 1024
    result["hierarchical"] = _hierarchical(config)
    result["cpp_mb"] = round(sum(f.stat().st_size for f in Path(model).rglob("*.cpp")) / 1e6, 1)
    start = time.perf_counter()
    rtl = run(gemm_main, backend="verilator", config=config, seed=seed)
    result["verilator_call_seconds"] = round(time.perf_counter() - start, 1)
    golden = run(gemm_main, backend="golden", config=config)
    for key in ("load_cycles", "load_seconds", "run_cycles", "run_seconds", "halted"):
        result[key] = rtl[key]
    cycles = rtl["load_cycles"] + rtl["run_cycles"]
    result["cycles_per_second"] = round(cycles / (rtl["load_seconds"] + rtl["run_seconds"]))
    result["counters"] = rtl["counters"]
    result["bit_exact"] = rtl["output"] == golden["output"] and rtl["halted"]
    import numpy as np
    out = np.frombuffer(rtl["output"], np.int8)
    result["saturated_fraction"] = round(float(np.mean((out == 127) | (out == -128))), 4)
    result["load_average"].append(round(os.getloadavg()[0], 1))
    return result


def _build_cost(result):
    if "build_cpu_seconds" not in result:
        return ""
    return f", {result['build_cpu_seconds']} s CPU, peak {result['build_peak_children_mib']} MiB"


def print_gemm(result):
    cfg = result["config"]
    print(f"chip {cfg['rows']}x{cfg['cols']}: GEMM {result['batch']} x "
          f"{result['k_tiles'] * cfg['rows']} x {result['n_tiles'] * cfg['cols']} "
          f"({result['k_tiles'] * result['n_tiles']} tiles): "
          f"{'bit-exact with the golden model' if result['bit_exact'] else 'DIFFERS from the golden model'}"
          f" ({100 * result['saturated_fraction']:.1f} % of outputs saturated); "
          f"Verilog {result['generate_seconds']} s, Verilator build {result['build_seconds']} s"
          f"{' (hierarchical)' if result['hierarchical'] else ''}{_build_cost(result)}"
          f", {result['cpp_mb']} MB of C++; "
          f"weights {result['load_cycles']} cycles in {result['load_seconds']:.1f} s, "
          f"program {result['run_cycles']} cycles in {result['run_seconds']:.1f} s: "
          f"{result['cycles_per_second']} cycles/s (load {result['load_average']})", flush=True)


# Command line ---------------------------------------------------------------

def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    modes = parser.add_subparsers(dest="mode", required=True)
    conv = modes.add_parser("convert", help="time and memory of generating the Verilog")
    conv.add_argument("--sizes", nargs="+", type=int, default=[8, 16, 32, 64, 128, 256],
                      help="array sizes R of R x R (default: 8 16 32 64 128 256)")
    conv.add_argument("--top", choices=("chip", "core", "engine"), default="chip")
    conv.add_argument("--timeout", type=float, default=1200, help="seconds per size (default 1200)")
    conv.add_argument("--max-gib", type=float, default=10, help="memory limit (default 10 GiB)")
    conv.add_argument("--keep", action="store_true", help="keep the Verilog in build/bench/")
    mm = modes.add_parser("gemm", help="a multi-tile GEMM on the Verilator model of the chip")
    mm.add_argument("--size", type=int, default=64, help="array size R of R x R (default 64)")
    mm.add_argument("--seed", type=int, default=1, help="the host's behaviour (default 1)")
    args = parser.parse_args(argv)

    if args.mode == "gemm":
        result = gemm(v1_config(args.size), seed=args.seed)
        print_gemm(result)
        _save(f"gemm/{args.size}", result)
        return 0 if result["bit_exact"] else 1

    if args.mode == "convert":
        for size in args.sizes:
            result = convert(v1_config(size), args.top, timeout=args.timeout,
                             max_gib=args.max_gib, keep=args.keep)
            print_conversion(result)
            _save(f"convert/{args.top}/{size}", result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
