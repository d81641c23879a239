"""Benchmark: the MLPerf Tiny int8 models through the TFLite front end
(the command line of `tpu.bench.tflite`, which measures).

For each model (ad01_int8, kws_ref_model, pretrainedResnet_quant):

1. the reference interpreter of the imported IR against the TFLite
   interpreter's reference kernels on ``--reference`` random int8 inputs
   (every output byte);
2. for each array size in ``--sizes``: the compiled model on ``--backend``
   (the Verilator RTL by default, or icarus/golden) on ``--chip`` random int8 inputs
   in one run (batch 1, one simulation for all of them), every output byte
   against the TFLite interpreter, and per inference the chip's cycles
   (counters), MXU-active cycles, utilisation by the model's own MACs (a
   depthwise convolution counts its real ``KH*KW*C*multiplier`` MACs per
   pixel, not the block-diagonal matrix the chip multiplies), the weight-load
   share (weight stall + shift cycles), and the host operators with their
   share of the work (`tpu.compiler.report`'s host-operator share);
3. with ``--batches`` (golden only): cycles per inference at each batch, and
   the best;
4. with ``--up5k``, the same on the UP5K-sized chip as well
   (`tpu.bench.tflite.UP5K_SIZED`: the array and memories the iCE40 UP5K's
   hard blocks hold, with the "up5k" profile's activation unit).

``--json FILE`` and ``--markdown FILE`` write the results; the exit status
is 1 when any output byte differs from TFLite.

    .venv/bin/python scripts/bench_tflite.py [--reference 100] [--chip 5] [--sizes 8,16]
        [--backend verilator|icarus|golden] [--batches 1,2,4,8] [--up5k] [--json R.json]
        [--markdown R.md]

The defaults are the RTL check: 5 inputs per model on Verilator, 8x8 and
16x16 (about an hour on a free 2-core machine, the two Verilator builds
included).
"""

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tpu.bench.tflite import MODELS, markdown, run_tflite  # noqa: E402


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--reference", type=int, default=100, help="inputs for the IR reference")
    parser.add_argument("--chip", type=int, default=5, help="inputs per configuration on the chip")
    parser.add_argument("--sizes", default="8,16", help="array sizes (rows = cols); empty for none")
    parser.add_argument("--ub-rows", type=int, default=8192)
    parser.add_argument("--up5k", action="store_true",
                        help="also the UP5K-sized chip (tpu.bench.tflite.UP5K_SIZED)")
    parser.add_argument("--backend", default="verilator", choices=["verilator", "icarus", "golden"])
    parser.add_argument("--batches", default="", help="golden: batches to try for the best one")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", metavar="FILE", help="write the results as JSON")
    parser.add_argument("--markdown", metavar="FILE", help="write the results as a markdown table")
    args = parser.parse_args(argv)
    results, failures = run_tflite(
        args.models.split(","), args.reference, args.chip,
        [int(s) for s in args.sizes.split(",") if s], args.ub_rows, args.backend,
        [int(b) for b in args.batches.split(",") if b], args.seed,
        log=lambda line: print(line, flush=True), up5k=args.up5k)
    if args.json:
        Path(args.json).write_text(json.dumps(dict(backend=args.backend, ub_rows=args.ub_rows,
                                                   results=results), indent=1) + "\n")
    if args.markdown:
        Path(args.markdown).write_text(markdown(results, args.backend))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
