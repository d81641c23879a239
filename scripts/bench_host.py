#!/usr/bin/env python3
"""Host-link measurements: DMA throughput, host read latency, and what the link
costs a matmul-heavy program.

Runs the cocotb module ``tpu.sim.bench.bench_host`` on the whole chip (the
`HostInterface` behind cocotbext-pcie's root complex, driven by
`tpu.driver.Device`) through ``tpu.sim.harness.run``: its ``dma`` test for
every link configuration and added host latency, its ``programs`` test for
the first configuration. Prints the tables of docs/host_performance.md and
saves ``build/bench/host.json`` and ``build/bench/host.md``. The measuring is
`tpu.bench.host` (which `tpu bench` runs too); this is its command line.

A configuration is ``LINK_DW/MAX_PAYLOAD/MAX_READ_REQUEST`` on the default
`TPUConfig` (8x8 array, 16 KiB unified buffer, 8 read tags). Each one is a
separate build of the chip (a few minutes under Verilator, reused afterwards).

Examples::

    python scripts/bench_host.py --quick
    python scripts/bench_host.py
    python scripts/bench_host.py --configs 4/256/512 --sizes 64 16384 --latencies 0 --programs
"""

import argparse
import json
import sys
import time
from pathlib import Path

from tpu.bench.host import FULL, QUICK, link_config, run_all, tables
from tpu.sim.bench.bench_host import PROGRAM_CASES
from tpu.sim.harness import BUILD_ROOT, SIMULATORS


def _config(text):
    try:
        return link_config(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help=f"one configuration, sizes up to 16 KiB, no added latency, the MLP only "
                             f"(default: {' '.join(FULL['configs'])}, sizes up to 1 MiB, "
                             f"latencies {FULL['latencies']})")
    parser.add_argument("--simulators", nargs="+", choices=SIMULATORS, default=["verilator"],
                        help="simulators (default: verilator; Icarus is far slower on the whole chip)")
    parser.add_argument("--configs", nargs="+", type=_config,
                        help="LINK_DW/MAX_PAYLOAD/MAX_READ_REQUEST configurations")
    parser.add_argument("--sizes", nargs="*", type=int, help="DMA sizes in bytes (none: no DMA runs)")
    parser.add_argument("--latencies", nargs="+", type=int,
                        help="cycles added to every completion by the host")
    parser.add_argument("--programs", nargs="*", choices=sorted(PROGRAM_CASES),
                        help="programs run through the link on the first configuration")
    parser.add_argument("--append", action="store_true",
                        help="add to the results already in --out (tables cover both)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", type=Path, default=BUILD_ROOT / "bench" / "host.json",
                        help="results (default: build/bench/host.json; tables beside it as .md)")
    args = parser.parse_args(argv)
    defaults = QUICK if args.quick else FULL
    if args.configs is None:
        args.configs = [link_config(c) for c in defaults["configs"]]
    for name in ("sizes", "latencies", "programs"):
        if getattr(args, name) is None:
            setattr(args, name, defaults[name])

    start = time.perf_counter()
    results = run_all(args.configs, args.sizes, args.latencies, args.programs,
                      args.simulators, args.seed)
    if args.append and args.out.exists():
        earlier = json.loads(args.out.read_text())
        results = {key: earlier.get(key, []) + results[key] for key in results}
    text = tables(results)
    print(text)
    print(f"total {time.perf_counter() - start:.0f} s")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    args.out.with_suffix(".md").write_text(text + "\n")
    print(f"saved {args.out} and {args.out.with_suffix('.md')}")
    return 0 if results["dma"] or results["programs"] else 1


if __name__ == "__main__":
    sys.exit(main())
