"""TLP receiver: the link stream in, the parsed stream out (docs/tlp.md)."""

import enum

from amaranth import *
from amaranth.lib import data, fifo, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from .tlp import TlpHeader, link_stream, tlp_stream


__all__ = ["TlpReceiver", "RxError", "decode_header"]


class RxError(enum.IntEnum):
    """Why `TlpReceiver` dropped a packet (its ``malformed_reason``)."""
    NONE = 0
    BAD_KEEP = 1            #: ``keep`` not contiguous from word 0, or short on a beat before the last
    SHORT = 2               #: the packet ended inside its header
    OVERSIZE = 3            #: a with-data TLP whose Length exceeds ``max_payload``
    LENGTH = 4              #: payload words (digest excluded) differ from Length, or the TD digest is missing
    UNEXPECTED_PAYLOAD = 5  #: words after the header (and digest) of a TLP whose Fmt says no data


def decode_header(m, words):
    """A `TlpHeader` signal decoded from the header words ``words[0..3]``
    (PCIe bit positions: header byte 0 in bits 31:24 of word 0)."""
    w0, w1, w2, w3 = words
    hdr = Signal(TlpHeader)
    m.d.comb += [
        hdr.fmt_type.eq(w0[24:32]),
        hdr.tc.eq(w0[20:23]),
        hdr.attr.eq(Cat(w0[12:14], w0[18])),
        hdr.th.eq(w0[16]),
        hdr.td.eq(w0[15]),
        hdr.ep.eq(w0[14]),
        hdr.at.eq(w0[10:12]),
        hdr.length.eq(w0[0:10]),
    ]
    # Completions are Type 0b0101x; every other TLP is read with the request
    # layout, which carries configuration and I/O requests through unchanged
    # (their third word lands in `address`).
    with m.If(w0[25:29] == 0b0101):
        m.d.comb += [
            hdr.completer_id.eq(w1[16:32]),
            hdr.status.eq(w1[13:16]),
            hdr.bcm.eq(w1[12]),
            hdr.byte_count.eq(w1[0:12]),
            hdr.requester_id.eq(w2[16:32]),
            hdr.tag.eq(w2[8:16]),
            hdr.lower_address.eq(w2[0:7]),
        ]
    with m.Else():
        m.d.comb += [
            hdr.requester_id.eq(w1[16:32]),
            hdr.tag.eq(w1[8:16]),
            hdr.last_be.eq(w1[4:8]),
            hdr.first_be.eq(w1[0:4]),
        ]
        with m.If(w0[29]):
            m.d.comb += hdr.address.eq(Cat(C(0, 2), w3[2:32], w2))
        with m.Else():
            m.d.comb += hdr.address.eq(Cat(C(0, 2), w2[2:32]))
    return hdr


def _realignment(link_dw, header_dw):
    """(beats holding only header words, header words in the next beat)."""
    return divmod(header_dw, link_dw)


