"""The DMA reader of the narrow host protocol: one read outstanding, answered in order."""

from amaranth import *
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ..driver.narrow_messages import MessageKind
from ..host_registers import HostError
from .byte_gearbox import byte_stream
from .dma_read import read_job
from .lfsr import LfsrTimer


__all__ = ["NarrowReader", "MessageHeader", "ReadAnswer"]

#: A message's header as the chip's units hand it to the link
#: (`tpu.driver.narrow_messages`).
MessageHeader = data.StructLayout({"kind": 8, "count": 16, "address": 32, "value": 32})

#: The start of the host's answer to a read: READ_ERROR (``error``) or
#: READ_DATA of ``count`` bytes, whose data words follow on ``words``
#: unless the message had none (``bare``).
ReadAnswer = data.StructLayout({"error": 1, "count": 16, "bare": 1})


class NarrowReader(wiring.Component):
    """Reads host memory job by job with READ_REQ messages of up to
    ``max_read_request`` bytes, one at a time: the next is asked for once
    the last byte of the one before has come. It serves the same jobs as
    `DmaReader` and delivers their bytes the same way.

    Members
    -------
    job : In(stream.Signature(read_job(host_addr_bits)))
    data : Out(byte_stream(4, channel=2))
        Each job's bytes in order, ``channel`` on every beat; every beat is
        full but a job's last.
    error : Out(5)
        The `HostError` of the first error, held until ``flush``; from an
        error on no request is sent and no byte delivered.
    flush : In(1)
        Drop the job; the answer of a read still outstanding is dropped
        without complaint as it comes (or times out).
    idle : Out(1)
    request : Out(stream.Signature(MessageHeader))
        READ_REQ headers.
    answer : In(stream.Signature(ReadAnswer, always_ready=True))
        The header of each READ_DATA or READ_ERROR from the host.
    words : In(stream.Signature(data.StructLayout({"data": 32, "last": 1})))
        A READ_DATA's data words, ``last`` on the message's last word.

    The checks, as `DmaReader`'s: an answer with no read outstanding is
    CPL_UNEXPECTED, READ_ERROR is CPL_STATUS, a count of zero, more bytes
    than the read awaits, a piece but the last not whole words, or a
    message whose words do not match its count is CPL_MALFORMED, and
    ``cpl_timeout`` cycles without an answer is CPL_TIMEOUT.
    """

    def __init__(self, config, *, length_bits=32):
        self._config = config
        self._length_bits = length_bits
        super().__init__({
            "job":     In(stream.Signature(read_job(config.host_addr_bits))),
            "data":    Out(byte_stream(4, channel=2)),
            "error":   Out(5),
            "flush":   In(1),
            "idle":    Out(1),
            "request": Out(stream.Signature(MessageHeader)),
            "answer":  In(stream.Signature(ReadAnswer, always_ready=True)),
            "words":   In(stream.Signature(data.StructLayout({"data": 32, "last": 1}))),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self._config
        mrr = cfg.max_read_request
        ok = self.error == 0
        error_now = Signal(5)

        active = Signal()               # a job has bytes not yet asked for
        addr = Signal(32)
        # Bytes of the job not yet asked for: at ``length_bits``, which the
        # chip's jobs fit (`HostInterface._narrow_job_bits`).
        job_left = Signal(self._length_bits)
        channel = Signal(2)             # the job's
        read_channel = Signal(2)        # the outstanding read's
        outstanding = Signal()          # a read's bytes are still to come
        stale = Signal()                # ... for a flushed job: dropped silently
        last_read = Signal()            # the outstanding read is its job's last
        read_left = Signal(range(mrr + 1))
        # Bytes of the READ_DATA in progress still to come: as wide as a
        # read, as only a piece that fits its read (`piece_good`) is counted.
        piece_left = Signal(range(mrr + 1))
        in_piece = Signal()             # its data words are passing
        piece_good = Signal()           # ... and are delivered
        lfsr = LfsrTimer(cfg.cpl_timeout)
        timer = Signal(lfsr.width, init=lfsr.start)

        # -- Requests --------------------------------------------------
        chunk = Mux(job_left < mrr, job_left, mrr)
        m.d.comb += [
            self.job.ready.eq(~active & ~self.flush),
            # Not while the last read's words pass: they are delivered
            # with its count, its channel and whether it ends its job.
            self.request.valid.eq(active & ~outstanding & ~in_piece & ok & ~self.flush),
            self.request.payload.kind.eq(MessageKind.READ_REQ),
            self.request.payload.count.eq(chunk),
            self.request.payload.address.eq(addr),
        ]
        with m.If(self.job.valid & self.job.ready):
            m.d.sync += [active.eq(1), addr.eq(self.job.payload.addr),
                         job_left.eq(self.job.payload.length[:self._length_bits]), channel.eq(self.job.payload.channel)]
        with m.If(self.request.valid & self.request.ready):
            m.d.sync += [
                outstanding.eq(1), stale.eq(0), timer.eq(lfsr.start),
                read_left.eq(chunk), last_read.eq(job_left <= mrr), read_channel.eq(channel),
                addr.eq(addr + chunk), job_left.eq(job_left - chunk),
            ]
            with m.If(job_left <= mrr):
                m.d.sync += active.eq(0)

        # -- Answers ----------------------------------------------------
        ans = self.answer.payload
        count = ans.count
        shape_ok = (count != 0) & (count <= read_left) & ((count == read_left) | (count[:2] == 0))
        with m.If(outstanding):
            m.d.sync += timer.eq(lfsr.step(timer))
            with m.If(timer == lfsr.last):
                m.d.sync += outstanding.eq(0)
                with m.If(~stale):
                    m.d.comb += error_now.eq(HostError.CPL_TIMEOUT)
        with m.If(self.answer.valid):
            m.d.sync += timer.eq(lfsr.start)
            with m.If(~outstanding):
                m.d.comb += error_now.eq(HostError.CPL_UNEXPECTED)
            with m.Elif(ans.error):
                m.d.sync += outstanding.eq(0)
                with m.If(~stale):
                    m.d.comb += error_now.eq(HostError.CPL_STATUS)
            with m.Elif(~shape_ok | ans.bare):
                m.d.sync += outstanding.eq(0)
                with m.If(~stale):
                    m.d.comb += error_now.eq(HostError.CPL_MALFORMED)
            with m.If(~ans.error & ~ans.bare):
                m.d.sync += [in_piece.eq(1), piece_left.eq(count),
                             piece_good.eq(outstanding & shape_ok & ~stale)]
                with m.If(outstanding & shape_ok):
                    m.d.sync += read_left.eq(read_left - count)
                    with m.If(count == read_left):
                        m.d.sync += outstanding.eq(0)

        # A READ_DATA's words: the bytes go out as they come.
        word = self.words.payload
        beat_bytes = Mux(piece_left < 4, piece_left, 4)
        # The piece's words must end with its bytes: a word past them, or
        # the last word before them, is malformed.
        fits = (piece_left != 0) & (word.last == (piece_left <= 4))
        deliver = in_piece & piece_good & fits & ok & ~self.flush
        m.d.comb += [
            self.data.payload.data.eq(word.data),
            self.data.payload.count.eq(beat_bytes),
            self.data.payload.last.eq(last_read & (read_left == 0) & (piece_left <= 4)),
            self.data.payload.channel.eq(read_channel),
            self.data.valid.eq(self.words.valid & deliver),
            self.words.ready.eq(~deliver | self.data.ready),
        ]
        with m.If(self.words.valid & self.words.ready):
            m.d.sync += piece_left.eq(Mux(piece_left < 4, 0, piece_left - 4))
            with m.If(word.last):
                m.d.sync += in_piece.eq(0)
            with m.If(~in_piece):
                m.d.comb += error_now.eq(HostError.CPL_MALFORMED)
            with m.Elif(~fits & piece_good):
                m.d.sync += [piece_good.eq(0), outstanding.eq(0)]
                m.d.comb += error_now.eq(HostError.CPL_MALFORMED)

        with m.If(ok):
            m.d.sync += self.error.eq(error_now)

        with m.If(self.flush):
            m.d.sync += [self.error.eq(0), active.eq(0), stale.eq(outstanding), piece_good.eq(0)]
        m.d.comb += self.idle.eq(~active & ~outstanding & ~in_piece)
        return m
