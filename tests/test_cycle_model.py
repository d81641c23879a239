"""The cycle estimate (`tpu.models.cycle_model`) on small programs whose timing
can be worked out by hand from the rules in docs/core_performance.md.

Cycle 0 is the cycle the first instruction is offered; it can be decoded
from cycle 2 and issues at 5; each later instruction is decoded from the
cycle the one before it issues, and issues three cycles later at the earliest.
"""

import pytest

from tpu import TPUConfig
from tpu.isa import (Act, Cfg, Conv, Func, Halt, Mmc, Nop, Pool, Rhm, Rw, Sync, Whm,
                     encode_program)
from tpu.hdl.sequencer import ACC_SLOTS
from tpu.sim.bench.bench_core import stream_program
from tpu.models.cycle_model import estimate_cycles


CFG = TPUConfig()                      # 8x8, weight memory latency 8, 8 bytes per cycle
R, C, L = CFG.rows, CFG.cols, CFG.weight_mem_latency
LATENCY = R + C + 2                    # matrix engine: row in -> accumulator row stored


def est(program, config=CFG, **kw):
    return estimate_cycles(config, encode_program(program), schedule=True, **kw)


def issues(result):
    return [s["issue"] for s in result["schedule"]]


def test_halt_alone():
    r = est([Halt()])
    assert r["cycles"] == 6                      # HALT issues at 5; halted from 6
    assert r["counters"] == {"cycles": 6, "mxu_active": 0, "useful_macs": 0, "weight_stall": 0,
                             "weight_shift": 0, "non_matrix": 6, "raw_stall": 0, "host_stall": 0}


def test_three_cycles_per_instruction():
    r = est([Nop(), Nop(), Cfg("out_zero_point", 3), Halt()])
    assert issues(r) == [5, 8, 11, 14]
    assert r["cycles"] == 15


def test_accepts_instructions_or_bytes():
    program = [Nop(), Halt()]
    assert estimate_cycles(CFG, program)["cycles"] == estimate_cycles(
        CFG, encode_program(program))["cycles"] == 9


@pytest.mark.parametrize("n", [1, 5, 64])
def test_rhm(n):
    # Rows are written in cycles 7 .. n + 6; the unit is idle at n + 7, when
    # HALT (decoded by 8) sees every unit idle.
    r = est([Rhm(0, n, 0x1000), Halt()])
    assert issues(r) == [5, n + 7]
    assert r["cycles"] == n + 8
    assert r["counters"]["host_stall"] == 1      # the request cycle
    assert r["counters"]["raw_stall"] == 0       # HALT waits, but not on a hazard


def test_host_latency():
    n, h = 10, 7
    assert est([Rhm(0, n, 0x1000), Halt()], host_latency=h)["cycles"] == n + 8 + h
    assert est([Rhm(0, n, 0x1000), Halt()], host_latency=h)["counters"]["host_stall"] == 1 + h


def test_read_after_write_interlock():
    # WHM of the rows an RHM writes waits until the cycle after the RHM is
    # idle (n + 8); it is ready at 8, so it waits n cycles on the hazard.
    n = 16
    r = est([Rhm(0, n, 0x1000), Whm(0, n, 0x2000), Halt()])
    assert issues(r) == [5, n + 8, 2 * n + 11]   # WHM idle n + 8 + 3 + n
    assert r["counters"]["raw_stall"] == n
    assert r["cycles"] == 2 * n + 12


def test_no_interlock_on_other_rows():
    # An MMC reading other UB rows than the RHM writes issues at once.
    n = 16
    r = est([Rhm(0, n, 0x1000), Mmc(n, 4, 0), Halt()])
    assert issues(r)[:2] == [5, 8]
    assert r["counters"]["raw_stall"] == 0


def test_rhm_and_whm_never_overlap():
    # Host memory is read and written in program order: a WHM of other rows
    # still waits for the RHM, from the cycle the RHM is idle (n + 7; one
    # cycle earlier than a hazard on UB rows clears).
    n = 16
    r = est([Rhm(0, n, 0x1000), Whm(n, n, 0x2000), Rhm(2 * n, 4, 0x3000), Halt()])
    assert issues(r) == [5, n + 7, 2 * n + 10, 2 * n + 16]
    assert r["counters"]["raw_stall"] == (n + 7 - 8) + (2 * n + 10 - (n + 10))


