"""scripts/bench_add_unit.py on a small TFLite model: a depthwise convolution
and a CONV_2D added together, on a 4x4 golden chip."""

import json

import numpy as np
import pytest

from script_loader import load_script
from tflite_builder import ModelBuilder

pytest.importorskip("tflite")

SAME, NONE = 0, 0




def depthwise_add_model():
    """x (6x6x8) -> DEPTHWISE_CONV_2D 3x3 and CONV_2D 1x1, then ADD."""
    rng = np.random.default_rng(3)
    m = ModelBuilder()
    x = m.tensor("x", [1, 6, 6, 8], "INT8", 0.05, 1)
    ws = rng.uniform(0.003, 0.02, 8)
    dw = m.tensor("dw", [1, 3, 3, 8], "INT8", ws, 0, axis=3, data=rng.integers(1, 128, (1, 3, 3, 8)))
    dwb = m.tensor("dwb", [8], "INT32", 0.05 * ws, 0, data=rng.integers(-300, 300, 8))
    pw = m.tensor("pw", [8, 1, 1, 8], "INT8", ws, 0, axis=0, data=rng.integers(-127, 128, (8, 1, 1, 8)))
    pwb = m.tensor("pwb", [8], "INT32", 0.05 * ws, 0, data=rng.integers(-300, 300, 8))
    a = m.tensor("a", [1, 6, 6, 8], "INT8", 0.04, -3)
    b = m.tensor("b", [1, 6, 6, 8], "INT8", 0.03, 2)
    y = m.tensor("y", [1, 6, 6, 8], "INT8", 0.06, 0)
    m.operator("DEPTHWISE_CONV_2D", [x, dw, dwb], [a], "DepthwiseConv2DOptions", Padding=SAME,
               StrideW=1, StrideH=1, DepthMultiplier=1, FusedActivationFunction=NONE,
               DilationWFactor=1, DilationHFactor=1)
    m.operator("CONV_2D", [x, pw, pwb], [b], "Conv2DOptions", Padding=SAME, StrideW=1,
               StrideH=1, FusedActivationFunction=NONE, DilationWFactor=1, DilationHFactor=1)
    m.operator("ADD", [a, b], [y], "AddOptions", FusedActivationFunction=NONE)
    return m.build([x], [y])


def test_bench_add_unit_on_a_small_model(tmp_path, capsys):
    path = tmp_path / "dw_add.tflite"
    path.write_bytes(depthwise_add_model())
    assert load_script("bench_add_unit").main(["--model", str(path), "--sizes", "4", "--ub-rows", "1024",
                                "--json", str(tmp_path / "r.json")]) == 0
    out = capsys.readouterr().out
    (entry,) = json.loads((tmp_path / "r.json").read_text())["results"][0]["sizes"]
    dw, add = entry["depthwise"], entry["add"]
    # One depthwise layer: 36 pixels x 9 taps x 8 channels of real MACs. On a
    # 4x4 array, two lane blocks: the vector unit takes 36 x 9 x 2 cycles, as
    # many as the diagonal tiles alone (2 N tiles x 9 taps, 36 rows each);
    # with every tile, each N tile also streams through its off-diagonal K tile.
    assert dw["layers"] == 1 and dw["real_macs"] == 36 * 9 * 8
    assert dw["vector_unit_estimate"] == 36 * 9 * 2
    assert dw["mxu_active_skipped"] == 36 * 9 * 2
    assert dw["mxu_active_all_tiles"] == 2 * 36 * 9 * 2
    assert dw["cycles_all_tiles"] > dw["cycles_skipped"] == entry["cycles"]
    # One ADD of 6x6x8: two UB rows per pixel; both inputs and the output cross the link.
    assert add["adds"] == 1 and add["output_elements"] == 288
    assert add["link_ub_rows"] == 3 * 72 and add["vector_unit_estimate"] == 2 * 72
    assert add["adjacent_parts"] == 2 and add["beyond_active"] > 0
    assert add["net_gain"] == add["beyond_active"] - add["vector_unit_estimate"]
    assert 0 < add["host_share"] < 1
    assert "dw_add 4x4:" in out and "4-lane vector unit (estimate) 648" in out
