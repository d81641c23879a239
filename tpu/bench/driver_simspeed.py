"""Whole-chip simulation speed through the driver (what scripts/bench_simspeed.py
prints): start latency and simulated cycles per second.

Two programs run with ``tpu.driver.run(main, backend=...)`` on each
configuration, with the model already built (a first, untimed call builds it):

* ``compute``: the driver's `long_program`, MMCs streaming the whole
  accumulator memory through the array (compute-bound, no host traffic);
* ``dma``: RHMs and WHMs of the whole unified buffer, back to back
  (host-link-bound: every cycle moves TLP beats).

*start* is the wall time from the `run` call to the doorbell of the program
(finding the model, the simulator starting, reset, enumeration,
`Device.open`), and the CPU time of both processes over it; *cycles/s* is
simulated cycles (link time over the 4 ns clock) per wall second from the
doorbell to the end of the program, and per CPU second of the simulation
process (which depends less on what else the machine runs). With `repeat`,
the fastest run and the shortest starts are kept.
"""

import json
import os
import time
from pathlib import Path

from ..driver import run
from ..selftest.checks import long_program
from ..isa import Halt, Rhm, Whm


__all__ = ["PROGRAMS", "measure", "run_driver_simspeed", "save"]


async def compute_main(device):
    """The compute-bound program: its run timed from inside the simulation."""
    return await _timed(device, long_program(device.config, int(os.environ["SIMSPEED_CYCLES"])))


async def dma_main(device):
    """Whole-UB RHMs and WHMs until about SIMSPEED_CYCLES cycles."""
    cfg = device.config
    nbytes = cfg.ub_rows * cfg.rows
    source, sink = device.alloc(nbytes), device.alloc(nbytes)
    device.write(source, bytes(i * 7 & 0xFF for i in range(nbytes)))
    # A whole-UB read and write take about 2 * nbytes / 7.5 cycles on a
    # 2-word link; the count need not be exact.
    pairs = max(1, int(os.environ["SIMSPEED_CYCLES"]) * 15 // (4 * nbytes))
    program = [Rhm(ub=0, rows=cfg.ub_rows, host=source.addr),
               Whm(ub=0, rows=cfg.ub_rows, host=sink.addr)] * pairs + [Halt()]
    result = await _timed(device, program)
    assert device.read(sink) == device.read(source), "the DMA program's bytes came back wrong"
    return result


async def _timed(device, program):
    entered = time.time()
    link = device.link
    job = await device.start(program)
    started, sim_start, cpu_start = time.time(), link.time(), time.process_time()
    # The simulation process's CPU time so far is what it spent starting.
    result = await device.wait(job, timeout=10.0)
    assert result.halted, f"the program did not halt: {result}"
    return {"entered": entered, "started": started, "ended": time.time(),
            "cpu_s": time.process_time() - cpu_start, "start_cpu_s": cpu_start,
            "cycles": round((link.time() - sim_start) * link.clock_hz)}


#: The programs by name: the `main` each runs in the simulation process.
PROGRAMS = {"compute": compute_main, "dma": dma_main}


def measure(config, backend, program, cycles, **options):
    """{start_s, cycles, run_s, cycles_per_s, ...} of one timed run of `program`
    (a name in `PROGRAMS`) of about `cycles` cycles."""
    # The simulation process reads the length from its environment.
    os.environ["SIMSPEED_CYCLES"] = str(cycles)
    called, called_cpu = time.time(), time.process_time()
    got = run(PROGRAMS[program], backend=backend, config=config, **options)
    returned = time.time()
    run_s = got["ended"] - got["started"]
    # CPU to start: this process (finding or generating the model) and the
    # simulation process up to the doorbell.
    start_cpu = time.process_time() - called_cpu + got["start_cpu_s"]
    return {"start_s": round(got["started"] - called, 2), "start_cpu_s": round(start_cpu, 2),
            "enter_s": round(got["entered"] - called, 2),
            "total_s": round(returned - called, 2), "cycles": got["cycles"], "run_s": round(run_s, 2),
            "cycles_per_s": round(got["cycles"] / run_s),
            "cycles_per_cpu_s": round(got["cycles"] / got["cpu_s"])}


def run_driver_simspeed(configs, backend="verilator", programs=tuple(PROGRAMS), cycles=200_000,
                        repeat=1, log=print):
    """One row per configuration and program: the best of `repeat` timed runs, each
    line logged as it is measured."""
    unknown = [p for p in programs if p not in PROGRAMS]
    if unknown:
        raise ValueError(f"unknown simulation-speed program(s) {', '.join(unknown)}: "
                         f"choose from {', '.join(PROGRAMS)}")
    if cycles < 1 or repeat < 1:
        raise ValueError(f"cycles and repeat must be at least 1, not {cycles} and {repeat}")
    rows = []
    for config in configs:
        # Builds the model if needed; not timed.
        measure(config, backend, "compute", 100)
        for program in programs:
            runs = [measure(config, backend, program, cycles) for _ in range(repeat)]
            best = max(runs, key=lambda got: got["cycles_per_cpu_s"])
            best = {**best, **{key: min(got[key] for got in runs) for key in ("start_s", "start_cpu_s")}}
            row = {"shape": f"{config.rows}x{config.cols}", "backend": backend, "program": program, **best}
            rows.append(row)
            log(f"{row['shape']:>6} {program:8} start {row['start_s']:6.2f} s ({row['start_cpu_s']:.2f} CPU s)  "
                f"{row['cycles']:8d} cycles in {row['run_s']:6.2f} s  {row['cycles_per_s']:8d} cycles/s "
                f"({row['cycles_per_cpu_s']} per CPU second)")
    return rows


def save(rows, path):
    """Write `run_driver_simspeed`'s rows to `path` as JSON."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as file:
        json.dump(rows, file, indent=1)