class TlpReceiver(wiring.Component):
    """Parses link-stream TLPs into the parsed stream, dropping malformed ones.

    Store-and-forward: a packet is buffered until its last word has shown it
    well-formed, so no beat of a malformed packet ever reaches ``tlp``. The
    buffer holds the realigned payload of two largest packets and the
    headers of all packets that can arrive while one drains, so input is
    taken at one beat per cycle whenever ``tlp`` is ready. A packet's first
    beat leaves ``tlp`` three cycles after its last beat came in.

    A TD=1 packet's digest (the word after the payload) is dropped unchecked,
    as the specification asks of a receiver that does not check ECRC; the
    header keeps ``td = 1``. Payload words past ``words`` in a beat are
    undefined.

    Members
    -------
    link : In(link_stream(link_dw))
        TLPs from the link, each starting at word 0 of a beat; every beat but
        the last of a packet must be full.
    tlp : Out(tlp_stream(link_dw))
        Well-formed TLPs with their payload from word 0 of the first beat.
    malformed : Out(1)
        One-cycle pulse per dropped packet (a cycle after its last beat).
    malformed_reason : Out(RxError)
        Why, in the cycle of the pulse.

    With ``addr32`` (a host side whose addresses are below 4 GiB: the
    ``serial_host`` small form) a 4-word header's upper address word is not
    kept: its ``address`` reads the lower 32 bits, and the header queue is
    three words wide instead of four (6 iCE40 block RAMs instead of 8).
    On a one-word link it is narrower still, for what the chip's units read
    of a packet: of the third word only its low 16 bits (a request's
    address bits 2 to 15, BAR0 decoding bits 2 to 11; a completion's tag and
    lower address), so ``address`` bits 16 and up and a completion's
    ``requester_id`` read 0 (5 block RAMs); and the payload buffer keeps
    data words alone (2 block RAMs instead of 3), a beat's ``words`` and
    ``last`` following from its header's Fmt and Length, since only
    well-formed packets leave.
    """

    def __init__(self, link_dw, *, max_payload=4096, addr32=False):
        if link_dw not in (1, 2, 4, 8):
            raise ValueError(f"link_dw must be 1, 2, 4 or 8, not {link_dw!r}")
        if max_payload < 4 or max_payload > 4096 or max_payload % 4:
            raise ValueError(f"max_payload must be a whole number of words up to 4096 bytes, "
                             f"not {max_payload!r}")
        self._link_dw = link_dw
        self._max_words = max_payload // 4
        self._addr32 = addr32
        super().__init__({
            "link":             In(link_stream(link_dw)),
            "tlp":              Out(tlp_stream(link_dw)),
            "malformed":        Out(1),
            "malformed_reason": Out(RxError),
        })

    def elaborate(self, platform):
        m = Module()
        L = self._link_dw
        max_words = self._max_words
        max_beats = -(-max_words // L)
        depth = 1 << (2 * max_beats + 8 - 1).bit_length()
        abits = depth.bit_length() - 1
        # Headers wait from commit until their packet has drained: while one
        # largest packet drains, a header-only packet can arrive every
        # ceil(3 / link_dw) cycles.
        min_beats = -(-3 // L)
        hdr_depth = 1 << (-(-max_beats // min_beats) + 4 - 1).bit_length()

        # The small form (`addr32` on a one-word link): payload entries hold
        # data alone and the third header word its low half.
        narrow = self._addr32 and L == 1
        if narrow:
            entry = data.StructLayout({"data": 32})
        else:
            entry = data.StructLayout({"data": 32 * L, "words": range(L + 1), "last": 1})
        m.submodules.buffer = buffer = Memory(shape=entry, depth=depth, init=[])
        wp = buffer.write_port()
        rp = buffer.read_port()
        kept_words = 3 if self._addr32 else 4
        kept_bits = 32 * kept_words - (16 if narrow else 0)
        m.submodules.headers = headers = fifo.SyncFIFOBuffered(width=kept_bits, depth=hdr_depth)

        # Pointers carry one bit more than the address, so full and empty differ.
        wr_ptr = Signal(abits + 1)      # next entry to write
        commit_ptr = Signal(abits + 1)  # end of the packets known well-formed
        rd_ptr = Signal(abits + 1)      # next entry to read

        beat = self.link.payload
        accept = Signal()
        last_in = Signal()
        m.d.comb += [accept.eq(self.link.valid & self.link.ready),
                     last_in.eq(accept & beat.last)]

        # Words in this beat, and whether keep is well formed.
        count = Signal(range(L + 1))
        contiguous = Signal()
        for n in range(L + 1):
            with m.If(beat.keep == (1 << n) - 1):
                m.d.comb += [count.eq(n), contiguous.eq(1)]
        keep_ok = Signal()
        m.d.comb += keep_ok.eq(contiguous & (beat.last | (count == L)))

        # Per-packet state.
        k = Signal(range(8))            # beat index within the packet, saturating
        seen = Signal(12)               # words before this beat, saturating
        remaining = Signal(range(max_words + 1))  # payload words still to write
        held = Signal(32 * L)           # the previous beat
        bad_keep = Signal()
        hwords = [Signal(32, name=f"hword{i}") for i in range(kept_words)]

        first = Signal()
        m.d.comb += first.eq(k == 0)
        w0 = Signal(32)
        m.d.comb += w0.eq(Mux(first, beat.data[:32], hwords[0]))
        four, with_data, td = w0[29], w0[30], w0[15]
        length_words = Signal(range(1025))
        m.d.comb += length_words.eq(Mux(w0[0:10] == 0, 1024, w0[0:10]))
        oversize = Signal()
        m.d.comb += oversize.eq(with_data & (length_words > max_words))
        expected = Signal(range(max_words + 1))
        m.d.comb += expected.eq(Mux(with_data & ~oversize, length_words, 0))
        header_dw = Signal(range(5))
        m.d.comb += header_dw.eq(Mux(four, 4, 3))
        seen_now = Signal.like(seen)
        m.d.comb += seen_now.eq(Mux(first, 0, seen))

        # The payload part of this beat, realigned to word 0 (`avail` words),
        # and what a last beat leaves over for one more buffer entry (`tail`).
        produce = Signal()
        avail = Signal(range(L + 1))
        pdata = Signal(32 * L)
        tail = Signal(range(L + 1))
        # Only a beat after the first produces, so the header's size for it
        # is taken from the held first word, not from the beat's own.
        for hdw, branch in ((4, m.If(hwords[0][29])), (3, m.Else())):
            q, s = _realignment(L, hdw)
            with branch:
                if s == 0:
                    m.d.comb += [produce.eq(k >= q), pdata.eq(beat.data), avail.eq(count)]
                else:
                    m.d.comb += [
                        produce.eq(k >= q + 1),
                        pdata.eq(Cat(held[32 * s:], beat.data[:32 * s])),
                        avail.eq((L - s) + Mux(count > s, s, count)),
                    ]
        for hdw, branch in ((4, m.If(four)), (3, m.Else())):
            q, s = _realignment(L, hdw)
            with branch:
                if s != 0:
                    with m.If((k >= q) & (count > s)):
                        m.d.comb += tail.eq(count - s)

        # Writes stop at the expected payload, which drops a digest and keeps
        # an over-long packet within the buffer. A first beat never produces
        # (every header is at least three words and the payload is realigned
        # behind it), so the write count is taken from `remaining` alone and
        # the header's Length (from the beat itself) only sets it.
        wn = Signal(range(L + 1))
        m.d.comb += wn.eq(Mux(avail < remaining, avail, remaining))
        rem_after = Signal.like(remaining)
        m.d.comb += rem_after.eq(Mux(first, expected, remaining - Mux(produce, wn, 0)))

        # The checks, made on the last beat.
        total = Signal(13)
        m.d.comb += total.eq(seen_now + count)
        reason = Signal(RxError)
        with m.If(bad_keep | ~keep_ok):
            m.d.comb += reason.eq(RxError.BAD_KEEP)
        with m.Elif(total < header_dw):
            m.d.comb += reason.eq(RxError.SHORT)
        with m.Elif(oversize):
            m.d.comb += reason.eq(RxError.OVERSIZE)
        with m.Elif(with_data & (total != header_dw + length_words + td)):
            m.d.comb += reason.eq(RxError.LENGTH)
        with m.Elif(~with_data & (total > header_dw + td)):
            m.d.comb += reason.eq(RxError.UNEXPECTED_PAYLOAD)
        with m.Elif(~with_data & (total != header_dw + td)):
            m.d.comb += reason.eq(RxError.LENGTH)

        # The cycle after a last beat commits or discards the packet. A first
        # beat never writes the buffer, so the commit's own write (the tail,
        # or the one empty beat of a header-only packet) never collides.
        # The tail's word count and whether the commit writes an entry are
        # made in the commit cycle from registers (`remaining` still holds
        # what the last beat left), not after the last beat's own sums.
        commit = Signal()
        commit_reason = Signal(RxError)
        commit_four = Signal()
        commit_tail = Signal(range(L + 1))
        commit_empty = Signal()         # a packet without payload
        commit_words = Signal(range(L + 1))
        commit_write = Signal()
        m.d.comb += [
            commit_words.eq(Mux(commit_tail < remaining, commit_tail, remaining)),
            commit_write.eq((commit_words != 0) | commit_empty),
        ]

        with m.If(accept):
            m.d.sync += [
                held.eq(beat.data),
                k.eq(Mux(beat.last, 0, Mux(k == 7, 7, k + 1))),
                seen.eq(Mux(beat.last, 0, Mux(total > 4095, 4095, total))),
                remaining.eq(rem_after),
                bad_keep.eq(~beat.last & (bad_keep | ~keep_ok)),
            ]
            with m.If(produce & (wn != 0)):
                m.d.comb += [
                    wp.en.eq(1),
                    wp.addr.eq(wr_ptr[:abits]),
                    wp.data.data.eq(pdata),
                ]
                if not narrow:
                    m.d.comb += [wp.data.words.eq(wn), wp.data.last.eq(wn == remaining)]
                m.d.sync += wr_ptr.eq(wr_ptr + 1)

        # A header word is written in every cycle its beat is due, taken or
        # not (`k` moves only when it is taken, so the beat taken writes it
        # last), so its clock enable is a LUT of `k`, not the handshake. The
        # commit reads the words in the cycle after the last beat, before
        # the next packet's first word (due then) lands.
        for i in range(4):
            if i < kept_words:
                with m.If(k == i // L):
                    m.d.sync += hwords[i].eq(beat.data.word_select(i % L, 32))
            else:
                # A 4-word header's lower address word takes the place
                # of the upper one.
                with m.If((k == i // L) & four):
                    m.d.sync += hwords[2].eq(beat.data.word_select(i % L, 32))

        m.d.sync += commit.eq(last_in)
        with m.If(last_in):
            m.d.sync += [
                commit_reason.eq(reason),
                commit_four.eq(four),
                commit_tail.eq(tail),
                commit_empty.eq(expected == 0),
            ]

        with m.If(commit):
            with m.If(commit_reason == RxError.NONE):
                end = Signal.like(wr_ptr)
                m.d.comb += end.eq(wr_ptr + commit_write)
                m.d.sync += [wr_ptr.eq(end), commit_ptr.eq(end)]
                tail_data = Signal(32 * L)
                if any(_realignment(L, hdw)[1] for hdw in (3, 4)):
                    for hdw, branch in ((4, m.If(commit_four)), (3, m.Else())):
                        _, s = _realignment(L, hdw)
                        with branch:
                            m.d.comb += tail_data.eq(held[32 * s:])
                else:
                    # Headers fill whole beats (link_dw 1): a commit writes
                    # only the empty entry of a header-only packet, whose
                    # data no one reads; the write port's data stays pdata.
                    m.d.comb += tail_data.eq(pdata)
                m.d.comb += [
                    wp.en.eq(commit_write),
                    wp.addr.eq(wr_ptr[:abits]),
                    wp.data.data.eq(tail_data),
                    headers.w_en.eq(1),
                    headers.w_data.eq(Cat(*hwords)[:kept_bits]),
                ]
                if not narrow:
                    m.d.comb += [wp.data.words.eq(commit_words), wp.data.last.eq(1)]
            with m.Else():
                m.d.sync += wr_ptr.eq(commit_ptr)
        m.d.comb += [
            self.malformed.eq(commit & (commit_reason != RxError.NONE)),
            self.malformed_reason.eq(Mux(commit, commit_reason, RxError.NONE)),
        ]

        # Room for this beat's write and a commit write after it, and a header
        # slot for every packet whose last beat may have come in.
        used = Signal(abits + 1)
        m.d.comb += used.eq(wr_ptr - rd_ptr)
        m.d.comb += self.link.ready.eq((used <= depth - 2) &
                                       (headers.level + commit <= hdr_depth - 1))

        # Read side: the read port's data register is the output register; its
        # enable holds it while the output is stalled.
        rd_valid = Signal()
        load = Signal()
        m.d.comb += [
            load.eq((commit_ptr != rd_ptr) & (~rd_valid | (self.tlp.valid & self.tlp.ready))),
            rp.addr.eq(rd_ptr[:abits]),
            rp.en.eq(load),
        ]
        with m.If(load):
            m.d.sync += [rd_ptr.eq(rd_ptr + 1), rd_valid.eq(1)]
        with m.Elif(self.tlp.valid & self.tlp.ready):
            m.d.sync += rd_valid.eq(0)

        if self._addr32:
            r0, r1 = (headers.r_data.word_select(i, 32) for i in range(2))
            r2 = Signal(32)
            m.d.comb += r2.eq(headers.r_data[64:])
            header = decode_header(m, [r0, r1, r2 & ~r0[29].replicate(32), r2])
        else:
            header = decode_header(m, [headers.r_data.word_select(i, 32) for i in range(4)])
        if narrow:
            # A committed packet with data has exactly Length payload words
            # (at most max_words: 1024 is 0 in ten bits), one a beat; one
            # without is its one empty entry.
            out_words = Signal(range(L + 1))
            out_last = Signal()
            index_bits = min(10, max_words.bit_length())
            beat_number = Signal(index_bits, init=1)    # of the beat on the output, from 1
            with m.If(self.tlp.valid & self.tlp.ready):
                m.d.sync += beat_number.eq(Mux(out_last, 1, beat_number + 1))
            m.d.comb += [
                out_words.eq(r0[30]),
                out_last.eq(~r0[30] | (beat_number == r0[:index_bits])),
            ]
        else:
            out_words, out_last = rp.data.words, rp.data.last
        m.d.comb += [
            # The header is queued as the packet commits and reaches the
            # queue's output as soon as the first entry reaches the read port.
            self.tlp.valid.eq(rd_valid & headers.r_rdy),
            self.tlp.payload.header.eq(header),
            self.tlp.payload.data.eq(rp.data.data),
            self.tlp.payload.words.eq(out_words),
            self.tlp.payload.last.eq(out_last),
            headers.r_en.eq(self.tlp.valid & self.tlp.ready & out_last),
        ]
        return m
