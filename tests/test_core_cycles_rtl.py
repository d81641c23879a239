"""Cycle counts of the RTL core, under both simulators: MXU utilisation of a
compute-bound program, weight stalls of a memory-bound one, and the cycle
estimate of `tpu.sim.cycle_model` against the RTL's counters.

Each program runs through ``tpu.sim.bench_core`` (an ideal host, an
instruction stream that never idles). The RTL is deterministic here, so the
cycle counts are asserted exactly, against the closed forms worked out in
docs/core_performance.md, and the estimate must equal every counter.
"""

import json

import pytest
from amaranth.back import verilog

from tpu import TPUConfig
from tpu.hdl.core import COUNTERS, TPUCore
from tpu.sim.bench_core import TOP
from tpu.sim.harness import run


CONFIG = TPUConfig()          # 8x8, weight memory: latency 8, 8 bytes (one tile row) per cycle
R, C, L = CONFIG.rows, CONFIG.cols, CONFIG.weight_mem_latency
_SOURCE = {}


def _bench(simulator, tmp_path, case):
    if CONFIG not in _SOURCE:
        _SOURCE[CONFIG] = verilog.convert(TPUCore(CONFIG), name=TOP, emit_src=False)
    out = tmp_path / "bench.json"
    tests, failures = run(CONFIG, simulator, "tpu.sim.bench_core", testcase="bench_program",
                          seed=1, toplevel=TOP, verilog_source=_SOURCE[CONFIG],
                          extra_env={"TPU_BENCH_CASE": json.dumps(case),
                                     "TPU_BENCH_OUT": str(out)})
    assert tests == 1 and failures == 0, "the core disagreed with the golden model"
    result = json.loads(out.read_text())[case["name"]]
    print(json.dumps({k: result[k] for k in ("counters", "matrix_phase", "utilisation",
                                              "estimate_error")}))
    return result


def _check_estimate(result):
    rtl, est = result["counters"], result["estimate"]["counters"]
    assert abs(est["cycles"] - rtl["cycles"]) / rtl["cycles"] <= 0.05
    # In fact the estimate is exact, counter for counter.
    assert {n: est[n] for n in COUNTERS} == {n: rtl[n] for n in COUNTERS}
    assert result["estimate"]["matrix_phase"]["first_row"] == result["matrix_phase"]["first_row"]
    assert result["estimate"]["matrix_phase"]["last_row"] == result["matrix_phase"]["last_row"]


@pytest.mark.rtl
@pytest.mark.parametrize("tiles", [16, 80])
def test_compute_bound(simulator, tmp_path, tiles):
    """64 rows through 16 (80) tiles, weights fetched 6 tiles ahead: the array
    takes a row in every cycle from the first row to the last."""
    T, B = tiles, 8 * R
    r = _bench(simulator, tmp_path, {"name": "compute", "tiles": T, "batch": B})
    c = r["counters"]
    assert r["utilisation"]["matrix_phase"] >= 0.95
    assert r["utilisation"]["matrix_phase"] == 1.0
    assert c["weight_stall"] == 0
    assert c["mxu_active"] == T * B and c["useful_macs"] == T * B * R * C
    assert c["weight_shift"] == T * R
    # The first MMC issues the cycle after the RHM of B rows is done (B + 7)
    # and its first row is in the array 3 cycles later; then T x B rows back
    # to back; then R + C + 4 cycles until the ACT issues, B + 17 until the
    # WHM does, B + 3 until HALT.
    assert r["matrix_phase"]["first_row"] == B + 10
    assert r["matrix_phase"]["cycles"] == T * B
    assert c["cycles"] == T * B + 3 * B + R + C + 34
    # Over the whole program: 80.9% with 16 tiles, 95.5% with 80.
    assert r["utilisation"]["program"] == pytest.approx(T * B / c["cycles"])
    if T >= 72:
        assert r["utilisation"]["program"] >= 0.95
    assert c["non_matrix"] == c["cycles"] - T * B
    assert c["raw_stall"] == (B - 1) + (B + R + C + 4) + (B + 15)
    assert c["host_stall"] == 1
    _check_estimate(r)


@pytest.mark.rtl
@pytest.mark.parametrize("batch", [1, 2])
def test_memory_bound(simulator, tmp_path, batch):
    """1 or 2 rows per tile: a tile can be switched only every R cycles (the
    time a tile takes to shift in), so the rows wait for their weights."""
    T, B = 32, batch
    r = _bench(simulator, tmp_path, {"name": f"memory_b{B}", "tiles": T, "batch": B})
    c = r["counters"]
    # The first tile: RW issued at 6, requested at 9, rows read from 9 + L,
    # at the array 4 cycles after their read, captured a cycle after the last:
    # the first row enters at L + R + 14. Then a switch every R cycles.
    first = L + R + 14
    assert r["matrix_phase"]["first_row"] == first
    assert r["matrix_phase"]["last_row"] == first + (T - 1) * R + B - 1
    assert r["utilisation"]["matrix_phase"] == pytest.approx(T * B / ((T - 1) * R + B))
    assert c["cycles"] == L + T * R + R + C + 3 * B + 38
    # The first switching row is at the array at B + 10 and waits until
    # `first`; each later one waits R - B cycles.
    assert c["weight_stall"] == (first - B - 10) + (T - 1) * (R - B)
    assert c["weight_shift"] == T * R
    _check_estimate(r)


@pytest.mark.rtl
@pytest.mark.parametrize("seed", [3, 8])
def test_random_program_estimate(simulator, tmp_path, seed):
    """A random legal program (every opcode, hazards everywhere)."""
    r = _bench(simulator, tmp_path, {"name": "random", "program": "random", "seed": seed,
                                     "length": 40})
    _check_estimate(r)
