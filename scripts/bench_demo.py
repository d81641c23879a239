"""Benchmark: the demo's digits MLP and CNN across batch sizes and arrays.

For each array (8x8 and 16x16 by default) and batch size, compiles the
demo's quantized models (`tpu.demo`), runs one batch of test digits on the
golden chip through the driver and prints the compile time, cycles per
inference, MXU utilisation over the whole program and while the array is
active, inferences per second at 100 MHz, and the per-layer cycles. The
golden chip's counters are the cycle model's (an ideal host: no DMA
latency), so the RTL's counts are a little higher (docs/demo.md). The
measuring is `tpu.bench.demo`; this is its command line.

    .venv/bin/python scripts/bench_demo.py [--arrays 8 16] [--batches 1 4 16 64 256]
"""

import argparse
import sys

from tpu import TPUConfig
from tpu.bench.demo import TABLE_HEAD, measure, table_row
from tpu.compiler import demo_models


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arrays", type=int, nargs="+", default=[8, 16])
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 4, 16, 64, 256])
    parser.add_argument("--models", nargs="+", default=["mlp", "cnn"])
    parser.add_argument("--out-dir", default="build/demo")
    args = parser.parse_args(argv)
    split = demo_models.digits_split()
    floats = demo_models.demo_models(args.out_dir, names=args.models)
    print(TABLE_HEAD)
    for name in args.models:
        for size in args.arrays:
            config = TPUConfig(rows=size, cols=size)
            for batch in args.batches:
                r = measure(name, floats[name], split, config, batch, args.out_dir)
                print(table_row(name, config, batch, r), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
