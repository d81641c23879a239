"""The TPU core: every block of the chip behind its instruction stream."""

from amaranth import *
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from ..config import TPUConfig
from ..isa import INSTRUCTION_BITS, Opcode
from .accumulators import AccReadSignature
from .activation_unit import ActivationUnit
from .counter_ram import CounterRam, CounterReadSignature
from .decoder import field
from .window import DmaWindows
from .host_dma import HostReadUnit, HostRequest, HostWriteUnit
from .matrix_engine import MatrixEngine
from .matrix_unit import MatrixUnit
from .sequencer import Sequencer
from .unified_buffer import UbReadSignature, UbRow, UnifiedBuffer
from .weight_fifo import WeightFifo
from .weight_memory import WeightMemory, WeightMemoryFillSignature


__all__ = ["TPUCore", "COUNTERS"]


#: Performance counters, after TPU v1's (ISCA 2017, Table 3).
COUNTERS = {
    "cycles":       "cycles since reset until halted",
    "mxu_active":   "cycles in which a row entered the systolic array",
    "useful_macs":  "multiply-accumulates of those rows (rows x cols each)",
    "weight_stall": "cycles a row was ready but its weight tile was not",
    "weight_shift": "cycles a weight-tile row shifted into the array",
    "non_matrix":   "cycles, until halted, in which no row entered the array",
    "raw_stall":    "cycles the next instruction waited on a data hazard",
    "host_stall":   "cycles an RHM or WHM waited on the host",
}


