"""Benchmark: the MLPerf Tiny int8 models through the TFLite front end.

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
   the best.

``--json FILE`` and ``--markdown FILE`` write the results; the exit status
is 1 when any output byte differs from TFLite.

    .venv/bin/python scripts/bench_tflite.py [--reference 100] [--chip 5] [--sizes 8,16]
        [--backend verilator|icarus|golden] [--batches 1,2,4,8] [--json R.json] [--markdown R.md]

The defaults are the RTL check: 5 inputs per model on Verilator, 8x8 and
16x16 (about an hour on a free 2-core machine, the two Verilator builds
included).
"""

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tpu import TPUConfig  # noqa: E402
from tpu.compiler import ir, reference  # noqa: E402
from tpu.compiler.errors import CompileError  # noqa: E402
from tpu.compiler.mlperf_tiny import MODELS, missing_reason, model_path  # noqa: E402
from tpu.compiler.session import InferenceSession  # noqa: E402
from tpu.compiler.tflite_frontend import import_tflite  # noqa: E402

#: Fmax (MHz) measured in docs/fpga.md: the array benchmark on the ECP5-85F
#: (8x8 with MULT18X18D, 16x16 in LUTs) and the whole 2x2 chip on the ECP5-85F
FMAX_MHZ = {8: 88.5, 16: 75.0}
CHIP_FMAX_MHZ = 22.15


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


def chip_run(graph, x, size, ub_rows, backend, batch=1):
    """Outputs and per-inference measurements of `x` on the chip, in one run."""
    config = TPUConfig(rows=size, cols=size, ub_rows=ub_rows)
    session = InferenceSession(graph, backend=backend, config=config, batch=batch)
    spec = graph.inputs[0]
    (y,) = session.run(None, {spec.model_name: x})
    report = session.report()
    total = report.total
    cycles = total.cycles / len(x)
    weight = (total.counters.get("weight_stall", 0) + total.counters.get("weight_shift", 0)) / len(x)
    host = report.host_operators()
    return y.reshape(len(x), -1), dict(
        cycles=cycles, mxu_active=total.counters.get("mxu_active", 0) / len(x),
        weight_cycles=weight, weight_share=weight / cycles if cycles else 0.0,
        host_operators=[dict(name=h["name"], op=h["op"], ops=h["ops"] / len(x),
                             share=h["share"]) for h in host],
        host_share=sum(h["share"] for h in host), parts=len(session.compiled.chip_steps))


def best_batch(graph, x, size, ub_rows, batches):
    """Golden cycles per inference at each batch that compiles: {batch: cycles}."""
    result = {}
    for batch in batches:
        try:
            _, m = chip_run(graph, x[:batch], size, ub_rows, "golden", batch)
        except CompileError as error:       # too large for this configuration: say so, go on
            print(f"    batch {batch}: {type(error).__name__}: {str(error).splitlines()[0]}")
            continue
        result[batch] = m["cycles"]
    return result