def test_first_tile_and_mmc_latency():
    # RW at 5 requests tile 0 at 8; its rows are read from 8 + L, one per
    # cycle, and reach the array 4 cycles after their read: 20 .. 27 with
    # L = 8. The tile is captured at 28 and the switching row enters at 29.
    # The MMC issued at 8 reads its row at 9, which is at the array at 11.
    r = est([Rw(0, 1), Mmc(0, 1, 0, switch=True), Halt()])
    assert r["matrix_phase"]["first_row"] == L + R + 13 == 29
    assert r["counters"]["weight_stall"] == 29 - 11
    # HALT waits until the row is stored (29 + LATENCY) and the engine idle.
    assert r["cycles"] == 29 + LATENCY + 2
    assert r["counters"]["weight_shift"] == R
    assert r["counters"]["mxu_active"] == 1
    assert r["counters"]["useful_macs"] == R * C


@pytest.mark.parametrize("latency, first", [(0, 23), (1, 23), (2, 23), (3, 24), (30, 51)])
def test_weight_memory_latency(latency, first):
    # The first row is read max(latency, 2) cycles after the request.
    cfg = CFG.replace(weight_mem_latency=latency)
    r = est([Rw(0, 1), Mmc(0, 1, 0, switch=True), Halt()], config=cfg)
    assert r["matrix_phase"]["first_row"] == first == max(latency, 2) + R + 13


@pytest.mark.parametrize("bpc, gap", [(8, 1), (4, 2), (3, 3), (2, 4), (1, 8)])
def test_weight_memory_bandwidth(bpc, gap):
    # A row every ceil(cols / bytes_per_cycle) cycles: the last row of tile 0
    # is read at 16 + 7 * gap and reaches the array 4 cycles later.
    cfg = CFG.replace(weight_mem_bytes_per_cycle=bpc)
    r = est([Rw(0, 1), Mmc(0, 1, 0, switch=True), Halt()], config=cfg)
    assert r["matrix_phase"]["first_row"] == 16 + (R - 1) * gap + 4 + 2


def test_tile_switches_rows_cycles_apart():
    # Each tile is used for 2 rows, fewer than the R cycles a switch needs:
    # consecutive switches are exactly R cycles apart.
    program = [Rw(0, 6)] + [Mmc(0, 2, 2 * t, switch=True) for t in range(6)] + [Halt()]
    r = est(program)
    assert r["matrix_phase"]["first_row"] == 29
    assert r["matrix_phase"]["last_row"] == 29 + 5 * R + 1
    assert r["utilisation"]["matrix_phase"] == pytest.approx(12 / (5 * R + 2))


def test_back_to_back_mmcs_without_bubbles():
    # MMCs of at least R rows each, each with a new tile, stream with no gap.
    B = 3 * R
    program = [Rhm(0, B, 0x1000), Rw(0, 4)] + [Mmc(0, B, 0, switch=True) for _ in range(4)]
    r = est(program + [Halt()])
    phase = r["matrix_phase"]
    assert phase["cycles"] == 4 * B
    assert r["utilisation"]["matrix_phase"] == 1.0
    assert r["counters"]["weight_stall"] == 0
    # The first MMC waits for the RHM (idle at B + 7) and issues at B + 8;
    # its first row is at the array 3 cycles later. The next MMC issues in the
    # cycle the last row of the one before is read.
    assert phase["first_row"] == B + 11
    mmc = [s["issue"] for s in r["schedule"] if s["instruction"].startswith("mmc")]
    assert mmc == [B + 8 + k * B for k in range(4)]


def test_act_waits_for_its_rows():
    # ACT reads accumulator rows the MMC writes: it issues two cycles after
    # the last row is stored (last row in + LATENCY + 2). Without pooling it
    # is idle B + 19 cycles after its issue.
    B = 16
    program = [Rhm(0, B, 0x1000), Rw(0, 1), Mmc(0, B, 0, switch=True),
               Act(0, B, B, func=Func.RELU), Halt()]
    r = est(program)
    last = r["matrix_phase"]["last_row"]
    act = r["schedule"][3]
    assert act["issue"] == last + LATENCY + 2
    assert act["done"] == act["issue"] + B + 19
    assert r["cycles"] == act["done"] + 1


