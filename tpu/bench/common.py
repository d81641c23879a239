"""Shared pieces of the benchmark suite: progress, GEMM graphs, plots, timing."""

import sys
import time

import numpy as np

from ..compiler import ir


__all__ = ["progress", "dense_graph", "random_feed", "run_compiled", "run_session", "plot_file", "percent",
           "percent_column", "BREAKDOWN"]

#: TPU v1's counter breakdown (Table 3), in the chip's counter names
BREAKDOWN = ("mxu_active", "weight_stall", "weight_shift", "non_matrix", "raw_stall", "host_stall")
_START = time.monotonic()


def progress(message):
    """One line of progress on stderr, with the time since the suite started."""
    print(f"[bench {time.monotonic() - _START:6.1f} s] {message}", file=sys.stderr, flush=True)


def dense_graph(k, n, seed=0):
    """A one-layer int8 GEMM ``(M, K) x (K, N)`` as an IR graph (M is the batch)."""
    rng = np.random.default_rng(seed)
    q = ir.QuantType(0.05, 0)
    tensors = {"x": ir.Tensor("x", (k,), q), "y": ir.Tensor("y", (n,), ir.QuantType(0.5, 0))}
    layer = ir.Dense("gemm", "x", "y", rng.integers(-128, 128, (k, n), dtype=np.int8),
                     np.full(n, 0.01), np.zeros(n, np.int64))
    return ir.Graph(tensors, [layer],
                    [ir.GraphInput("x", "x", (None, k), np.dtype(np.int8), "nc")],
                    [ir.GraphOutput("y", "y", (None, n), np.dtype(np.int8), "nc")],
                    f"gemm {k}x{n}").validate()


def random_feed(graph, batch, seed=0):
    """Random integer inputs of `graph` for `batch` samples, by model input name."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for spec in graph.inputs:
        tensor = graph.tensor(spec.tensor)
        low, high = tensor.quant.range
        q = rng.integers(low, high + 1, (batch, *tensor.shape), dtype=np.int64)
        if np.dtype(spec.model_dtype).kind == "f":   # reals that quantize to q
            q = (q - tensor.quant.zero_point) * tensor.quant.scale
        array = q.astype(spec.model_dtype)
        if spec.layout == "nchw" and array.ndim == 4:
            array = array.transpose(0, 3, 1, 2)
        feeds[spec.model_name] = array
    return feeds


def run_compiled(graph, config, batch, backend="golden", seed=0, **options):
    """Compile `graph` for `config` at `batch`, run one batch on `backend` (with
    the backend's `options`) and return ``(report, wall seconds of the run, the
    CompiledModel)``."""
    from ..compiler.session import InferenceSession
    session = InferenceSession(graph, backend=backend, config=config, batch=batch, **options)
    feeds = random_feed(graph, batch, seed)
    start = time.monotonic()
    session.run(None, feeds)
    return session.report(), time.monotonic() - start, session.compiled


def run_session(graph, config, batch, backend="golden", seed=0, **options):
    """`run_compiled` without the compiled model: ``(report, wall seconds)``."""
    return run_compiled(graph, config, batch, backend, seed, **options)[:2]


def plot_file(out_dir, name):
    """The path of plot `name` in `out_dir`, with a non-interactive backend selected."""
    import matplotlib
    matplotlib.use("Agg")
    return out_dir / f"{name}.png"


def percent(value):
    return f"{100 * value:.1f}%"


def percent_column(value):
    """`value` as a percentage for a fixed-width text table column."""
    return f"{100 * value:6.2f}%"
