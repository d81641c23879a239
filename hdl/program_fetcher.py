"""Fetches a program from host memory by DMA into the core's instruction stream."""

from amaranth import *
from amaranth.lib import fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from ..isa import INSTRUCTION_BITS, INSTRUCTION_BYTES
from .byte_gearbox import ByteBeat, gearbox
from .dma_read import read_job


__all__ = ["ProgramFetcher"]


class ProgramFetcher(wiring.Component):
    """Reads ``length`` instructions from host address ``addr`` in chunks, and
    only ever asks for as many as its instruction queue has room for: fetched
    instructions always have somewhere to land, so their DMA data can never
    block the host reads queued behind them (an RHM's bytes).

    Ports
    -----
    start : In(1)
        Pulse: fetch ``length`` instructions from ``addr``.
    addr : In(host_addr_bits)
    length : In(32)
    job : Out(stream of read_job(host_addr_bits))
        Read jobs for the DMA reader (``channel`` left 0).
    data : In(byte_stream)
        The jobs' bytes.
    instr : Out(stream.Signature(128))
        Instructions in program order.
    busy : Out(1)
        Instructions left to fetch or to hand over.
    flush : In(1)
        Forget the program (the DMA reader is flushed alongside).
    """

    def __init__(self, config, *, depth=32, chunk=16):
        assert chunk <= depth
        self._config = config
        self._depth = depth
        self._chunk = chunk
        super().__init__({
            "start":  In(1),
            "addr":   In(config.host_addr_bits),
            "length": In(32),
            "job":    Out(stream.Signature(read_job(config.host_addr_bits))),
            "data":   In(stream.Signature(ByteBeat(4 * config.link_dw))),
            "instr":  Out(stream.Signature(INSTRUCTION_BITS)),
            "busy":   Out(1),
            "flush":  In(1),
        })

    def elaborate(self, platform):
        m = Module()
        depth, chunk = self._depth, self._chunk

        # Jobs are whole instructions, as a `BeatShifter` needs.
        m.submodules.gearbox = packer = ResetInserter(self.flush)(
            gearbox(4 * self._config.link_dw, INSTRUCTION_BYTES, whole=True))
        m.submodules.queue = queue = ResetInserter(self.flush)(
            fifo.SyncFIFOBuffered(width=INSTRUCTION_BITS, depth=depth))
        wiring.connect(m, wiring.flipped(self.data), packer.i)
        m.d.comb += [
            queue.w_data.eq(packer.o.payload.data),
            queue.w_en.eq(packer.o.valid),
            packer.o.ready.eq(queue.w_rdy),
            self.instr.payload.eq(queue.r_data),
            self.instr.valid.eq(queue.r_rdy),
            queue.r_en.eq(self.instr.ready),
        ]

        addr = Signal(self._config.host_addr_bits)
        left = Signal(32)          # instructions not yet asked for
        outstanding = Signal(range(depth + 1))   # asked for, not yet queued
        take = Signal(range(chunk + 1))
        m.d.comb += take.eq(Mux(left > chunk, chunk, left))
        arrived = packer.o.valid & packer.o.ready
        asked = self.job.valid & self.job.ready

        m.d.comb += [
            self.job.valid.eq((left != 0) & (queue.level + outstanding + take <= depth)),
            self.job.payload.addr.eq(addr),
            self.job.payload.length.eq(take * INSTRUCTION_BYTES),
        ]
        m.d.sync += outstanding.eq(outstanding + Mux(asked, take, 0) - arrived)
        with m.If(asked):
            m.d.sync += [addr.eq(addr + take * INSTRUCTION_BYTES), left.eq(left - take)]
        with m.If(self.start):
            m.d.sync += [addr.eq(self.addr), left.eq(self.length)]

        m.d.comb += self.busy.eq((left != 0) | (outstanding != 0) | queue.r_rdy)
        with m.If(self.flush):
            m.d.sync += [left.eq(0), outstanding.eq(0)]
        return m
