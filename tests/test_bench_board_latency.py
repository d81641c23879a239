"""`tpu bench`'s MLPerf Tiny latency on the ULX3S: cycles per inference on the
ulx3s16 chip (the cycle model) over the routed clock recorded in
`tpu.fpga.routed_clocks`, the 75 MHz target and the array's 142 MHz, beside
fpgaConvNet's published latencies."""

from pathlib import Path

import pytest

from tpu.bench.board_latency import (FPGACONVNET_MS, board_clocks, board_latency,
                                     load_tiny_models, markdown)
from tpu.bench.common import dense_graph
from tpu.bench.design_space import estimated_cycles
from tpu.bench.report import _board_latency_section
from tpu.compiler.mlperf_tiny import MODELS, missing_reason, model_path
from tpu.compiler.tflite_frontend import import_tflite
from tpu.config import ULX3S16_PROFILE
from tpu.fpga.routed_clocks import ROUTED_CHIPS


def test_clocks_are_the_recorded_ones():
    clocks = board_clocks()
    assert [mhz for _, mhz in clocks] == [54.73, 75.0, 142.0]
    assert clocks[0][0] == "routed (2026-12-07, 82653f4)"
    # The latest routed ulx3s16 build is the one the table divides by.
    latest = [r for r in ROUTED_CHIPS if r.profile == "ulx3s16"][-1]
    assert clocks[0][1] == latest.fmax_mhz
    with pytest.raises(ValueError, match="no routed build of profile 'up6k'"):
        board_clocks(profile="up6k")


def test_latency_is_cycles_over_the_clock():
    graphs = {"gemm 64x48": dense_graph(64, 48, seed=3), "gemm 16x16": dense_graph(16, 16, seed=4)}
    result = board_latency(graphs)
    assert result["config"] == ULX3S16_PROFILE.name
    for row, (name, graph) in zip(result["models"], graphs.items()):
        cycles, _ = estimated_cycles(graph, ULX3S16_PROFILE, 1)
        assert row["model"] == name and row["cycles"] == cycles > 0
        assert row["ms"] == {"routed (2026-12-07, 82653f4)": cycles / 54730,
                             "target": cycles / 75000, "array alone": cycles / 142000}
        assert row["fpgaconvnet_ms"] is None
    table = markdown(result)
    row = result["models"][0]
    assert (f"| gemm 64x48 | {row['cycles']:,} | {row['cycles'] / 54730:.3f} | "
            f"{row['cycles'] / 75000:.3f} | {row['cycles'] / 142000:.3f} | - |") in table
    assert "ms at 54.73 MHz (routed (2026-12-07, 82653f4))" in table.splitlines()[0]


def test_a_refused_model_is_a_row():
    # A 16x16 chip with a unified buffer too small for the layer's input.
    result = board_latency({"wide": dense_graph(4096, 16)}, ULX3S16_PROFILE.replace(ub_rows=64),
                           clocks=[("routed", 10.0)])
    (row,) = result["models"]
    assert row["cycles"] is None and row["error"]
    assert "| wide | refused: " in markdown(result)


def test_report_section():
    result = {**board_latency({"gemm": dense_graph(32, 32)}), "skipped": {"vww": "not present"}}
    text = _board_latency_section({"board_latency": result})
    assert "## MLPerf Tiny on the ULX3S" in text and "fpgaConvNet" in text
    assert "Not run: vww: not present" in text
    assert _board_latency_section({}) == ""


def test_mlperf_tiny_on_the_ulx3s():
    graphs, skipped = load_tiny_models()
    if not graphs:
        pytest.skip("; ".join(f"{k}: {v}" for k, v in skipped.items()))
    assert set(graphs) | set(skipped) == set(MODELS)
    assert skipped == {name: missing_reason(name) for name in MODELS if missing_reason(name)}
    result = board_latency(graphs)
    for row in result["models"]:
        name = row["model"]
        cycles, _ = estimated_cycles(import_tflite(Path(model_path(name))), ULX3S16_PROFILE, 1)
        print(name, cycles, row["ms"])
        assert row["cycles"] == cycles
        assert row["ms"]["routed (2026-12-07, 82653f4)"] == cycles / 54730
        assert row["fpgaconvnet_ms"] == FPGACONVNET_MS.get(name)
    assert FPGACONVNET_MS == {"pretrainedResnet_quant": 0.411, "kws_ref_model": 0.324}


