#!/usr/bin/env python3
"""Benchmark: ResNet-18 and MobileNetV2 (QDQ, uint8 activations, `tpu.compiler.imagenet_models`)
compiled for chips of 8x8, 16x16 and 256x256 arrays.

For each model and chip: the compile time, the parts, the cycles per
inference (the cycle model's estimate of every chip part, which the golden
chip's counters equal; host steps and weight fills between parts are not
timed) and the MXU utilisation (the model's MACs done, less those of
all-zero tiles skipped, over ``cycles x rows x cols``). With ``--run`` the
compiled model also runs on the golden chip (timed) and its outputs are
compared with ONNX Runtime's on the same random images.

A chip is ``RxC`` or a profile with optional ``:ub=ROWS:acc=ROWS``; ``v1``
(`tpu.config.V1_PROFILE`, ``--profile v1``) is TPU v1's 256x256 array with
its 24 MiB unified buffer (98 304 rows of 256 bytes) and 4 MiB of
accumulators (4 096 rows of 256 int32) and its weight memory's 34 GB/s at
700 MHz (48 bytes a cycle; ``wbw=`` sets it). A chip that refuses a
model is reported with the compiler's message (the ``--ub-rows`` it names).

    .venv/bin/python scripts/bench_imagenet.py [--size 224] [--models resnet18,mobilenet_v2]
        [--chips 8x8,16x16,v1] [--batch 1] [--run] [--json R.json]
"""

import argparse
import json
import sys
import time

import numpy as np


def chip(text):
    """``RxC`` or a profile name (``v1``), then ``:field=value`` options."""
    from tpu import TPUConfig
    from tpu.config import PROFILES
    shape, *options = text.split(":")
    fields = {"ub": "ub_rows", "acc": "acc_rows", "wmem": "weight_mem_tiles",
              "wbw": "weight_mem_bytes_per_cycle"}
    extra = {fields[k]: int(v) for k, v in (o.split("=") for o in options)}
    if shape in PROFILES:
        return TPUConfig.from_options(extra, shape)
    rows, cols = (int(v) for v in shape.split("x"))
    return TPUConfig(rows=rows, cols=cols, **extra)


def measure(graph, config, batch):
    """Compile `graph`; (compiled, seconds, cycles per inference, utilisation)."""
    from tpu.compiler.artifact import ChipStep
    from tpu.compiler.backend import compile_graph
    start = time.perf_counter()
    compiled = compile_graph(graph, config, batch)
    seconds = time.perf_counter() - start
    steps = [s for s in compiled.steps if isinstance(s, ChipStep)]
    cycles = sum(s.estimated_cycles for s in steps)
    done = sum(min(max(s.useful_macs - s.skipped_macs, 0), s.performed_macs) for s in steps)
    return compiled, seconds, cycles / batch, done / (cycles * config.rows * config.cols)


def run_golden(model, compiled, batch, size):
    """Run `compiled` on the golden chip on random images; (seconds, fraction of outputs
    equal to ONNX Runtime's, largest difference in output steps)."""
    from tpu.compiler import zoo
    from tpu.compiler.session import InferenceSession
    x = np.random.default_rng(7).standard_normal((batch, 3, size, size)).astype(np.float32)
    start = time.perf_counter()
    (ours,) = InferenceSession(compiled, backend="golden").run(None, {"input": x})
    seconds = time.perf_counter() - start
    (theirs,) = zoo.ort_run(model, x)
    scale = compiled.outputs[0].quant.scale
    steps = np.rint(np.abs(ours - theirs) / scale)
    return seconds, float(np.mean(ours == theirs)), int(steps.max())


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--models", default="resnet18,mobilenet_v2")
    parser.add_argument("--chips", default="8x8,16x16,v1")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--run", action="store_true", help="run on the golden chip too")
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args(argv)
    from tpu.compiler import imagenet_models
    from tpu.compiler.errors import CompileError
    from tpu.compiler.onnx_frontend import import_onnx
    results = []
    for name in args.models.split(","):
        model = imagenet_models.quantized(name, args.size)
        graph = import_onnx(model)
        for text in args.chips.split(","):
            config = chip(text)
            row = {"model": name, "size": args.size, "chip": text, "batch": args.batch,
                   "ub_rows": config.ub_rows, "acc_rows": config.acc_rows}
            try:
                compiled, seconds, cycles, util = measure(graph, config, args.batch)
            except CompileError as error:
                row["refused"] = str(error)
                print(f"{name} {args.size} on {text}: refused: {error}", flush=True)
                results.append(row)
                continue
            row.update(compile_s=round(seconds, 1), parts=len(compiled.steps),
                       cycles_per_inference=round(cycles), utilisation=round(util, 6))
            line = (f"{name} {args.size} on {text} (ub {config.ub_rows}): compile "
                    f"{seconds:.1f} s, {len(compiled.steps)} steps, {cycles:,.0f} cycles per "
                    f"inference, MXU utilisation {100 * util:.2f}%")
            if args.run:
                run_s, equal, worst = run_golden(model, compiled, args.batch, args.size)
                row.update(golden_s=round(run_s, 1), equal=equal, max_steps_off=worst)
                line += f"; golden run {run_s:.1f} s, {100 * equal:.2f}% equal to ONNX Runtime"
            print(line, flush=True)
            results.append(row)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
