"""Host-link measurements: DMA throughput, host read latency, and what the link
costs a matmul-heavy program (docs/host_performance.md).

Runs the cocotb module ``tpu.sim.bench.bench_host`` on the whole chip (the
`HostInterface` behind cocotbext-pcie's root complex, driven by
`tpu.driver.Device`) through ``tpu.sim.harness.run``: its ``dma`` test for
every link configuration and added host latency, its ``programs`` test for
the first configuration. A configuration is
``LINK_DW/MAX_PAYLOAD/MAX_READ_REQUEST`` on the chip's `TPUConfig`; each one
is a separate build of the chip (a few minutes under Verilator, reused
afterwards). `scripts/bench_host.py` and `tpu bench` both run it.
"""

import json
import math
import os
import time
from pathlib import Path

from ..config import TPUConfig
from ..sim.harness import BUILD_ROOT, missing_simulator, run
from .common import progress


__all__ = ["FULL", "QUICK", "link_config", "run_all", "tables", "dma_table", "latency_table",
           "program_table", "read_ceiling", "write_ceiling", "summary"]

BENCH_MODULE = "tpu.sim.bench.bench_host"
BENCH_DIR = BUILD_ROOT / "bench"

FULL = {"configs": ["2/256/512", "4/256/512", "4/128/128", "2/128/128"],
        "sizes": [64, 1024, 16384, 262144, 1048576], "latencies": [0, 200],
        "programs": ["mlp", "layer", "compute"]}
QUICK = {"configs": ["2/256/512"], "sizes": [64, 1024, 16384], "latencies": [0],
         "programs": ["mlp"]}


def link_config(text, base=None):
    """``TPUConfig`` of a ``LINK_DW/MAX_PAYLOAD/MAX_READ_REQUEST`` text on `base`
    (default `TPUConfig()`); ValueError naming the text when it is not one."""
    try:
        dw, mp, mrr = (int(v) for v in text.split("/"))
        return (base or TPUConfig()).replace(link_dw=dw, max_payload=mp, max_read_request=mrr)
    except ValueError as error:
        raise ValueError(f"expected LINK_DW/MAX_PAYLOAD/MAX_READ_REQUEST "
                         f"(e.g. 4/256/512), not {text!r}: {error}") from None


def _label(config):
    return f"{config.link_dw}/{config.max_payload}/{config.max_read_request}"


def _run(config, simulator, testcase, env, seed, runs_dir):
    key = f"{_label(config)}/{simulator}/{testcase}/lat{env['TPU_BENCH_LATENCY']}"
    out = Path(runs_dir) / f"host-{key.replace('/', '-')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.unlink(missing_ok=True)
    env = {**env, "TPU_BENCH_OUT": str(out.resolve()), "TPU_BENCH_KEY": "run"}
    progress(f"host link {key}: running {BENCH_MODULE} (the chip's model is built once)")
    from ..hdl.verilog import CHIP_NAME, generate_verilog
    start = time.perf_counter()
    tests, failures = run(config, simulator, BENCH_MODULE, testcase=testcase, seed=seed,
                          toplevel=CHIP_NAME, verilog_source=generate_verilog(config, top="chip"),
                          extra_env=env)
    elapsed = time.perf_counter() - start
    if failures or not out.exists():
        progress(f"host link {key}: FAILED or wrote no results (see the simulation log under "
                 f"{BUILD_ROOT / 'sim' / simulator})")
        return None
    data = json.loads(out.read_text())["run"]
    data.update(run_seconds=round(elapsed, 1), load_average=round(os.getloadavg()[0], 2))
    progress(f"host link {key}: {elapsed:.0f} s")
    return data


def run_all(configs, sizes, latencies, programs, simulators=("verilator",), seed=1,
            runs_dir=None):
    """The ``dma`` test for every configuration and latency, the ``programs`` test on
    the first configuration: ``{"dma": [...], "programs": [...]}`` (a failed run is
    left out, with its log named in the progress)."""
    runs_dir = runs_dir or BENCH_DIR / "runs"
    results = {"dma": [], "programs": []}
    for simulator in simulators:
        reason = missing_simulator(simulator)
        if reason:
            progress(f"host link on {simulator}: skipped: {reason}")
            continue
        for n, config in enumerate(configs):
            for latency in latencies:
                env = {"TPU_BENCH_LATENCY": str(latency)}
                if sizes:
                    data = _run(config, simulator, "dma",
                                {**env, "TPU_BENCH_SIZES": json.dumps(list(sizes))}, seed, runs_dir)
                    if data:
                        results["dma"].append(data)
                if programs and n == 0:
                    data = _run(config, simulator, "programs",
                                {**env, "TPU_BENCH_PROGRAMS": json.dumps(list(programs))}, seed,
                                runs_dir)
                    if data:
                        results["programs"].append(data)
    return results


def tables(results):
    """The Markdown tables of `run_all`'s results (docs/host_performance.md's)."""
    out = []
    if results["dma"]:
        out += ["### DMA throughput", dma_table(results["dma"]),
                "### Ceilings and host read latency (cycles)", latency_table(results["dma"])]
    if results["programs"]:
        out += ["### Programs through the host link", program_table(results["programs"])]
    return "\n\n".join(out)


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


def summary(results):
    """One paragraph: the largest DMA's read and write rates against the raw link, and
    the host's share of each program's cycles (the ``host_stall`` counter)."""
    parts = []
    for run_ in results["dma"]:
        config = TPUConfig(**run_["config"])
        raw = 4 * config.link_dw
        big = max(run_["dma"], key=lambda e: e["bytes"])
        n = big["bytes"]
        parts.append(f"{_label(config)}, host latency {run_['latency']}: {_size(n)} read at "
                     f"{n / big['read']['link']['cycles']:.2f} B/cycle and written at "
                     f"{n / big['write']['link']['cycles']:.2f} B/cycle of {raw} raw")
    for run_ in results["programs"]:
        for name, d in run_["programs"].items():
            chip, core = d["counters"], d["core_alone"]
            parts.append(f"program {name} (host latency {run_['latency']}): host stalls "
                         f"{100 * chip['host_stall'] / chip['cycles']:.1f}% of its "
                         f"{chip['cycles']} cycles, {100 * (chip['cycles'] - core['cycles']) / core['cycles']:+.1f}% "
                         f"over the core alone")
    return "; ".join(parts) + "." if parts else "No host-link run."
