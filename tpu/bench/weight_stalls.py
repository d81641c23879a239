"""Where weight stalls come from in compiled programs, and what removes them.

A part's first tile needs ``weight_mem_latency`` + ``rows`` + 4 cycles to
reach the array from its RW; when the first MMC is ready sooner (an input of
a few rows) it waits. The compiler's RW pass
(`tpu.compiler.schedule.insert_weight_reads`) used to request a part's first
tiles just before its first switching MMC, after the part's input RHMs: the
GEMM sweep's weight stalls, 4 to 19 cycles per part, once per part. It now
issues them at the program's start.

`hoist_first_reads` moves the RWs before the first switching MMC to the
program's start (weights never depend on the unified buffer, and the driver
loads a part's weight tiles before starting it); `compare` estimates a
compiled model's parts as compiled and hoisted on the cycle model (the same
for programs of the current compiler). A part that starts its matrix work
within ~20 cycles (an input already resident from the previous part, no RHM
to hide behind) still waits: only a request made by the previous part could
hide that, and a part ends with HALT.
"""

from ..isa import Mmc, Rw, decode_program, encode_program
from ..models.cycle_model import estimate_cycles


__all__ = ["hoist_first_reads", "compare"]


def hoist_first_reads(program):
    """`program` (bytes) with every RW before its first switching MMC moved to its start."""
    ins = list(decode_program(program))
    first = next((i for i, x in enumerate(ins) if isinstance(x, Mmc) and x.switch and x.rows),
                 None)
    if first is None:
        return bytes(program)
    early = [x for x in ins[:first] if isinstance(x, Rw)]
    rest = [x for i, x in enumerate(ins) if not (i < first and isinstance(x, Rw))]
    return encode_program(early + rest)


def compare(config, compiled):
    """Per chip part of `compiled`: cycles and weight stalls as compiled and with the
    first RWs hoisted (cycle model)."""
    out = []
    for step in compiled.steps:
        program = getattr(step, "program", None)
        if program is None:
            continue
        a = estimate_cycles(config, program)
        b = estimate_cycles(config, hoist_first_reads(program))
        out.append({"part": step.name, "cycles": a["cycles"],
                    "weight_stall": a["counters"]["weight_stall"],
                    "hoisted_cycles": b["cycles"],
                    "hoisted_weight_stall": b["counters"]["weight_stall"]})
    return out
