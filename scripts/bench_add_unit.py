#!/usr/bin/env python3
"""Benchmark: depthwise convolution and ADD on the MXU and host, against a vector unit.

The numbers behind docs/tflite.md's choice (issue 10): for each model and
array size, on the golden chip (its cycle model is exact against the RTL's
programs; batch 1, one random int8 input):

* **depthwise**: the MXU-active cycles of the model's depthwise convolutions
  (block-diagonal weights) with every weight tile multiplied, with all-zero
  tiles skipped (what the back end does), and the estimate for an R-lane
  per-channel MAC unit beside the activation pipeline (one tap of R channels
  per cycle: ``pixels x taps x ceil(C / R)``); and the model's cycles per
  inference both ways;
* **ADD**: the model's cycles per inference with its ADDs on the host; the
  ADDs' share of the work (`tpu run`'s host-operator share); the unified-
  buffer rows they move over the host link (both inputs written to host
  memory, the output read back); the cycles beyond MXU-active of the chip
  parts that write an ADD's input or read its output (about what an on-chip
  ADD could save: their link traffic); the estimate for an R-lane vector unit
  that reads two UB rows per output row; and its best net gain (saved minus
  spent).

    .venv/bin/python scripts/bench_add_unit.py [--models kws_ref_model,pretrainedResnet_quant]
        [--model FILE.tflite] [--sizes 8,16] [--ub-rows 8192] [--json R.json]
"""

import argparse
import json
import sys
from pathlib import Path
from unittest import mock

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tpu import TPUConfig  # noqa: E402
from tpu.compiler import ir, parts  # noqa: E402
from tpu.compiler.layout import as_image  # noqa: E402
from tpu.compiler.mlperf_tiny import missing_reason, model_path  # noqa: E402
from tpu.compiler.report import conv_macs_per_pixel  # noqa: E402
from tpu.compiler.session import InferenceSession  # noqa: E402
from tpu.compiler.tflite_frontend import import_tflite  # noqa: E402

DEFAULT_MODELS = ("kws_ref_model", "pretrainedResnet_quant")


def golden_report(graph, size, ub_rows, x, skip_zero_tiles=True):
    """`Report` of one batch-1 run of `x` on the golden chip."""
    config = TPUConfig(rows=size, cols=size, ub_rows=ub_rows)
    if skip_zero_tiles:
        session = InferenceSession(graph, backend="golden", config=config, batch=1)
    else:
        # Every tile kept: the parts pass before it skipped all-zero ones.
        every_tile = lambda tiles: np.ones(tiles.shape[:2], dtype=bool)  # noqa: E731
        with mock.patch.object(parts, "kept_tiles", every_tile):
            session = InferenceSession(graph, backend="golden", config=config, batch=1)
    session.run(None, {graph.inputs[0].model_name: x})
    return session.report()


def depthwise_layers(graph):
    """The convolutions whose weights are block-diagonal (depthwise)."""
    return [layer for layer in graph.layers if isinstance(layer, ir.Conv2D)
            and conv_macs_per_pixel(layer.weight) < int(np.prod(layer.weight.shape))]


