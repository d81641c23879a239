"""DMA writer: sends a job's bytes to host memory as memory-write TLPs."""

from amaranth import *
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from .byte_gearbox import append_bytes_in_words, byte_stream
from .dma_split import address_counter, chunk_ahead, request_header, split_chunk
from .tlp import FmtType, TlpHeader, tlp_stream


__all__ = ["DmaWriter", "WriteJob", "write_job"]


def write_job(addr_bits=64):
    """A write job: ``length`` bytes to host address ``addr`` (`addr_bits`
    wide, ``TPUConfig.host_addr_bits``)."""
    return data.StructLayout({"addr": addr_bits, "length": 32})


#: The write job of a chip with 64-bit host addresses.
WriteJob = write_job()


class DmaWriter(wiring.Component):
    """Writes `length` (>= 1) bytes at any host byte address.

    Members
    -------
    requester_id : In(16)
    job : In(stream.Signature(write_job(host_addr_bits)))
        Taken when the previous job's last TLP has been sent.
    data : In(byte_stream(4 * link_dw))
        Exactly the job's bytes, ``length`` counting them (``last`` is not
        looked at).
    request : Out(tlp_stream(link_dw))
        MWr TLPs cut at every ``max_payload``-aligned address, each a 3-word
        (MWR_32) header below 4 GiB, else MWR_64; the byte at address A in
        byte lane A % 4 of the first payload word, first/last BE marking
        exactly the job's bytes (a one-word TLP has last BE 0).
    flush : In(1)
        Drop the current job: bytes already taken from ``data`` are
        discarded and no more are taken (the producer is flushed by the same
        abort). A TLP once offered on ``request`` is finished first (the
        transmitter may have sent its header words already), so the link
        never sees a truncated packet; lanes of it whose bytes had not
        arrived carry zeros (inside the job's range, whose contents an abort
        leaves undefined). A TLP not yet offered is never sent.
    idle : Out(1)
        No job is in progress.

    Sends one beat per cycle while ``data`` keeps up; jobs are separated by
    one idle cycle.
    """

    def __init__(self, config):
        self._config = config
        super().__init__({
            "requester_id": In(16),
            "job":          In(stream.Signature(write_job(config.host_addr_bits))),
            "data":         In(byte_stream(4 * config.link_dw)),
            "request":      Out(tlp_stream(config.link_dw)),
            "flush":        In(1),
            "idle":         Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self._config
        link_dw = cfg.link_dw
        beat = 4 * link_dw
        max_payload = cfg.max_payload

        active = Signal()
        addr = Signal(cfg.host_addr_bits)  # of the next TLP
        left = Signal(32)                  # bytes not yet given to a TLP
        in_left = Signal(32)               # bytes still to take from `data`
        # `in_left != 0`, registered: `data.ready` then comes from flip-flops
        # through the few LUTs of `fill`, not through an OR of 32 bits, and
        # so do the enables of the WHM shifter's buffer behind it. Not on the
        # one-word link (`serial_host`), where the iCE40's mapping of the
        # word slots came out a level deeper with it.
        in_some = Signal() if not cfg.serial_host else (in_left != 0)
        tlp = Signal()                     # `hdr` is a TLP being sent
        started = Signal()                 # ... and has been offered on `request`
        draining = Signal()                # flushed while a TLP was half sent
        tlp_left = Signal(range(max_payload + 4))   # its bytes still to send
        hdr = Signal(TlpHeader)
        # Room for two beats in flight plus one arriving, plus the up to three
        # lanes that place the first byte in its word.
        size = 3 * beat + 3
        fill = Signal(range(size + 1))

        # The next TLP's byte count is chosen a TLP ahead (`after`: what
        # `left` becomes once it is sent).
        chunk, after, _, load_chunk, advance_chunk = chunk_ahead(m, max_payload)
        split = split_chunk(m, addr, chunk, max_payload, fmt32=FmtType.MWR_32, fmt64=FmtType.MWR_64)
        load_addr, advance_addr = address_counter(m, addr, max_payload)

        # The TLP's next beat: its byte count, word count and whether it is
        # the last, registered beside `tlp_left` (set with it at the header,
        # stepped as a beat goes), so the offer and the buffer's shift start
        # from registers.
        take = Signal(range(beat + 1))
        words = Signal(range(link_dw + 1))
        last = Signal()

        def beat_of(n):
            return [take.eq(Mux(n < beat, n, beat)), words.eq(Mux(n < beat, (n + 3) >> 2, link_dw)),
                    last.eq(n <= beat)]

        enough = Signal()
        m.d.comb += enough.eq(fill >= take)
        out = self.request
        m.d.comb += [
            out.valid.eq(tlp & (draining | enough)),
            out.payload.header.eq(hdr),
            out.payload.words.eq(words),
            out.payload.last.eq(last),
        ]
        out_fire = out.valid & out.ready
        tlp_end = out_fire & last

        in_count = Signal(range(beat + 1))
        m.d.comb += [
            in_count.eq(Mux(self.data.payload.count < in_left, self.data.payload.count, in_left)),
            self.data.ready.eq(active & ~draining & in_some & (fill <= size - beat)),
        ]
        in_fire = self.data.valid & self.data.ready
        if cfg.serial_host:
            # One-word link: only whole words leave but a job's last bytes.
            # Only a draining TLP can want more bytes than are held.
            removed = Mux(out_fire, Mux(take > fill, fill, take), 0)
            head, empty = append_bytes_in_words(m, size, fill, removed, self.data.payload.data,
                                                in_count, in_fire)
        else:
            buf = Signal(8 * size)
            # The byte queue (`append_bytes`'s, bytes at and above `fill` zero)
            # after a beat leaves and after none are both worked out from
            # registers and the input; the handshake on `request` only chooses.
            # Only a draining TLP can want more bytes than are held; then
            # nothing comes in, the shift by `take` brings in zero lanes, and the
            # count, wrong until the TLP ends, is cleared with it.
            kept = Signal.like(fill)
            incoming = Signal(8 * beat)
            m.d.comb += [
                kept.eq(fill - take),
                incoming.eq(Mux(in_fire, self.data.payload.data, 0) &
                            Cat((k < in_count).replicate(8) for k in range(beat))),
            ]
            with m.If(out_fire):
                m.d.sync += buf.eq(((buf >> (take * 8)) | (incoming << (kept * 8)))[:len(buf)])
                m.d.sync += fill.eq(Mux(in_fire, kept + in_count, kept))
            with m.Else():
                m.d.sync += [
                    buf.eq((buf | (incoming << (fill * 8)))[:len(buf)]),
                    fill.eq(Mux(in_fire, fill + in_count, fill)),
                ]
            head, empty = buf[:8 * beat], [buf.eq(0), fill.eq(0)]
        m.d.comb += out.payload.data.eq(head)
        with m.If(in_fire):
            # bytes stay to take if the beat is short of them (`in_count` is the beat's count)
            m.d.sync += in_left.eq(in_left - in_count)
            if not cfg.serial_host:
                m.d.sync += in_some.eq(self.data.payload.count < in_left)

        # Offered is as good as started: on a narrow link the transmitter
        # sends the header words before it takes the first beat, so a TLP
        # withdrawn then would leave a truncated packet on the link (and the
        # arbiter waiting on it).
        with m.If(out.valid):
            m.d.sync += started.eq(1)
        with m.If(out_fire & ~last):
            m.d.sync += [tlp_left.eq(tlp_left - beat), *beat_of(tlp_left - beat)]
        # The next header is ready as the previous TLP's last beat goes, so
        # TLPs follow each other without a gap.
        with m.If(active & ~draining & (left != 0) & (~tlp | tlp_end)):
            m.d.sync += [
                *request_header(hdr, split, addr, self.requester_id),
                tlp.eq(1),
                started.eq(0),
                # The buffer starts with addr % 4 zero lanes (see `job`).
                tlp_left.eq(addr[:2] + split["bytes"]),
                *beat_of(addr[:2] + split["bytes"]),
                *advance_addr(split["bytes"]),
                left.eq(after),
                *advance_chunk(),
            ]
        with m.Elif(tlp_end):
            m.d.sync += [tlp.eq(0), started.eq(0)]
        with m.If(active & ~tlp & (left == 0)):
            m.d.sync += active.eq(0)

        m.d.comb += [
            self.job.ready.eq(~active & ~self.flush),
            self.idle.eq(~active),
        ]
        with m.If(self.job.valid & self.job.ready):
            if not cfg.serial_host:
                m.d.sync += in_some.eq(self.job.payload.length != 0)
            m.d.sync += [
                active.eq(1),
                *load_addr(self.job.payload.addr),
                left.eq(self.job.payload.length),
                *load_chunk(self.job.payload.addr, self.job.payload.length),
                in_left.eq(self.job.payload.length),
                # Zero lanes in front of the first byte put it in lane addr % 4.
                fill.eq(self.job.payload.addr[:2]),
            ]

        stop = [active.eq(0), tlp.eq(0), started.eq(0), draining.eq(0), *empty,
                left.eq(0), in_left.eq(0), *([] if cfg.serial_host else [in_some.eq(0)])]
        with m.If(draining & tlp_end):
            m.d.sync += stop
        with m.If(self.flush):
            with m.If(tlp & (started | out.valid) & ~tlp_end):
                m.d.sync += draining.eq(1)
            with m.Else():
                m.d.sync += stop
        return m
