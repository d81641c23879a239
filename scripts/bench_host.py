#!/usr/bin/env python3
"""Host-link measurements: DMA throughput, host read latency, and what the link
costs a matmul-heavy program.

Runs the cocotb module ``tpu.sim.bench.bench_host`` on the whole chip (the
`HostInterface` behind cocotbext-pcie's root complex, driven by
`tpu.driver.Device`) through ``tpu.sim.harness.run``: its ``dma`` test for
every link configuration and added host latency, its ``programs`` test for
the first configuration. Prints the tables of docs/host_performance.md and
saves ``build/bench/host.json`` and ``build/bench/host.md``.

A configuration is ``LINK_DW/MAX_PAYLOAD/MAX_READ_REQUEST`` on the default
`TPUConfig` (8x8 array, 16 KiB unified buffer, 8 read tags). Each one is a
separate build of the chip (a few minutes under Verilator, reused afterwards).

Examples::

    python scripts/bench_host.py --quick
    python scripts/bench_host.py
    python scripts/bench_host.py --configs 4/256/512 --sizes 64 16384 --latencies 0 --programs
"""

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

from tpu import TPUConfig
from tpu.hdl.verilog import CHIP_NAME, generate_verilog
from tpu.sim.bench.bench_host import PROGRAM_CASES
from tpu.sim.harness import BUILD_ROOT, SIMULATORS, missing_simulator, run


BENCH_MODULE = "tpu.sim.bench.bench_host"
BENCH_DIR = BUILD_ROOT / "bench"

FULL = {"configs": ["2/256/512", "4/256/512", "4/128/128", "2/128/128"],
        "sizes": [64, 1024, 16384, 262144, 1048576], "latencies": [0, 200],
        "programs": ["mlp", "layer", "compute"]}
QUICK = {"configs": ["2/256/512"], "sizes": [64, 1024, 16384], "latencies": [0],
         "programs": ["mlp"]}


def _config(text):
    try:
        dw, mp, mrr = (int(v) for v in text.split("/"))
        return TPUConfig(link_dw=dw, max_payload=mp, max_read_request=mrr)
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"expected LINK_DW/MAX_PAYLOAD/MAX_READ_REQUEST "
                                         f"(e.g. 4/256/512), not {text!r}: {error}")


def _label(config):
    return f"{config.link_dw}/{config.max_payload}/{config.max_read_request}"


def _run(config, simulator, testcase, env, seed):
    key = f"{_label(config)}/{simulator}/{testcase}/lat{env['TPU_BENCH_LATENCY']}"
    out = BENCH_DIR / "runs" / f"host-{key.replace('/', '-')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.unlink(missing_ok=True)
    env = {**env, "TPU_BENCH_OUT": str(out.resolve()), "TPU_BENCH_KEY": "run"}
    print(f"{key}: running {BENCH_MODULE} ...", file=sys.stderr, flush=True)
    start = time.perf_counter()
    tests, failures = run(config, simulator, BENCH_MODULE, testcase=testcase, seed=seed,
                          toplevel=CHIP_NAME, verilog_source=generate_verilog(config, top="chip"),
                          extra_env=env)
    elapsed = time.perf_counter() - start
    if failures or not out.exists():
        print(f"{key}: FAILED or wrote no results (see the simulation log under "
              f"{BUILD_ROOT / 'sim' / simulator})", file=sys.stderr)
        return None
    data = json.loads(out.read_text())["run"]
    data.update(run_seconds=round(elapsed, 1), load_average=round(os.getloadavg()[0], 2))
    print(f"{key}: {elapsed:.0f} s", file=sys.stderr, flush=True)
    return data


def run_all(args):
    results = {"dma": [], "programs": []}
    for simulator in args.simulators:
        reason = missing_simulator(simulator)
        if reason:
            print(f"{simulator}: skipped: {reason}", file=sys.stderr)
            continue
        for n, config in enumerate(args.configs):
            for latency in args.latencies:
                env = {"TPU_BENCH_LATENCY": str(latency)}
                if args.sizes:
                    data = _run(config, simulator, "dma",
                                {**env, "TPU_BENCH_SIZES": json.dumps(args.sizes)}, args.seed)
                    if data:
                        results["dma"].append(data)
                if args.programs and n == 0:
                    data = _run(config, simulator, "programs",
                                {**env, "TPU_BENCH_PROGRAMS": json.dumps(args.programs)}, args.seed)
                    if data:
                        results["programs"].append(data)
    return results


# Ceilings ---------------------------------------------------------------------