def test_routed_builds_in_the_fpga_table():
    from tpu.bench.fpga import routed_table
    from tpu.bench.report import _fpga_section
    lines = routed_table().splitlines()
    assert len(lines) == 2 + len(ROUTED_CHIPS)
    # 2 x 16 x 16 x 28.87 MHz = 14.8 GOPS; the profile is built at 50 MHz now.
    assert "| ulx3s-85f | --profile ulx3s16, control re-timed | 16x16 | 16.6667 | 28.87 | 14.8 | " \
        "2026-12-05 | ae77c3d | 50 | " in routed_table()
    # 2 x 16 x 16 x 45.02 MHz = 23.1 GOPS, built at the oscillator's 25 MHz.
    assert "| --profile ulx3s16, pooling average in stages | 16x16 | 25 | 45.02 | 23.1 | " \
        "2026-12-05 | f9103d6 | 50 | " in routed_table()
    # 2 x 16 x 16 x 48.14 MHz = 24.6 GOPS, built at 41.67 MHz from the PLL.
    assert "| --profile ulx3s16, decoder products in terms | 16x16 | 41.6667 | 48.14 | 24.6 | " \
        "2026-12-05 | 0010099 | 50 | " in routed_table()
    # 2 x 16 x 16 x 47.69 MHz = 24.4 GOPS, built at 45 MHz.
    assert "| --profile ulx3s16, pooling output without carry chains | 16x16 | 45 | 47.69 | 24.4 | " \
        "2026-12-05 | 6afb2de | 50 | " in routed_table()
    # 2 x 16 x 16 x 48.83 MHz = 25.0 GOPS, built at 45 MHz.
    assert "| --profile ulx3s16, the shared lane's column one-hot | 16x16 | 45 | 48.83 | 25.0 | " \
        "2026-12-05 | 825f7e6 | 50 | " in routed_table()
    # 2 x 16 x 16 x 49.66 MHz = 25.4 GOPS, built at 45.83 MHz.
    assert "| --profile ulx3s16, three-cycle PEs | 16x16 | 45.8333 | 49.66 | 25.4 | " \
        "2026-12-05 | df5d627 | 50 | " in routed_table()
    # 2 x 16 x 16 x 48.39 MHz = 24.8 GOPS, built at 46.875 MHz.
    assert "| --profile ulx3s16, the sequencer's enables from flip-flops | 16x16 | 46.875 | 48.39 | " \
        "24.8 | 2026-12-05 | 72cf499 | 50 | " in routed_table()
    # 2 x 16 x 16 x 50.69 MHz = 26.0 GOPS, built at 45.83 MHz.
    assert "| --profile ulx3s16, the function table read a cycle early | 16x16 | 45.8333 | 50.69 | " \
        "26.0 | 2026-12-06 | 6abf3b7 | 50 | " in routed_table()
    # 2 x 16 x 16 x 49.75 MHz = 25.5 GOPS, built at 46.875 MHz.
    assert "| --profile ulx3s16, the packing gearboxes' enables by slot | 16x16 | 46.875 | 49.75 | " \
        "25.5 | 2026-12-06 | 5e84340 | 50 | " in routed_table()
    # 2 x 16 x 16 x 51.82 MHz = 26.5 GOPS, built at 46.875 MHz.
    assert "| --profile ulx3s16, the shared lane's group select from a register | 16x16 | 46.875 | " \
        "51.82 | 26.5 | 2026-12-06 | 0895865 | 50 | " in routed_table()
    # 2 x 16 x 16 x 54.02 MHz = 27.7 GOPS, built at 46.875 MHz.
    assert "| --profile ulx3s16, the shared lane's start from flip-flops | 16x16 | 46.875 | 54.02 | " \
        "27.7 | 2026-12-06 | d2d4f87 | 50 | " in routed_table()
    # 2 x 16 x 16 x 50.37 MHz = 25.8 GOPS, built at 50 MHz and meeting it.
    assert "| ulx3s-85f | --profile ulx3s16, the weight FIFO's read enable from a flip-flop | " \
        "16x16 | 50 | 50.37 | 25.8 | 2026-12-06 | 46f2969 | 50 | " in routed_table()
    # 2 x 16 x 16 x 53.31 MHz = 27.3 GOPS, built at 50 MHz and meeting it.
    assert "| ulx3s-85f | --profile ulx3s16, the MLAS rounding and the fetcher's registered valid | " \
        "16x16 | 50 | 53.31 | 27.3 | 2026-12-07 | 8c5fb4d | " in routed_table()
    # 2 x 16 x 16 x 56.83 MHz = 29.1 GOPS, built at 50 MHz and meeting it.
    assert "| ulx3s-85f | --profile ulx3s16, the activation function's output registered | " \
        "16x16 | 50 | 56.83 | 29.1 | 2026-12-07 | 666dcd6 | 50 | " in routed_table()
    # 2 x 16 x 16 x 54.79 MHz = 28.1 GOPS, built at 50 MHz and meeting it.
    assert "| ulx3s-85f | --profile ulx3s16, the decoder's steps and the pooling input registered | " \
        "16x16 | 50 | 54.79 | 28.1 | 2026-12-07 | 6abf0fb | 50 | " in routed_table()
    # 2 x 16 x 16 x 54.73 MHz = 28.0 GOPS, built at 50 MHz and meeting it; the latest
    # tree's 54.73 MHz less 5% is 51.99, and no PLL clock between the 50 MHz it met
    # and that is faster: the profile's default is 50 MHz.
    assert lines[-1].startswith("| ulx3s-85f | --profile ulx3s16, LDQ's words moved a state later | "
                                "16x16 | 50 | 54.73 | 28.0 | 2026-12-07 | 82653f4 | 50 | ")
    assert "| 2x2 | 18.75 | 20.73 | 0.2 | 2026-12-02 | - | 18.75 |" in routed_table()
    assert routed_table() in _fpga_section({"fpga": []})