@pytest.mark.parametrize("multiplier_latency", [2, 3])
def test_rows_stored_after_the_engine_latency(multiplier_latency):
    # Three-cycle PE multipliers store every row one cycle later: the ACT
    # reading them and so the whole program move by exactly one cycle.
    cfg = CFG.replace(pe_multiplier_latency=multiplier_latency)
    assert cfg.matrix_latency == R + C + multiplier_latency
    B = 16
    program = [Rhm(0, B, 0x1000), Rw(0, 1), Mmc(0, B, 0, switch=True),
               Act(0, B, B, func=Func.RELU), Halt()]
    r, base = est(program, config=cfg), est(program)
    last = r["matrix_phase"]["last_row"]
    assert last == base["matrix_phase"]["last_row"]
    assert r["schedule"][3]["issue"] == last + R + C + multiplier_latency + 2
    assert r["cycles"] == base["cycles"] + multiplier_latency - 2
    assert r["counters"]["non_matrix"] == base["counters"]["non_matrix"] + multiplier_latency - 2


def test_act_on_other_rows_does_not_wait():
    B = 16
    program = [Rhm(0, B, 0x1000), Rw(0, 1), Mmc(0, B, 0, switch=True), Sync(),
               Mmc(0, B, 0), Act(B, B, B), Halt()]
    r = est(program)
    mmc2, act = r["schedule"][4], r["schedule"][5]
    assert act["issue"] == mmc2["issue"] + 3


def test_rows_between_mmcs_in_flight_are_free():
    # MMCs into rows 0..7 and 32..39 hold just those rows: an ACT of rows
    # 16..23 issues right after them.
    program = [Rw(0, 2), Mmc(0, R, 0, switch=True), Mmc(0, R, 32, switch=True),
               Act(16, 100, R), Halt()]
    r = est(program)
    assert r["schedule"][3]["issue"] == r["schedule"][2]["issue"] + 3


def test_act_waits_only_for_the_mmc_of_its_rows():
    # Double buffering: an ACT of the rows of the first MMC issues two cycles
    # after that MMC's last row is stored, while the second MMC (other rows)
    # is still streaming; the array never idles.
    B = 2 * R
    program = [Rhm(0, B, 0x1000), Rw(0, 2), Mmc(0, B, 0, switch=True),
               Mmc(0, B, B, switch=True), Act(0, 2 * B, B), Halt()]
    r = est(program)
    first = r["matrix_phase"]["first_row"]
    assert r["schedule"][4]["issue"] == first + B - 1 + LATENCY + 2
    assert r["schedule"][4]["issue"] < r["matrix_phase"]["last_row"] + LATENCY
    assert r["utilisation"]["matrix_phase"] == 1.0


@pytest.mark.parametrize("reads, waits_for", [(ACC_SLOTS - 2, "own"), (ACC_SLOTS - 1, "merged")])
def test_slots_exhausted_merge_into_the_youngest(reads, waits_for):
    # ACC_SLOTS one-row MMCs (rows 0, 1, ...) take every slot; the next MMC
    # (6 rows) is merged into the youngest slot, which then holds until its
    # last row is stored. Row k's MMC issues at 5 + 3k, its row enters at
    # 8 + 3k; the 6-row MMC's last row enters last.
    n = ACC_SLOTS
    program = [Mmc(0, 1, k) for k in range(n)] + [Mmc(0, 6, n), Act(reads, 100, 1), Halt()]
    r = est(program)
    act = r["schedule"][n + 1]
    if waits_for == "own":
        assert act["issue"] == 8 + 3 * reads + LATENCY + 2
    else:
        assert act["issue"] == r["matrix_phase"]["last_row"] + LATENCY + 2


def test_decode_of_convolution_and_windowed_pooling():
    # A division takes a cycle per bit of its dividend: rows - 1 = 3 (2 bits)
    # for the CONV MMC, 8 cycles more around it (3 before, 5 after: the
    # products, their sums, the larger, the ranges, the fault).
    conv = est([Mmc(0, 4, 0, conv=Conv(2, 1, 4)), Halt()])
    plain = est([Mmc(0, 4, 0), Halt()])
    assert issues(conv)[0] == 2 + 8 + 2 and issues(plain)[0] == 5
    # One too long for the UB faults, once decoded: rows - 1 has 20 bits.
    long_conv = est([Mmc(0, 1 << 20, 0, conv=Conv(2, 1, 4)), Halt()])
    assert long_conv["schedule"][0]["ready"] == 2 + 8 + 20
    # rows 16 (5 bits) / in_w 4 = in_h 4, then (4 - 2) / 2 and (4 - 2) / 2 (2
    # bits each), 12 cycles around the three.
    pooled = est([Act(0, 0, 16, pool=Pool.MAX, pool_size=2, pool_stride=2, in_w=4), Halt()])
    assert issues(pooled)[0] == 2 + 12 + 5 + 2 + 2


