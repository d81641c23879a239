"""Running a compiled model's chunks on one device: what a session and the
device pool (`tpu.runtime`) both need, below both of them."""

import numpy as np

__all__ = ["host_bytes", "run_chunks"]


async def _execute(device, compiled, inputs, profile=True):
    """One chunk: ``(outputs by tensor name, profile)`` from the back end."""
    from .execute import execute
    result = await execute(device, compiled, inputs, profile=profile)
    if isinstance(result, tuple):
        outputs, profile_data = result
    else:
        outputs, profile_data = result.outputs, getattr(result, "profile", None)
    return outputs, profile_data


def host_bytes(compiled):
    """Host memory a run of `compiled` may hold at once: its region, the
    weight image (loaded through a buffer) and a program, with room to spare."""
    programs = [len(getattr(step, "program", b"")) for step in getattr(compiled, "steps", [])]
    weights = getattr(compiled, "weights", None)
    needed = int(getattr(compiled, "host_size", 0)) + max(programs, default=0) \
        + (0 if weights is None else np.asarray(weights).nbytes)
    return -(-(needed + (64 << 10)) // 4096) * 4096


async def run_chunks(device, compiled, chunks, done=None):
    """Every chunk through the back end's `execute` on one device; a list of
    ``(outputs, profile)``. ``done(n)`` after the n-th chunk."""
    results = []
    for chunk in chunks:
        results.append(await _execute(device, compiled, chunk))
        if done is not None:
            done(len(results))
    return results