def read_ceiling(config):
    """Bytes per cycle of back-to-back completions of max_payload bytes
    (3-word header, payload words right after it) on a `link_dw` stream."""
    size = min(config.max_payload, config.max_read_request)
    return size / math.ceil((3 + size // 4) / config.link_dw)


def write_ceiling(config, header_dw):
    """Bytes per cycle of back-to-back MWr TLPs of max_payload bytes."""
    return config.max_payload / math.ceil((header_dw + config.max_payload // 4) / config.link_dw)


# Tables -----------------------------------------------------------------------

def _size(n):
    return f"{n // 1048576} MiB" if n >= 1048576 else f"{n // 1024} KiB" if n >= 1024 else f"{n} B"


def dma_table(results):
    head = ("| link_dw/max_payload/max_read_request | raw B/cycle | host latency added | bytes "
            "| read: link cycles | B/cycle | % raw | steady B/cycle | program cycles | host_stall "
            "| write: link cycles | B/cycle | % raw | program cycles | host_stall |")
    lines = [head, "|" + "---|" * 4 + "---:|" * 11]
    for run_ in results:
        config = TPUConfig(**run_["config"])
        raw = 4 * config.link_dw
        for entry in run_["dma"]:
            r, w = entry["read"], entry["write"]
            n = entry["bytes"]
            rl, wl = r["link"], w["link"]
            lines.append(
                f"| {_label(config)} | {raw} | {run_['latency']} | {_size(n)} "
                f"| {rl['cycles']} | {n / rl['cycles']:.2f} | {100 * n / rl['cycles'] / raw:.1f} "
                f"| {n / rl['steady_cycles']:.2f} | {r['counters']['cycles']} "
                f"| {r['counters']['host_stall']} "
                f"| {wl['cycles']} | {n / wl['cycles']:.2f} | {100 * n / wl['cycles'] / raw:.1f} "
                f"| {w['counters']['cycles']} | {w['counters']['host_stall']} |")
    return "\n".join(lines)


def latency_table(results):
    head = ("| link_dw/max_payload/max_read_request | host latency added | read ceiling B/cycle "
            "| write ceiling B/cycle | read latency: first | min | mean | max |")
    lines = [head, "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for run_ in results:
        config = TPUConfig(**run_["config"])
        largest = max(run_["dma"], key=lambda e: e["bytes"])
        link = largest["read"]["link"]
        header = largest["write"]["link"]["header_dw"]
        lines.append(
            f"| {_label(config)} | {run_['latency']} | {read_ceiling(config):.2f} "
            f"| {write_ceiling(config, header):.2f} ({header}-word header) "
            f"| {link['first_latency']} | {link['latency_min']} | {link['latency_mean']:.1f} "
            f"| {link['latency_max']} |")
    return "\n".join(lines)


def program_table(results):
    head = ("| config | host latency added | program | weights (WFILL) | WFILL cycles "
            "| cycles, core alone | cycles, through the link | link cost | host_stall "
            "| host_stall share | input RHM on link | output WHM on link | mxu_active "
            "| MXU use, core alone | MXU use, link |")
    lines = [head, "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for run_ in results:
        config = TPUConfig(**run_["config"])
        macs = config.rows * config.cols
        for name, d in run_["programs"].items():
            chip, core = d["counters"], d["core_alone"]
            rhm = sum(r["cycles"] for r in d["reads"])
            whm = d["write"]["cycles"] if d["write"] else 0
            fill = d["wfill"]["cycles"] if d["wfill"] else 0
            lines.append(
                f"| {_label(config)} | {run_['latency']} | {name} | {d['weight_bytes']} B "
                f"| {fill} | {core['cycles']} | {chip['cycles']} "
                f"| {100 * (chip['cycles'] - core['cycles']) / core['cycles']:+.1f}% "
                f"| {chip['host_stall']} | {100 * chip['host_stall'] / chip['cycles']:.1f}% "
                f"| {rhm} | {whm} | {chip['mxu_active']} "
                f"| {100 * chip['useful_macs'] / macs / core['cycles']:.1f}% "
                f"| {100 * chip['useful_macs'] / macs / chip['cycles']:.1f}% |")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help=f"one configuration, sizes up to 16 KiB, no added latency, the MLP only "
                             f"(default: {' '.join(FULL['configs'])}, sizes up to 1 MiB, "
                             f"latencies {FULL['latencies']})")
    parser.add_argument("--simulators", nargs="+", choices=SIMULATORS, default=["verilator"],
                        help="simulators (default: verilator; Icarus is far slower on the whole chip)")
    parser.add_argument("--configs", nargs="+", type=_config,
                        help="LINK_DW/MAX_PAYLOAD/MAX_READ_REQUEST configurations")
    parser.add_argument("--sizes", nargs="*", type=int, help="DMA sizes in bytes (none: no DMA runs)")
    parser.add_argument("--latencies", nargs="+", type=int,
                        help="cycles added to every completion by the host")
    parser.add_argument("--programs", nargs="*", choices=sorted(PROGRAM_CASES),
                        help="programs run through the link on the first configuration")
    parser.add_argument("--append", action="store_true",
                        help="add to the results already in --out (tables cover both)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", type=Path, default=BENCH_DIR / "host.json",
                        help="results (default: build/bench/host.json; tables beside it as .md)")
    args = parser.parse_args(argv)
    defaults = QUICK if args.quick else FULL
    if args.configs is None:
        args.configs = [_config(c) for c in defaults["configs"]]
    for name in ("sizes", "latencies", "programs"):
        if getattr(args, name) is None:
            setattr(args, name, defaults[name])

    start = time.perf_counter()
    results = run_all(args)
    if args.append and args.out.exists():
        earlier = json.loads(args.out.read_text())
        results = {key: earlier.get(key, []) + results[key] for key in results}
    tables = []
    if results["dma"]:
        tables += ["## DMA throughput", dma_table(results["dma"]),
                   "## Ceilings and host read latency (cycles)", latency_table(results["dma"])]
    if results["programs"]:
        tables += ["## Programs through the host link", program_table(results["programs"])]
    text = "\n\n".join(tables)
    print(text)
    print(f"total {time.perf_counter() - start:.0f} s")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    args.out.with_suffix(".md").write_text(text + "\n")
    print(f"saved {args.out} and {args.out.with_suffix('.md')}")
    return 0 if results["dma"] or results["programs"] else 1


if __name__ == "__main__":
    sys.exit(main())
