"""Benchmark: MXU utilisation of compiled convolution layers (the command line
of `tpu.bench.layers`, which measures).

Compiles one convolution layer (and a small CNN) at a given batch for an
8x8 array, runs it on the golden chip through the driver, and prints per
part the chip's cycles, MXU-active cycles, the model's MACs, the utilisation
over the whole program and over the matrix phase (first row into the array
to the last: how busy the array is while the matrix unit runs).

With ``--demo`` it instead compiles the demo's quantized digits MLP and CNN
(`tpu.demo`) for the 8x8 and 16x16 arrays, runs one batch on the golden chip
and prints the compile time, the per-layer table (cycles, MACs,
utilisation, TPU v1's counter breakdown) and the whole program against the
matrix unit's lower bound (model MACs / (rows x cols)).

    .venv/bin/python scripts/bench_compiler.py [--batch 64] [--demo] [--arrays 8 16]
        [--models mlp cnn] [--backend golden|icarus|verilator]
"""

import argparse
import sys

from tpu.bench.layers import conv_layers, demo


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--demo", action="store_true",
                        help="the demo's MLP and CNN instead of single convolutions")
    parser.add_argument("--arrays", type=int, nargs="+", default=[8, 16],
                        help="array sizes for --demo")
    parser.add_argument("--models", nargs="+", default=["mlp", "cnn"], choices=["mlp", "cnn"],
                        help="demo models for --demo")
    parser.add_argument("--backend", default="golden", choices=["golden", "icarus", "verilator"],
                        help="where --demo runs: the golden chip or the RTL")
    args = parser.parse_args(argv)
    if args.demo:
        demo(args.arrays, args.batch, names=args.models, backend=args.backend)
        return 0
    rows = conv_layers(args.batch, args.seed)
    return 0 if all(r["exact"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
