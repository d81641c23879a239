"""Which batch to compile a model for, and why.

A model whose batch dimension is dynamic compiles at batch 1 unless a batch
is asked for: a compiled model runs whole batches, so a larger one would
make every single inference pay for a batch (and the simulators take that
much longer). What a larger batch would give is not hidden, though:
`batch_choice` compiles the model at a few larger batches, within the
chip's memories and the simulated host's memory, and says which one has
the fewest cycles per inference (the cycle model's estimate of the chip
parts) and by how much, so that ``tpu compile`` can print it beside the
batch it chose.
"""

from .errors import CompileError


__all__ = ["batch_choice", "CANDIDATES", "dynamic_batch"]

#: batches tried for the hint
CANDIDATES = (2, 4, 8, 16, 32, 64)
#: a larger batch is worth a hint when it is at least this much faster
_WORTH = 1.1


def dynamic_batch(graph):
    """Whether every model input's batch dimension is dynamic (None)."""
    shapes = [getattr(i, "model_shape", None) for i in graph.inputs]
    return bool(shapes) and all(s is not None and len(s) > 0 and s[0] is None for s in shapes)


def cycles_per_inference(compiled):
    """The cycle model's cycles of the chip parts per sample of `compiled`."""
    return sum(getattr(s, "estimated_cycles", 0) for s in compiled.steps) / compiled.batch


def batch_choice(graph, config, compiled, requested=None, candidates=CANDIDATES):
    """A sentence: the batch `compiled` was compiled for and why, with a
    hint of a faster batch for a model of dynamic batch compiled at 1."""
    from .backend import compile_graph
    from .session import DEFAULT_ARENA_BYTES, host_bytes
    batch = compiled.batch
    if requested is not None:
        return f"batch {batch} (as asked with --batch)"
    if not dynamic_batch(graph):
        return f"batch {batch} (the model's inputs have a fixed batch dimension)"
    base = cycles_per_inference(compiled)
    best = None
    for b in candidates:
        try:
            trial = compile_graph(graph, config, b)
        except CompileError:
            break              # (a larger batch would not fit either)
        if host_bytes(trial) > DEFAULT_ARENA_BYTES:
            break
        cycles = cycles_per_inference(trial)
        if best is None or cycles < best[1]:
            best = (b, cycles)
    why = f"batch {batch} (the model's batch is dynamic: one inference per run"
    if best is None or not base or base < _WORTH * best[1]:
        return why + "; a larger --batch would not be faster)"
    b, cycles = best
    return (why + f"; --batch {b} would take {cycles:,.0f} cycles per inference instead of "
            f"{base:,.0f}, {base / cycles:.1f}x the throughput, for runs of {b} samples)")
