"""The DMA writer of the narrow host protocol: a job's bytes as WRITE messages."""

from amaranth import *
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from ..driver.narrow_messages import MessageKind
from .byte_gearbox import byte_stream
from .dma_write import write_job
from .narrow_reader import MessageHeader


__all__ = ["NarrowWriter"]


class NarrowWriter(wiring.Component):
    """Writes a job's bytes to host memory as WRITE messages of up to
    ``max_payload`` bytes each, its first byte at the job's address: no
    alignment, no byte enables. It serves the same jobs as `DmaWriter`.

    Members
    -------
    job : In(stream.Signature(write_job(host_addr_bits)))
        Taken when the previous job's last message has gone.
    data : In(byte_stream(4))
        The job's bytes, every beat full but the job's last.
    flush : In(1)
        Drop the job: a message whose header has gone is finished with
        zero words (the link never sees half a message), none follows.
    idle : Out(1)
    request : Out(stream.Signature(MessageHeader))
        WRITE headers; each is followed by its words on ``words``.
    words : Out(stream.Signature(32))
        The data words of the message whose header went last.
    """

    def __init__(self, config, *, length_bits=32):
        self._config = config
        self._length_bits = length_bits
        super().__init__({
            "job":     In(stream.Signature(write_job(config.host_addr_bits))),
            "data":    In(byte_stream(4)),
            "flush":   In(1),
            "idle":    Out(1),
            "request": Out(stream.Signature(MessageHeader)),
            "words":   Out(stream.Signature(32)),
        })

    def elaborate(self, platform):
        m = Module()
        max_payload = self._config.max_payload

        active = Signal()
        addr = Signal(32)
        # Bytes of the job not yet in a message: at ``length_bits``, which
        # the chip's jobs fit (`HostInterface._narrow_job_bits`).
        left = Signal(self._length_bits)
        words_left = Signal(range(max_payload // 4 + 1))  # of the message whose header went
        draining = Signal()             # flushed: its words go as zeros

        chunk = Mux(left < max_payload, left, max_payload)
        m.d.comb += [
            self.job.ready.eq(~active & ~self.flush),
            self.idle.eq(~active),
            self.request.valid.eq(active & (left != 0) & (words_left == 0) & ~self.flush),
            self.request.payload.kind.eq(MessageKind.WRITE),
            self.request.payload.count.eq(chunk),
            self.request.payload.address.eq(addr),
            self.words.valid.eq((words_left != 0) & (self.data.valid | draining)),
            self.words.payload.eq(Mux(draining, 0, self.data.payload.data)),
            self.data.ready.eq((words_left != 0) & ~draining & self.words.ready),
        ]
        # The job ends when its last message's last word has gone.
        with m.If(words_left == 0):
            m.d.sync += draining.eq(0)
            with m.If(left == 0):
                m.d.sync += active.eq(0)
        with m.If(self.job.valid & self.job.ready):
            m.d.sync += [active.eq(1), addr.eq(self.job.payload.addr), left.eq(self.job.payload.length[:self._length_bits])]
        with m.If(self.request.valid & self.request.ready):
            m.d.sync += [words_left.eq((chunk + 3) >> 2), addr.eq(addr + chunk), left.eq(left - chunk)]
        with m.If(self.words.valid & self.words.ready):
            m.d.sync += words_left.eq(words_left - 1)
        with m.If(self.flush):
            m.d.sync += left.eq(0)
            with m.If(words_left != 0):
                m.d.sync += draining.eq(1)
        return m
