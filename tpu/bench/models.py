"""Models per layer at several batches on the golden chip: the demo MLP and CNN
(quantized like the demo) and the MLPerf Tiny models that are present."""

from pathlib import Path

import numpy as np

from ..compiler.errors import CompileError
from .common import BREAKDOWN, progress, run_session


__all__ = ["load_models", "run_models", "BATCHES"]

BATCHES = (1, 8, 64, 256)
#: the unified buffer the MLPerf Tiny models run with (their first layers need more than the
#: default 2048 rows even at batch 1; docs/tflite.md measures them with this one)
TINY_UB_ROWS = 8192


def model_config(name, config):
    """The chip model `name` runs on: `config`, with a larger unified buffer for MLPerf Tiny."""
    if name.startswith("demo"):
        return config
    return config.replace(ub_rows=max(config.ub_rows, TINY_UB_ROWS))
CALIBRATION_IMAGES = 256


def load_models(quick, cache_dir="build/demo"):
    """``(graphs by name, skipped: name -> reason)``."""
    from ..compiler import demo_models, zoo
    from ..compiler.onnx_frontend import import_onnx
    graphs, skipped = {}, {}
    floats = demo_models.demo_models(cache_dir, log=progress)
    x_train = demo_models.digits_split()[0]
    for name, model in floats.items():
        quantized = zoo.quantize(model, demo_models.model_input(name, x_train[:CALIBRATION_IMAGES]),
                                 form="qdq", activation_type="int8")
        graphs[f"demo {name}"] = import_onnx(quantized, name=f"digits_{name}")
    from ..compiler import mlperf_tiny
    names = list(mlperf_tiny.MODELS)
    for name in names:
        reason = mlperf_tiny.missing_reason(name)
        if reason is None and quick:
            reason = "full run only (minutes per model on the golden chip at batch 256)"
        if reason:
            skipped[name] = reason
            continue
        try:
            from ..compiler.tflite_frontend import import_tflite
            graphs[name] = import_tflite(Path(mlperf_tiny.model_path(name)))
        except Exception as error:          # a model the front end refuses is reported, not fatal
            skipped[name] = f"{type(error).__name__}: {error}"
    return graphs, skipped


def real_macs(graph, layer):
    """The model's own MACs of `layer` per sample: a depthwise convolution (lowered to a
    block-diagonal Conv2D) counts only its taps that can be non-zero, as
    scripts/bench_tflite.py does."""
    from ..compiler import ir
    from ..compiler.report import layer_macs
    if isinstance(layer, ir.Conv2D) and layer.name.startswith("depthwise"):
        pixels = int(np.prod(graph.tensor(layer.output).shape[:2]))
        kh, kw = layer.weight.shape[:2]
        return pixels * kh * kw * int(np.count_nonzero(np.any(layer.weight != 0, axis=(0, 1))))
    return layer_macs(graph, layer)


def _fit_batch(graph, config, batch):
    """The largest power-of-two fraction of `batch` the compiler accepts."""
    from ..compiler.backend import compile_graph
    while True:
        try:
            compile_graph(graph, config, batch)
            return batch
        except CompileError as error:
            if batch == 1:
                raise
            batch = max(1, batch // 2)


def run_models(graphs, config, batches, clock_hz):
    """Per model and batch: the report's layers and totals."""
    results = []
    for name, graph in graphs.items():
        chip = model_config(name, config)
        for batch in batches:
            progress(f"model {name} at batch {batch} on golden")
            try:
                compiled_batch = _fit_batch(graph, chip, batch)
                report, seconds = run_session(graph, chip, compiled_batch)
            except Exception as error:
                results.append({"model": name, "batch": batch, "error": f"{type(error).__name__}: {error}"})
                continue
            report.clock_hz = clock_hz
            total = report.total
            if not total.cycles:
                results.append({"model": name, "batch": batch,
                                "error": "every layer is a host step (no chip part to measure)"})
                continue
            by_name = {layer.name: layer for layer in graph.layers}
            for row in report.rows:      # depthwise layers: the model's MACs, not the lowered ones
                if any(n.startswith("depthwise") for n in row.layers):
                    row.macs = report.samples * sum(real_macs(graph, by_name[n])
                                                    for n in row.layers if n in by_name)
            total = report.total
            layers = []
            for row in report.rows:
                layers.append({"name": row.name, "where": row.where, "cycles": row.cycles,
                               "estimate": row.estimate, "macs": row.macs,
                               "utilisation": row.utilisation,
                               "weight_bytes": row.counters.get("weight_shift", 0) * config.cols,
                               **{n: int(row.counters.get(n, 0)) for n in BREAKDOWN}})
            results.append({
                "model": name, "batch": batch, "compiled_batch": compiled_batch,
                "ub_rows": chip.ub_rows,
                "cycles": total.cycles, "estimate": total.estimate, "macs": total.macs,
                "utilisation": total.utilisation,
                **{n: int(total.counters.get(n, 0)) for n in BREAKDOWN},
                "cycles_per_inference": report.cycles_per_inference,
                "inferences_per_second": report.inferences_per_second,
                "clock_hz": clock_hz, "seconds": seconds, "layers": layers})
    return results
