"""Cycle counts of the RTL core, under both simulators: MXU utilisation of a
compute-bound program, weight stalls of a memory-bound one, and the cycle
estimate of `tpu.models.cycle_model` against the RTL's counters.

Each program runs through ``tpu.sim.bench.bench_core`` (an ideal host, an
instruction stream that never idles). The RTL is deterministic here, so the
cycle counts are asserted exactly, against the closed forms worked out in
docs/core_performance.md, and the estimate must equal every counter.
"""

import json

import pytest

from conftest import long_only
from tpu import TPUConfig
from tpu.config import UP5K_PROFILE
from tpu.hdl.core import COUNTERS
from tpu.hdl.decoder import decode_cycles
from tpu.hdl.sequencer import ACC_SLOTS
from tpu.isa import Act, Conv, Func, Halt, Mmc, Pool, Rhm, Rw, Whm
from tpu.sim.bench.bench_core import HOST_IN, HOST_OUT
from tpu.sim.harness import run
from tpu.models.cycle_model import estimate_cycles


CONFIG = TPUConfig()          # 8x8, weight memory: latency 8, 8 bytes (one tile row) per cycle
R, C, L = CONFIG.rows, CONFIG.cols, CONFIG.weight_mem_latency
LATENCY = R + C + 2           # matrix engine: row in -> accumulator row stored