class TPUCore(wiring.Component):
    """Sequencer, unified buffer, weight memory and FIFO, matrix engine and
    activation unit, wired as TPU v1 is.

    Members
    -------
    instr : In(stream.Signature(128))
        Instructions (`tpu.isa`), in program order.
    host_read_req : Out(stream.Signature(HostRequest()))
    host_read_data : In(stream.Signature(UbRow))
        RHM's bytes, one UB row per beat.
    host_write_req : Out(stream.Signature(HostRequest()))
    host_write_data : Out(stream.Signature(UbRow))
        WHM's bytes, one UB row per beat.
    wmem_fill : In(WeightMemoryFillSignature)
        Writes weight memory (one tile row per cycle).
    windows : In(DmaWindows(config): host_addr_bits-wide base and size, dma_windows of them)
        The host-memory windows DMA may touch: bytes ``[base, base + size)``
        (``size`` 0: closed). An RHM or WHM whose bytes are not all inside one
        window faults with HOST_RANGE before it starts. Held by the host
        interface; sampled when each instruction is decoded.
    clear : In(1)
        Clears the core as its reset does, a cycle late: each unit (and the
        counters) takes it through a register of its own, so the clear is
        registered wherever it fans out and no unit waits on another's
        wires. The core's state is cleared from the second cycle after
        ``clear``; in the cycle after it the core still runs as it was.
    dma_error : In(1)
        The host interface failed a DMA (an error completion or a timeout),
        held until reset: the core stops issuing and halts with DMA_ERROR at
        the RHM or WHM issued last (see `Sequencer`).
    debug_ub : In(UbReadSignature)
    debug_acc : In(AccReadSignature)
        Read ports for tests and the host; ``debug_acc`` is served only while
        the activation unit is idle.
    halted, fault, fault_index, irq, irq_code, busy : Out
        Status; see `Sequencer`. ``busy``: instructions queued or running.
    counters : Out(StructLayout of counter_bits-wide counters, see `COUNTERS`)
        With ``ram_counters`` instead:
    counter_read : In(CounterReadSignature)
        A read of the counter at index ``addr`` of `COUNTERS`: ``data`` is
        the value it had in the cycle of ``en``, a cycle later (`CounterRam`).
    counter_events : Out(len(COUNTERS))
        Bit ``i``: counter ``i`` counts in this cycle (``useful_macs`` adds
        rows x cols), for testbenches that follow the counters cycle by
        cycle, which reads at most every other cycle cannot.
    """

    def __init__(self, config):
        if not isinstance(config, TPUConfig):
            raise TypeError(f"TPUCore needs a TPUConfig, not {config!r}")
        self._config = config
        ports = {
            "instr":           In(stream.Signature(INSTRUCTION_BITS)),
            "host_read_req":   Out(stream.Signature(HostRequest())),
            "host_read_data":  In(stream.Signature(UbRow(config))),
            "host_write_req":  Out(stream.Signature(HostRequest())),
            "host_write_data": Out(stream.Signature(UbRow(config))),
            "wmem_fill":       In(WeightMemoryFillSignature(config)),
            "windows":         In(DmaWindows(config)),
            "clear":           In(1),
            "dma_error":       In(1),
            "debug_ub":        In(UbReadSignature(config)),
            "debug_acc":       In(AccReadSignature(acc_rows=config.acc_rows, cols=config.cols)),
            "halted":          Out(1),
            "fault":           Out(4),
            "fault_index":     Out(32),
            "irq":             Out(1),
            "irq_code":        Out(16),
            "busy":            Out(1),
            "counters":        Out(data.StructLayout({name: config.counter_bits
                                                      for name in COUNTERS})),
        }
        if config.ram_counters:
            del ports["counters"]
            ports["counter_read"] = In(CounterReadSignature(len(COUNTERS), config.counter_bits))
            ports["counter_events"] = Out(len(COUNTERS))
        super().__init__(ports)

    @property
    def config(self):
        return self._config

    def elaborate(self, platform):
        m = Module()
        cfg = self._config

        def cleared(name, block):
            # A register of `clear` for this unit alone: a clear fanned out
            # from one net over the whole core set the chip's clock (its
            # routing, docs/fpga.md "Logic depth"). `keep` holds the copies
            # apart through synthesis.
            copy = Signal(name=f"{name}_clear", attrs={"keep": 1})
            m.d.sync += copy.eq(self.clear)
            m.submodules[name] = block = ResetInserter(copy)(block)
            return block

        seq = Sequencer(cfg)
        ub = UnifiedBuffer(cfg)
        rhm = HostReadUnit(cfg)
        whm = HostWriteUnit(cfg)
        mmc = MatrixUnit(cfg)
        act = ActivationUnit(cfg)
        engine = MatrixEngine(cfg)
        wfifo = WeightFifo(cfg)
        wmem = WeightMemory(cfg)
        for name, block in [("sequencer", seq), ("ub", ub), ("rhm", rhm), ("whm", whm), ("mmc", mmc),
                            ("act", act), ("engine", engine), ("weight_fifo", wfifo),
                            ("weight_memory", wmem)]:
            cleared(name, block)

        wiring.connect(m, wiring.flipped(self.instr), seq.instr)
        wiring.connect(m, seq.rhm, rhm.cmd)
        wiring.connect(m, seq.whm, whm.cmd)
        wiring.connect(m, seq.mmc, mmc.cmd)
        wiring.connect(m, seq.act, act.cmd)
        m.d.comb += [
            seq.rhm_idle.eq(rhm.idle),
            seq.whm_idle.eq(whm.idle),
            seq.mmc_idle.eq(mmc.idle),
            seq.act_idle.eq(act.idle),
            seq.mmc_drained.eq(mmc.drained & ~engine.busy),
            seq.acc_stored.eq(engine.written.valid),
            seq.windows.eq(self.windows),
            seq.dma_error.eq(self.dma_error),
        ]

        # Host DMA.
        wiring.connect(m, rhm.request, wiring.flipped(self.host_read_req))
        wiring.connect(m, wiring.flipped(self.host_read_data), rhm.data)
        wiring.connect(m, whm.request, wiring.flipped(self.host_write_req))
        wiring.connect(m, whm.data, wiring.flipped(self.host_write_data))

        # Unified buffer.
        wiring.connect(m, act.ub_write, ub.act_write)
        wiring.connect(m, rhm.ub, ub.dma_write)
        wiring.connect(m, mmc.ub, ub.mxu_read)
        wiring.connect(m, whm.ub, ub.dma_read)
        wiring.connect(m, act.ub_read, ub.table_read)
        wiring.connect(m, wiring.flipped(self.debug_ub), ub.debug_read)

        # Weights: RW commands queue up in front of the weight FIFO; the
        # sequencer bounds them (WEIGHT_FIFO_OVERFLOW) so the queue never fills.
        # With serial_issue (the small core) a queued RW keeps only the bits
        # an issued one can have: its tiles lie in the weight memory
        # (WEIGHT_MEM_RANGE) and number at most weight_fifo_tiles + 2
        # (WEIGHT_FIFO_OVERFLOW), so the queue is one block RAM wide, not 3.
        if cfg.serial_issue:
            tile_bits = max(1, (cfg.weight_mem_tiles - 1).bit_length())
            count_bits = (cfg.weight_fifo_tiles + 2).bit_length()
        else:
            tile_bits = count_bits = 24
        rw_queue = fifo.SyncFIFOBuffered(width=tile_bits + count_bits, depth=cfg.weight_fifo_tiles + 2)
        cleared("rw_queue", rw_queue)
        rw_word = seq.rw.payload.word
        m.d.comb += [
            rw_queue.w_data.eq(Cat(field(rw_word, Opcode.RW, "tile")[:tile_bits],
                                   field(rw_word, Opcode.RW, "count")[:count_bits])),
            rw_queue.w_en.eq(seq.rw.valid),
            seq.rw.ready.eq(rw_queue.w_rdy),
            wfifo.load.payload.tile.eq(rw_queue.r_data[:tile_bits]),
            wfifo.load.payload.count.eq(rw_queue.r_data[tile_bits:tile_bits + count_bits]),
            wfifo.load.valid.eq(rw_queue.r_rdy),
            rw_queue.r_en.eq(wfifo.load.ready),
        ]
        wiring.connect(m, wfifo.mem_request, wmem.request)
        wiring.connect(m, wmem.response, wfifo.mem_response)
        wiring.connect(m, wiring.flipped(self.wmem_fill), wmem.fill)
        wiring.connect(m, wfifo.o, engine.weights)

        # Matrix engine.
        wiring.connect(m, mmc.rows, engine.act)
        with m.If(act.idle):
            m.d.comb += [engine.acc_read.en.eq(self.debug_acc.en),
                         engine.acc_read.addr.eq(self.debug_acc.addr)]
        with m.Else():
            m.d.comb += [engine.acc_read.en.eq(act.acc.en), engine.acc_read.addr.eq(act.acc.addr)]
        m.d.comb += [act.acc.data.eq(engine.acc_read.data), self.debug_acc.data.eq(engine.acc_read.data)]

        # Status.
        m.d.comb += [
            self.halted.eq(seq.halted),
            self.fault.eq(seq.fault),
            self.fault_index.eq(seq.fault_index),
            self.irq.eq(seq.irq),
            self.irq_code.eq(seq.irq_code),
            self.busy.eq(~seq.idle),
        ]

        # Performance counters. They count until the core halts: HALT and
        # the decoder's faults wait for every unit to be idle, but DMA_ERROR
        # halts at once, and an MMC or the failed RHM may go on after it;
        # counting those too would break non_matrix = cycles - mxu_active
        # and leave host_stall growing past cycles. (Tile shifts are not
        # gated: prefetched tiles may shift in after a HALT, and the cycle
        # model counts them.)
        running = ~seq.halted
        row_in = running & engine.act.valid & engine.act.ready
        events = {
            "cycles":       running,
            "mxu_active":   row_in,
            "weight_stall": running & engine.act.valid & ~engine.act.ready,
            "weight_shift": engine.weights.valid & engine.weights.ready,
            "non_matrix":   running & ~row_in,
            "raw_stall":    running & seq.raw_stall,
            "host_stall":   running & ((~rhm.idle & ~self.host_read_data.valid) |
                                       (self.host_write_data.valid & ~self.host_write_data.ready)),
        }
        if cfg.ram_counters:
            # A flip-flop counter each was 263 LUT4s and 254 flip-flops of
            # the up5k chip (docs/fpga.md "Counters in a block RAM").
            m.submodules.counters = counters = CounterRam(
                [cfg.rows * cfg.cols if name == "useful_macs" else 1 for name in COUNTERS],
                cfg.counter_bits)
            counters_clear = Signal(attrs={"keep": 1})
            m.d.sync += counters_clear.eq(self.clear)
            m.d.comb += [
                counters.clear.eq(counters_clear),
                counters.events.eq(Cat(row_in if name == "useful_macs" else events[name]
                                       for name in COUNTERS)),
                self.counter_events.eq(counters.events),
            ]
            wiring.connect(m, wiring.flipped(self.counter_read), counters.read)
            return m
        counting = Module()
        cleared("counting", counting)
        for name, event in events.items():
            counter = getattr(self.counters, name)
            counting.d.sync += counter.eq(counter + event)
        counting.d.sync += self.counters.useful_macs.eq(
            self.counters.useful_macs + Mux(row_in, cfg.rows * cfg.cols, 0))
        return m
