"""Benchmark: the demo's digits MLP and CNN across batch sizes and arrays.

For each array (8x8 and 16x16 by default) and batch size, compiles the
demo's quantized models (`tpu.demo`), runs one batch of test digits on the
golden chip through the driver and prints the compile time, cycles per
inference, MXU utilisation over the whole program and while the array is
active, inferences per second at 100 MHz, and the per-layer cycles. The
golden chip's counters are the cycle model's (an ideal host: no DMA
latency), so the RTL's counts are a little higher (docs/demo.md).

    .venv/bin/python scripts/bench_demo.py [--arrays 8 16] [--batches 1 4 16 64 256]
"""

import argparse
import contextlib
import io
import sys
import time

from tpu import TPUConfig
from tpu.compiler import demo_models
from tpu.compiler.report import build_report
from tpu.demo import CLOCK_HZ, _prepare, _run_on_chip


def measure(name, float_model, split, config, batch, out_dir):
    started = time.perf_counter()
    with contextlib.redirect_stderr(io.StringIO()):
        m = _prepare(name, float_model, split, config=config, batch=batch, out_dir=out_dir)
        results = _run_on_chip({name: (m["compiled"], m["chunks"][:1])}, "golden", name)[name]
    report = build_report(m["graph"], config, [p for _, p in results], m["batch"],
                          clock_hz=CLOCK_HZ, batch=m["batch"])
    total = report.total
    return {"batch": m["batch"], "compile_s": m["timings"]["compile"],
            "cycles": report.cycles_per_inference, "util": total.utilisation,
            "active": total.active_utilisation, "ips": report.inferences_per_second,
            "layers": ", ".join(f"{row.name} {row.cycles / m['batch']:.0f}" for row in report.rows),
            "seconds": time.perf_counter() - started}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arrays", type=int, nargs="+", default=[8, 16])
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 4, 16, 64, 256])
    parser.add_argument("--models", nargs="+", default=["mlp", "cnn"])
    parser.add_argument("--out-dir", default="build/demo")
    args = parser.parse_args(argv)
    split = demo_models.digits_split()
    floats = demo_models.demo_models(args.out_dir, names=args.models)
    print("| model | array | batch | compile (s) | cycles/inference | MXU util (program) "
          "| (while active) | inferences/s at 100 MHz | cycles per inference by layer |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name in args.models:
        for size in args.arrays:
            config = TPUConfig(rows=size, cols=size)
            for batch in args.batches:
                r = measure(name, floats[name], split, config, batch, args.out_dir)
                asked = "" if r["batch"] == batch else f" (asked {batch})"
                print(f"| {name} | {size}x{size} | {r['batch']}{asked} | {r['compile_s']:.2f} "
                      f"| {r['cycles']:.0f} | {100 * r['util']:.1f}% | {100 * r['active']:.1f}% "
                      f"| {r['ips']:,.0f} | {r['layers']} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
