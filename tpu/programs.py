"""Programs (lists of `tpu.isa` instructions) on their way to a chip: what
the runtime (`tpu.compiler.execute`), the self-test and the benchmarks do to
a program before they run it.

relocate(program, regions)
    Moves every RHM/WHM host address into the host buffers the program's data
    was given.
"""

import dataclasses

from .isa import Rhm, Whm


__all__ = ["relocate"]


def relocate(program, regions):
    """`program` (instructions) with every RHM/WHM host address moved:
    `regions` are ``(old_address, size, HostBuffer)``; an address inside
    ``[old, old + size)`` moves to the same offset in the buffer."""
    out = []
    for instruction in program:
        if isinstance(instruction, (Rhm, Whm)):
            for old, size, buffer in regions:
                if old <= instruction.host < old + size:
                    instruction = dataclasses.replace(instruction,
                                                      host=buffer.addr + instruction.host - old)
                    break
            else:
                raise ValueError(f"{instruction} addresses no region of the program's data")
        out.append(instruction)
    return out
