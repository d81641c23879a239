"""Weight FIFO: whole tiles fetched ahead from weight memory."""

from amaranth import *
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from ..config import TPUConfig


__all__ = ["WeightFifo", "WeightLoad"]


def WeightLoad(config):
    """A read-weights command: tiles ``tile .. tile + count - 1``."""
    return data.StructLayout({
        "tile":  range(config.weight_mem_tiles),
        "count": range(config.weight_mem_tiles + 1),
    })


class WeightFifo(wiring.Component):
    """``weight_fifo_tiles`` tiles of buffering between weight memory and the array.

    Executes read-weights commands: requests each tile from weight memory as
    soon as the FIFO has room reserved for all of it, so responses can never
    overflow it and weight memory latency is hidden behind up to
    ``weight_fifo_tiles`` tiles of look-ahead.

    Members
    -------
    load : In(stream.Signature(WeightLoad(config)))
        Commands; one is taken when all tiles of the previous one are requested.
    mem_request : Out(stream.Signature(range(weight_mem_tiles)))
        Tile numbers to weight memory.
    mem_response : In(stream.Signature(ArrayLayout(signed(8), cols)))
        Tile rows from weight memory, in request order.
    o : Out(stream.Signature(ArrayLayout(signed(8), cols)))
        Tile rows to the matrix engine, row 0 of each tile first.
    tile_done : Out(1)
        The last row of a tile left through ``o`` this cycle.
    idle : Out(1)
        No command is in progress.
    """

    def __init__(self, config):
        if not isinstance(config, TPUConfig):
            raise TypeError(f"WeightFifo needs a TPUConfig, not {config!r}")
        self._config = config
        row = data.ArrayLayout(signed(8), config.cols)
        super().__init__({
            "load":         In(stream.Signature(WeightLoad(config))),
            "mem_request":  Out(stream.Signature(range(config.weight_mem_tiles))),
            "mem_response": In(stream.Signature(row)),
            "o":            Out(stream.Signature(row)),
            "tile_done":    Out(1),
            "idle":         Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self._config
        depth = cfg.weight_fifo_tiles

        m.submodules.rows = rows = fifo.SyncFIFOBuffered(
            width=cfg.cols * 8, depth=depth * cfg.rows)
        m.d.comb += [
            rows.w_data.eq(self.mem_response.payload),
            rows.w_en.eq(self.mem_response.valid),
            self.mem_response.ready.eq(rows.w_rdy),
            self.o.payload.eq(rows.r_data),
            self.o.valid.eq(rows.r_rdy),
            rows.r_en.eq(self.o.ready),
        ]

        # Tiles requested and not yet drained: room is reserved for them.
        reserved = Signal(range(depth + 1))
        out_row = Signal(range(cfg.rows))
        m.d.comb += self.tile_done.eq(self.o.valid & self.o.ready & (out_row == cfg.rows - 1))
        with m.If(self.o.valid & self.o.ready):
            m.d.sync += out_row.eq(Mux(out_row == cfg.rows - 1, 0, out_row + 1))

        tile = Signal(range(cfg.weight_mem_tiles))
        left = Signal(range(cfg.weight_mem_tiles + 1))
        m.d.comb += [
            self.load.ready.eq(left == 0),
            self.idle.eq(left == 0),
            self.mem_request.payload.eq(tile),
            self.mem_request.valid.eq((left != 0) & (reserved != depth)),
        ]
        requested = self.mem_request.valid & self.mem_request.ready
        with m.If(self.load.valid & self.load.ready):
            m.d.sync += [tile.eq(self.load.payload.tile), left.eq(self.load.payload.count)]
        with m.Elif(requested):
            m.d.sync += [tile.eq(tile + 1), left.eq(left - 1)]
        m.d.sync += reserved.eq(reserved + requested - self.tile_done)
        return m
