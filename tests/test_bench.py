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
    assert saved["cpu_seconds"] > 0 and len(saved["load_average"]) == 2
    assert "s CPU (the suite's process" in (tmp_path / "report.md").read_text()
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
    # a run that did not record its CPU time, published with /usr/bin/time -v's
    from tpu.bench.report import publish_run
    del saved["cpu_seconds"]
    (tmp_path / "results.json").write_text(json.dumps(saved))
    log = tmp_path / "time.log"
    log.write_text("\tCommand being timed: \"tpu bench\"\n\tUser time (seconds): 1500.25\n"
                   "\tSystem time (seconds): 99.5\n")
    page.write_text(f"# Benchmarks\n\n{BEGIN}\n{END}\n")
    doc = publish_run(tmp_path, log, docs=tmp_path / "docs")
    assert "1600 s CPU" in doc.read_text() and "1600 s CPU" in page.read_text()


def test_bench_command_parses():
    from tpu.cli.commands import _parser
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


def test_the_compiler_issues_the_first_weight_reads_first():
    """A part of 11 rows (too few to hide the first tile's fill behind its input
    read): the compiler's first RWs are already at the program's start, so
    hoisting them changes nothing and no MMC waits for its tile."""
    from tpu.bench.common import dense_graph
    from tpu.bench.weight_stalls import compare, hoist_first_reads
    from tpu.compiler.backend import compile_graph
    from tpu.config import TPUConfig
    from tpu.isa import Rw, decode_program
    config = TPUConfig()
    compiled = compile_graph(dense_graph(8, 8), config, 11)
    [part] = compare(config, compiled)
    assert part["weight_stall"] == part["hoisted_weight_stall"] == 0
    assert part["cycles"] == part["hoisted_cycles"]
    program = list(decode_program(hoist_first_reads(compiled.steps[0].program)))
    assert isinstance(program[0], Rw)
    assert program == list(decode_program(compiled.steps[0].program))


