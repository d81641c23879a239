"""BAR0: the register file the host reads and writes over MMIO."""

from amaranth import *
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ..host_registers import (COUNTER_NAMES, UNMAPPED, Irq, config_words, register_bits,
                              register_overflow_bits, registers)
from .counter_ram import CounterReadSignature
from .window import DmaWindows
from .tlp import CplStatus, FmtType, TlpHeader, has_data, tlp_stream


__all__ = ["Bar0", "RegisterAccess"]

#: One register access of the narrow host protocol (`narrow_host`): a write
#: of ``value`` or a read of the register at word ``offset``.
RegisterAccess = data.StructLayout({"write": 1, "offset": 10, "value": 32})

#: Reads and writes longer than this many words are answered UR / dropped:
#: a 64-bit access is the widest a driver needs.
MAX_ACCESS_WORDS = 2


def _byte_count(first_be, last_be, length):
    """Bytes a read of `length` words with these byte enables returns (PCIe
    base specification, table 2-38), and the offset of its first byte."""
    first = Mux(first_be[0], 0, Mux(first_be[1], 1, Mux(first_be[2], 2, Mux(first_be[3], 3, 0))))
    first_last = Mux(first_be[3], 3, Mux(first_be[2], 2, Mux(first_be[1], 1, 0)))
    last = Mux(last_be[3], 3, Mux(last_be[2], 2, Mux(last_be[1], 1, 0)))
    single = Mux(first_be == 0, 1, first_last - first + 1)
    multi = length * 4 - first - (3 - last)
    return Mux(length == 1, single, multi), first


