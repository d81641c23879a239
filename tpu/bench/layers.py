"""Compiled convolution layers and the demo models on the golden chip: per part
cycles, MXU-active cycles, MACs, utilisation over the program and over the matrix
phase, TPU v1's counter breakdown (docs/compiler.md). `scripts/bench_compiler.py`
is its command line; `tpu bench` runs `conv_layers`."""

import numpy as np

from ..compiler import ir
from ..compiler.backend import compile_graph
from ..compiler.reference import run as reference_run
from ..config import TPUConfig
from ..driver import run
from ..isa import decode_program
from ..models.cycle_model import estimate_cycles


__all__ = ["conv_graph", "measure", "conv_layers", "measure_demo", "demo"]


def conv_graph(rng, h, w, cin, cout, kernel, padding, pool=None):
    q = lambda: ir.QuantType(float(rng.uniform(0.02, 0.08)), int(rng.integers(-20, 20)))
    tensors = {"x": ir.Tensor("x", (h, w, cin), q())}
    oh, ow = h + 2 * padding - kernel + 1, w + 2 * padding - kernel + 1
    tensors["y"] = ir.Tensor("y", (oh, ow, cout), q())
    layers = [ir.Conv2D("conv", "x", "y",
                        rng.integers(-127, 128, size=(kernel, kernel, cin, cout)).astype(np.int8),
                        np.full(cout, 1 / (kernel * kernel * cin * 64)),
                        rng.integers(-1000, 1000, size=cout), (1, 1), (padding,) * 4,
                        ir.Activation("relu"))]
    out = "y"
    if pool:
        tensors["p"] = ir.Tensor("p", (oh // 2, ow // 2, cout), tensors["y"].quant)
        layers.append(ir.Pool2D("pool", "y", "p", pool, (2, 2), (2, 2)))
        out = "p"
    return ir.Graph(tensors, layers, [ir.GraphInput("x", "x", (None, h, w, cin), np.int8, "nhwc")],
                    [ir.GraphOutput(out, out, (None,), np.int8, "nhwc")], "bench").validate()


async def _main(device, compiled, inputs):
    from ..compiler.execute import execute
    return await execute(device, compiled, inputs)


def measure(name, graph, config, batch, rng, log=print):
    """One batch of random inputs through convolution `graph` on the golden chip:
    per chip part its counters, MACs and utilisation (over the program and the
    matrix phase), and whether the outputs equal the reference interpreter's."""
    compiled = compile_graph(graph, config, batch)
    x = rng.integers(-128, 128, size=(batch, *graph.tensor("x").shape))
    arena = 4 * compiled.host_size + compiled.weights.nbytes + (1 << 20)
    outputs, profile = run(lambda d: _main(d, compiled, {"x": x}), backend="golden",
                           config=config, open={"arena_bytes": arena})
    expected = reference_run(graph, {"x": x}, outputs_only=True)
    exact = all(np.array_equal(outputs[k], v) for k, v in expected.items())
    cells = config.rows * config.cols
    rows = []
    for step, part in zip(compiled.chip_steps, profile):
        c = part["counters"]
        est = estimate_cycles(config, decode_program(step.program))
        phase = est["matrix_phase"]["cycles"]
        rows.append({"layer": name, "part": part["name"], "cycles": int(c["cycles"]),
                     "mxu_active": int(c["mxu_active"]), "macs": int(part["useful_macs"]),
                     "utilisation": part["useful_macs"] / (c["cycles"] * cells),
                     "matrix_phase": phase, "cells": cells, "exact": bool(exact)})
        log(f"{name:>18} {part['name']:>8}: {c['cycles']:7d} cycles, mxu_active "
              f"{c['mxu_active']:7d}, {part['useful_macs']:9d} MACs, utilisation "
              f"{100 * part['useful_macs'] / (c['cycles'] * cells):5.1f}% of the program, "
              f"{100 * part['useful_macs'] / (phase * cells):5.1f}% of the matrix phase "
              f"({phase} cycles), bit-exact: {exact}")
    return rows


def measure_demo(name, float_model, split, config, batch, out_dir, backend="golden", log=print):
    """Compile and run one batch of a demo model on `backend`; print its
    report (host stalls are the RTL's only: the golden chip's host is ideal)."""
    import contextlib
    import io
    import time
    from ..compiler.report import build_report
    from ..demo import CLOCK_HZ, _prepare, _run_on_chip
    with contextlib.redirect_stderr(io.StringIO()):
        m = _prepare(name, float_model, split, config=config, batch=batch, out_dir=out_dir)
        started = time.perf_counter()
        results = _run_on_chip({name: (m["compiled"], m["chunks"][:1])}, backend, name)[name]
        run_s = time.perf_counter() - started
    report = build_report(m["graph"], config, [p for _, p in results], m["batch"],
                          clock_hz=CLOCK_HZ, batch=m["batch"])
    total = report.total
    bound = total.macs / (config.rows * config.cols)
    log(f"\n{name} on {config.rows}x{config.cols}, batch {m['batch']}: compiled in "
          f"{m['timings']['compile']:.2f} s, {backend} run {run_s:.1f} s")
    log(report.format_table())
    log(f"matrix-unit lower bound {bound:.0f} cycles: the program takes "
          f"{total.cycles / bound:.2f}x; MXU utilisation while active "
          f"{100 * total.active_utilisation:.1f}%")


def demo(arrays, batch, out_dir="build/demo", names=("mlp", "cnn"), backend="golden", log=print):
    """`measure_demo` of the demo models `names` on square arrays of `arrays`."""
    from ..compiler import demo_models
    split = demo_models.digits_split()
    models = demo_models.demo_models(out_dir)      # trained once, then cached
    for size in arrays:
        config = TPUConfig(rows=size, cols=size)
        for name in names:
            measure_demo(name, models[name], split, config, batch, out_dir, backend, log)



def conv_layers(batch=64, seed=1, log=print):
    """The reference set of single convolution layers (docs/compiler.md) at `batch`;
    their `measure` rows."""
    rng = np.random.default_rng(seed)
    rows = []
    # The default 8x8 chip with a unified buffer large enough for a batch of 64 images.
    config = TPUConfig(ub_rows=1 << 15)
    rows += measure("3x3 conv 8->8", conv_graph(rng, 8, 8, 8, 8, 3, 1), config, batch, rng, log)
    rows += measure("3x3 conv 16->16", conv_graph(rng, 8, 8, 16, 16, 3, 1), config, batch, rng, log)
    rows += measure("3x3 conv+maxpool", conv_graph(rng, 8, 8, 8, 8, 3, 1, "max"), config, batch,
                    rng, log)
    rows += measure("1x1 conv 8->8", conv_graph(rng, 8, 8, 8, 8, 1, 0), config, batch, rng, log)
    # The default chip's 2048-row unified buffer: input and output stream through it.
    rows += measure("3x3 conv, UB 2048", conv_graph(rng, 8, 8, 8, 8, 3, 1), TPUConfig(), batch,
                    rng, log)
    return rows
