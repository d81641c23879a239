"""The per-layer report: sums over chunks, MAC counts, utilisation, throughput."""

import json

import pytest

from tpu import TPUConfig
from tpu.compiler import report

from test_compiler_reference import small_graph


def part(name, layers, cycles, active, estimate, host=False, **more):
    counters = {"cycles": cycles, "mxu_active": active, "useful_macs": active * 64,
                "weight_stall": 3, "weight_shift": 16, "non_matrix": cycles - active,
                "raw_stall": 5, "host_stall": 2, **more}
    return {"name": name, "layers": layers, "counters": {} if host else counters,
            "estimate": {"cycles": estimate}, "host": host}


def profile():
    chunk = [part("conv", ["conv", "pool"], 1000, 400, 990), part("fc", ["flat", "fc"], 200, 30, 210),
             part("sm", ["sm"], 0, 0, 0, host=True)]
    return [chunk, chunk]


def test_macs_utilisation_and_totals():
    graph = small_graph()
    r = report.build_report(graph, TPUConfig(), profile(), samples=3)
    conv, fc, sm = r.rows
    # conv: 6x6 output pixels x 3x3 taps x 2 in x 3 out; fc: 27 x 4; per sample, 3 samples.
    assert conv.macs == 3 * 36 * 9 * 2 * 3 and fc.macs == 3 * 27 * 4 and sm.macs == 0
    assert conv.cycles == 2000 and conv.estimate == 1980 and conv.counters["mxu_active"] == 800
    assert conv.utilisation == pytest.approx(conv.macs / (2000 * 64))
    assert conv.active_utilisation == pytest.approx(conv.macs / (800 * 64))
    assert sm.where == "host" and sm.cycles == 0
    total = r.total
    assert total.cycles == 2400 and total.counters["raw_stall"] == 20
    assert r.cycles_per_inference == pytest.approx(800)
    assert r.inferences_per_second == pytest.approx(3 * 100e6 / 2400)
    r200 = report.build_report(graph, TPUConfig(), profile(), samples=3, clock_hz=200e6)
    assert r200.inferences_per_second == pytest.approx(2 * r.inferences_per_second)


def test_table_and_json():
    r = report.build_report(small_graph(), TPUConfig(), profile(), samples=3)
    text = r.format_table()
    lines = text.splitlines()
    assert lines[0].split()[:5] == ["layer", "where", "cycles", "estimate", "MACs"]
    assert "RAW" in lines[0] and "w.stall" in lines[0]
    assert lines[1].split()[:4] == ["conv", "chip", "2000", "1980"]
    assert lines[3].split()[:3] == ["sm", "host", "-"]
    assert lines[-2].split()[:2] == ["total", "2400"]
    assert "125,000 inferences/s at 100 MHz" in lines[-1]
    assert "weight fills not timed" in lines[-1]
    data = json.loads(json.dumps(r.to_json()))
    assert data["total"]["cycles"] == 2400 and data["samples"] == 3
    assert data["layers"][0]["counters"]["weight_shift"] == 32
    assert data["inferences_per_second"] == pytest.approx(125000)


def test_bad_clock():
    with pytest.raises(ValueError, match="clock"):
        report.build_report(small_graph(), TPUConfig(), profile(), 1, clock_hz=0)


def test_skipped_tiles_are_not_counted_as_done():
    """A dense layer whose weights are zero but for one block: the skipped
    all-zero tiles' MACs are reported apart, and utilisation (from the MACs
    done, at most those performed) stays at or under 100%."""
    import numpy as np
    from tpu.compiler.ir import Dense, Graph, GraphInput, GraphOutput, QuantType, Tensor
    from tpu.compiler.session import InferenceSession
    rng = np.random.default_rng(5)
    weight = np.zeros((64, 8), dtype=np.int8)
    weight[:8] = rng.integers(-128, 128, (8, 8))
    graph = Graph(
        tensors={"x": Tensor("x", (64,), QuantType(0.05, 0)), "y": Tensor("y", (8,), QuantType(0.1, 3))},
        layers=[Dense("fc", "x", "y", weight=weight, weight_scale=0.01)],
        inputs=[GraphInput("x", "x", (None, 64), np.dtype(np.int8), "nc")],
        outputs=[GraphOutput("y", "y", (None, 8), np.dtype(np.int8), "nc")]).validate()
    session = InferenceSession(graph, config=TPUConfig(), batch=8)
    step = session.compiled.steps[0]
    assert step.skipped_tiles == 7 and step.useful_macs == 8 * 64 * 8
    assert step.skipped_macs == 7 * 8 * 8 * 8 and step.performed_macs == 8 * 64
    session.run(None, {"x": rng.integers(-128, 128, (8, 64)).astype(np.int8)})
    row = session.report().rows[0]
    assert row.performed == row.counters["useful_macs"] == 8 * 64
    assert row.skipped == 7 and row.done_macs == 8 * 8 * 8
    assert 0 < row.utilisation <= row.active_utilisation <= 1.0
    assert "skipped" in session.report().format_table().splitlines()[0]
