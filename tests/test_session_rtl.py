"""A compiled model on the RTL of the whole chip: `InferenceSession` on the
simulation backends runs every chunk in one simulation and equals the golden
backend and the reference interpreter bit for bit."""

import numpy as np
import pytest

from tpu.compiler import ir
from tpu.compiler.ir import Activation, QuantType
from tpu.compiler.session import InferenceSession

# The host-interface tests build this chip already: no extra simulator build.
from test_host_interface_rtl import NARROW


def tiny_mlp():
    """10 -> 6 (relu) -> 3: a few hundred cycles per chunk."""
    rng = np.random.default_rng(2)
    q_in, q_h, q_out = QuantType(0.04, 3), QuantType(0.05, -128), QuantType(0.1, 0)
    tensors = {n: ir.Tensor(n, s, q) for n, s, q in
               [("x", (10,), q_in), ("h", (6,), q_h), ("y", (3,), q_out)]}
    layers = [
        ir.Dense("fc1", "x", "h", rng.integers(-90, 90, (10, 6)).astype(np.int8),
                 rng.uniform(0.005, 0.02, 6), rng.integers(-400, 400, 6), Activation("relu")),
        ir.Dense("fc2", "h", "y", rng.integers(-90, 90, (6, 3)).astype(np.int8), 0.01),
    ]
    return ir.Graph(tensors, layers,
                    [ir.GraphInput("x", "x", (None, 10), np.dtype(np.float32), "nc")],
                    [ir.GraphOutput("y", "y", (None, 3), np.dtype(np.float32), "nc")],
                    "tiny").validate()


@pytest.mark.rtl
def test_model_on_rtl_equals_golden(simulator):
    graph = tiny_mlp()
    x = np.random.default_rng(1).normal(size=(3, 10)).astype(np.float32)
    (want,) = InferenceSession(graph, backend="reference").run(None, {"x": x})
    golden = InferenceSession(graph, backend="golden", config=NARROW, batch=2)
    (g,) = golden.run(None, {"x": x})
    rtl = InferenceSession(graph, backend=simulator, config=NARROW, batch=2, seed=3)
    heard = []
    rtl.progress = lambda done, total: heard.append((done, total))
    (y,) = rtl.run(None, {"x": x})
    assert heard[-1] == (2, 2)
    assert (g == want).all() and (y == want).all()
    # Two chunks, both run in the one simulation, with the chip's counters.
    assert len(rtl.last_profile) == 2
    for chunk, golden_chunk in zip(rtl.last_profile, golden.last_profile):
        for part, golden_part in zip(chunk, golden_chunk):
            for name in ("mxu_active", "useful_macs", "weight_shift"):
                assert part["counters"][name] == golden_part["counters"][name], (part["name"], name)