def test_average_pooling_reciprocal():
    plain = est([Act(0, 0, 8), Halt()])["schedule"][0]
    avg = est([Act(0, 0, 8, pool=Pool.GLOBAL_AVG), Halt()])["schedule"][0]
    assert plain["done"] - plain["issue"] == 8 + 19
    assert avg["done"] - avg["issue"] == 8 + 19 + 34


def test_underflow_fault_halts():
    # MMC with SWITCH and no tile requested: the chip halts when it is decoded.
    r = est([Mmc(0, 4, 0, switch=True), Nop(), Halt()])
    assert r["cycles"] == 6
    assert r["counters"]["mxu_active"] == 0


def test_no_halt_ends_when_idle():
    assert est([Rhm(0, 10, 0x1000)])["cycles"] == 5 + 2 + 10


# The benchmark programs (sim/bench/bench_core.py), in closed form --------------------

def stream_cycles(config, tiles, batch):
    """Cycles of `stream_program` with its epilogue (ACT + WHM of one block):
    the last row plus R + C + 4 to the ACT, B + 20 to the WHM, B + 3 to HALT."""
    R_, C_ = config.rows, config.cols
    gap = -(-C_ // min(config.weight_mem_bytes_per_cycle, C_))
    first = max(batch + 11,                                      # after the RHM
                config.weight_mem_latency + (R_ - 1) * gap + 17)  # after the first tile
    interval = max(batch, R_, R_ * gap)                          # between switches
    last = first + (tiles - 1) * interval + batch - 1
    return first, last, last + R_ + C_ + 2 * batch + 28


@pytest.mark.parametrize("config, tiles, batch", [
    (CFG, 16, 64),                                             # compute-bound
    (CFG, 4, 8),
    (CFG, 32, 2),                                              # memory-bound
    (CFG, 32, 1),
    (CFG.replace(weight_mem_bytes_per_cycle=2), 16, 8),        # low bandwidth
    (TPUConfig(rows=16, cols=16, weight_mem_bytes_per_cycle=16), 8, 128),
    (TPUConfig(rows=16, cols=16, weight_mem_bytes_per_cycle=16), 32, 2),
])
def test_stream_program_closed_form(config, tiles, batch):
    r = est(stream_program(config, tiles=tiles, batch=batch), config=config)
    first, last, cycles = stream_cycles(config, tiles, batch)
    assert (r["matrix_phase"]["first_row"], r["matrix_phase"]["last_row"], r["cycles"]) == \
        (first, last, cycles)
    c = r["counters"]
    assert c["mxu_active"] == tiles * batch
    assert c["non_matrix"] == cycles - tiles * batch
    assert c["weight_shift"] == tiles * config.rows
    gap = -(-config.cols // min(config.weight_mem_bytes_per_cycle, config.cols))
    interval = max(batch, config.rows, config.rows * gap)
    # The first switching row waits from when it is at the array (B + 11,
    # or 14 when the MMC, ready at 11, is decoded after the RHM's rows are
    # written) for its tile; every later one waits interval - B cycles.
    assert c["weight_stall"] == first - max(batch + 11, 14) + (tiles - 1) * (interval - batch)


def test_compute_bound_utilisation():
    r = est(stream_program(CFG, tiles=16, batch=8 * R))
    assert r["utilisation"]["matrix_phase"] == 1.0
    assert r["counters"]["weight_stall"] == 0
    # The whole program: 16 x 64 rows in 1024 + 3 x 64 + 8 + 8 + 38 cycles.
    assert r["cycles"] == 1024 + 246
    # Waits on hazards: the first MMC for the RHM (ready at 11, issued at B +
    # 8), the ACT for the last MMC's rows (ready three cycles after the last
    # MMC issues, 2 + B cycles before its last row enters; issued R + C + 4
    # after that row), the WHM for the ACT (B + 17).
    B = 8 * R
    assert r["counters"]["raw_stall"] == (B - 3) + (B + R + C + 3) + (B + 17) == 225
    long = est(stream_program(CFG, tiles=128, batch=8 * R))
    assert long["utilisation"]["program"] > 0.95


@pytest.mark.parametrize("act_lag", [1, 2])
def test_layer_act_is_hidden(act_lag):
    # Each block's ACT, placed after the next block's first MMC(s), waits
    # only for its own block's rows: the array never idles.
    from tpu.sim.bench.bench_core import layer_program
    program = layer_program(CFG, blocks=4, k_tiles=4, batch=64, act_lag=act_lag)
    r = est(program)
    assert r["matrix_phase"]["cycles"] == 16 * 64
    assert r["utilisation"]["matrix_phase"] == 1.0
