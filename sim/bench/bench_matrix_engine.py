"""cocotb benchmarks of the matrix engine: MXU utilisation and simulation speed.

Launched by `tpu.sim.harness.run` (see ``scripts/bench_mxu.py``). Every figure
comes from the RTL's own cycle counts: the cycle in which each weight beat
and each activation row is accepted and each accumulator row is written.
Results are checked against the golden model as in the testbench, then
written as JSON to the path in ``TPU_BENCH_OUT`` (if set).

Run each test in a simulation of its own (``testcase=``), as the driver
does: cocotb does not reset the design between tests, and the accumulator
memory keeps what an earlier test wrote, which the next test's golden model
would not know.

Environment:

``TPU_BENCH_OUT``
    JSON file that each test adds its results to (under its own name).
``TPU_BENCH_BATCHES``
    Comma-separated activation rows per tile, each an integer or a multiple
    of ``rows`` written ``4r`` (default ``1,1r,4r,64r``).
``TPU_BENCH_TILES``
    Tiles in the tile-switch sequence (default 8).
``TPU_BENCH_CYCLES``
    Length of the simulation-speed runs, in cycles (default 20000).
"""

import json
import os
import time

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, RisingEdge, Timer

from ..harness import config_from_env
from ...models.matrix_engine_model import MatMul, ideal_schedule
from ..host.streams import pack_fields
from ..testbenches.tb_matrix_engine import TB


__all__ = ["utilisation", "sim_speed", "sim_speed_free_run"]

_results = {}


def _record(key, value):
    """Add one result to the JSON file, keeping what earlier runs put there."""
    _results[key] = value
    path = os.environ.get("TPU_BENCH_OUT")
    if path:
        merged = {}
        if os.path.exists(path):
            with open(path) as f:
                merged = json.load(f)
        merged.update(_results)
        with open(path, "w") as f:
            json.dump(merged, f, indent=2)


def _common():
    config = config_from_env()
    _results.setdefault("config", config.to_dict())
    _results.setdefault("simulator", f"{cocotb.SIM_NAME} {cocotb.SIM_VERSION}")
    return config


def batches(rows):
    text = os.environ.get("TPU_BENCH_BATCHES", "1,1r,4r,64r")
    result = []
    for item in text.replace(" ", ",").split(","):
        if item:
            result.append(int(item[:-1] or 1) * rows if item.endswith("r") else int(item))
    return result


def ideal(config, tiles, batch):
    """Closed-form cycle counts of `tiles` tiles of `batch` rows each, streamed
    back to back (weights and rows offered from the same cycle on):

    * the first tile is usable ``rows + 1`` cycles after its first beat;
    * then a switch every ``max(batch, rows)`` cycles;
    * each row is written ``latency`` cycles after it is accepted.
    """
    latency = config.matrix_latency
    steady = (tiles - 1) * max(batch, config.rows) + batch
    return {"cycles": config.rows + 1 + steady + latency, "steady_cycles": steady}


async def measure(tb, tiles, batch):
    """Stream `tiles` tiles of `batch` rows each, back to back, into an idle
    engine; return the cycle counts and utilisations the RTL achieved."""
    cfg = tb.config
    first = (len(tb.weights.accepted), len(tb.act.accepted), len(tb.writes))
    ops = []
    for t in range(tiles):
        tb.push_tile(tb.random_tile())
        op = MatMul(tb.random_rows(batch, unsigned=t % 2 == 0), (t * batch) % cfg.acc_rows,
                    accumulate=False, unsigned=t % 2 == 0, switch=True)
        tb.matmul(op)
        ops.append(op)
    rows_total = len(tb.expected)
    await tb.loop.run_until(
        lambda: tb.act.done and tb.weights.done and len(tb.writes) >= rows_total,
        timeout=10 * (tiles * (batch + cfg.rows) + cfg.rows + cfg.cols + 50),
        what=f"{tiles} tiles x {batch} rows to be written")
    for _ in range(cfg.rows + 2):           # let the weight guard expire: idle again
        await tb.loop.step()
    tb.check_writes()

    weight0 = tb.weights.accepted[first[0]]
    accepted = tb.act.accepted[first[1]:]
    writes = [cycle for cycle, *_ in tb.writes[first[2]:]]
    useful = tiles * batch                   # rows; each is rows*cols MACs
    cycles = writes[-1] - weight0 + 1
    steady = accepted[-1] - accepted[0] + 1

    # The same run from the model's documented timing.
    latency = cfg.matrix_latency
    schedule = [c for op in ideal_schedule(cfg, ops) for c in op]
    ideal_cycles = schedule[-1] + latency + 1
    ideal_steady = schedule[-1] - schedule[0] + 1
    formula = ideal(cfg, tiles, batch)
    if (ideal_cycles, ideal_steady) != (formula["cycles"], formula["steady_cycles"]):
        tb.fail(f"ideal_schedule gives {ideal_cycles}/{ideal_steady} cycles, the closed "
                f"form {formula}")
    result = {
        "tiles": tiles,
        "batch": batch,
        "macs": useful * cfg.rows * cfg.cols,
        "cycles": cycles,
        "ideal_cycles": ideal_cycles,
        "utilisation": useful / cycles,
        "ideal_utilisation": useful / ideal_cycles,
        "steady_cycles": steady,
        "ideal_steady_cycles": ideal_steady,
        "steady_utilisation": useful / steady,
        "ideal_steady_utilisation": useful / ideal_steady,
        "first_row_after_weight": accepted[0] - weight0,
        "latency": writes[0] - accepted[0],
    }
    tb.dut._log.info("%d tile(s) x %d rows: %d cycles (ideal %d), utilisation %.2f%%, "
                     "steady %.2f%%", tiles, batch, cycles, ideal_cycles,
                     100 * result["utilisation"], 100 * result["steady_utilisation"])
    return result


