"""The chip as the host sees it: a TPU core behind a PCIe-style transaction layer."""

from amaranth import *
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ..host_registers import Control, HostError, Irq, Status
from ..isa import INSTRUCTION_BYTES
from .bar0 import Bar0
from .byte_gearbox import gearbox
from .core import TPUCore
from .dma_read import DmaReader, read_job
from .dma_write import DmaWriter
from .narrow_link import NarrowLink
from .narrow_reader import NarrowReader
from .narrow_writer import NarrowWriter
from .program_fetcher import ProgramFetcher
from .tlp import FmtType, link_stream
from .tlp_arbiter import TlpArbiter
from .tlp_rx import TlpReceiver
from .tlp_tx import TlpTransmitter
from .weight_filler import WeightFiller
from .window import inside_a_window


__all__ = ["HostInterface", "Channel"]


class Channel:
    """DMA read channels: whose bytes a read job fetches."""
    PROGRAM = 0
    RHM = 1
    WEIGHTS = 2


class HostInterface(wiring.Component):
    """A `TPUCore` with its host side: TLP receiver and transmitter, the BAR0
    register file, the DMA reader and writer, the program fetcher, the weight
    filler and MSI-style interrupts (docs/host_interface.md). With
    ``narrow_host`` the link carries the narrow host protocol's messages
    (`NarrowLink`, `NarrowReader`, `NarrowWriter`) instead of TLPs.

    Ports
    -----
    rx : In(link_stream)
        TLPs from the host (memory requests to BAR0, completions of the chip's reads).
    tx : Out(link_stream)
        TLPs to the host (completions of MMIO reads, DMA reads and writes, MSIs).
    pcie_id : In(16)
        The chip's bus/device/function, as enumeration assigned it.
    irq_pending : Out(1)
        IRQ_STATUS & IRQ_ENABLE is not zero (for hosts without MSI).
    status : Out(4)
        STATUS as BAR0 reads it (busy, halted, error, weight fill busy), for
        a board's LEDs.
    """

    def __init__(self, config):
        self._config = config
        super().__init__({
            "rx":          In(link_stream(config.link_dw)),
            "tx":          Out(link_stream(config.link_dw)),
            "pcie_id":     In(16),
            "irq_pending": Out(1),
            "status":      Out(4),
        })

    @property
    def config(self):
        return self._config

    def elaborate(self, platform):
        m = Module()
        cfg = self._config
        beat_bytes = 4 * cfg.link_dw

        abort = Signal()        # ABORT or SOFT_RESET this cycle
        narrow = cfg.narrow_host
        if not narrow:
            m.submodules.rx = rx = TlpReceiver(cfg.link_dw, max_payload=cfg.max_payload,
                                               addr32=bool(cfg.serial_host))
            m.submodules.tx = tx = TlpTransmitter(cfg.link_dw)
        m.submodules.bar0 = bar0 = Bar0(cfg)
        fetcher = ProgramFetcher(cfg)
        if narrow:
            job_bits = self._narrow_job_bits(fetcher)
            m.submodules.reader = reader = NarrowReader(cfg, length_bits=max(job_bits.values()))
            # A WHM's job is at most the unified buffer, as an RHM's; an
            # MSI's is 4 bytes.
            m.submodules.writer = writer = NarrowWriter(cfg, length_bits=max(job_bits[Channel.RHM], 3))
        else:
            m.submodules.reader = reader = DmaReader(cfg)
            m.submodules.writer = writer = DmaWriter(cfg)
        m.submodules.fetcher = fetcher
        m.submodules.filler = filler = WeightFiller(cfg)
        if not narrow:
            m.submodules.arbiter = arbiter = TlpArbiter(cfg.link_dw, 3)
        m.submodules.core = core = TPUCore(cfg)
        # RHM and WHM jobs are whole UB rows, as a `BeatShifter` needs.
        m.submodules.rhm_gearbox = rhm_gearbox = ResetInserter(abort)(gearbox(beat_bytes, cfg.rows))
        m.submodules.whm_gearbox = whm_gearbox = ResetInserter(abort)(gearbox(cfg.rows, beat_bytes))

        if narrow:
            self._narrow_link(m, bar0, reader, writer)
        else:
            wiring.connect(m, wiring.flipped(self.rx), rx.link)
            wiring.connect(m, tx.link, wiring.flipped(self.tx))
            m.d.comb += [
                bar0.completer_id.eq(self.pcie_id),
                bar0.malformed.eq(rx.malformed),
                reader.requester_id.eq(self.pcie_id),
                writer.requester_id.eq(self.pcie_id),
            ]

            # Received TLPs: completions answer the DMA reader, the rest is for BAR0.
            # Cpl, CplD and their locked forms differ from Cpl only in bits 6 and 0.
            is_cpl = (rx.tlp.payload.header.fmt_type & 0xBE) == FmtType.CPL
            m.d.comb += [
                reader.completion.payload.eq(rx.tlp.payload),
                bar0.request.payload.eq(rx.tlp.payload),
                reader.completion.valid.eq(rx.tlp.valid & is_cpl),
                bar0.request.valid.eq(rx.tlp.valid & ~is_cpl),
                rx.tlp.ready.eq(Mux(is_cpl, reader.completion.ready, bar0.request.ready)),
            ]

            # Sent TLPs: register completions, read requests, writes.
            wiring.connect(m, bar0.completion, arbiter.i0)
            wiring.connect(m, reader.request, arbiter.i1)
            wiring.connect(m, writer.request, arbiter.i2)
            wiring.connect(m, arbiter.o, tx.tlp)

        rw = bar0.rw
        control = bar0.control
        windows = bar0.windows

        # --- Errors and status -------------------------------------------------
        error_code = Signal(8)
        host_error = Signal(8)     # this cycle's new host-side error, if any
        running = Signal()         # a program was started and has not ended
        halted = Signal()
        irq_code = Signal(16)
        busy = Signal()
        m.d.comb += busy.eq(running | filler.busy)
        idle_ok = ~busy & (error_code == 0)

        def bit(flag):
            return control[flag.bit_length() - 1]

        start = bit(Control.START) & idle_ok
        wfill = bit(Control.WFILL) & idle_ok
        m.d.comb += [
            abort.eq(bit(Control.ABORT) | bit(Control.SOFT_RESET)),
            bar0.soft_reset.eq(bit(Control.SOFT_RESET)),
            bar0.refused.eq((bit(Control.START) | bit(Control.WFILL)) & ~idle_ok & ~abort),
        ]

        # The range checks of START and WFILL are registered: a CONTROL write
        # shares no packet with a register they read (no such register lies
        # next to CONTROL, and an access is at most two words), and BAR0
        # holds every request for three cycles after a write (`settle`), so
        # those registers were written at least four cycles before the
        # CONTROL pulse and the checks made a cycle earlier see them. The
        # window comparisons' carry chains then end in a register, not in
        # the error code, the interrupts and the program's start.
        prog_addr = Cat(rw.PROG_ADDR_LO, rw.PROG_ADDR_HI)
        prog_ok = Signal()
        wfill_addr = Cat(rw.WFILL_ADDR_LO, rw.WFILL_ADDR_HI)
        wfill_ok = Signal()
        if narrow:
            self._shared_range_checks(m, rw, windows, prog_ok, wfill_ok)
        else:
            m.d.sync += prog_ok.eq(inside_a_window(m, windows, prog_addr, rw.PROG_LEN * INSTRUCTION_BYTES))
            m.d.sync += wfill_ok.eq(inside_a_window(m, windows, wfill_addr, rw.WFILL_TILES * cfg.tile_bytes) &
                                    (rw.WFILL_TILE + rw.WFILL_TILES <= cfg.weight_mem_tiles) &
                                    (rw.WFILL_TILE < cfg.weight_mem_tiles))
        start_ok = start & prog_ok
        wfill_go = wfill & wfill_ok
        # ABORT, SOFT_RESET and START clear the core through its registers
        # (`TPUCore.clear`): a cycle later, so the fetcher starts a cycle
        # later too, and the core and the fetcher see a program start as they
        # did when the clear was combinational. In the cycle between, the
        # core still runs as it was: `clearing` masks what it says then.
        clearing = Signal()
        start_go = Signal()
        m.d.sync += [clearing.eq(abort | start_ok), start_go.eq(start_ok)]
        core_irq = core.irq & ~clearing

        with m.If(start & ~prog_ok):
            m.d.comb += host_error.eq(HostError.FETCH_RANGE)
        with m.Elif(wfill & ~wfill_ok):
            m.d.comb += host_error.eq(HostError.WFILL_RANGE)
        reader_failed = Signal()
        m.d.sync += reader_failed.eq(reader.error != 0)
        with m.If((reader.error != 0) & ~reader_failed):
            m.d.comb += host_error.eq(reader.error)

        core_fault = core_irq & (core.fault != 0)
        new_error = Signal(8)
        m.d.comb += new_error.eq(Mux(host_error != 0, host_error, Mux(core_fault, core.fault, 0)))
        with m.If((error_code == 0) & (new_error != 0)):
            m.d.sync += error_code.eq(new_error)
        # Only a program's reads fault the core: a weight fill's failed read
        # (or a stray completion while idle) is no instruction's, so
        # FAULT_INDEX stays "none" even after a program that ran off its end
        # without HALT, whose last RHM the core would otherwise name.
        m.d.comb += core.dma_error.eq((reader.error != 0) & running)

        program_done = ~fetcher.busy & ~core.busy & ~start_go
        with m.If(start_ok):
            m.d.sync += [running.eq(1), halted.eq(0)]
        with m.Elif(running & ((core_irq & core.halted) | (new_error != 0) | (error_code != 0)
                               | program_done)):
            m.d.sync += running.eq(0)
        with m.If(core_irq & core.halted & (core.fault == 0)):
            m.d.sync += halted.eq(1)
        with m.If(core_irq & ~core.halted):
            m.d.sync += irq_code.eq(core.irq_code)
        with m.If(bar0.soft_reset):
            m.d.sync += irq_code.eq(0)

        m.d.comb += self.status.eq(bar0.status)
        m.d.comb += [
            bar0.status.eq(Mux(busy, Status.BUSY, 0) | Mux(halted, Status.HALTED, 0) |
                           Mux(error_code != 0, Status.ERROR, 0) |
                           Mux(filler.busy, Status.WFILL_BUSY, 0)),
            bar0.error_code.eq(error_code),
            bar0.fault_index.eq(Mux(core.fault != 0, core.fault_index, 0xFFFFFFFF)),
            bar0.irq_code.eq(irq_code),
            bar0.dma_error.eq(reader.error),
        ]
        if cfg.ram_counters:
            wiring.connect(m, bar0.counter_read, core.counter_read)
        else:
            m.d.comb += bar0.counters.eq(core.counters)

        # --- Interrupts ----------------------------------------------------------
        raised = Signal(32)
        m.d.comb += raised.eq(
            Mux(core_irq & core.halted & (core.fault == 0), Irq.HALT, 0) |
            Mux(core_irq & ~core.halted, Irq.INT, 0) |
            Mux((error_code == 0) & (new_error != 0), Irq.ERROR, 0) |
            Mux(filler.done, Irq.WFILL_DONE, 0))
        m.d.comb += bar0.irq_raise.eq(raised)
        m.d.comb += self.irq_pending.eq((bar0.irq_status & rw.IRQ_ENABLE) != 0)
        msi_pending = Signal()
        msi_addr = Cat(rw.MSI_ADDR_LO, rw.MSI_ADDR_HI)

        # --- Core and resets -------------------------------------------------
        m.d.comb += [
            core.clear.eq(abort | start_ok),
            core.windows.eq(windows),
        ]
        with m.If(abort):
            m.d.sync += [error_code.eq(0), running.eq(0), halted.eq(0)]

        # --- DMA reads: program, RHM, weights --------------------------------
        m.d.comb += [
            fetcher.start.eq(start_go),
            fetcher.addr.eq(prog_addr),
            fetcher.length.eq(rw.PROG_LEN),
            fetcher.flush.eq(abort | (error_code != 0)),
            filler.start.eq(wfill_go),
            filler.addr.eq(wfill_addr),
            filler.tile.eq(rw.WFILL_TILE),
            filler.tiles.eq(rw.WFILL_TILES),
            # A fill stopped by an error is over: STATUS drops WFILL_BUSY, so
            # the driver sees the error instead of a fill that never ends.
            filler.flush.eq(abort | (error_code != 0)),
            reader.flush.eq(abort),
            writer.flush.eq(abort),
        ]
        wiring.connect(m, fetcher.instr, core.instr)
        wiring.connect(m, filler.fill, core.wmem_fill)

        # The decoder let the RHM through only inside a window, so its
        # address fits host_addr_bits.
        rhm_job = Signal(read_job(cfg.host_addr_bits))
        m.d.comb += [
            rhm_job.addr.eq(core.host_read_req.payload.addr),
            rhm_job.length.eq(core.host_read_req.payload.rows * cfg.rows),
            rhm_job.channel.eq(Channel.RHM),
        ]
        # Fixed priority: jobs are single beats, and each source waits for its
        # own data before asking again, so none starves the others.
        sources = [(fetcher.job, Channel.PROGRAM, fetcher.job.payload),
                   (core.host_read_req, Channel.RHM, rhm_job),
                   (filler.job, Channel.WEIGHTS, filler.job.payload)]
        # Not the core's in the cycle it is being cleared: an RHM it asked
        # for before an ABORT is not the reader's after it.
        may_read = (error_code == 0) & ~(clearing & core.host_read_req.valid)
        if narrow:
            self._narrow_read_jobs(m, reader, fetcher, sources, may_read)
        else:
            with m.If(may_read):
                for n, (source, channel, payload) in enumerate(sources):
                    earlier = [s.valid for s, _, _ in sources[:n]]
                    with m.If(source.valid & ~Cat(*earlier).any() if earlier else source.valid):
                        m.d.comb += [
                            reader.job.valid.eq(1),
                            reader.job.payload.addr.eq(payload.addr),
                            reader.job.payload.length.eq(payload.length),
                            reader.job.payload.channel.eq(channel),
                            source.ready.eq(reader.job.ready),
                        ]

        # The bytes go back to whoever asked.
        consumers = {Channel.PROGRAM: fetcher.data, Channel.RHM: rhm_gearbox.i,
                     Channel.WEIGHTS: filler.data}
        out = reader.data
        for channel, sink in consumers.items():
            m.d.comb += [
                sink.payload.data.eq(out.payload.data),
                sink.payload.count.eq(out.payload.count),
                sink.payload.last.eq(out.payload.last),
                sink.valid.eq(out.valid & (out.payload.channel == channel)),
            ]
            with m.If(out.payload.channel == channel):
                m.d.comb += out.ready.eq(sink.ready)
        m.d.comb += [
            core.host_read_data.payload.eq(rhm_gearbox.o.payload.data[:8 * cfg.rows]),
            core.host_read_data.valid.eq(rhm_gearbox.o.valid),
            rhm_gearbox.o.ready.eq(core.host_read_data.ready),
        ]

        # --- DMA writes: WHM bytes, then interrupts ----------------------------
        # An MSI waits for the write in progress to finish, so the host sees a
        # WHM's bytes before the interrupt that says they are there.
        whm_rows = Signal(24)      # rows of the current WHM still to pass
        # The payload is assigned here whole, never in part inside the FSM: a
        # constant part would become an always block that Icarus never runs.
        m.d.comb += [
            whm_gearbox.i.payload.data.eq(core.host_write_data.payload),
            whm_gearbox.i.payload.count.eq(cfg.rows),
            whm_gearbox.i.payload.last.eq(whm_rows == 1),
        ]
        with m.FSM(name="write_source"):
            with m.State("IDLE"):
                with m.If(msi_pending):
                    m.d.comb += [
                        writer.job.valid.eq(1),
                        writer.job.payload.addr.eq(msi_addr),
                        writer.job.payload.length.eq(4),
                    ]
                    with m.If(writer.job.ready):
                        m.d.sync += msi_pending.eq(0)
                        m.next = "MSI"
                with m.Elif(core.host_write_req.valid & ~clearing):
                    req = core.host_write_req.payload
                    m.d.comb += [
                        writer.job.valid.eq(1),
                        writer.job.payload.addr.eq(req.addr),
                        writer.job.payload.length.eq(req.rows * cfg.rows),
                        core.host_write_req.ready.eq(writer.job.ready),
                    ]
                    with m.If(writer.job.ready):
                        m.d.sync += whm_rows.eq(req.rows)
                        m.next = "WHM"
            with m.State("MSI"):
                m.d.comb += [
                    writer.data.valid.eq(1),
                    writer.data.payload.data.eq(rw.MSI_DATA),
                    writer.data.payload.count.eq(4),
                    writer.data.payload.last.eq(1),
                ]
                with m.If(writer.data.ready | abort):
                    m.next = "IDLE"
            with m.State("WHM"):
                m.d.comb += [
                    whm_gearbox.i.valid.eq(core.host_write_data.valid),
                    core.host_write_data.ready.eq(whm_gearbox.i.ready),
                ]
                with m.If(core.host_write_data.valid & whm_gearbox.i.ready):
                    m.d.sync += whm_rows.eq(whm_rows - 1)
                wiring.connect(m, whm_gearbox.o, writer.data)
                with m.If((writer.data.valid & writer.data.ready & writer.data.payload.last) | abort):
                    m.next = "IDLE"
        # After the FSM's clear, so an interrupt raised as an MSI leaves is not lost.
        with m.If((raised & rw.IRQ_ENABLE) != 0):
            m.d.sync += msi_pending.eq(msi_addr != 0)
        return m

    def _narrow_job_bits(self, fetcher):
        """The bits of each channel's read job length (`narrow_host`). A
        program's job is at most the fetcher's chunk (256 bytes here), a
        weight fill's at most the weight memory (the fill's range check
        passed) and an RHM's at most the unified buffer (the decoder faults
        an RHM whose rows end past it, before the request), so no job
        reaches the length's upper bits."""
        cfg = self._config
        return {Channel.PROGRAM: fetcher.max_job_bytes.bit_length(),
                Channel.RHM: (cfg.ub_rows * cfg.rows).bit_length(),
                Channel.WEIGHTS: (cfg.weight_mem_tiles * cfg.tile_bytes).bit_length()}

    def _narrow_read_jobs(self, m, reader, fetcher, sources, may_read):
        """The read jobs' fixed priority as one grant per source and the
        job the OR of the granted one's fields (`narrow_host`), where the
        nested choice costs a multiplexer level per source on every bit;
        each length at its bits (`_narrow_job_bits`)."""
        widths = self._narrow_job_bits(fetcher)
        job = reader.job.payload
        addrs, lengths, channels, grants = [], [], [], []
        for n, (source, channel, payload) in enumerate(sources):
            grant = Signal(name=f"read_grant_{n}")
            earlier = [s.valid for s, _, _ in sources[:n]]
            m.d.comb += [
                grant.eq(may_read & source.valid & ~Cat(*earlier).any() if earlier
                         else may_read & source.valid),
                source.ready.eq(grant & reader.job.ready),
            ]
            grants.append(grant)
            addrs.append(Mux(grant, payload.addr, 0))
            lengths.append(Mux(grant, payload.length[:widths[channel]], 0))
            channels.append(Mux(grant, channel, 0))

        def any_of(values):
            result = values[0]
            for value in values[1:]:
                result = result | value
            return result
        m.d.comb += [
            reader.job.valid.eq(Cat(*grants).any()),
            job.addr.eq(any_of(addrs)),
            job.length.eq(any_of(lengths)),
            job.channel.eq(any_of(channels)),
        ]

    def _shared_range_checks(self, m, rw, windows, prog_ok, wfill_ok):
        """The window checks of START and WFILL on one comparator, taking
        turns a cycle each (`narrow_host`): the registers they read were
        written at least four cycles before a CONTROL pulse (`Bar0` holds
        every access three cycles after a write, and a narrow access is one
        word), so a result one or two cycles old is still theirs.

        With 32-bit windows no span of more than 2**32 bytes fits one, so
        the byte count is compared in 32 bits and a larger one fails apart;
        a tile range is compared in the bits of ``weight_mem_tiles``."""
        cfg = self._config
        assert cfg.host_addr_bits == 32
        turn = Signal()            # 0: the program's span, 1: the weight fill's
        m.d.sync += turn.eq(~turn)
        fill_bytes = rw.WFILL_TILES * cfg.tile_bytes
        prog_bytes = rw.PROG_LEN * INSTRUCTION_BYTES
        nbytes = Signal(max(len(fill_bytes), len(prog_bytes)))
        m.d.comb += nbytes.eq(Mux(turn, fill_bytes, prog_bytes))
        addr = Mux(turn, Cat(rw.WFILL_ADDR_LO, rw.WFILL_ADDR_HI), Cat(rw.PROG_ADDR_LO, rw.PROG_ADDR_HI))
        small = nbytes[:32]
        inside = (nbytes == 0) | (inside_a_window(m, windows, addr, small) & (nbytes[32:] == 0))
        tiles = cfg.weight_mem_tiles
        bits = tiles.bit_length()
        # TILE < tiles, so TILE fits `bits` bits and TILES must too.
        tiles_ok = ((rw.WFILL_TILE < tiles) & (rw.WFILL_TILES[bits:] == 0) &
                    (rw.WFILL_TILE[:bits] + rw.WFILL_TILES[:bits] <= tiles))
        with m.If(turn):
            m.d.sync += wfill_ok.eq(inside & tiles_ok)
        with m.Else():
            m.d.sync += prog_ok.eq(inside)

    def _narrow_link(self, m, bar0, reader, writer):
        """The narrow host protocol's messages to and from BAR0, the reader
        and the writer (`narrow_host`) in place of the TLP layer."""
        m.submodules.link = link = NarrowLink(self._config)
        wiring.connect(m, wiring.flipped(self.rx), link.rx)
        wiring.connect(m, link.tx, wiring.flipped(self.tx))
        wiring.connect(m, link.access, bar0.access)
        wiring.connect(m, bar0.answer, link.answer)
        wiring.connect(m, reader.request, link.read_request)
        wiring.connect(m, link.read_answer, reader.answer)
        wiring.connect(m, link.read_words, reader.words)
        wiring.connect(m, writer.request, link.write_request)
        wiring.connect(m, writer.words, link.write_words)
        m.d.comb += bar0.malformed.eq(link.malformed)
