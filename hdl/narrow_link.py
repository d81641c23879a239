"""The narrow host protocol's messages on the chip's link streams (docs/serial_link.md)."""

from amaranth import *
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ..driver.narrow_messages import MessageKind
from .bar0 import RegisterAccess
from .narrow_reader import MessageHeader, ReadAnswer
from .tlp import link_stream


__all__ = ["NarrowLink"]


class NarrowLink(wiring.Component):
    """Takes the place of the TLP receiver, transmitter and arbiter with
    ``narrow_host``: splits the host's messages into register accesses and
    read answers, and sends the chip's messages one whole message at a time.

    A message is three header words (kind and count, address, value) and
    then data words (`tpu.driver.narrow_messages`). One that is not well
    formed (an unknown kind, a reserved bit set, a register offset past
    BAR0's 4 KiB or not a word's, a length its kind does not have) is
    dropped whole and counted on ``malformed``, as the TLP receiver drops a
    malformed packet.

    Ports
    -----
    rx : In(link_stream(1))
        Messages from the host, one word a beat (the frame bridge's ``tlp_out``).
    tx : Out(link_stream(1))
        Messages to the host (the bridge's ``tlp_in``).
    access : Out(stream.Signature(RegisterAccess))
        REG_WRITE and REG_READ, to BAR0.
    answer : In(stream.Signature(32))
        BAR0's value for each REG_READ: sent as REG_VALUE.
    malformed : Out(1)
        Pulses for each message dropped.
    read_request : In(stream.Signature(MessageHeader))
        The DMA reader's READ_REQ headers (their kind is not read, nor a
        write request's; a count is at most ``max_read_request`` or
        ``max_payload``); ``read_answer`` and ``read_words`` bring it
        READ_DATA and READ_ERROR.
    read_answer : Out(stream.Signature(ReadAnswer, always_ready=True))
    read_words : Out(stream.Signature(StructLayout({"data": 32, "last": 1})))
        A READ_DATA's data words.
    write_request : In(stream.Signature(MessageHeader))
        The DMA writer's WRITE headers, each followed by ceil(count / 4)
        words on ``write_words``.
    write_words : In(stream.Signature(32))

    Messages go out in the order their headers were taken; a register
    value first, then a read request, then a write.
    """

    def __init__(self, config):
        self._config = config
        super().__init__({
            "rx":            In(link_stream(1)),
            "tx":            Out(link_stream(1)),
            "access":        Out(stream.Signature(RegisterAccess)),
            "answer":        In(stream.Signature(32)),
            "malformed":     Out(1),
            "read_request":  In(stream.Signature(MessageHeader)),
            "read_answer":   Out(stream.Signature(ReadAnswer, always_ready=True)),
            "read_words":    Out(stream.Signature(data.StructLayout({"data": 32, "last": 1}))),
            "write_request": In(stream.Signature(MessageHeader)),
            "write_words":   In(stream.Signature(32)),
        })

    def elaborate(self, platform):
        m = Module()
        read_offset = Signal(10)        # of the register read BAR0 is answering
        self._receive(m, read_offset)
        self._send(m, read_offset)
        return m

    def _receive(self, m, read_offset):
        rx = self.rx
        word = rx.payload.data
        last = rx.payload.last
        fire = rx.valid & rx.ready
        index = Signal(2)               # header word 0, 1 or 2
        # The first two header words are kept as what the third's checks
        # read of them, worked out as each comes: 16 + 4 and 10 + 1 flip-flops
        # where the words took 64.
        count = Signal(16)              # the first word's count
        reg_write = Signal()            # REG_WRITE
        reg_kind = Signal()             # REG_WRITE or REG_READ, count and reserved bits 0
        error_kind = Signal()           # READ_ERROR, count and reserved bits 0
        data_kind = Signal()            # READ_DATA, reserved bits 0
        offset = Signal(10)             # the second word's register offset
        offset_ok = Signal()            # ... a word's, inside BAR0's 4 KiB
        passing = Signal()              # a READ_DATA's words go to the reader
        dropping = Signal()             # the rest of a malformed message goes nowhere
        kind = word[24:]
        reserved_ok = word[16:24] == 0
        no_count = word[:16] == 0
        register = reg_kind & offset_ok & last
        read_error = error_kind & last
        read_data = data_kind
        header = ~passing & ~dropping
        at_value = header & (index == 2)

        m.d.comb += [
            rx.ready.eq(1),
            self.access.payload.write.eq(reg_write),
            self.access.payload.offset.eq(offset),
            self.access.payload.value.eq(word),
            # (offered only for a READ_ERROR or a READ_DATA)
            self.read_answer.payload.error.eq(error_kind),
            self.read_answer.payload.count.eq(count),
            self.read_answer.payload.bare.eq(last),
            self.read_words.payload.data.eq(word),
            self.read_words.payload.last.eq(last),
        ]
        with m.If(header & fire):
            m.d.sync += index.eq(Mux(last | (index == 2), 0, index + 1))
            with m.If(index == 0):
                m.d.sync += [
                    count.eq(word[:16]),
                    reg_write.eq(kind == MessageKind.REG_WRITE),
                    reg_kind.eq(((kind == MessageKind.REG_WRITE) | (kind == MessageKind.REG_READ))
                                & no_count & reserved_ok),
                    error_kind.eq((kind == MessageKind.READ_ERROR) & no_count & reserved_ok),
                    data_kind.eq((kind == MessageKind.READ_DATA) & reserved_ok),
                ]
            with m.If(index == 1):
                m.d.sync += [offset.eq(word[2:12]), offset_ok.eq((word[:2] == 0) & (word[12:] == 0))]
            with m.If(last & (index != 2)):
                m.d.comb += self.malformed.eq(1)
        with m.If(at_value & register):
            m.d.comb += [self.access.valid.eq(rx.valid), rx.ready.eq(self.access.ready)]
        with m.Elif(at_value & (read_error | read_data)):
            m.d.comb += self.read_answer.valid.eq(rx.valid)
            with m.If(rx.valid & ~last):
                m.d.sync += passing.eq(1)
        with m.Elif(at_value & rx.valid):
            m.d.comb += self.malformed.eq(1)
            m.d.sync += dropping.eq(~last)
        with m.If(passing):
            m.d.comb += [self.read_words.valid.eq(rx.valid), rx.ready.eq(self.read_words.ready)]
        with m.If((passing | dropping) & fire & last):
            m.d.sync += [passing.eq(0), dropping.eq(0)]
        with m.If(self.access.valid & self.access.ready & ~self.access.payload.write):
            m.d.sync += read_offset.eq(offset)

    def _send(self, m, read_offset):
        # A message's kind is one of three (the reader's are READ_REQ, the
        # writer's WRITE) and its count at most a read's or a write's bytes:
        # kept as that, not as the header's 8 and 16 bits.
        cfg = self._config
        hdr = Signal(data.StructLayout({
            "reading": 1, "writing": 1,
            "count": max(cfg.max_read_request, cfg.max_payload).bit_length(),
            "address": 32, "value": 32}))
        index = Signal(2)
        words_left = Signal(range(self._config.max_payload // 4 + 1))
        kind = Signal(8)
        tx = self.tx.payload
        m.d.comb += [
            tx.keep.eq(1),
            kind.eq(Mux(hdr.writing, MessageKind.WRITE,
                        Mux(hdr.reading, MessageKind.READ_REQ, MessageKind.REG_VALUE))),
        ]
        with m.FSM(name="send"):
            with m.State("IDLE"):
                with m.If(self.answer.valid):
                    m.d.comb += self.answer.ready.eq(1)
                    m.d.sync += [hdr.reading.eq(0), hdr.writing.eq(0), hdr.count.eq(0),
                                 hdr.address.eq(Cat(C(0, 2), read_offset)),
                                 hdr.value.eq(self.answer.payload)]
                    m.next = "HEADER"
                with m.Elif(self.read_request.valid):
                    m.d.comb += self.read_request.ready.eq(1)
                    request = self.read_request.payload
                    m.d.sync += [hdr.reading.eq(1), hdr.writing.eq(0), hdr.count.eq(request.count),
                                 hdr.address.eq(request.address), hdr.value.eq(0)]
                    m.next = "HEADER"
                with m.Elif(self.write_request.valid):
                    m.d.comb += self.write_request.ready.eq(1)
                    request = self.write_request.payload
                    m.d.sync += [hdr.reading.eq(0), hdr.writing.eq(1), hdr.count.eq(request.count),
                                 hdr.address.eq(request.address), hdr.value.eq(0),
                                 words_left.eq((request.count + 3) >> 2)]
                    m.next = "HEADER"
            with m.State("HEADER"):
                writing = hdr.writing
                m.d.comb += [
                    self.tx.valid.eq(1),
                    tx.data.eq(Mux(index == 0, Cat(hdr.count, C(0, 24 - len(hdr.count)), kind),
                                   Mux(index == 1, hdr.address, hdr.value))),
                    tx.last.eq((index == 2) & ~writing),
                ]
                with m.If(self.tx.ready):
                    m.d.sync += index.eq(Mux(index == 2, 0, index + 1))
                    with m.If(index == 2):
                        m.next = "IDLE"
                        with m.If(writing):
                            m.next = "DATA"
            with m.State("DATA"):
                m.d.comb += [
                    self.tx.valid.eq(self.write_words.valid),
                    tx.data.eq(self.write_words.payload),
                    tx.last.eq(words_left == 1),
                    self.write_words.ready.eq(self.tx.ready),
                ]
                with m.If(self.tx.valid & self.tx.ready):
                    m.d.sync += words_left.eq(words_left - 1)
                    with m.If(words_left == 1):
                        m.next = "IDLE"