@cocotb.test()
async def utilisation(dut):
    """Useful MACs / (rows * cols * cycles), from the first weight beat to the
    last accumulator write, for one tile and for back-to-back tile switches."""
    cfg = _common()
    tb = TB(dut)
    await tb.reset()
    tiles = int(os.environ.get("TPU_BENCH_TILES", "8"))
    results = []
    for batch in batches(cfg.rows):
        for count in (1, tiles):
            results.append(await measure(tb, count, batch))
    _record("utilisation", results)
    await tb.check_memory()


@cocotb.test()
async def sim_speed(dut):
    """Wall-clock simulated cycles per second of the full testbench (stream
    drivers, write monitor) on a long random stream with idle cycles. Also
    per second of CPU time of the simulator process (cocotb runs inside it),
    which other load on the machine affects less."""
    cfg = _common()
    tb = TB(dut, act_idle=0.1, weight_idle=0.1)
    await tb.reset()
    target = int(os.environ.get("TPU_BENCH_CYCLES", "20000"))
    # About `target` cycles of work: idle inputs and tile waits fill the rest.
    rows_total = 0
    while rows_total < 0.87 * target:
        switch = not tb.ops or bool(tb.rng.random() < 0.7)
        if switch:
            tb.push_tile(tb.random_tile())
        count = int(tb.rng.integers(1, 4 * cfg.rows + 1))
        unsigned = bool(tb.rng.random() < 0.5)
        tb.matmul(MatMul(tb.random_rows(count, unsigned), int(tb.rng.integers(0, cfg.acc_rows)),
                         accumulate=bool(tb.rng.random() < 0.5), unsigned=unsigned,
                         switch=switch))
        rows_total += count
    start_cycle = tb.loop.cycle
    start, cpu_start = time.perf_counter(), time.process_time()
    await tb.loop.run_until(
        lambda: tb.act.done and tb.weights.done and len(tb.writes) >= rows_total,
        timeout=20 * target, what="the random stream to be written")
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    cycles = tb.loop.cycle - start_cycle
    tb.check_writes()
    _record("sim_speed", {"cycles": cycles, "rows": rows_total, "seconds": seconds,
                          "cycles_per_second": cycles / seconds, "cpu_seconds": cpu,
                          "cycles_per_cpu_second": cycles / cpu})
    dut._log.info("%d cycles in %.2f s: %.0f cycles/s", cycles, seconds, cycles / seconds)


@cocotb.test()
async def sim_speed_free_run(dut):
    """The simulator alone: after a tile is loaded, a clock implemented in
    the simulator interface (not a Python coroutine) runs with a row accepted
    every cycle (the same row, accumulated into one address) and no Python
    in the loop at all: an upper bound for any cocotb testbench."""
    _common()
    tb = TB(dut)
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns", impl="gpi").start())
    dut.rst.value = 1
    await ClockCycles(dut.clk, 3)
    dut.rst.value = 0
    tb.push_tile(tb.random_tile())
    tb.matmul(MatMul(tb.random_rows(1, True), 0, unsigned=True, switch=True))
    await tb.finish()
    x = tb.random_rows(1, True)[0]
    await RisingEdge(dut.clk)             # leave the read-only phase
    dut.act__payload.value = pack_fields(tb.row_layout, {
        "data": sum(int(v) << (8 * i) for i, v in enumerate(x)),
        "acc_addr": 0, "accumulate": 1, "unsigned": 1, "switch": 0})
    dut.act__valid.value = 1
    target = int(os.environ.get("TPU_BENCH_CYCLES", "20000"))
    start, cpu_start = time.perf_counter(), time.process_time()
    await Timer(10 * target, unit="ns")
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    dut.act__valid.value = 0
    _record("sim_speed_free_run", {"cycles": target, "seconds": seconds,
                                   "cycles_per_second": target / seconds, "cpu_seconds": cpu,
                                   "cycles_per_cpu_second": target / cpu})
    dut._log.info("%d cycles in %.2f s: %.0f cycles/s", target, seconds, target / seconds)