@pytest.mark.rtl
def test_compiled_program_on_the_rtl_core_equals_the_cycle_model(simulator):
    """Like with like: a compiled part with a batch too small to hide its tiles
    (one sample through two K tiles: a weight stall), on the RTL core with an
    ideal host, counter for counter. (With one K tile the first tile now
    arrives within the three-cycle decode, so no stall is left to compare.)"""
    from tpu.bench.common import dense_graph
    from tpu.bench.rtl_core import compiled_parts, run_core
    from tpu.compiler.backend import compile_graph
    from tpu.config import TPUConfig
    config = TPUConfig()
    [(name, program)] = compiled_parts(compile_graph(dense_graph(16, 8, seed=3), config, 1),
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


def test_cycle_model_target_counts_the_whole_chip_runs():
    """The 2% target covers the runs through the whole chip (against the estimate with
    the link model), not only the RTL core with an ideal host."""
    from tpu.bench.report import targets
    from tpu.config import TPUConfig
    core = [{"name": "gemm part", "simulator": "verilator", "cycles": 281, "estimate": 281,
             "counters_equal": True}]
    chip = [{"name": "GEMM 16x16x8", "simulator": "verilator", "cycles": 445, "estimate": 445,
             "counters_equal": True}]

    def target():
        [t] = [t for t in targets(TPUConfig(), [], [], core, chip) if t[0].startswith("golden")]
        return t

    passed, detail = target()[1:]
    assert passed is True and "1 on the RTL core" in detail and "1 through the whole chip" in detail
    chip[0]["estimate"] = 281          # the ideal host's estimate misses the link's cost
    passed, detail = target()[1:]
    assert passed is False and "GEMM 16x16x8 (verilator): RTL 445, estimate 281" in detail
    chip[0] = {"name": "demo cnn b8", "simulator": "verilator", "error": "it did not run"}
    passed, detail = target()[1:]
    assert passed is False and "1 run(s) failed: demo cnn b8" in detail


def test_convolution_layers_part_and_its_section():
    """`tpu.bench.layers` (what scripts/bench_compiler.py prints) as rows and a report section."""
    from tpu.bench.layers import conv_layers
    from tpu.bench.report import _layers_section
    rows = conv_layers(batch=2, log=lambda line: None)
    assert [r["layer"] for r in rows][:2] == ["3x3 conv 8->8", "3x3 conv 16->16"]
    for r in rows:
        assert r["exact"] and r["mxu_active"] <= r["matrix_phase"] <= r["cycles"]
        assert 0 < r["utilisation"] <= 1
    text = _layers_section({"conv_layers": rows, "conv_batch": 2})
    assert "## Convolution layers" in text and "| 1x1 conv 8->8 |" in text


def test_tflite_part_and_its_section():
    """`tpu.bench.tflite` (what scripts/bench_tflite.py prints) on one model, golden."""
    from tpu.bench.report import _layers_section
    from tpu.bench.tflite import run_tflite
    from tpu.compiler.mlperf_tiny import missing_reason
    reason = missing_reason("ad01_int8")
    if reason:
        pytest.skip(reason)
    lines = []
    results, failures = run_tflite(["ad01_int8"], reference=2, chip=1, sizes=(8,),
                                   backend="golden", log=lines.append)
    assert failures == 0 and results[0]["reference"] == {"inputs": 2, "equal": 2}
    [size] = results[0]["sizes"]
    assert size["equal"] == 1 and size["cycles"] > size["mxu_active"] > 0
    text = _layers_section({"tflite": {"backend": "golden", "results": results}})
    assert "ad01_int8: reference interpreter 2/2 inputs equal" in text
    assert "| ad01_int8 | 8x8 | 1/1 (golden) |" in text


def test_tflite_chips_and_results_saved_before_the_up5k_chip():
    """`--up5k` adds the UP5K-sized chip after the square arrays; a results.json
    saved before it (no array label, no weight stall) still renders."""
    from tpu.bench.tflite import UP5K_FMAX_MHZ, UP5K_SIZED, chip_configs, markdown
    from tpu.config import TPUConfig
    configs = chip_configs((8, 16), 8192, up5k=True)
    assert [label for label, _, _ in configs] == ["8x8", "16x16", "4x4 UP5K-sized"]
    assert configs[0][1] == TPUConfig(rows=8, cols=8, ub_rows=8192) and configs[0][2] == 88.5
    assert configs[2][1:] == (UP5K_SIZED, UP5K_FMAX_MHZ)
    assert [label for label, _, _ in chip_configs((8,), 8192)] == ["8x8"]
    old = dict(size=16, equal=1, inputs=1, cycles=1000.0, mxu_active=500.0, utilisation=0.5,
               weight_share=0.25, host_operators=[], inferences_per_second=75000.0, fmax_mhz=75.0)
    line = markdown([dict(model="m", sizes=[old])], "golden").splitlines()[2]
    assert line.startswith("| m | 16x16 | 1/1 (golden) | 1,000 |") and "| 25.0% | none |" in line


def test_large_gemms_take_the_golden_counters_from_the_cycle_model():
    """Above `functional_macs` the sweep skips the golden chip's arithmetic; the counters
    are the ones the golden chip reports (it takes them from the same cycle model)."""
    from tpu.bench.gemm import gemm_config, run_gemms
    from tpu.config import TPUConfig
    config = gemm_config(TPUConfig())
    sizes = [(24, 16, 8), (64, 40, 8)]
    golden = run_gemms(config, True, sizes=sizes, functional_macs=None)
    mixed = run_gemms(config, True, sizes=sizes, functional_macs=24 * 16 * 8)
    assert [g["arithmetic"] for g in mixed] == [True, False]
    keys = ("cycles", "estimate", "ideal_cycles", "mxu_active", "weight_stall", "weight_shift",
            "non_matrix", "raw_stall", "host_stall", "weight_stall_hoisted")
    for a, b in zip(golden, mixed):
        assert {k: a[k] for k in keys} == {k: b[k] for k in keys}


def test_report_states_wall_and_cpu_time_and_load():
    """The report's header says what the run cost and what else ran; a run saved
    before the suite recorded CPU time and load says they were not recorded."""
    from tpu.bench.report import _run_time
    text = _run_time({"seconds": 3000.4, "cpu_seconds": 2710.6, "load_average": [3.5, 6.25]})
    assert text == ("3000 s wall, 2711 s CPU (the suite's process and its simulators and "
                    "builds); load average 3.5 at the start, 6.25 at the end.")
    assert _run_time({"seconds": 60}) == ("60 s wall, CPU time not recorded; "
                                          "load average not recorded.")


def test_publish_command_errors(tmp_path, capsys):
    """`tpu bench --publish` refuses a directory without a run and a time log that is
    not one, each in one line."""
    from tpu.bench.report import time_log_cpu_seconds
    from tpu.cli import main
    assert main(["bench", "--publish", str(tmp_path)]) != 0
    assert "no results.json of a tpu bench run" in capsys.readouterr().err
    assert main(["bench", "--time-log", "x.log"]) != 0
    assert "--time-log goes with --publish DIR" in capsys.readouterr().err
    with pytest.raises(ValueError, match="no 'System time"):
        time_log_cpu_seconds("\tUser time (seconds): 3.0\n")
