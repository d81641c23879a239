"""Benchmark: the MLPerf Tiny int8 models through the TFLite front end.

For each model (ad01_int8, kws_ref_model, pretrainedResnet_quant):

1. the reference interpreter of the imported IR against the TFLite
   interpreter's reference kernels on ``--reference`` random int8 inputs
   (every output byte);
2. for each array size in ``--sizes``: the compiled model on ``--backend``
   (golden by default, or verilator/icarus) on ``--chip`` random inputs,
   every output byte against the TFLite interpreter, and per inference at
   batch 1 the chip's cycles (counters), MXU-active cycles, utilisation by
   the model's own MACs (a depthwise convolution counts its real
   ``KH*KW*C*multiplier`` MACs per pixel, not the block-diagonal matrix the
   chip multiplies), and the host steps.

    .venv/bin/python scripts/bench_tflite.py [--reference 100] [--chip 5] [--sizes 8,16]
"""

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tpu import TPUConfig  # noqa: E402
from tpu.compiler import ir, reference  # noqa: E402
from tpu.compiler.mlperf_tiny import MODELS, missing_reason, model_path  # noqa: E402
from tpu.compiler.session import InferenceSession  # noqa: E402
from tpu.compiler.tflite_frontend import import_tflite  # noqa: E402


def tflite_outputs(path, x):
    from ai_edge_litert.interpreter import Interpreter, OpResolverType
    interpreter = Interpreter(model_path=str(path),
                              experimental_op_resolver_type=OpResolverType.BUILTIN_REF)
    interpreter.allocate_tensors()
    (inp,), (out,) = interpreter.get_input_details(), interpreter.get_output_details()
    results = []
    for sample in x:
        interpreter.set_tensor(inp["index"], sample[None])
        interpreter.invoke()
        results.append(interpreter.get_tensor(out["index"])[0].copy())
    return np.array(results).reshape(len(x), -1)


def model_macs(graph):
    """The model's own multiply-accumulates per inference (depthwise: real taps)."""
    total = 0
    for layer in graph.layers:
        if isinstance(layer, ir.Dense):
            total += layer.weight.size
        elif isinstance(layer, ir.Conv2D):
            pixels = int(np.prod(graph.tensor(layer.output).shape[:2]))
            kh, kw = layer.weight.shape[:2]
            # Block-diagonal (depthwise) weights: count the taps that can be non-zero.
            taps = int(np.count_nonzero(np.any(layer.weight != 0, axis=(0, 1))))
            dense = layer.weight.shape[2] * layer.weight.shape[3]
            total += pixels * kh * kw * (taps if layer.name.startswith("depthwise") else dense)
    return total


def chip_run(graph, x, size, ub_rows, backend):
    config = TPUConfig(rows=size, cols=size, ub_rows=ub_rows)
    session = InferenceSession(graph, backend=backend, config=config, batch=1)
    spec = graph.inputs[0]
    (y,) = session.run(None, {spec.model_name: x})
    steps = session.last_profile[0]            # one chunk = one inference at batch 1
    chip = [s for s in steps if s["kind"] == "chip"]
    cycles = sum(s["counters"]["cycles"] for s in chip)
    active = sum(s["counters"]["mxu_active"] for s in chip)
    weights = sum(s["counters"].get("weight_stall", 0) + s["counters"].get("weight_shift", 0)
                  for s in chip)
    host = [s["name"] for s in steps if s["kind"] == "host"]
    return y.reshape(len(x), -1), dict(cycles=cycles, active=active, weight=weights,
                                       host=host, parts=len(chip))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--reference", type=int, default=100, help="inputs for the IR reference")
    parser.add_argument("--chip", type=int, default=5, help="inputs per configuration on the chip")
    parser.add_argument("--sizes", default="8,16", help="array sizes (rows = cols)")
    parser.add_argument("--ub-rows", type=int, default=8192)
    parser.add_argument("--backend", default="golden")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    failures = 0
    for name in args.models.split(","):
        reason = missing_reason(name)
        if reason:
            print(f"{name}: skipped: {reason}")
            continue
        path = model_path(name)
        graph = import_tflite(path)
        spec = graph.inputs[0]
        rng = np.random.default_rng(args.seed)
        n = max(args.reference, args.chip)
        x = rng.integers(-128, 128, size=(n, *spec.model_shape[1:]), dtype=np.int8)
        want = tflite_outputs(path, x)
        t = time.time()
        got = reference.run(graph, {spec.tensor: x[:args.reference].reshape(
            args.reference, *graph.tensor(spec.tensor).shape)}, outputs_only=True)
        got = got[graph.outputs[0].tensor].reshape(args.reference, -1)
        bad = int((got != want[:args.reference]).any(axis=1).sum())
        failures += bad
        macs = model_macs(graph)
        print(f"{name}: {MODELS[name].task}; {macs:,} MACs per inference")
        print(f"  reference interpreter vs TFLite: {args.reference - bad}/{args.reference} "
              f"inputs equal in every byte ({time.time() - t:.1f} s)")
        for size in [int(s) for s in args.sizes.split(",")]:
            t = time.time()
            y, m = chip_run(graph, x[:args.chip], size, args.ub_rows, args.backend)
            bad = int((y != want[:args.chip]).any(axis=1).sum())
            failures += bad
            util = macs / (m["cycles"] * size * size) if m["cycles"] else 0.0
            print(f"  {size}x{size} {args.backend}: {args.chip - bad}/{args.chip} equal to TFLite; "
                  f"{m['cycles']:,} cycles/inference (batch 1), MXU active {m['active']:,}, "
                  f"utilisation {100 * util:.1f}%, weight stall+shift {m['weight']:,}; "
                  f"{m['parts']} chip parts; host steps: {', '.join(m['host']) or 'none'} "
                  f"({time.time() - t:.1f} s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