def _bench(simulator, tmp_path, case, config=CONFIG):
    out = tmp_path / "bench.json"
    tests, failures = run(config, simulator, "tpu.sim.bench.bench_core", testcase="bench_program",
                          seed=1, top="core",
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
    # The first MMC issues the cycle after the RHM of B rows is done (B + 8)
    # and its first row is in the array 3 cycles later; then T x B rows back
    # to back; then R + C + 4 cycles until the ACT issues, B + 21 until the
    # WHM does (the ACT's pooling average takes 2 cycles and the pooling
    # unit's input register 1), B + 3 until HALT.
    assert r["matrix_phase"]["first_row"] == B + 11
    assert r["matrix_phase"]["cycles"] == T * B
    assert c["cycles"] == T * B + 3 * B + R + C + 38
    # Over the whole program: 80.6% with 16 tiles, 95.4% with 80.
    assert r["utilisation"]["program"] == pytest.approx(T * B / c["cycles"])
    if T >= 73:
        assert r["utilisation"]["program"] >= 0.95
    assert c["non_matrix"] == c["cycles"] - T * B
    assert c["raw_stall"] == (B - 3) + (B + R + C + 3) + (B + 17)
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
    # The first tile: RW issued at 8, requested at 11, rows read from 11 + L,
    # at the array 4 cycles after their read, captured a cycle after the last:
    # the first row enters at L + R + 16. Then a switch every R cycles.
    first = L + R + 16
    assert r["matrix_phase"]["first_row"] == first
    assert r["matrix_phase"]["last_row"] == first + (T - 1) * R + B - 1
    assert r["utilisation"]["matrix_phase"] == pytest.approx(T * B / ((T - 1) * R + B))
    assert c["cycles"] == L + T * R + R + C + 3 * B + 43
    # The first switching row is at the array at 14 (its MMC, ready at 11,
    # issues then: the RHM's B rows are written by then) and waits until
    # `first`; each later one waits R - B cycles.
    assert c["weight_stall"] == (first - 14) + (T - 1) * (R - B)
    assert c["weight_shift"] == T * R
    _check_estimate(r)


@pytest.mark.rtl
@pytest.mark.parametrize("seed", [3, 8])
def test_random_program_estimate(simulator, tmp_path, seed):
    """A random legal program (every opcode, hazards everywhere)."""
    r = _bench(simulator, tmp_path, {"name": "random", "program": "random", "seed": seed,
                                     "length": 40})
    _check_estimate(r)


#: The default core with three-cycle PE multipliers: every row stored one
#: cycle later (R + C + 3), which the estimate must know.
PIPELINED = CONFIG.replace(pe_multiplier_latency=3)


@pytest.mark.rtl
def test_three_cycle_multipliers_compute_bound(simulator, tmp_path):
    """`test_compute_bound`'s 16 tiles with three-cycle PE multipliers: the
    same stream of rows, each stored a cycle later, so the ACT and what
    follows it (the whole program) one cycle later; the estimate exact."""
    T, B = 16, 8 * R
    r = _bench(simulator, tmp_path, {"name": "compute", "tiles": T, "batch": B}, config=PIPELINED)
    c = r["counters"]
    assert r["matrix_phase"]["first_row"] == B + 11
    assert r["utilisation"]["matrix_phase"] == 1.0 and c["mxu_active"] == T * B
    assert c["cycles"] == T * B + 3 * B + R + C + 39
    assert c["raw_stall"] == (B - 3) + (B + R + C + 4) + (B + 17)
    _check_estimate(r)


@pytest.mark.rtl
def test_three_cycle_multipliers_random_program_estimate(simulator, tmp_path):
    """A random legal program on the three-cycle core: the estimate equals
    every counter."""
    r = _bench(simulator, tmp_path, {"name": "random", "program": "random", "seed": 5,
                                     "length": 40}, config=PIPELINED)
    _check_estimate(r)


def _asm(name, instructions):
    return {"name": name, "program": "asm", "text": "\n".join(str(i) for i in instructions)}


@pytest.mark.rtl
def test_accumulator_double_buffering(simulator, tmp_path):
    """MMC into accumulator rows B..2B-1 while an ACT reads rows 0..B-1,
    written by the MMC before: the ACT issues two cycles after the first
    MMC's last row is stored, while the second MMC's rows still enter the
    array (it does not wait for the engine to drain), and the array never
    idles."""
    B = 8 * R
    program = [Rhm(0, B, HOST_IN), Rw(0, 2), Mmc(0, B, 0, switch=True),
               Mmc(0, B, B, switch=True), Act(0, 2 * B, B, func=Func.RELU),
               Whm(2 * B, B, HOST_OUT), Halt()]
    r = _bench(simulator, tmp_path, _asm("double_buffer", program))
    c = r["counters"]
    first, last = B + 11, B + 11 + 2 * B - 1
    assert (r["matrix_phase"]["first_row"], r["matrix_phase"]["last_row"]) == (first, last)
    assert r["utilisation"]["matrix_phase"] == 1.0
    # The ACT is ready three cycles after the second MMC issues (2B + 8) and
    # waits R + C + 3 cycles, for the first MMC's last row (first + B - 1) to
    # be stored; the first MMC waits B - 3 cycles for the RHM, the WHM B + 17
    # for the ACT (its pooling average takes 2 cycles, the pooling unit's
    # input register 1).
    act_issue = (2 * B + 11) + (R + C + 3)
    assert act_issue == first + B - 1 + LATENCY + 2
    assert act_issue < last                      # rows still entering the array
    assert c["raw_stall"] == (B - 3) + (R + C + 3) + (B + 17)
    assert c["cycles"] == act_issue + (B + 20) + (B + 3) + 1 == 4 * B + R + C + 38
    _check_estimate(r)


@pytest.mark.rtl
@pytest.mark.parametrize("merged", [False, True])
def test_accumulator_slots_exhausted(simulator, tmp_path, merged):
    """ACC_SLOTS one-row MMCs take every slot; a 6-row MMC is then merged
    into the youngest slot. An ACT of the rows of the second-youngest
    one-row MMC waits for that MMC only; one of the youngest's rows waits
    for the merged MMC's last row too."""
    n = ACC_SLOTS
    reads = n - 1 if merged else n - 2
    program = [Mmc(0, 1, k) for k in range(n)] + [Mmc(0, 6, n), Act(reads, 100, 1), Halt()]
    r = _bench(simulator, tmp_path, _asm("slots", program))
    # MMC k issues at 5 + 3k and its row enters at 8 + 3k; the 6-row MMC's
    # rows enter at 3n + 8 .. 3n + 13. The ACT is ready at 3n + 8.
    assert r["matrix_phase"]["last_row"] == 3 * n + 13
    if merged:
        assert r["counters"]["raw_stall"] == (3 * n + 13 + LATENCY + 2) - (3 * n + 8)
    else:
        assert r["counters"]["raw_stall"] == (8 + 3 * reads + LATENCY + 2) - (3 * n + 8)
    _check_estimate(r)


@pytest.mark.rtl
def test_layer_act_hidden(simulator, tmp_path):
    """The benchmark's dense layer (two accumulator regions, each block's ACT
    after the next block's first MMC): the array takes a row every cycle from
    the first to the last."""
    if simulator == "icarus":
        long_only("a minute under Icarus; its cycle counts are the RTL's, the same under both "
                  "simulators, and Icarus runs test_compute_bound on the same core")
    r = _bench(simulator, tmp_path, {"name": "layer", "program": "layer", "blocks": 4,
                                     "k_tiles": 4, "batch": 8 * R, "act_lag": 1})
    assert r["matrix_phase"]["cycles"] == 16 * 8 * R
    assert r["utilisation"]["matrix_phase"] == 1.0
    assert r["counters"]["cycles"] == 1654
    _check_estimate(r)


#: The UP5K profile's core: one requantizer for the two columns, its product
#: in 4 cycles on a 16 x 16-bit multiplier: ACT takes a row every 8 cycles.
SHARED = UP5K_PROFILE


@pytest.mark.rtl
@pytest.mark.parametrize("seed", [3, 8])
def test_shared_requantizer_estimate(simulator, tmp_path, seed):
    """A random program on the UP5K profile's core (one shared requantizer, a
    multi-cycle product): the results are the golden model's and the
    estimate is exact."""
    r = _bench(simulator, tmp_path, {"name": "random", "program": "random", "seed": seed,
                                     "length": 40}, config=SHARED)
    _check_estimate(r)


@pytest.mark.rtl
@pytest.mark.parametrize("seed", [3, 8])
def test_shared_fast_requantizer_estimate(simulator, tmp_path, seed):
    """The same on the UP5K profile's core with the fast activation pipeline
    (the ulx3s16 chip's form of a shared lane: its function table read a
    cycle early, its divider of one dividend length): the results are the
    golden model's and the estimate is exact."""
    r = _bench(simulator, tmp_path, {"name": "random", "program": "random", "seed": seed,
                                     "length": 40}, config=SHARED.replace(serial_act=0))
    _check_estimate(r)


@pytest.mark.rtl
@pytest.mark.parametrize("serial_act", [1, 0], ids=["small", "fast"])
def test_shared_requantizer_act_timing(simulator, tmp_path, serial_act):
    """ACTs on the UP5K profile's core, with its small activation pipeline
    and with the fast one: 20 rows without pooling take 8 cycles a row (the
    same latency in both: the small form's pooling average in 4 cycles, the
    fast form's in 3 registered stages after its pooling unit's input
    register); a 2x2 MAX pooling whose last
    window completes 8 rows before the end is done when the pipeline has
    taken its last row (the rows read ahead of it are not left for the next
    ACT, whose results would then be wrong); an RHM runs beside the ACT's UB
    writes."""
    config = SHARED.replace(serial_act=serial_act)
    step = config.act_row_cycles
    program = [Rhm(0, 24, HOST_IN), Rw(0, 1), Mmc(0, 24, 0, switch=True),
               Act(0, 100, 20, func=Func.RELU),
               Act(0, 120, 24, pool=Pool.MAX, pool_size=2, pool_stride=2, in_w=8),
               Rhm(200, 24, HOST_IN), Act(0, 140, 3), Whm(100, 44, HOST_OUT), Halt()]
    schedule = estimate_cycles(config, program, schedule=True)["schedule"]
    act, pooled = schedule[3], schedule[4]
    assert act["done"] - act["issue"] == 20 * step + 19
    # Settings 2 cycles after issue; the pipeline takes the first row 3
    # cycles after them and the last 23 x step later; idle 2 cycles after.
    assert pooled["done"] - pooled["issue"] == 2 + 3 + 23 * step + 2
    r = _bench(simulator, tmp_path, _asm(f"shared_act_{serial_act}", program), config=config)
    _check_estimate(r)


@pytest.mark.rtl
def test_serial_issue_runs_one_unit_at_a_time(simulator, tmp_path):
    """The UP5K profile's sequencer issues to one unit at a time
    (`serial_issue`) and multiplies the decoder's products a bit a cycle
    (`serial_decode`): an RHM of other rows waits until the MMC before it
    has stored its last row, an MMC until the RHM before it is idle; a
    convolution MMC and a windowed ACT decode in their longer time; the
    results are the golden model's and the estimate is exact. The same
    program with parallel issue overlaps the RHM with the MMC."""
    program = [Rhm(0, 24, HOST_IN), Rw(0, 1), Mmc(0, 24, 0, switch=True),
               Rhm(100, 24, HOST_IN), Mmc(100, 24, 24),
               Mmc(0, 12, 48, conv=Conv(out_w=4, col_step=1, row_step=6)),
               Act(0, 150, 24, func=Func.RELU, pool=Pool.MAX, pool_size=2, pool_stride=2, in_w=4),
               Whm(150, 6, HOST_OUT), Halt()]
    serial = estimate_cycles(SHARED, program, schedule=True)["schedule"]
    assert serial[3]["issue"] == serial[2]["done"] + 1          # the RHM after the MMC's last store
    assert serial[4]["issue"] >= serial[3]["done"]              # the MMC after the RHM
    # The convolution's decode starts as the MMC before it issues: 12 cycles
    # with its division of 11 in 4 and its products in one; 8 + 24 (every
    # division 24 cycles) + 4 x 10 (products a bit a cycle, 256 UB rows).
    assert decode_cycles(program[5].encode()) == 12
    assert decode_cycles(program[5].encode(), SHARED) == 8 + 24 + 40 == 72
    assert serial[5]["ready"] == serial[4]["issue"] + 72
    parallel = estimate_cycles(SHARED.replace(serial_issue=0, serial_decode=0), program,
                               schedule=True)["schedule"]
    assert parallel[3]["issue"] < serial[3]["issue"]
    r = _bench(simulator, tmp_path, _asm("serial_issue", program), config=SHARED)
    _check_estimate(r)


@pytest.mark.rtl
def test_small_act_average_counts(simulator, tmp_path):
    """Average pooling on the UP5K profile's core (its small activation
    unit, which passes the pooling count and its reciprocal as they are):
    3x3 windows (count 9, where a count of ``2 k`` would equal ``k * k``
    for k = 2), one 4x4 window (16) and a global average of 35 rows, on
    sums of both signs; the results are the golden model's and the
    estimate is exact."""
    program = [Rhm(0, 36, HOST_IN), Rw(0, 1), Mmc(0, 36, 0, switch=True),
               Act(0, 100, 36, pool=Pool.AVG, pool_size=3, pool_stride=1, in_w=6),
               Act(0, 116, 35, pool=Pool.GLOBAL_AVG),
               Act(4, 117, 16, pool=Pool.AVG, pool_size=4, pool_stride=4, in_w=4),
               Whm(100, 18, HOST_OUT), Halt()]
    r = _bench(simulator, tmp_path, _asm("small_act_average_counts", program), config=SHARED)
    _check_estimate(r)
