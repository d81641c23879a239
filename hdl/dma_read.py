"""DMA reader: reads host memory with memory-read TLPs, reassembles the
completions in request order and delivers each job's bytes."""

from amaranth import *
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ..host_registers import HostError
from .byte_gearbox import ByteAligner, byte_stream
from .dma_split import address_counter, chunk_ahead, fits_in_block, request_header, split_chunk
from .lfsr import LfsrTimer
from .tlp import CplStatus, FmtType, tlp_stream


__all__ = ["DmaReader", "ReadJob", "read_job"]


def read_job(addr_bits=64):
    """A read job: ``length`` bytes at host address ``addr`` (`addr_bits`
    wide, ``TPUConfig.host_addr_bits``) for ``channel``."""
    return data.StructLayout({"addr": addr_bits, "length": 32, "channel": 2})


#: The read job of a chip with 64-bit host addresses.
ReadJob = read_job()


def _log2(n):
    return n.bit_length() - 1


class DmaReader(wiring.Component):
    """Reads `length` (>= 1) bytes at any host byte address, job by job.

    Members
    -------
    requester_id : In(16)
    job : In(stream.Signature(read_job(host_addr_bits)))
        Taken once the previous job's last request has been issued, so the
        requests of consecutive jobs follow each other without a gap.
    request : Out(tlp_stream(link_dw))
        MRd TLPs, one header-only beat each, cut at every
        ``max_read_request``-aligned address (MRD_32 below 4 GiB, else
        MRD_64), tags handed out in turn from 0..read_tags-1.
    completion : In(tlp_stream(link_dw))
        Every completion the chip receives (the parsed stream: every beat
        but a packet's last carries ``link_dw`` words). Always ready.
    data : Out(byte_stream(4 * link_dw, channel=2))
        Each job's bytes, in job order, the job's first byte in lane 0 and
        its ``channel`` on every beat.
    error : Out(5)
        The `HostError` code of the first error, 0 for none; held until
        ``flush``. From an error on, no request is issued and no data
        delivered (completions are still taken).
    flush : In(1)
        Abort: drop the current job and every byte not yet delivered, clear
        ``error``. Tags with completions still to come stay reserved until
        those arrive (they are discarded silently) or time out.
    idle : Out(1)
        No job in progress, no tag reserved, no byte held.

    Request tag t owns slot t of a reorder buffer of ``read_tags`` x
    ``max_read_request`` bytes; a completion's bytes go to their place in
    the slot, and the slots are read in tag order, each as far as its
    request's bytes have arrived, so delivery overlaps reception.
    docs/dma.md gives the checks that make a completion an error.
    """

    def __init__(self, config):
        self._config = config
        super().__init__({
            "requester_id": In(16),
            "job":          In(stream.Signature(read_job(config.host_addr_bits))),
            "request":      Out(tlp_stream(config.link_dw)),
            "completion":   In(tlp_stream(config.link_dw)),
            "data":         Out(byte_stream(4 * config.link_dw, channel=2)),
            "error":        Out(5),
            "flush":        In(1),
            "idle":         Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self._config
        link_dw = cfg.link_dw
        beat = 4 * link_dw
        tags = cfg.read_tags
        mrr = cfg.max_read_request
        rows = mrr // beat                     # reorder-buffer rows per slot
        tag_bits = max(1, (tags - 1).bit_length())
        flush = self.flush
        ok = self.error == 0

        def next_tag(t):
            return Mux(t == tags - 1, 0, t + 1)

        # Per-tag state. `busy`: the slot holds a request's bytes not yet
        # delivered. `outstanding`: completions are still due. `stale`: they
        # belong to a flushed request and are dropped without complaint.
        busy = Signal(tags)
        outstanding = Signal(tags)
        stale = Signal(tags)
        left = Array(Signal(range(mrr + 1), name=f"left{t}") for t in range(tags))
        # Offset in the request's max_read_request-aligned block of the next
        # byte due, so also where its bytes have arrived up to.
        next_off = Array(Signal(range(mrr + 1), name=f"next_off{t}") for t in range(tags))
        # The words from the one holding the next byte to the request's end,
        # ceil((next_off % 4 + left) / 4): a completion carrying exactly
        # these is its last, found by one compare with its Length.
        due = Array(Signal(range(mrr // 4 + 1), name=f"due{t}") for t in range(tags))
        # Where each request's bytes lie in its slot, worked out when it is
        # issued so that delivery reads registers: its first and last rows,
        # the lane of its first byte, and the byte counts of its first row
        # and of its last row (when that is not the first).
        first_row = Array(Signal(range(rows), name=f"first_row{t}") for t in range(tags))
        last_row = Array(Signal(range(rows), name=f"last_row{t}") for t in range(tags))
        first_lane = Array(Signal(range(beat), name=f"first_lane{t}") for t in range(tags))
        first_count = Array(Signal(range(beat + 1), name=f"first_count{t}") for t in range(tags))
        last_count = Array(Signal(range(beat + 1), name=f"last_count{t}") for t in range(tags))
        job_end = Signal(tags)
        channel = Array(Signal(2, name=f"channel{t}") for t in range(tags))
        if cfg.serial_host:
            # The small form times its one tag on an LFSR: no carry chain.
            lfsr = LfsrTimer(cfg.cpl_timeout)
            timer = Array(Signal(lfsr.width, name=f"timer{t}", init=lfsr.start) for t in range(tags))
            timer_start, timer_last = lfsr.start, lfsr.last
            timer_step = lfsr.step
        else:
            timer = Array(Signal(range(cfg.cpl_timeout), name=f"timer{t}") for t in range(tags))
            timer_start, timer_last = 0, cfg.cpl_timeout - 1
            timer_step = lambda state: state + 1

        error_now = Signal(5)       # an error found this cycle (latest wins)

        # -- Requests --------------------------------------------------
        active = Signal()
        addr = Signal(cfg.host_addr_bits)
        job_channel = Signal(2)
        tail = Signal(tag_bits)     # the next tag to hand out
        req_valid = Signal()

        load_addr, advance_addr = address_counter(m, addr, mrr)
        # The next request's byte count and whether it ends the job are
        # chosen a request ahead, so issuing one reads registers.
        chunk, after, is_job_end, load_chunk, advance_chunk = chunk_ahead(m, mrr)
        # The offset of the next request's last byte in its aligned block,
        # chosen with its byte count, so that the rows and counts a tag
        # keeps are made at issue from registers without the sum.
        mrr_bits = _log2(mrr)
        i_end = Signal(range(mrr))
        job_fits, job_end_sum = fits_in_block(m, self.job.payload.addr, self.job.payload.length, mrr)
        m.d.comb += self.job.ready.eq(~active & ~flush)
        with m.If(self.job.valid & self.job.ready):
            m.d.sync += [
                active.eq(1),
                *load_addr(self.job.payload.addr),
                *load_chunk(self.job.payload.addr, self.job.payload.length),
                i_end.eq(Mux(job_fits, job_end_sum - 1, mrr - 1)),
                job_channel.eq(self.job.payload.channel),
            ]

        split = split_chunk(m, addr, chunk, mrr, fmt32=FmtType.MRD_32, fmt64=FmtType.MRD_64)
        lane_bits = _log2(link_dw)
        row_bits = _log2(rows)
        beat_bits = _log2(beat)
        # The request's place in its slot.
        i_start = addr[:mrr_bits]
        i_first_row = i_start[beat_bits:]
        i_last_row = i_end[beat_bits:]
        i_end_count = i_end[:beat_bits] + 1
        tail_free = ~busy.bit_select(tail, 1) & ~outstanding.bit_select(tail, 1)
        issue = Signal()
        m.d.comb += [
            issue.eq(active & tail_free & ok & ~flush & (~req_valid | self.request.ready)),
            self.request.valid.eq(req_valid),
        ]
        with m.If(self.request.ready):
            m.d.sync += req_valid.eq(0)
        # The request's header is loaded whenever the output register is free,
        # issued or not (it is read only while `req_valid`): it is made from
        # registers that only an issue moves, so an issue loads the same
        # header as before, and its clock enable is the output's handshake,
        # not `issue` (the error, the flush, the tag's state, the job).
        # Not on the one-word link (`serial_host`), whose reader is kept small.
        load_header = issue if cfg.serial_host else (~req_valid | self.request.ready)
        with m.If(load_header):
            m.d.sync += request_header(self.request.payload.header, split, addr, self.requester_id, tail)
        with m.If(issue):
            m.d.sync += [
                self.request.payload.last.eq(1),
                req_valid.eq(1),
                *advance_addr(split["bytes"]),
                *advance_chunk(),
                # Every request but a job's first starts aligned.
                i_end.eq(Mux(after[mrr_bits:] == 0, after - 1, mrr - 1)),
                tail.eq(next_tag(tail)),
            ]
            with m.If(is_job_end):
                m.d.sync += active.eq(0)

        # -- Completions -----------------------------------------------
        cpl = self.completion
        hdr = cpl.payload.header
        m.d.comb += cpl.ready.eq(1)
        in_packet = Signal()        # a beat after the first of a completion
        with m.If(cpl.valid):
            m.d.sync += in_packet.eq(~cpl.payload.last)
        first = cpl.valid & ~in_packet

        # Checks on a completion's first beat, against its tag's request.
        ctag = hdr.tag[:tag_bits]
        matched = (hdr.tag < tags) & outstanding.bit_select(ctag, 1)
        c_stale = stale.bit_select(ctag, 1)
        c_left = left[ctag]
        c_next = next_off[ctag]
        c_due = due[ctag]
        lead = c_next[:2]
        dwords = Signal(11)
        covered = Signal(13)        # bytes from the word holding the next byte
        m.d.comb += [
            dwords.eq(Mux(hdr.length == 0, 1024, hdr.length)),
            covered.eq(dwords << 2),
        ]
        # `due` is at most 1024 (a request lies in one aligned block of at
        # most 4096 bytes), so its low ten bits against Length decide.
        def shape(t_left, t_next, t_due):
            """Whether the first beat fits a request with these counts, and
            whether it is the request's last completion."""
            final = t_due[:10] == hdr.length
            return ((hdr.fmt_type == FmtType.CPLD)
                    & (Mux(hdr.byte_count == 0, 4096, hdr.byte_count) == t_left)
                    & (hdr.lower_address == t_next[:7])
                    & (final | (dwords < t_due))), final

        shape_ok, final = shape(c_left, c_next, c_due)
        # Where a partial completion leaves its tag's request: it ends on a
        # word boundary, so its bytes are `covered` less the lead. A final
        # one ends the request, whose counts are then not looked at again,
        # so these are applied whichever it is.
        c_next_off = Signal(range(mrr + 1))
        c_left_after = Signal(range(mrr + 1))
        c_due_after = Signal(range(mrr // 4 + 1))
        m.d.comb += [
            c_next_off.eq(Cat(C(0, 2), c_next[2:]) + covered),
            c_left_after.eq(c_left - (covered - lead)),
            c_due_after.eq(c_due - dwords),
        ]
        # A poisoned completion's data is known bad: refuse it like an error status.
        status_ok = (hdr.status == CplStatus.SC) & ~hdr.ep

        # What the rest of a multi-beat completion needs from its first beat.
        p_tag = Signal(tag_bits)
        p_good = Signal()           # its payload is written and counted
        p_final = Signal()
        p_next_off = Signal(range(mrr + 1))
        p_left = Signal(range(mrr + 1))
        p_due = Signal(range(mrr // 4 + 1))
        p_base = Signal(range(mrr // 4 + 1))
        p_count = Signal(12)        # payload words so far, saturating
        e_tag = Mux(first, ctag, p_tag)
        e_good = Mux(first, matched & status_ok & shape_ok, p_good)
        e_count = Mux(first, 0, p_count)
        words = cpl.payload.words
        count_after = Signal(12)
        m.d.comb += count_after.eq(e_count + words)
        with m.If(first):
            m.d.sync += [p_tag.eq(ctag), p_good.eq(matched & status_ok & shape_ok),
                         p_final.eq(final), p_next_off.eq(c_next_off),
                         p_left.eq(c_left_after), p_due.eq(c_due_after),
                         p_base.eq(c_next >> 2)]
        # The bank of a beat's first word, and the payload words still to
        # come, kept in registers so a word's write enable does not wait on
        # the sum of the offset and the count. Every beat but a packet's last
        # is whole, so the bank is the first beat's throughout.
        # Its length check is then the last beat's words against that room:
        # a CplD's last beat carries at least one word, so one after more
        # words than the Length (the room saturated at 0) fails it too.
        p_lane = Signal(max(1, lane_bits))
        p_room = Signal(11)
        e_lane = Mux(first, c_next[2:2 + max(1, lane_bits)], p_lane)
        e_room = Mux(first, dwords, p_room)
        with m.If(first):
            m.d.sync += p_lane.eq(e_lane)
        with m.If(cpl.valid):
            m.d.sync += [
                p_count.eq(Mux(count_after > 2047, 2047, count_after)),
                p_room.eq(Mux(words >= e_room, 0, e_room - words)),
            ]
        complete = cpl.valid & cpl.payload.last & e_good
        # A payload word j < link_dw is inside the Length when the words still
        # to come are link_dw or more, else by their low bits: a compare of
        # lane-sized values, not of j with the whole count.
        if lane_bits:
            room_wide = Mux(first, (hdr.length == 0) | (hdr.length[lane_bits:] != 0),
                            p_room[lane_bits:] != 0)
            room_low = e_room[:lane_bits]
            in_room = lambda j: room_wide | (j < room_low)
        else:
            in_room = lambda j: e_room != 0
        length_ok = Mux(first, words == dwords, words == p_room)

        # The reorder buffer: one bank per payload word lane, so a beat whose
        # first word is at any word offset lands in one cycle.
        banks = []
        for k in range(link_dw):
            bank = Memory(shape=32, depth=tags * rows, init=[])
            m.submodules[f"bank{k}"] = bank
            wr = bank.write_port()
            rd = bank.read_port()
            banks.append(rd)
            pos = Signal(range(mrr // 4 + link_dw + 1), name=f"pos{k}")   # a later beat's word offset in the slot
            j = Signal(range(link_dw), name=f"j{k}")                          # its payload word
            if link_dw == 1:
                m.d.comb += j.eq(0)
            else:
                m.d.comb += j.eq((k - e_lane)[:lane_bits])
            # A first beat's word for bank k lands in the row of the tag's
            # next word, or the row after when k is below that word's lane:
            # one short increment after the tag's multiplexer, not two sums.
            row_in = Signal(max(1, row_bits), name=f"row_in{k}")
            # (No lane is above the last bank's, so its row is the tag's own.)
            if lane_bits and k < link_dw - 1:
                m.d.comb += row_in.eq(c_next[2 + lane_bits:] + (k < c_next[2:2 + lane_bits]))
            else:
                m.d.comb += row_in.eq(c_next[2 + lane_bits:])
            m.d.comb += [
                pos.eq(p_base + p_count + j),
                wr.addr.eq(Cat(Mux(first, row_in, pos >> lane_bits)[:row_bits], e_tag)),
                wr.data.eq(cpl.payload.data.word_select(j, 32)),
                wr.en.eq(cpl.valid & e_good & (j < words) & in_room(j)),
            ]

        # -- Per-tag bookkeeping ---------------------------------------
        head = Signal(tag_bits)     # the tag being delivered
        abs_row = Signal(range(rows))   # row of the head slot being read
        at_first = Signal(init=1)   # ... and it is its request's first row
        deliver_last_row = Signal()
        read = Signal()
        for t in range(tags):
            with m.If(outstanding[t]):
                m.d.sync += timer[t].eq(timer_step(timer[t]))
                with m.If(timer[t] == timer_last):
                    m.d.sync += outstanding[t].eq(0)
                    with m.If(~stale[t]):
                        m.d.comb += error_now.eq(HostError.CPL_TIMEOUT)
            # A first beat's checks and new counts for tag t are made from
            # the tag's own registers, not from the ones chosen by the
            # header's tag: no tag multiplexer in front of the compares and
            # sums whose results update the tag.
            t_matched = (hdr.tag == t) & outstanding[t]
            t_shape_ok, t_final = shape(left[t], next_off[t], due[t])
            t_next_off = Cat(C(0, 2), next_off[t][2:]) + covered
            t_left = left[t] - (covered - next_off[t][:2])
            t_due = due[t] - dwords
            t_complete = (cpl.valid & cpl.payload.last
                          & Mux(first, t_matched & status_ok & t_shape_ok, p_good & (p_tag == t)))
            with m.If(first & t_matched):
                m.d.sync += timer[t].eq(timer_start)
                with m.If(~status_ok | ~t_shape_ok):
                    m.d.sync += outstanding[t].eq(0)
            with m.If(t_complete):
                with m.If(length_ok):
                    m.d.sync += [left[t].eq(Mux(first, t_left, p_left)),
                                 next_off[t].eq(Mux(first, t_next_off, p_next_off)),
                                 due[t].eq(Mux(first, t_due, p_due))]
                    with m.If(Mux(first, t_final, p_final)):
                        m.d.sync += outstanding[t].eq(0)
                with m.Else():
                    m.d.sync += outstanding[t].eq(0)
            with m.If(read & deliver_last_row & (head == t)):
                m.d.sync += busy[t].eq(0)
            with m.If(issue & (tail == t)):
                m.d.sync += [
                    busy[t].eq(1), outstanding[t].eq(1), stale[t].eq(0), timer[t].eq(timer_start),
                    left[t].eq(split["bytes"]),
                    next_off[t].eq(i_start),
                    due[t].eq(split["dwords"]),
                    first_row[t].eq(i_first_row),
                    last_row[t].eq(i_last_row),
                    first_lane[t].eq(i_start[:beat_bits]),
                    first_count[t].eq(Mux(i_first_row == i_last_row, i_end_count, beat)
                                      - i_start[:beat_bits]),
                    last_count[t].eq(i_end_count),
                    job_end[t].eq(is_job_end),
                    channel[t].eq(job_channel),
                ]

        # Completion errors, reported unless the tag is stale.
        with m.If(first):
            with m.If(~matched):
                m.d.comb += error_now.eq(HostError.CPL_UNEXPECTED)
            with m.Elif(~c_stale & ~status_ok):
                m.d.comb += error_now.eq(HostError.CPL_STATUS)
            with m.Elif(~c_stale & ~shape_ok):
                m.d.comb += error_now.eq(HostError.CPL_MALFORMED)
        with m.If(complete & ~length_ok & ~stale.bit_select(e_tag, 1)):
            m.d.comb += error_now.eq(HostError.CPL_MALFORMED)

        with m.If(ok):
            m.d.sync += self.error.eq(error_now)

        # -- Delivery --------------------------------------------------
        # `abs_row` is kept in a register: loaded with the next tag's first
        # row as the head moves on to it, or, when the head waits on a tag
        # not yet issued, with that request's first row as it is issued.
        m.d.comb += deliver_last_row.eq(abs_row == last_row[head])
        head_next = Signal(tag_bits)
        m.d.comb += head_next.eq(next_tag(head))
        # (abs_row + 1) * beat <= next_off, the row's bytes all here.
        arrived = ~outstanding.bit_select(head, 1) | (abs_row < next_off[head][beat_bits:])

        m.submodules.pack = pack = ResetInserter(flush)(ByteAligner(beat))
        r_valid = Signal()          # a read's data is on the banks' outputs
        r_lane = Signal(range(beat))
        r_count = Signal(range(beat + 1))
        r_last = Signal()
        r_channel = Signal(2)
        advance = ~r_valid | pack.i.ready
        m.d.comb += read.eq(busy.bit_select(head, 1) & arrived & ok & ~flush & advance)
        for rd in banks:
            m.d.comb += [rd.addr.eq(Cat(abs_row[:row_bits], head)), rd.en.eq(advance)]
        with m.If(advance):
            m.d.sync += [
                r_valid.eq(read),
                r_lane.eq(Mux(at_first, first_lane[head], 0)),
                r_count.eq(Mux(at_first, first_count[head], Mux(deliver_last_row, last_count[head], beat))),
                r_last.eq(job_end.bit_select(head, 1) & deliver_last_row),
                r_channel.eq(channel[head]),
            ]
        with m.If(read & deliver_last_row):
            m.d.sync += [head.eq(head_next), at_first.eq(1)]
            with m.If(issue & (tail == head_next)):
                m.d.sync += abs_row.eq(i_first_row)
            with m.Else():
                m.d.sync += abs_row.eq(first_row[head_next])
        with m.Elif(read):
            m.d.sync += [abs_row.eq(abs_row + 1), at_first.eq(0)]
        with m.Elif(issue & (tail == head)):
            m.d.sync += abs_row.eq(i_first_row)

        out_channel = Signal(2)     # the gearbox holds one job at a time
        m.d.comb += [
            pack.i.valid.eq(r_valid),
            pack.i.payload.data.eq(Cat(rd.data for rd in banks)),
            pack.i.payload.lane.eq(r_lane),
            pack.i.payload.count.eq(r_count),
            pack.i.payload.last.eq(r_last),
            self.data.valid.eq(pack.o.valid & ok & ~flush),
            self.data.payload.data.eq(pack.o.payload.data),
            self.data.payload.count.eq(pack.o.payload.count),
            self.data.payload.last.eq(pack.o.payload.last),
            self.data.payload.channel.eq(out_channel),
            pack.o.ready.eq(self.data.ready & ok & ~flush),
        ]
        with m.If(pack.i.valid & pack.i.ready):
            m.d.sync += out_channel.eq(r_channel)

        # -- Abort -----------------------------------------------------
        with m.If(flush):
            m.d.sync += [
                self.error.eq(0),
                active.eq(0),
                busy.eq(0),
                stale.eq(outstanding),
                r_valid.eq(0),
                # The slots are handed out in turn; the next request's comes
                # first for delivery.
                head.eq(tail),
                at_first.eq(1),
            ]

        m.d.comb += self.idle.eq(~active & (busy == 0) & (outstanding == 0) & ~req_valid
                                 & ~r_valid & pack.idle)
        return m
