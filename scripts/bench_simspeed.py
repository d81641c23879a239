#!/usr/bin/env python3
"""Whole-chip simulation speed through the driver: start latency and
simulated cycles per second.

Runs two programs with ``tpu.driver.run(main, backend=...)`` on each
configuration, with the model already built (a first, untimed call builds
it):

* ``compute``: the driver's `long_program`, MMCs streaming the whole
  accumulator memory through the array (compute-bound, no host traffic);
* ``dma``: RHMs and WHMs of the whole unified buffer, back to back
  (host-link-bound: every cycle moves TLP beats).

*start* is the wall time from the `run` call to the doorbell of the program
(finding the model, the simulator starting, reset, enumeration,
`Device.open`), and the CPU time of both processes over it; *cycles/s* is
simulated cycles (link time over the 4 ns clock) per wall second from the
doorbell to the end of the program, and per CPU second of the simulation
process (which depends less on what else the machine runs). With
``--repeat``, the fastest run and the shortest starts are kept. Prints a table and saves
``build/bench/simspeed.json``.

Examples::

    python scripts/bench_simspeed.py
    python scripts/bench_simspeed.py --shapes 8x8 --cycles 50000
    python scripts/bench_simspeed.py --backend icarus --shapes 4x4 --cycles 5000
"""

import argparse
import json
import os
import sys
import time

from tpu import TPUConfig
from tpu.driver import run
from tpu.driver.checks import long_program
from tpu.isa import Halt, Rhm, Whm


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


MAINS = {"compute": compute_main, "dma": dma_main}


def measure(config, backend, program, cycles, **options):
    """{start_s, cycles, run_s, cycles_per_s} of one timed run."""
    os.environ["SIMSPEED_CYCLES"] = str(cycles)
    called, called_cpu = time.time(), time.process_time()
    got = run(MAINS[program], backend=backend, config=config, **options)
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


def _shape(text):
    try:
        rows, cols = (int(v) for v in text.lower().split("x"))
        return TPUConfig(rows=rows, cols=cols)
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"expected ROWSxCOLS (e.g. 16x16), not {text!r}: {error}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", nargs="+", type=_shape, default=[_shape("8x8"), _shape("16x16")],
                        metavar="ROWSxCOLS", help="array shapes (default 8x8 16x16)")
    parser.add_argument("--backend", default="verilator", choices=["verilator", "icarus"])
    parser.add_argument("--programs", nargs="+", default=list(MAINS), choices=list(MAINS))
    parser.add_argument("--cycles", type=int, default=200_000, help="simulated cycles per program")
    parser.add_argument("--repeat", type=int, default=1, help="timed runs per case (the best is kept)")
    parser.add_argument("--out", default=os.path.join("build", "bench", "simspeed.json"))
    args = parser.parse_args(argv)
    if args.cycles < 1 or args.repeat < 1:
        parser.error("--cycles and --repeat must be at least 1")

    rows = []
    for config in args.shapes:
        # Builds the model if needed; not timed.
        measure(config, args.backend, "compute", 100)
        for program in args.programs:
            runs = [measure(config, args.backend, program, args.cycles) for _ in range(args.repeat)]
            best = max(runs, key=lambda got: got["cycles_per_cpu_s"])
            best = {**best, **{key: min(got[key] for got in runs) for key in ("start_s", "start_cpu_s")}}
            row = {"shape": f"{config.rows}x{config.cols}", "backend": args.backend, "program": program, **best}
            rows.append(row)
            print(f"{row['shape']:>6} {program:8} start {row['start_s']:6.2f} s ({row['start_cpu_s']:.2f} CPU s)  "
                  f"{row['cycles']:8d} cycles in {row['run_s']:6.2f} s  {row['cycles_per_s']:8d} cycles/s "
              f"({row['cycles_per_cpu_s']} per CPU second)",
                  flush=True)
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out, "w") as file:
        json.dump(rows, file, indent=1)
    print(f"saved {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
