"""TLP transmitter: the parsed stream in, the link stream out (docs/tlp.md)."""

from amaranth import *
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .tlp import link_stream, tlp_stream


__all__ = ["TlpTransmitter", "encode_header"]


def encode_header(header):
    """The four header words of `header` (a `TlpHeader` view) at their PCIe
    bit positions; the fourth is meaningless for a 3-word header. TD is sent
    as 0: no digest is ever appended."""
    cpl = header.fmt_type[1:5] == 0b0101
    w0 = Cat(header.length, header.at, header.attr[0:2], header.ep, C(0, 1), header.th,
             C(0, 1), header.attr[2], C(0, 1), header.tc, C(0, 1), header.fmt_type)
    request_w1 = Cat(header.first_be, header.last_be, header.tag, header.requester_id)
    cpl_w1 = Cat(header.byte_count, header.bcm, header.status, header.completer_id)
    cpl_w2 = Cat(header.lower_address, C(0, 1), header.tag, header.requester_id)
    address_low = Cat(C(0, 2), header.address[2:32])
    request_w2 = Mux(header.fmt_type[5], header.address[32:64], address_low)
    return [w0, Mux(cpl, cpl_w1, request_w1), Mux(cpl, cpl_w2, request_w2), address_low]


class TlpTransmitter(wiring.Component):
    """Serialises parsed-stream TLPs onto the link stream.

    Each packet goes out as its 3 or 4 header words (4 when Fmt bit 5 is set)
    followed directly by its payload. The output is combinational from the
    input and a little state, and runs at one beat per cycle: a packet takes
    ``ceil((header + payload words) / link_dw)`` cycles, the beats that hold
    only header words and a last beat of payload words left over from the
    input's last beat being the cycles in which ``tlp`` is not taken.

    Members
    -------
    tlp : In(tlp_stream(link_dw))
        Packets to send; every beat but the last must hold ``link_dw`` words,
        and a header-only packet is one beat with ``words == 0``.
    link : Out(link_stream(link_dw))
        The packets in link format.
    """

    def __init__(self, link_dw):
        if link_dw not in (1, 2, 4, 8):
            raise ValueError(f"link_dw must be 1, 2, 4 or 8, not {link_dw!r}")
        self._link_dw = link_dw
        super().__init__({
            "tlp":  In(tlp_stream(link_dw)),
            "link": Out(link_stream(link_dw)),
        })

    def elaborate(self, platform):
        m = Module()
        L = self._link_dw
        beat = self.tlp.payload
        hwords = encode_header(beat.header)

        k = Signal(range(8))            # output beat index within the packet
        held = Signal(32 * L)           # input words carried into the next output beat
        tail = Signal()                 # the next output beat is the leftover of a last input beat
        tail_words = Signal(range(L + 1))

        def keep_for(n):
            return Cat(*[n > i for i in range(L)])

        out = self.link.payload
        sent = Signal()
        m.d.comb += sent.eq(self.link.valid & self.link.ready)

        with m.If(tail):
            m.d.comb += [
                self.link.valid.eq(1),
                out.data.eq(held),
                out.keep.eq(keep_for(tail_words)),
                out.last.eq(1),
            ]
            with m.If(self.link.ready):
                m.d.sync += [tail.eq(0), k.eq(0)]
        with m.Else():
            m.d.comb += self.link.valid.eq(self.tlp.valid)
            for hdw, branch in ((4, m.If(beat.header.fmt_type[5])), (3, m.Else())):
                # q beats of header only, then s header words before the payload.
                q, s = divmod(hdw, L)
                with branch:
                    with m.Switch(k):
                        for kk in range(q):
                            with m.Case(kk):
                                # A header-only packet whose header fills whole
                                # beats ends on its last header beat.
                                end = (kk == q - 1) & (s == 0)
                                done = Const(int(end)) & (beat.words == 0)
                                m.d.comb += [
                                    out.data.eq(Cat(*hwords[kk * L:(kk + 1) * L])),
                                    out.keep.eq((1 << L) - 1),
                                    out.last.eq(done),
                                    self.tlp.ready.eq(self.link.ready & done),
                                ]
                                with m.If(sent):
                                    m.d.sync += k.eq(Mux(done, 0, kk + 1))
                        with m.Default():
                            lead = Mux(k == q, Cat(*hwords[q * L:hdw]), held[:32 * s]) if s else C(0, 0)
                            fits = beat.words <= L - s
                            m.d.comb += [
                                out.data.eq(Cat(lead, beat.data[:32 * (L - s)])),
                                out.keep.eq(keep_for(s + Mux(fits, beat.words, L - s))),
                                out.last.eq(beat.last & fits),
                                self.tlp.ready.eq(self.link.ready),
                            ]
                            with m.If(sent):
                                m.d.sync += [k.eq(Mux(beat.last, 0, q + 1)),
                                             held.eq(beat.data[32 * (L - s):])]
                                with m.If(beat.last & ~fits):
                                    m.d.sync += [tail.eq(1), tail_words.eq(beat.words - (L - s))]
        return m
