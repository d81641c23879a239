"""Pass: schedule the weight reads (RW) of a program part.

The lowering emits MMCs that name the weight-memory tile they switch to
(``Mmc.switch`` with a pending tile). This pass inserts RWs so that every
tile is requested as early as the weight FIFO allows: at most
``weight_fifo_tiles + 2`` tiles requested and not yet switched to at any
point of the program (more is WEIGHT_FIFO_OVERFLOW), consecutive tiles in
one RW. RW does not block later instructions, so requesting early lets the
weight memory's latency and the tile loads hide behind the MMCs before.

The RWs of the first tiles go at the program's start, before the part's
table and input RHMs: weights never depend on the unified buffer (the
runtime loads a part's tiles before it starts it), and a first tile takes
``weight_mem_latency + rows + 4`` cycles from its RW to the array, which an
MMC ready after a short input read would otherwise wait for
(`tpu.bench.weight_stalls`).
"""

from ..isa import Rw


__all__ = ["insert_weight_reads"]


def insert_weight_reads(items, config):
    """`items`: instructions, where an MMC that switches is a pair
    ``(Mmc, tile)``. Returns the instructions with RWs inserted."""
    tiles = [item[1] for item in items if isinstance(item, tuple)]
    limit = config.weight_fifo_tiles + 2
    out = []
    requested = switched = 0
    for item in items:
        if isinstance(item, tuple):
            reads = []
            first = requested
            while requested < len(tiles) and requested - switched < limit:
                if requested > first and tiles[requested] != tiles[requested - 1] + 1:
                    reads.append(Rw(tile=tiles[first], count=requested - first))
                    first = requested
                requested += 1
            if requested > first:
                reads.append(Rw(tile=tiles[first], count=requested - first))
            assert requested > switched, "a switch without a requested tile"
            if switched == 0:
                out[:0] = reads       # the first tiles: at the start
            else:
                out.extend(reads)
            out.append(item[0])
            switched += 1
        else:
            out.append(item)
    return out

