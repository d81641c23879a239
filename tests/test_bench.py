"""`tpu bench` on a tiny suite (golden only): files written, numbers consistent; the
bench's pieces: traces, weight-stall analysis, compiled programs on the RTL core."""

import json

import pytest

from tpu.bench import run_bench
from tpu.bench.report import publish


def test_tiny_bench_writes_consistent_report(tmp_path):
    results = run_bench(tmp_path, quick=True, backends=(),
                        gemm_sizes=[(64, 8, 8), (3, 11, 8)], include_models=False)
    assert (tmp_path / "report.md").read_text().startswith("# Benchmark report")
    for name in ("gemm_utilisation", "roofline", "design_space"):
        assert (tmp_path / f"{name}.png").read_bytes()[:4] == b"\x89PNG"
    saved = json.loads((tmp_path / "results.json").read_text())
    assert len(saved["gemms"]) == 2
    for g in saved["gemms"]:
        assert 0 < g["utilisation"] <= g["ideal_utilisation"] <= 1
        assert g["ideal_cycles"] <= g["cycles"] == g["estimate"]
        assert g["mxu_active"] == g["ideal_cycles"]
        assert sum(g[k] for k in ("mxu_active", "non_matrix")) == g["cycles"]
    assert {t[0][:15] for t in saved["targets"]} >= {"MXU utilisation", "zero weight-sta"}
    points = [p for p in saved["design_space"] if p["cycles"]]
    assert points and all(p["speedup"] > 0 for p in points)
    from tpu.bench.report import BEGIN, END, render
    before = (tmp_path / "report.md").read_text()
    (tmp_path / "report.md").unlink()
    assert render(tmp_path)["targets"] == saved["targets"]
    assert (tmp_path / "report.md").read_text() == before
    page = tmp_path / "docs" / "benchmarks.md"
    page.parent.mkdir()
    page.write_text(f"# Benchmarks\n\n{BEGIN}\nold numbers\n{END}\n\n## Kept\n")
    doc = publish(tmp_path, tmp_path / "docs" / "bench.md", tmp_path / "docs" / "img", page)
    assert "](img/bench_roofline.png)" in doc.read_text()
    assert (tmp_path / "docs" / "img" / "bench_roofline.png").exists()
    text = page.read_text()
    assert "old numbers" not in text and text.endswith(f"{END}\n\n## Kept\n")
    assert f"`{saved['command']}`" in text and saved["date"] in text
    assert "](img/bench_design_space.png)" in text and "](bench.md)" in text


def test_bench_command_parses():
    from tpu.cli import _parser
    args = _parser().parse_args(["bench", "--quick", "--out", "x", "--rows", "16", "--cols", "16"])
    assert args.quick and args.out == "x" and args.rows == 16


def test_trace_covers_every_instruction_of_every_part():
    from tpu.bench.common import dense_graph
    from tpu.bench.trace import TRACKS, UNITS, CONTROL, model_trace
    from tpu.compiler.backend import compile_graph
    from tpu.isa import INSTRUCTION_BYTES
    from tpu.config import TPUConfig
    compiled = compile_graph(dense_graph(20, 12), TPUConfig(), 16)
    events = model_trace(compiled)["traceEvents"]
    units = {TRACKS.index(t) for t in (*UNITS.values(), CONTROL)}
    slices = [e for e in events if e["ph"] == "X" and e["tid"] in units]
    issues = [e for e in events if e["ph"] == "X" and e["tid"] == TRACKS.index("instruction issue")]
    parts = [e for e in events if e["ph"] == "X" and e["tid"] == 0]
    count = sum(len(s.program) // INSTRUCTION_BYTES for s in compiled.steps)
    assert len(slices) == len(issues) == count
    end = parts[-1]["ts"] + parts[-1]["dur"]
    assert all(0 <= e["ts"] and e["ts"] + e["dur"] <= end + 1 for e in slices)
    assert any(e["name"].startswith("mmc") for e in slices)
    # every stall the counters count is on a stall track, by cause
    counters = parts[0]["args"]
    stalls = {name: sum(e["dur"] for e in events if e["ph"] == "X"
                        and e["tid"] == TRACKS.index(track))
              for name, track in (("weight_stall", "stall: weight (MMC waits for its tile)"),
                                  ("raw_stall", "stall: RAW hazard"),
                                  ("host_stall", "stall: host (RHM waits for data)"))}
    assert stalls == {name: counters[name] for name in stalls}


def test_hoisting_the_first_weight_reads_removes_the_first_tile_stall():
    from tpu.bench.common import dense_graph
    from tpu.bench.weight_stalls import compare, hoist_first_reads
    from tpu.compiler.backend import compile_graph
    from tpu.config import TPUConfig
    from tpu.isa import Rw, decode_program
    config = TPUConfig()
    compiled = compile_graph(dense_graph(8, 8), config, 11)   # 11 rows: too few to hide the fill
    [part] = compare(config, compiled)
    assert part["weight_stall"] > 0 and part["hoisted_weight_stall"] == 0
    program = list(decode_program(hoist_first_reads(compiled.steps[0].program)))
    assert isinstance(program[0], Rw)
    assert sorted(map(str, program)) == sorted(map(str, decode_program(compiled.steps[0].program)))


@pytest.mark.rtl
def test_compiled_program_on_the_rtl_core_equals_the_cycle_model(simulator):
    """Like with like: a compiled part with a batch too small to hide its first tile
    (a weight stall), on the RTL core with an ideal host, counter for counter."""
    from tpu.bench.common import dense_graph
    from tpu.bench.rtl_core import compiled_parts, run_core
    from tpu.compiler.backend import compile_graph
    from tpu.config import TPUConfig
    config = TPUConfig()
    [(name, program)] = compiled_parts(compile_graph(dense_graph(8, 8, seed=3), config, 11),
                                       "gemm")
    row = run_core(config, simulator, name, program)
    assert "error" not in row, row.get("error")
    assert row["counters"] == row["estimate_counters"] and row["counters_equal"]
    assert row["cycles"] == row["estimate"] and row["counters"]["weight_stall"] > 0


def test_fpga_table_reads_the_last_builds(tmp_path):
    from tpu.bench.fpga import find_builds, table
    assert find_builds(tmp_path) == []
    board = tmp_path / "fpga" / "ulx3s-85f"
    board.mkdir(parents=True)
    (board / "build.json").write_text(json.dumps({
        "board": "ulx3s-85f", "device": "LFE5U-85F", "config": {"rows": 2, "cols": 2},
        "fits": True, "clock_mhz": 25.0, "problem": "clock sync reaches 22.15 MHz of 25",
        "resources": {"logic": {"used": 25061, "available": 83640}, "ffs": None,
                      "dsp": {"used": 30, "available": 156}, "ram": None},
        "clocks": {"sync": {"fmax_mhz": 22.15, "target_mhz": 25.0}}, "seconds": 900}))
    (board.parent / "broken").mkdir()
    (board.parent / "broken" / "build.json").write_text("{not json")
    [row] = find_builds(tmp_path)
    assert row["array"] == "2x2" and row["logic"] == "25061/83640" and row["fmax_mhz"] == 22.15
    text = table([row])
    assert "| chip (tpu build) | ulx3s-85f | 2x2 | yes | 25061/83640 | - | 30/156 |" in text
    assert "22.1" in text and "reaches 22.15 MHz" in text