def markdown(results, backend):
    head = ("| model | array | inputs equal | cycles/inference (batch 1) | best batch | "
            "MXU active | MXU util. | weight load | host operators (share) | inf/s at Fmax |")
    lines = [head, "|---|---|---|---:|---|---:|---:|---:|---|---:|"]
    for r in results:
        for s in r["sizes"]:
            best = (f"{s['best_batch']['cycles']:,.0f} at {s['best_batch']['batch']}"
                    if s.get("best_batch") else "")
            host = ", ".join(f"{h['op']} {100 * h['share']:.2g}%"
                             for h in s["host_operators"]) or "none"
            lines.append(
                f"| {r['model']} | {s['size']}x{s['size']} | {s['equal']}/{s['inputs']} "
                f"({backend}) | {s['cycles']:,.0f} | {best} | {s['mxu_active']:,.0f} | "
                f"{100 * s['utilisation']:.1f}% | {100 * s['weight_share']:.1f}% | {host} | "
                f"{s['inferences_per_second']:,.0f} at {s['fmax_mhz']} MHz |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--reference", type=int, default=100, help="inputs for the IR reference")
    parser.add_argument("--chip", type=int, default=5, help="inputs per configuration on the chip")
    parser.add_argument("--sizes", default="8,16", help="array sizes (rows = cols)")
    parser.add_argument("--ub-rows", type=int, default=8192)
    parser.add_argument("--backend", default="verilator", choices=["verilator", "icarus", "golden"])
    parser.add_argument("--batches", default="", help="golden: batches to try for the best one")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", metavar="FILE", help="write the results as JSON")
    parser.add_argument("--markdown", metavar="FILE", help="write the results as a markdown table")
    args = parser.parse_args(argv)
    failures = 0
    results = []
    batches = [int(b) for b in args.batches.split(",") if b]
    for name in args.models.split(","):
        reason = missing_reason(name)
        if reason:
            print(f"{name}: skipped: {reason}")
            continue
        path = model_path(name)
        graph = import_tflite(path)
        spec = graph.inputs[0]
        rng = np.random.default_rng(args.seed)
        n = max(args.reference, args.chip, *batches)
        x = rng.integers(-128, 128, size=(n, *spec.model_shape[1:]), dtype=np.int8)
        want = tflite_outputs(path, x)
        macs = model_macs(graph)
        print(f"{name}: {MODELS[name].task}; {macs:,} MACs per inference", flush=True)
        result = dict(model=name, macs=macs, seed=args.seed, sizes=[])
        if args.reference:
            t = time.time()
            got = reference.run(graph, {spec.tensor: x[:args.reference].reshape(
                args.reference, *graph.tensor(spec.tensor).shape)}, outputs_only=True)
            got = got[graph.outputs[0].tensor].reshape(args.reference, -1)
            bad = int((got != want[:args.reference]).any(axis=1).sum())
            failures += bad
            result["reference"] = dict(inputs=args.reference, equal=args.reference - bad)
            print(f"  reference interpreter vs TFLite: {args.reference - bad}/{args.reference} "
                  f"inputs equal in every byte ({time.time() - t:.1f} s)", flush=True)
        for size in [int(s) for s in args.sizes.split(",")]:
            t = time.time()
            y, m = chip_run(graph, x[:args.chip], size, args.ub_rows, args.backend)
            bad = int((y != want[:args.chip]).any(axis=1).sum())
            failures += bad
            fmax = FMAX_MHZ.get(size, CHIP_FMAX_MHZ)
            entry = dict(size=size, backend=args.backend, inputs=args.chip, equal=args.chip - bad,
                         utilisation=macs / (m["cycles"] * size * size) if m["cycles"] else 0.0,
                         fmax_mhz=fmax, inferences_per_second=fmax * 1e6 / m["cycles"],
                         seconds=round(time.time() - t, 1), **m)
            if batches and args.backend == "golden":
                per_batch = best_batch(graph, x, size, args.ub_rows, batches)
                entry["batches"] = per_batch
                if per_batch:
                    b = min(per_batch, key=per_batch.get)
                    entry["best_batch"] = dict(batch=b, cycles=per_batch[b])
            result["sizes"].append(entry)
            host = ", ".join(f"{h['op']} {100 * h['share']:.2g}%" for h in m["host_operators"])
            print(f"  {size}x{size} {args.backend}: {entry['equal']}/{args.chip} equal to TFLite; "
                  f"{m['cycles']:,.0f} cycles/inference (batch 1), MXU active "
                  f"{m['mxu_active']:,.0f}, utilisation {100 * entry['utilisation']:.1f}%, "
                  f"weight stall+shift {m['weight_cycles']:,.0f} "
                  f"({100 * m['weight_share']:.1f}%); {m['parts']} chip parts; host operators: "
                  f"{host or 'none'}"
                  + (f"; per batch {entry['batches']}" if "batches" in entry else "")
                  + f" ({entry['seconds']} s)", flush=True)
        results.append(result)
    if args.json:
        Path(args.json).write_text(json.dumps(dict(backend=args.backend, ub_rows=args.ub_rows,
                                                   results=results), indent=1) + "\n")
    if args.markdown:
        Path(args.markdown).write_text(markdown(results, args.backend))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