def ub_rows_of(graph, tensor, lanes):
    """Unified-buffer rows of one sample of `tensor`: a row per pixel and block of `lanes` channels."""
    h, w, c = as_image(graph.tensor(tensor).shape)
    return h * w * -(-c // lanes)


def rows_of_layers(report, names):
    """The report's chip rows that run any IR layer in `names`."""
    return [row for row in report.rows if row.where == "chip" and set(row.layers) & set(names)]


def measure_depthwise(graph, size, ub_rows, x):
    layers = depthwise_layers(graph)
    if not layers:
        return None
    names = [layer.name for layer in layers]
    skipped = golden_report(graph, size, ub_rows, x)
    every = golden_report(graph, size, ub_rows, x, skip_zero_tiles=False)
    active = lambda report: sum(row.counters.get("mxu_active", 0)  # noqa: E731
                                for row in rows_of_layers(report, names))
    vector = 0
    for layer in layers:
        kh, kw, _, cout = layer.weight.shape
        pixels = int(np.prod(graph.tensor(layer.output).shape[:2]))
        vector += pixels * kh * kw * -(-cout // size)
    return dict(layers=len(layers), real_macs=sum(
                    int(np.prod(graph.tensor(layer.output).shape[:2])) * conv_macs_per_pixel(layer.weight)
                    for layer in layers),
                mxu_active_all_tiles=active(every), mxu_active_skipped=active(skipped),
                vector_unit_estimate=vector,
                cycles_all_tiles=every.total.cycles, cycles_skipped=skipped.total.cycles)


def measure_add(graph, size, ub_rows, x, report):
    adds = [layer for layer in graph.layers if isinstance(layer, ir.Add)]
    if not adds:
        return None
    inputs = {t for layer in adds for t in layer.inputs}
    outputs = {layer.output for layer in adds}
    by_name = {layer.name: layer for layer in graph.layers}
    near = [row for row in report.rows if row.where == "chip" and any(
        by_name[n].output in inputs or set(by_name[n].inputs) & outputs
        for n in row.layers if n in by_name)]
    beyond = sum(row.cycles - row.counters.get("mxu_active", 0) for row in near)
    out_rows = sum(ub_rows_of(graph, layer.output, size) for layer in adds)
    link_rows = sum(ub_rows_of(graph, t, size) for layer in adds for t in (*layer.inputs, layer.output))
    vector = 2 * out_rows
    shares = [h for h in report.host_operators() if h["op"] == "Add"]
    return dict(adds=len(adds), output_elements=sum(int(np.prod(graph.tensor(layer.output).shape))
                                                    for layer in adds),
                cycles=report.total.cycles, host_share=sum(h["share"] for h in shares),
                link_ub_rows=link_rows, adjacent_parts=len(near), beyond_active=beyond,
                vector_unit_estimate=vector, net_gain=beyond - vector)


def run(graph, name, sizes, ub_rows, seed):
    """{model, sizes: [{size, depthwise, add}]} of one model."""
    spec = graph.inputs[0]
    x = np.random.default_rng(seed).integers(-128, 128, size=(1, *spec.model_shape[1:]),
                                             dtype=np.int8)
    result = dict(model=name, sizes=[])
    for size in sizes:
        report = golden_report(graph, size, ub_rows, x)
        entry = dict(size=size, cycles=report.total.cycles,
                     depthwise=measure_depthwise(graph, size, ub_rows, x),
                     add=measure_add(graph, size, ub_rows, x, report))
        result["sizes"].append(entry)
        print_entry(name, entry)
    return result


def print_entry(name, entry):
    size, dw, add = entry["size"], entry["depthwise"], entry["add"]
    print(f"{name} {size}x{size}: {entry['cycles']:,} cycles per inference", flush=True)
    if dw:
        print(f"  depthwise ({dw['layers']} layers, {dw['real_macs']:,} real MACs): MXU-active "
              f"{dw['mxu_active_all_tiles']:,} with all tiles, {dw['mxu_active_skipped']:,} with "
              f"zero tiles skipped; {size}-lane vector unit (estimate) {dw['vector_unit_estimate']:,}; "
              f"model {dw['cycles_all_tiles']:,} -> {dw['cycles_skipped']:,} cycles", flush=True)
    if add:
        print(f"  ADD ({add['adds']} on the host, {add['output_elements']:,} output elements): "
              f"{100 * add['host_share']:.2f}% of the work; {add['link_ub_rows']:,} UB rows over "
              f"the link; {add['beyond_active']:,} cycles beyond MXU-active in the "
              f"{add['adjacent_parts']} chip parts around them; {size}-lane vector unit "
              f"(estimate) {add['vector_unit_estimate']:,}; best net gain {add['net_gain']:,} "
              f"({100 * add['net_gain'] / add['cycles']:.1f}%)", flush=True)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(DEFAULT_MODELS),
                        help="MLPerf Tiny models (comma-separated)")
    parser.add_argument("--model", action="append", default=[], metavar="FILE",
                        help="a .tflite file instead (repeatable)")
    parser.add_argument("--sizes", default="8,16", help="array sizes (rows = cols)")
    parser.add_argument("--ub-rows", type=int, default=8192)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", metavar="FILE", help="write the results as JSON")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    if args.model:
        models = [(Path(p).stem, p) for p in args.model]
    else:
        models = []
        for name in args.models.split(","):
            reason = missing_reason(name)
            if reason:
                print(f"{name}: skipped: {reason}")
                continue
            models.append((name, model_path(name)))
    results = [run(import_tflite(path), name, sizes, args.ub_rows, args.seed)
               for name, path in models]
    if args.json:
        Path(args.json).write_text(json.dumps(dict(ub_rows=args.ub_rows, results=results),
                                              indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
