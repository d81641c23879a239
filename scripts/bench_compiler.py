"""Benchmark: MXU utilisation of compiled convolution layers.

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

import numpy as np

from tpu import TPUConfig
from tpu.compiler import ir
from tpu.compiler.backend import compile_graph
from tpu.compiler.execute import execute
from tpu.compiler.reference import run as reference_run
from tpu.driver import run
from tpu.isa import decode_program
from tpu.sim.models.cycle_model import estimate_cycles


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
    return await execute(device, compiled, inputs)


def measure(name, graph, config, batch, rng):
    compiled = compile_graph(graph, config, batch)
    x = rng.integers(-128, 128, size=(batch, *graph.tensor("x").shape))
    arena = 4 * compiled.host_size + compiled.weights.nbytes + (1 << 20)
    outputs, profile = run(lambda d: _main(d, compiled, {"x": x}), backend="golden",
                           config=config, open={"arena_bytes": arena})
    expected = reference_run(graph, {"x": x}, outputs_only=True)
    exact = all(np.array_equal(outputs[k], v) for k, v in expected.items())
    cells = config.rows * config.cols
    for step, part in zip(compiled.chip_steps, profile):
        c = part["counters"]
        est = estimate_cycles(config, decode_program(step.program))
        phase = est["matrix_phase"]["cycles"]
        print(f"{name:>18} {part['name']:>8}: {c['cycles']:7d} cycles, mxu_active "
              f"{c['mxu_active']:7d}, {part['useful_macs']:9d} MACs, utilisation "
              f"{100 * part['useful_macs'] / (c['cycles'] * cells):5.1f}% of the program, "
              f"{100 * part['useful_macs'] / (phase * cells):5.1f}% of the matrix phase "
              f"({phase} cycles), bit-exact: {exact}")


def measure_demo(name, float_model, split, config, batch, out_dir, backend="golden"):
    """Compile and run one batch of a demo model on `backend`; print its
    report (host stalls are the RTL's only: the golden chip's host is ideal)."""
    import contextlib
    import io
    import time
    from tpu.compiler.report import build_report
    from tpu.demo import CLOCK_HZ, _prepare, _run_on_chip
    with contextlib.redirect_stderr(io.StringIO()):
        m = _prepare(name, float_model, split, config=config, batch=batch, out_dir=out_dir)
        started = time.perf_counter()
        results = _run_on_chip({name: (m["compiled"], m["chunks"][:1])}, backend, name)[name]
        run_s = time.perf_counter() - started
    report = build_report(m["graph"], config, [p for _, p in results], m["batch"],
                          clock_hz=CLOCK_HZ, batch=m["batch"])
    total = report.total
    bound = total.macs / (config.rows * config.cols)
    print(f"\n{name} on {config.rows}x{config.cols}, batch {m['batch']}: compiled in "
          f"{m['timings']['compile']:.2f} s, {backend} run {run_s:.1f} s")
    print(report.format_table())
    print(f"matrix-unit lower bound {bound:.0f} cycles: the program takes "
          f"{total.cycles / bound:.2f}x; MXU utilisation while active "
          f"{100 * total.active_utilisation:.1f}%")


def demo(arrays, batch, out_dir="build/demo", names=("mlp", "cnn"), backend="golden"):
    from tpu.compiler import demo_models
    split = demo_models.digits_split()
    models = demo_models.demo_models(out_dir)      # trained once, then cached
    for size in arrays:
        config = TPUConfig(rows=size, cols=size)
        for name in names:
            measure_demo(name, models[name], split, config, batch, out_dir, backend)
    return 0


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
        return demo(args.arrays, args.batch, names=args.models, backend=args.backend)
    rng = np.random.default_rng(args.seed)
    # The default 8x8 chip with a unified buffer large enough for a batch of 64 images.
    config = TPUConfig(ub_rows=1 << 15)
    measure("3x3 conv 8->8", conv_graph(rng, 8, 8, 8, 8, 3, 1), config, args.batch, rng)
    measure("3x3 conv 16->16", conv_graph(rng, 8, 8, 16, 16, 3, 1), config, args.batch, rng)
    measure("3x3 conv+maxpool", conv_graph(rng, 8, 8, 8, 8, 3, 1, "max"), config, args.batch, rng)
    measure("1x1 conv 8->8", conv_graph(rng, 8, 8, 8, 8, 1, 0), config, args.batch, rng)
    # The default chip's 2048-row unified buffer: input and output stream through it.
    measure("3x3 conv, UB 2048", conv_graph(rng, 8, 8, 8, 8, 3, 1), TPUConfig(), args.batch, rng)
    return 0


if __name__ == "__main__":
    sys.exit(main())
