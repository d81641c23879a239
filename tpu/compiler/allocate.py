"""Pass: place the unified-buffer blocks of a compiled model.

Every piece of UB data lives over a range of steps (program parts): a
tensor from the part that produces it (or first reads it from host memory)
to the last part that reads it, and each part's LDQ and lookup tables for
that part only. Blocks whose step ranges overlap must not share rows; the
allocator places them first fit, in order of their first step. The
accumulators need no allocation: every part alternates between their two
halves.
"""

from dataclasses import dataclass
from operator import attrgetter


__all__ = ["Block", "place_blocks"]


@dataclass(slots=True)     # (the allocator makes thousands per try)
class Block:
    """``rows`` UB rows needed from step ``start`` to step ``end``
    (inclusive). ``tensor`` names the tensor a resident block holds (spilling
    it frees the block), None for step-local data."""
    key: tuple
    rows: int
    start: int
    end: int
    tensor: str = None
    base: int = None


def place_blocks(blocks, ub_rows):
    """Set every block's ``base``; returns None, or the first block that does
    not fit (the others then have no meaningful base)."""
    live = []       # placed blocks that a later block may still overlap
    # (by first step, then largest first: two stable sorts, as fast as a
    # key without a Python function per block)
    order = sorted(sorted(blocks, key=attrgetter("rows"), reverse=True), key=attrgetter("start"))
    for block in order:
        # (blocks come by first step: one that ended before this one starts
        # overlaps no later block either)
        live = [b for b in live if b.end >= block.start]
        busy = sorted((b.base, b.base + b.rows) for b in live if b.start <= block.end)
        base = 0
        for lo, hi in busy:
            if base + block.rows <= lo:
                break
            base = max(base, hi)
        if base + block.rows > ub_rows:
            return block
        block.base = base
        live.append(block)
    return None