class Bar0(wiring.Component):
    """Serves the host's memory requests to BAR0 from the register table in
    `tpu.host_registers`.

    Every request the chip receives that is not a completion comes here. Memory
    reads and writes of one or two whole words are served; any other memory
    request, and any non-posted request of another type, is answered with an
    Unsupported Request completion and counted in BAD_REQUESTS; other posted
    requests (messages) are dropped and counted.

    Ports
    -----
    request : In(tlp_stream)
    completion : Out(tlp_stream)
    completer_id : In(16)
        The host's requests and their completions; with ``narrow_host``
        instead:
    access : In(stream.Signature(RegisterAccess))
        One-word register writes and reads, without TLP decoding.
    answer : Out(stream.Signature(32))
        The value of each read, in order.
    rw : Out(StructLayout)
        The writable registers' values, by name (e.g. ``rw.PROG_LEN``), each
        as wide as the bits it keeps (`register_bits`: an address ``_HI``
        keeps ``host_addr_bits - 32``).
    windows : Out(DmaWindows)
    control : Out(4)
        One-cycle pulses of the CONTROL bits written.
    irq_status : Out(32)
    irq_raise : In(32)
        Bits to set in IRQ_STATUS (the host clears them by writing 1).
    status, error_code, fault_index, irq_code, dma_error : In(32)
        Read-only registers.
    counters : In(StructLayout of ``counter_bits``-wide counters)
        With ``ram_counters`` instead:
    counter_read : Out(CounterReadSignature)
        Reads of the counters in their RAM (`tpu.hdl.counter_ram.CounterRam`):
        a counter's ``_LO`` read asks for its value in the cycle the read is
        taken and answers it (and latches its ``_HI``) the cycle after,
        holding the next request until then.
    soft_reset : In(1)
        Every writable register back to its reset value.
    malformed, refused : In(1)
        Pulses counted in BAD_REQUESTS: the receiver dropped a malformed
        packet; a START or WFILL was refused.

    On a one-word link one register multiplexer serves a two-word read, the
    second word a cycle after the first (still before the link needs it),
    so a 64-bit read of a counter's ``_LO``/``_HI`` pair is one snapshot;
    a wider link reads both words at once through two. With
    ``serial_host`` (the small form behind a UART, whose driver reads and
    writes one word at a time) only one-word accesses are served, a longer
    one is answered UR like any other it does not serve, and IRQ_STATUS
    keeps only the `Irq` bits.
    """

    def __init__(self, config):
        self._config = config
        self._table = registers(config)
        self._bits = register_bits(config)
        self._overflow = register_overflow_bits(config)
        self._rw = [r for r in self._table if r.access == "rw"
                    and not r.name.startswith("WIN")]
        if config.narrow_host:
            host = {"access": In(stream.Signature(RegisterAccess)),
                    "answer": Out(stream.Signature(32))}
        else:
            host = {"request":      In(tlp_stream(config.link_dw)),
                    "completion":   Out(tlp_stream(config.link_dw)),
                    "completer_id": In(16)}
        ports = {
            **host,
            "rw":           Out(data.StructLayout({r.name: self._bits.get(r.name, 32)
                                                   for r in self._rw})),
            "windows":      Out(DmaWindows(config)),
            "control":      Out(4),
            "irq_status":   Out(32),
            "irq_raise":    In(32),
            "status":       In(32),
            "error_code":   In(32),
            "fault_index":  In(32),
            "irq_code":     In(32),
            "dma_error":    In(32),
            "counters":     In(data.StructLayout({name: config.counter_bits
                                                   for name in COUNTER_NAMES})),
            "soft_reset":   In(1),
            "malformed":    In(1),
            "refused":      In(1),
        }
        if config.ram_counters:
            del ports["counters"]
            ports["counter_read"] = Out(CounterReadSignature(len(COUNTER_NAMES), config.counter_bits))
        super().__init__(ports)

    def elaborate(self, platform):
        m = Module()
        cfg = self._config

        # Register storage: only the bits a register keeps (an address _HI
        # above host_addr_bits keeps none, reads 0 and ignores writes).
        stored = {r.name: Signal(self._bits.get(r.name, 32), name=f"reg_{r.name.lower()}",
                                 init=r.reset)
                  for r in self._table if r.access == "rw"}
        irq_status = Signal(len(Irq) if cfg.serial_host else 32)
        counter_hi = Signal(cfg.counter_bits - 32)
        bad_requests = Signal(32)
        m.d.comb += self.irq_status.eq(irq_status)
        for r in self._rw:
            m.d.comb += self.rw[r.name].eq(stored[r.name])
        for i in range(cfg.dma_windows):
            m.d.comb += [
                self.windows[i].base.eq(Cat(stored[f"WIN{i}_BASE_LO"], stored[f"WIN{i}_BASE_HI"])),
                self.windows[i].size.eq(Cat(stored[f"WIN{i}_SIZE_LO"], stored[f"WIN{i}_SIZE_HI"])),
            ]

        constants = {"ID", "VERSION", "ISA_VERSION", *config_words(cfg)}
        words = config_words(cfg)
        inputs = {"STATUS": self.status, "ERROR_CODE": self.error_code,
                  "FAULT_INDEX": self.fault_index, "IRQ_CODE": self.irq_code,
                  "DMA_ERROR": self.dma_error, "BAD_REQUESTS": bad_requests,
                  "IRQ_STATUS": irq_status, "CONTROL": C(0, 32)}
        for i, name in enumerate(COUNTER_NAMES):
            # With ram_counters a _LO is answered from `counter_read`, a cycle later.
            inputs[f"{name.upper()}_LO"] = C(0, 32) if cfg.ram_counters else self.counters[name][:32]
            inputs[f"{name.upper()}_HI"] = counter_hi

        def read(offset):
            """The value at word `offset` (a signal), and whether it is a counter _LO."""
            value = Signal(32)
            latch = Signal()
            with m.Switch(offset):
                for r in self._table:
                    with m.Case(r.offset >> 2):
                        if r.name in stored:
                            m.d.comb += value.eq(stored[r.name])
                        elif r.name in inputs:
                            m.d.comb += value.eq(inputs[r.name])
                        elif r.name in constants:
                            m.d.comb += value.eq(words.get(r.name, r.reset))
                        else:
                            raise AssertionError(f"register {r.name} has no source")
                        if r.name.endswith("_LO") and r.name[:-3].lower() in COUNTER_NAMES:
                            m.d.comb += latch.eq(1)
                with m.Default():
                    m.d.comb += value.eq(UNMAPPED)
            return value, latch

        # IRQ_STATUS bits a write clears this cycle.
        cleared = Signal(32)
        if cfg.narrow_host:
            self._serve_words(m, read, stored, cleared, counter_hi, bad_requests)
        else:
            self._serve_tlps(m, read, stored, cleared, counter_hi, bad_requests)
        # A raise wins over a clear in the same cycle: an event is never lost.
        m.d.sync += irq_status.eq((irq_status & ~cleared) | self.irq_raise)

        with m.If(self.soft_reset):
            for r in self._table:
                if r.name in stored:
                    m.d.sync += stored[r.name].eq(r.reset)
            m.d.sync += [irq_status.eq(0), bad_requests.eq(0)]
        return m

    def _store(self, m, r, stored, value):
        """Register `r` takes `value`, in the current condition."""
        if r.name in self._overflow:
            # The low bits, and whether the value is past them.
            n = self._overflow[r.name]
            m.d.sync += stored[r.name].eq(Cat(value[:n], value[n:].any()))
        else:
            m.d.sync += stored[r.name].eq(value)

    def _write(self, m, offset, value, stored, control, cleared, rw=True, now=True):
        """A write of `value` to word `offset`, in the current condition: to
        a writable register (`rw`), to one whose write acts at once
        (`now`: IRQ_STATUS, CONTROL), or to either."""
        with m.Switch(offset):
            for r in self._table:
                if r.access == "rw":
                    if not len(stored[r.name]) or not rw:
                        continue
                    with m.Case(r.offset >> 2):
                        self._store(m, r, stored, value)
                elif not now:
                    continue
                elif r.access == "w1c":
                    with m.Case(r.offset >> 2):
                        m.d.comb += cleared.eq(value)
                elif r.name == "CONTROL":
                    with m.Case(r.offset >> 2):
                        m.d.sync += control.eq(value[:4])

    @staticmethod
    def _settled(m, wrote):
        """Whether the writes before have taken full effect: an access that
        follows a write (`wrote`, the cycle it is taken) waits three cycles,
        as a CONTROL bit acts two cycles later, so a read always sees what
        the writes before it did (STATUS read right after START says BUSY)."""
        settle = Signal(2)
        with m.If(settle != 0):
            m.d.sync += settle.eq(settle - 1)
        with m.If(wrote):
            m.d.sync += settle.eq(3)
        return settle == 0

    def _latch_counter_hi(self, m, offset, counter_hi):
        """A counter's _LO read at `offset` latches its upper half for the
        _HI read (the word after it)."""
        with m.Switch(offset):
            for i, name in enumerate(COUNTER_NAMES):
                with m.Case((0x200 >> 2) + 2 * i):
                    m.d.sync += counter_hi.eq(self.counters[name][32:])

    def _fetch_counter(self, m, offset):
        """Asks `counter_read` for the counter whose _LO is at word `offset`,
        which it answers in the next cycle."""
        # The _LO registers are every other word from a multiple of 2 * 8
        # words, so the counter's index is the offset's bits above the first.
        assert (0x200 >> 2) % (2 * len(COUNTER_NAMES)) == 0
        index_bits = (len(COUNTER_NAMES) - 1).bit_length()
        m.d.comb += [self.counter_read.en.eq(1), self.counter_read.addr.eq(offset[1:1 + index_bits])]

    def _serve_words(self, m, read, stored, cleared, counter_hi, bad_requests):
        """Register accesses of one word each (`narrow_host`): a write is
        applied, a read answered on ``answer``."""
        access = self.access.payload
        control = Signal(4)
        responding = Signal()
        resp = Signal(32)
        m.d.comb += [
            self.control.eq(control),
            self.answer.valid.eq(responding),
            self.answer.payload.eq(resp),
        ]
        m.d.sync += control.eq(0)
        wrote = Signal()
        busy = responding
        if self._config.ram_counters:
            fetching = Signal()
            busy = responding | fetching
        m.d.comb += self.access.ready.eq(~busy & self._settled(m, wrote))
        taken = self.access.valid & self.access.ready
        m.d.comb += wrote.eq(taken & access.write)
        with m.If(wrote):
            self._write(m, access.offset, access.value, stored, control, cleared)
        value, latch = read(access.offset)
        with m.If(taken & ~access.write):
            m.d.sync += [responding.eq(1), resp.eq(value)]
            if self._config.ram_counters:
                with m.If(latch):
                    m.d.sync += [responding.eq(0), fetching.eq(1)]
                    self._fetch_counter(m, access.offset)
            elif len(counter_hi):
                with m.If(latch):
                    self._latch_counter_hi(m, access.offset, counter_hi)
        if self._config.ram_counters:
            with m.If(fetching):
                m.d.sync += [fetching.eq(0), responding.eq(1), resp.eq(self.counter_read.data[:32]),
                             counter_hi.eq(self.counter_read.data[32:])]
        with m.If(self.answer.valid & self.answer.ready):
            m.d.sync += responding.eq(0)
        m.d.sync += bad_requests.eq(bad_requests + self.malformed + self.refused)

    def _serve_tlps(self, m, read, stored, cleared, counter_hi, bad_requests):
        """Memory requests in TLPs: writes applied, reads and the rest answered with completions."""
        cfg = self._config
        link_dw = cfg.link_dw
        max_words = 1 if cfg.serial_host else MAX_ACCESS_WORDS

        # The request, one packet at a time: its header is on every beat.
        beat = self.request.payload
        hdr = beat.header
        fmt = hdr.fmt_type
        is_mem = (fmt == FmtType.MRD_32) | (fmt == FmtType.MRD_64) | \
                 (fmt == FmtType.MWR_32) | (fmt == FmtType.MWR_64)
        is_write = is_mem & has_data(fmt)
        # Messages (Type 10rrr) are posted with or without data: a completion
        # for one would reach the root complex as a stray, under a tag one of
        # its own reads may be waiting on.
        message = fmt[3:5] == 0b10
        posted = (has_data(fmt) & ~((fmt == FmtType.IOWR) | (fmt == FmtType.CFGWR0) |
                                    (fmt == FmtType.CFGWR1))) | message
        length = Mux(hdr.length == 0, 1024, hdr.length)
        whole = (hdr.first_be == 0xF) & ((length == 1) | (hdr.last_be == 0xF))
        # 1 <= Length <= MAX_ACCESS_WORDS (a 0 is 1024) as plain logic, no
        # comparison's carry chain in front of the request's checks.
        short = Cat(hdr.length == k for k in range(1, max_words + 1)).any()
        served = is_mem & short & ~hdr.ep
        word_offset = hdr.address[2:12]

        # Writes: apply each payload word as it passes (`index`: word of the packet).
        index = Signal(range(1024 + link_dw + 1))
        control = Signal(4)
        m.d.comb += self.control.eq(control)
        m.d.sync += control.eq(0)

        with m.If(self.request.valid & self.request.ready):
            m.d.sync += index.eq(Mux(beat.last, 0, index + link_dw))

        # A writable register takes its word a cycle after the beat: whether
        # the beat writes, its offset and its word are registered, so each
        # register's clock enable is the registered offset's decode (2 LUT
        # levels from flip-flops), not 6 or 7 levels of the request's header
        # and handshake. The write lands within the three cycles an access
        # after a write waits (`_settled`), and CONTROL and IRQ_STATUS, whose
        # writes act at once, have no writable register beside them that a
        # two-word write could also reach.
        write_ok = is_write & served & whole
        for lane in range(link_dw):
            offset = Signal(10, name=f"write_offset_{lane}")
            value = beat.data[32 * lane:32 * (lane + 1)]
            go = Signal(name=f"write_go_{lane}")
            held_offset = Signal(10, name=f"write_held_offset_{lane}")
            held = Signal(32, name=f"write_value_{lane}")
            writes = Signal(name=f"writes_{lane}")
            m.d.comb += [
                offset.eq(word_offset + index + lane),
                writes.eq(self.request.valid & self.request.ready & write_ok & (lane < beat.words)),
            ]
            m.d.sync += [go.eq(writes), held_offset.eq(offset), held.eq(value)]
            with m.If(writes):
                self._write(m, offset, value, stored, control, cleared, rw=False)
            with m.If(go):
                self._write(m, held_offset, held, stored, control, cleared, now=False)


        # Non-posted requests are answered: a read of registers or UR.
        responding = Signal()
        resp = Signal(TlpHeader)
        resp_words = Signal(range(max_words + 1))
        resp_data = Signal(32 * max_words)
        sent = Signal(range(max_words + link_dw + 1))

        settled = self._settled(m, self.request.valid & self.request.ready & beat.last & is_write)
        busy = responding
        if cfg.ram_counters:
            # A counter's value gets a register of its own: through
            # resp_data it would add a level to the request's path there.
            fetching = Signal()
            from_counter = Signal()
            counter_word = Signal(32)
            busy = responding | fetching
        m.d.comb += self.request.ready.eq(~busy & settled)
        def take_word(w, taken, value, latch, offset, store=True):
            """Word `w` of the completion is `value`, read at `offset` (unless
            not `store`: loaded with the header); a counter's _LO taken
            latches its upper half for the _HI read."""
            if store:
                m.d.sync += resp_data[32 * w:32 * (w + 1)].eq(value)
            if not len(counter_hi):
                return
            with m.If(taken & latch):
                self._latch_counter_hi(m, offset, counter_hi)

        if link_dw == 1 and max_words == 1:
            accept_value, accept_latch = read(word_offset)
        elif link_dw == 1:
            second = Signal()                  # the second word is read this cycle
            second_offset = Signal(10)
            read_offset = Signal(10)
            m.d.comb += read_offset.eq(Mux(second, second_offset, word_offset))
            accept_value, accept_latch = read(read_offset)

        bad = Signal()
        m.d.sync += bad_requests.eq(bad_requests + bad + self.malformed + self.refused)
        # The completion's header is loaded in every cycle no completion is
        # pending, whether a request is taken or not (it is read only while
        # `responding`), so its clock enable is `busy`, a flip-flop or two,
        # not the request's decode and handshake.
        count, first = _byte_count(hdr.first_be, hdr.last_be, length)
        ok = served & ~is_write
        if link_dw > 1 and not cfg.ram_counters:
            reads = [read(word_offset + w) for w in range(max_words)]
        with m.If(~busy):
            m.d.sync += [
                resp.fmt_type.eq(Mux(ok, FmtType.CPLD, FmtType.CPL)),
                resp.tc.eq(hdr.tc),
                resp.attr.eq(hdr.attr),
                resp.length.eq(Mux(ok, length, 0)),
                resp.requester_id.eq(hdr.requester_id),
                resp.tag.eq(hdr.tag),
                resp.completer_id.eq(self.completer_id),
                resp.status.eq(Mux(ok, CplStatus.SC, CplStatus.UR)),
                resp.byte_count.eq(Mux(ok, count, 4)),
                resp.lower_address.eq(Mux(ok, Cat(first[:2], hdr.address[2:7]), 0)),
                resp_words.eq(Mux(ok, length, 0)),
            ]
            if link_dw == 1 and not cfg.ram_counters:
                m.d.sync += resp_data[:32].eq(accept_value)
            elif not cfg.ram_counters:
                for w, (value, _) in enumerate(reads):
                    m.d.sync += resp_data[32 * w:32 * (w + 1)].eq(value)
        with m.If(self.request.valid & self.request.ready & beat.last):
            m.d.comb += bad.eq(~served | (is_write & ~whole))
            with m.If(~posted):
                m.d.sync += [responding.eq(1), sent.eq(0)]
                if cfg.ram_counters:
                    m.d.sync += [resp_data[:32].eq(accept_value), from_counter.eq(ok & accept_latch)]
                    with m.If(ok & accept_latch):
                        m.d.sync += [responding.eq(0), fetching.eq(1)]
                        self._fetch_counter(m, word_offset)
                elif link_dw == 1 and max_words == 1:
                    take_word(0, ok, accept_value, accept_latch, word_offset, store=False)
                elif link_dw == 1:
                    # One word a beat: the second word is not sent before
                    # the cycle after next, so one register mux reads both,
                    # the second in the next cycle.
                    take_word(0, ok & (length >= 1), accept_value, accept_latch, word_offset, store=False)
                    m.d.sync += [second.eq(ok & (length == 2)), second_offset.eq(word_offset + 1)]
                else:
                    for w, (value, latch) in enumerate(reads):
                        take_word(w, ok & (w < length), value, latch, word_offset + w, store=False)
        if cfg.ram_counters:
            with m.If(fetching):
                m.d.sync += [fetching.eq(0), responding.eq(1), counter_word.eq(self.counter_read.data[:32]),
                             counter_hi.eq(self.counter_read.data[32:])]
        if link_dw == 1 and max_words > 1:
            with m.If(second):
                take_word(1, 1, accept_value, accept_latch, second_offset)
                m.d.sync += second.eq(0)

        # The completion: header on every beat, then the words.
        out = self.completion.payload
        remaining = resp_words - sent
        m.d.comb += [
            self.completion.valid.eq(responding),
            out.header.eq(resp),
            out.data.eq(Mux(from_counter, counter_word, resp_data[:32]) if cfg.ram_counters
                        else (resp_data >> (32 * sent))[:32 * link_dw]),
            out.words.eq(Mux(remaining > link_dw, link_dw, remaining)),
            out.last.eq(remaining <= link_dw),
        ]
        with m.If(self.completion.valid & self.completion.ready):
            m.d.sync += sent.eq(sent + link_dw)
            with m.If(out.last):
                m.d.sync += responding.eq(0)

