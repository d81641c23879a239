"""Weight memory: whole weight tiles behind a request/response port."""

from amaranth import *
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from ..config import TPUConfig
from .ram import Ram


__all__ = ["WeightMemory", "WeightMemoryFillSignature"]


def WeightMemoryFillSignature(config):
    """A write port for one tile row, from the writer's side."""
    return wiring.Signature({
        "en":   Out(1),
        "addr": Out(range(config.weight_mem_tiles * config.rows)),
        "data": Out(data.ArrayLayout(signed(8), config.cols)),
    })


class WeightMemory(wiring.Component):
    """The chip's weight store, with the latency and bandwidth of off-chip DRAM.

    TPU v1 keeps its weights in DDR3 behind a 30 GB/s port; this component
    models such a port on chip so that simulations see realistic weight
    stalls: a tile request is answered ``max(weight_mem_latency, 1)`` cycles
    after it is accepted, and rows then flow at an average of
    ``config.weight_mem_bytes_per_cycle`` bytes per cycle (at most one tile row,
    ``cols`` bytes, per cycle). Responses come in request order.

    Tile ``t`` is rows ``t*rows .. t*rows + rows - 1`` of the storage; row
    ``k`` of a tile holds ``w[k, 0..cols-1]``.

    Members
    -------
    request : In(stream.Signature(range(weight_mem_tiles)))
        Tile numbers to read. Up to 4 may be outstanding.
    response : Out(stream.Signature(ArrayLayout(signed(8), cols)))
        Tile rows, row 0 first, ``rows`` per request.
    fill : In(WeightMemoryFillSignature)
        Writes one tile row; the host's (and testbenches') way in.
    """

    OUTSTANDING = 4
    SKID_ROWS = 3

    def __init__(self, config):
        if not isinstance(config, TPUConfig):
            raise TypeError(f"WeightMemory needs a TPUConfig, not {config!r}")
        self._config = config
        self._mem = Ram(shape=data.ArrayLayout(signed(8), config.cols),
                        depth=config.weight_mem_tiles * config.rows)
        super().__init__({
            "request":  In(stream.Signature(range(config.weight_mem_tiles))),
            "response": Out(stream.Signature(data.ArrayLayout(signed(8), config.cols))),
            "fill":     In(WeightMemoryFillSignature(config)),
        })

    @property
    def config(self):
        return self._config

    def elaborate(self, platform):
        m = Module()
        cfg = self._config
        rows, cols = cfg.rows, cfg.cols

        m.submodules.mem = mem = self._mem
        wr = mem.write_port()
        rd = mem.read_port()
        m.d.comb += [wr.en.eq(self.fill.en), wr.addr.eq(self.fill.addr), wr.data.eq(self.fill.data)]

        # Requests wait in a queue stamped with the cycle they become due.
        now = Signal(32)
        m.d.sync += now.eq(now + 1)
        pending_layout = data.StructLayout({"tile": range(cfg.weight_mem_tiles), "due": 32})
        m.submodules.pending = pending = fifo.SyncFIFOBuffered(
            width=pending_layout.size, depth=self.OUTSTANDING)
        m.d.comb += [
            pending.w_data.eq(Cat(self.request.payload, now + cfg.weight_mem_latency)),
            pending.w_en.eq(self.request.valid),
            self.request.ready.eq(pending.w_rdy),
        ]
        head = Signal(pending_layout)
        m.d.comb += head.eq(pending.r_data)

        # Bandwidth: earn bytes_per_cycle credit a cycle, spend cols a row.
        # Credit saturates at one row, so idle time is not banked as a burst.
        bpc = min(cfg.weight_mem_bytes_per_cycle, cols)
        credit = Signal(range(cols + bpc + 1))
        has_credit = credit >= cols

        # Reads: the memory has one cycle of latency; a one-row skid buffer
        # keeps back-pressure from losing the row in flight.
        row = Signal(range(rows))
        issue = Signal()
        # Due when ``head.due - now <= 0``, that is when ``head.due - now - 1``
        # is negative: ``head.due + ~now``, one carry chain and no compare.
        due = (head.due + ~now)[31]
        m.d.comb += issue.eq(pending.r_rdy & due & has_credit)

        m.submodules.out = out = fifo.SyncFIFO(width=cols * 8, depth=self.SKID_ROWS)
        in_flight = Signal()
        # Issue only if the read can land: the skid FIFO has room for it and
        # the row already in flight.
        room = Signal()
        m.d.comb += room.eq(out.level + in_flight < self.SKID_ROWS)
        fire = Signal()
        m.d.comb += fire.eq(issue & room)

        m.d.comb += [
            rd.en.eq(1),
            rd.addr.eq(head.tile * rows + row),
        ]
        m.d.sync += in_flight.eq(fire)
        m.d.comb += [
            out.w_data.eq(rd.data),
            out.w_en.eq(in_flight),
        ]
        m.d.comb += [
            self.response.payload.eq(out.r_data),
            self.response.valid.eq(out.r_rdy),
            out.r_en.eq(self.response.ready),
        ]

        with m.If(fire):
            with m.If(row == rows - 1):
                m.d.sync += row.eq(0)
                m.d.comb += pending.r_en.eq(1)
            with m.Else():
                m.d.sync += row.eq(row + 1)

        # The credit after a cycle with and without a row read, both from
        # the register alone: `fire` only chooses.
        def earned(spent):
            value = credit + bpc - spent
            return Mux(value > cols, cols, value)
        kept = Signal.like(credit)
        spent = Signal.like(credit)
        m.d.comb += [kept.eq(earned(0)), spent.eq(earned(cols))]
        m.d.sync += credit.eq(Mux(fire, spent, kept))
        return m
