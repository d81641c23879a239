"""Sequencer: instruction queue, decode, hazard interlocks and in-order issue."""

from amaranth import *
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ..config import TPUConfig
from ..isa import INSTRUCTION_BITS, Fault, Opcode, ldl_rows, ldq_rows
from .decoder import RANGE_KINDS, InstructionDecoder, _clamped, field
from .window import DmaWindows


__all__ = ["Sequencer", "Command", "UNITS", "ACC_SLOTS"]


def Command():
    """An issued instruction: its word and what the decoder derived from it."""
    return data.StructLayout({
        "word":     INSTRUCTION_BITS,
        "ub_last":  25,
        "out_rows": 24,
    })


# The execution units; each runs one instruction at a time, in issue order.
UNITS = ("rhm", "whm", "mmc", "act")

#: The accumulator ranges of MMCs in flight that the sequencer tracks one by
#: one; when all are taken, a new MMC's range is merged into the youngest.
ACC_SLOTS = 4


class _InstructionQueue(wiring.Component):
    """`fifo.SyncFIFOBuffered`'s ports and timing (the same ``w_rdy`` and
    ``r_rdy`` in every cycle, the same ``r_data`` while ``r_rdy``), its head
    read from its memory at a pointer (a LUT RAM's asynchronous read)
    rather than kept in an output register: ``r_en``, which waits on the
    sequencer's issue decision, enables the pointer and the counts alone,
    not the 128 flip-flops of that register."""

    def __init__(self, width, depth):
        if depth < 2:
            raise ValueError(f"the instruction queue holds at least 2 words, not {depth}")
        self._depth = depth
        super().__init__({
            "w_data": In(width), "w_en": In(1), "w_rdy": Out(1),
            "r_data": Out(width), "r_en": In(1), "r_rdy": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        depth = self._depth
        # The counts of SyncFIFOBuffered: the words behind its output
        # register (`inner`, at most depth - 1), and that register's valid.
        inner = Signal(range(depth))
        inner_ready = inner != 0
        write = self.w_rdy & self.w_en
        advance = inner_ready & (~self.r_rdy | self.r_en)
        m.d.comb += self.w_rdy.eq(inner != depth - 1)
        with m.If(write & ~advance):
            m.d.sync += inner.eq(inner + 1)
        with m.If(advance & ~write):
            m.d.sync += inner.eq(inner - 1)
        with m.If(advance):
            m.d.sync += self.r_rdy.eq(1)
        with m.Elif(self.r_en):
            m.d.sync += self.r_rdy.eq(0)

        # Every word stays in the memory until it is read: the head is the
        # oldest, at `head`.
        m.submodules.storage = storage = Memory(shape=len(self.w_data), depth=depth, init=[])
        w_port = storage.write_port()
        r_port = storage.read_port(domain="comb")
        tail = Signal(range(depth))
        head = Signal(range(depth))
        m.d.comb += [w_port.addr.eq(tail), w_port.data.eq(self.w_data), w_port.en.eq(write),
                     r_port.addr.eq(head), self.r_data.eq(r_port.data)]
        with m.If(write):
            m.d.sync += tail.eq(Mux(tail == depth - 1, 0, tail + 1))
        with m.If(self.r_en & self.r_rdy):
            m.d.sync += head.eq(Mux(head == depth - 1, 0, head + 1))
        return m


def _registered(m, value, name=None):
    """`value` a cycle later, from a flip-flop."""
    register = Signal.like(Value.cast(value), name=name)
    m.d.sync += register.eq(value)
    return register


class _Range:
    """An inclusive row range with a valid bit."""

    def __init__(self, name, width=25):
        self.valid = Signal(name=f"{name}_valid")
        self.lo = Signal(width, name=f"{name}_lo")
        self.hi = Signal(width, name=f"{name}_hi")

    def assign(self, valid, lo, hi):
        return [self.valid.eq(valid), self.lo.eq(lo), self.hi.eq(hi)]

    def copy_from(self, other):
        return self.assign(other.valid, other.lo, other.hi)


class Sequencer(wiring.Component):
    """Takes instructions in order and issues each to its unit when it is safe.

    An instruction is issued when its unit is free and no instruction still
    running in another unit writes what it reads, reads what it writes, or
    writes what it writes (UB rows and accumulator rows, compared as ranges;
    host memory as a whole: RHM and WHM never overlap).
    So a program written in plain order, with no NOPs, always computes what it
    would compute one instruction at a time. Each MMC holds the accumulator
    rows it writes until the matrix engine has stored its last row, in one of
    `ACC_SLOTS` slots; with every slot taken, a new MMC's rows are merged into
    the youngest slot's (which then frees with the new MMC's last row), so an
    MMC never waits for a slot and a range is only ever held longer.

    With ``config.serial_issue`` the interlocks are not built: an
    instruction for a unit waits until every other unit is idle and, unless
    it is an MMC, until ``mmc_drained``, so no running instruction can touch
    its rows (docs/core.md, "The small forms").

    SYNC, INT and HALT wait until every unit is idle. A fault (from the
    decoder, or WEIGHT_FIFO_UNDERFLOW / WEIGHT_FIFO_OVERFLOW at issue) stops
    issue before the faulting instruction: earlier instructions finish, the
    chip halts with the fault code and the instruction's index. A DMA error
    (``dma_error``) halts at once with DMA_ERROR and the index of the RHM or
    WHM it belongs to (see ``dma_error``).

    Members
    -------
    instr : In(stream.Signature(128))
        Instructions, in program order.
    rhm, whm, mmc, act, rw : Out(stream.Signature(Command()))
        Commands to the units (``act`` also takes CFG, LDQ and LDL).
    rhm_idle, whm_idle, mmc_idle, act_idle : In(1)
        The unit has no command in progress.
    mmc_drained : In(1)
        No matrix row is in flight anywhere (the accumulators are written).
    acc_stored : In(1)
        The matrix engine stores an accumulator row this cycle.
    windows : In(DmaWindows(config))
        The host-memory windows RHM and WHM may touch (see
        `InstructionDecoder`); outside them: HOST_RANGE.
    dma_error : In(1)
        A level, held until reset: the host side failed a DMA. While not
        halted, the sequencer issues nothing more from the first cycle it is
        high and halts in the next with DMA_ERROR, ``fault_index`` being the
        index of the RHM or WHM issued last. RHM and WHM never overlap, so
        that is the one running, if any; if none has been issued since
        reset, ``fault_index`` is ``2**32 - 1``. Ignored once halted.
    halted : Out(1)
        HALT or a fault was issued; nothing more is issued until reset.
    fault : Out(4)
    fault_index : Out(32)
        Index (from 0, counting since reset) of the faulting instruction.
    irq : Out(1)
        One-cycle pulse: INT, HALT or a fault was reached; ``irq_code`` is the
        INT code (0 for HALT and faults).
    irq_code : Out(16)
    idle : Out(1)
        Nothing is queued, being decoded, or running.
    raw_stall : Out(1)
        An instruction is ready to issue but waits on a hazard this cycle.
    """

    QUEUE_DEPTH = 16

    @classmethod
    def queue_depth(cls, config):
        """Instructions the queue of `config`'s sequencer holds: 16, or 2 with
        ``serial_host``, whose program fetcher holds the program ahead of it
        (2 are flip-flops where 16 take 8 block RAMs of an iCE40: 128-bit
        words). An instruction takes at least 3 cycles to decode, so 2 keep
        the decoder fed from a source offering one a cycle; behind a one-word
        link the fetcher's own queue holds the rest."""
        return 2 if config.serial_host else cls.QUEUE_DEPTH

    def __init__(self, config):
        if not isinstance(config, TPUConfig):
            raise TypeError(f"Sequencer needs a TPUConfig, not {config!r}")
        self._config = config
        members = {"instr": In(stream.Signature(INSTRUCTION_BITS))}
        for unit in (*UNITS, "rw"):
            members[unit] = Out(stream.Signature(Command()))
        for unit in UNITS:
            members[f"{unit}_idle"] = In(1)
        members.update({
            "mmc_drained": In(1),
            "acc_stored":  In(1),
            "windows":     In(DmaWindows(config)),
            "dma_error":   In(1),
            "halted":      Out(1),
            "fault":       Out(4),
            "fault_index": Out(32),
            "irq":         Out(1),
            "irq_code":    Out(16),
            "idle":        Out(1),
            "raw_stall":   Out(1),
        })
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        cfg = self._config

        if cfg.serial_issue:
            m.submodules.queue = queue = fifo.SyncFIFOBuffered(width=INSTRUCTION_BITS,
                                                               depth=self.queue_depth(cfg))
        else:
            m.submodules.queue = queue = _InstructionQueue(INSTRUCTION_BITS, self.queue_depth(cfg))
        m.d.comb += [
            queue.w_data.eq(self.instr.payload),
            queue.w_en.eq(self.instr.valid),
            self.instr.ready.eq(queue.w_rdy),
        ]

        m.submodules.decoder = decoder = InstructionDecoder(cfg)
        m.d.comb += decoder.windows.eq(self.windows)
        # The small form issues the decoder's own register of the word,
        # which is loaded by the same `load` and held until the next: a
        # second copy would be 128 flip-flops more.
        word = decoder.held if cfg.serial_issue else Signal(INSTRUCTION_BITS)
        loaded = Signal()           # `word` holds an instruction not yet issued
        count = Signal(32)          # instructions loaded so far (issued so far, in the small form)
        # Its index in the program. The small form issues in load order, one
        # word at a time, so that is the count of words issued before it.
        index = count if cfg.serial_issue else Signal(32)
        issue = Signal()

        halted = Signal()
        # The decoder takes the word from the queue's output register as it
        # is loaded, and decodes what the word alone decides in that cycle.
        m.d.comb += [decoder.word.eq(queue.r_data), self.halted.eq(halted)]

        load = Signal()
        halting = Signal()
        m.d.comb += load.eq(queue.r_rdy & ~halted & ~halting & (~loaded | issue))
        m.d.comb += [queue.r_en.eq(load), decoder.start.eq(load)]
        if cfg.serial_issue:
            take, source = load, queue.r_data
            with m.If(load):
                m.d.sync += loaded.eq(1)
            with m.Elif(issue):
                m.d.sync += loaded.eq(0)
            with m.If(issue):
                m.d.sync += count.eq(count + 1)
        else:
            # The word, its index and the flags below are taken from the
            # decoder's register in the cycle after `load`, under a
            # registered enable: `load` waits on the issue decision, and so
            # reaches only `loaded`, the queue and the decoder's FSM. The
            # decoder takes at least `DECODE_STAGES` cycles, and the
            # registered comparisons below read them from the cycle before
            # its ``done``, so they are in time; the word issued in the
            # cycle of `load` was read in that cycle.
            take, source = _registered(m, load, "taken"), decoder.held
            with m.If(take):
                m.d.sync += [word.eq(source), index.eq(count), count.eq(count + 1)]
            with m.If(load):
                m.d.sync += loaded.eq(1)
            with m.Elif(issue):
                m.d.sync += loaded.eq(0)

        # Nothing issues from the cycle a DMA error is seen.
        ready = loaded & decoder.done & ~halted & ~self.dma_error

        # What the issue logic asks of the opcode and the word, decoded from
        # the word as it is taken and registered with `word`, so that the
        # issue cycle starts from flip-flops.
        def opcode_is(*ops):
            def test(w):
                return Cat(*[w[:8] == op for op in ops]).any()
            return test
        predecoded = {
            "rhm": opcode_is(Opcode.RHM), "whm": opcode_is(Opcode.WHM), "mmc": opcode_is(Opcode.MMC),
            "act": opcode_is(Opcode.ACT, Opcode.CFG, Opcode.LDQ, Opcode.LDL), "rw": opcode_is(Opcode.RW),
            "barrier": opcode_is(Opcode.SYNC, Opcode.INT, Opcode.HALT), "nop": opcode_is(Opcode.NOP),
            "halt": opcode_is(Opcode.HALT), "int": opcode_is(Opcode.INT),
            "rw_empty": lambda w: opcode_is(Opcode.RW)(w) & (field(w, Opcode.RW, "count") == 0),
            "switch": lambda w: opcode_is(Opcode.MMC)(w) & field(w, Opcode.MMC, "switch") &
                                (field(w, Opcode.MMC, "rows") != 0),
        }
        decoded = {name: Signal(name=f"is_{name}") for name in predecoded}
        with m.If(take):
            m.d.sync += [decoded[name].eq(test(source)) for name, test in predecoded.items()]

        # The unit each opcode goes to.
        target = {unit: decoded[unit] for unit in (*UNITS, "rw")}
        barrier = decoded["barrier"]

        idle_in = {unit: getattr(self, f"{unit}_idle") for unit in UNITS}
        hazard = Signal()
        go = Signal()
        if cfg.serial_issue:
            # One unit at a time: an instruction for a unit waits until every
            # other unit is idle, and one that is not an MMC until every
            # matrix row is stored, so nothing it touches is still in use; a
            # unit runs its own instructions in order. No ranges are kept.
            to_unit = Cat(*[target[unit] for unit in UNITS]).any()
            others_busy = Cat(*[~target[unit] & ~idle_in[unit] for unit in UNITS]).any()
            m.d.comb += hazard.eq(to_unit & (others_busy | (~target["mmc"] & ~self.mmc_drained)))
        else:
            self._interlocks(m, hazard, target, decoder, word, idle_in, go)
        all_idle = Signal()
        m.d.comb += all_idle.eq(Cat(*idle_in.values()).all() & self.mmc_drained)

        # Weight tiles requested by RW and not yet switched to.
        pending = Signal(range(cfg.weight_mem_tiles + cfg.weight_fifo_tiles + 3))
        rw_count = field(word, Opcode.RW, "count")
        if cfg.serial_decode:
            # An RW of more tiles than the weight memory holds faults in the
            # decoder (WEIGHT_MEM_RANGE, which comes before the FIFO's
            # faults), so its count is exact below the memory's power of two
            # and clamped there: the same RWs overflow and issue.
            rw_count = _clamped(rw_count, cfg.weight_mem_tiles.bit_length())
        switch = decoded["switch"]
        # Registered, as the comparisons above: `pending` changes only when
        # an instruction issues.
        underflow = _registered(m, switch & (pending == 0), "underflow")
        overflow = _registered(m, target["rw"] & (pending + rw_count > cfg.weight_fifo_tiles + 2),
                               "overflow")

        fault = Signal(4)
        with m.If(decoder.fault != Fault.NONE):
            m.d.comb += fault.eq(decoder.fault)
        with m.Elif(underflow):
            m.d.comb += fault.eq(Fault.WEIGHT_FIFO_UNDERFLOW)
        with m.Elif(overflow):
            m.d.comb += fault.eq(Fault.WEIGHT_FIFO_OVERFLOW)

        command = Signal(Command())
        m.d.comb += [command.word.eq(word), command.ub_last.eq(decoder.ub_last),
                     command.out_rows.eq(decoder.out_rows)]
        unit_ready = Signal()
        with m.If(barrier):
            m.d.comb += unit_ready.eq(all_idle)
        with m.Elif(target["rw"]):
            m.d.comb += unit_ready.eq(decoded["rw_empty"] | self.rw.ready)
        with m.Elif(decoded["nop"]):
            m.d.comb += unit_ready.eq(1)
        with m.Else():
            # A unit's ready may come before it is idle (the matrix unit takes
            # the next MMC while issuing the last row of the previous one).
            m.d.comb += unit_ready.eq(Cat(*[target[u] & getattr(self, u).ready
                                            for u in UNITS]).any())

        m.d.comb += [
            go.eq(ready & (fault == Fault.NONE) & unit_ready & ~hazard),
            halting.eq(go & decoded["halt"]),
            issue.eq(go),
            self.raw_stall.eq(ready & (fault == Fault.NONE) & unit_ready & hazard),
        ]
        for unit in UNITS:
            port = getattr(self, unit)
            m.d.comb += [port.payload.eq(command), port.valid.eq(ready & (fault == Fault.NONE) &
                                                                 target[unit] & ~hazard)]
        m.d.comb += [self.rw.payload.eq(command),
                     self.rw.valid.eq(ready & (fault == Fault.NONE) & target["rw"] & ~decoded["rw_empty"])]

        with m.If(go & target["rw"]):
            m.d.sync += pending.eq(pending + rw_count)
        with m.Elif(go & switch):
            m.d.sync += pending.eq(pending - 1)

        # The RHM or WHM a DMA error belongs to: they never overlap, so the
        # last one issued.
        dma_index = Signal(32, init=(1 << 32) - 1)
        with m.If(go & (target["rhm"] | target["whm"])):
            m.d.sync += dma_index.eq(index)

        # Halting, faults and interrupts.
        m.d.sync += self.irq.eq(0)
        with m.If(self.dma_error & ~halted):
            m.d.sync += [halted.eq(1), self.fault.eq(Fault.DMA_ERROR),
                         self.fault_index.eq(dma_index), self.irq.eq(1), self.irq_code.eq(0)]
        with m.Elif(ready & (fault != Fault.NONE) & all_idle):
            m.d.sync += [halted.eq(1), self.fault.eq(fault), self.fault_index.eq(index),
                         self.irq.eq(1), self.irq_code.eq(0)]
        with m.If(go & decoded["halt"]):
            m.d.sync += [halted.eq(1), self.irq.eq(1), self.irq_code.eq(0)]
        with m.If(go & decoded["int"]):
            m.d.sync += [self.irq.eq(1), self.irq_code.eq(field(word, Opcode.INT, "code"))]

        m.d.comb += self.idle.eq(~queue.r_rdy & ~loaded & all_idle)
        return m

    def _interlocks(self, m, hazard, target, decoder, word, idle_in, go):
        """The range interlocks of parallel issue: `hazard` while a running
        unit or an MMC in flight shares rows with the waiting instruction."""
        # What the instruction reads and writes: registered by the decoder
        # in the cycle before its ``done``.
        ub_r, ub_w, acc_r, acc_w = (decoder.ranges[kind] for kind in RANGE_KINDS)
        # What each running unit reads and writes. An instruction that
        # issues has no fault, so its rows are below the UB's or the
        # accumulators' size: only the address bits are kept and compared
        # (a faulting instruction's ranges may be wider, but it never
        # issues, so its comparisons are never used).
        cfg = self._config
        width = {"ub_r": cfg.ub_addr_width, "ub_w": cfg.ub_addr_width,
                 "acc_r": cfg.acc_addr_width, "acc_w": cfg.acc_addr_width}
        running = {unit: {kind: _Range(f"{unit}_{kind}", width[kind]) for kind in RANGE_KINDS}
                   for unit in UNITS}
        slots = [_Range(f"acc_slot{i}", cfg.acc_addr_width) for i in range(ACC_SLOTS)]

        # The range comparisons are registered: every cycle, the waiting
        # instruction's ranges (from the decoder's registers) against the
        # running units' and the accumulator slots'. Their bounds change only
        # when an instruction issues, and the next one's ranges are
        # registered at least a cycle later (`DECODE_STAGES`), so at its
        # ``done`` the comparisons are of the bounds of this cycle.
        def bounds_meet(a, b):
            bits = len(b.lo)
            return (a.lo[:bits] <= b.hi) & (b.lo <= a.hi[:bits])

        pairs = (("ub_w", "ub_r"), ("ub_w", "ub_w"), ("ub_r", "ub_w"),
                 ("acc_w", "acc_r"), ("acc_w", "acc_w"), ("acc_r", "acc_w"))
        candidate = dict(ub_r=ub_r, ub_w=ub_w, acc_r=acc_r, acc_w=acc_w)
        hazard_terms = []
        # A unit's comparisons are folded into one register with their
        # ranges' valid bits: while an instruction waits nothing issues, so
        # a running range is never set, and all of a unit's ranges clear
        # together, in the cycle after the unit is idle. So the valid bits
        # of the next cycle are this cycle's unless the unit is idle now.
        for unit in UNITS:
            r = running[unit]
            meets = [candidate[mine].valid & r[theirs].valid & bounds_meet(candidate[mine], r[theirs])
                     for mine, theirs in pairs]
            hazard_terms.append(_registered(m, ~target[unit] & ~idle_in[unit] & Cat(*meets).any(),
                                            f"meets_{unit}"))
        # MMCs write their accumulator rows in issue order, so only other
        # units wait for a slot. A slot frees in any cycle (its MMC's last
        # row stored), so its valid bit is taken in the issue cycle.
        for i, slot in enumerate(slots):
            meets = [candidate[mine].valid & bounds_meet(candidate[mine], slot) for mine in ("acc_r", "acc_w")]
            met = _registered(m, ~target["mmc"] & Cat(*meets).any(), f"meets_slot{i}")
            hazard_terms.append(met & slot.valid)
        # Host memory is one more shared memory: RHM and WHM wait for each
        # other, so a read never overtakes an earlier write, nor a write an
        # earlier read.
        hazard_terms.append(target["rhm"] & ~self.whm_idle)
        hazard_terms.append(target["whm"] & ~self.rhm_idle)
        m.d.comb += hazard.eq(Cat(*hazard_terms).any())

        # Record what an issued instruction touches, until its unit is idle.
        # The bounds follow the waiting instruction's while it is for the
        # unit, whose own ranges no comparison then reads (``~target``
        # above), so that they hold its ranges once it issues: the wide
        # enable is a flip-flop, not `go`. (The next word's flags and its
        # ranges are registered two cycles after the `load` in its issue
        # cycle at the earliest, its ranges not before its flags: so the
        # bounds hold the issued instruction's when the flags change.)
        for unit in UNITS:
            r = running[unit]
            kinds = [kind for kind in RANGE_KINDS if unit != "mmc" or kind != "acc_w"]
            with m.If(target[unit]):
                m.d.sync += [bound for kind in kinds
                             for bound in (r[kind].lo.eq(candidate[kind].lo), r[kind].hi.eq(candidate[kind].hi))]
            with m.If(go & target[unit]):
                m.d.sync += [r[kind].valid.eq(candidate[kind].valid) for kind in kinds]
            with m.Elif(idle_in[unit]):
                m.d.sync += [r[kind].valid.eq(0) for kind in r]
        self._acc_slots(m, slots, go & target["mmc"] & acc_w.valid, acc_w,
                        field(word, Opcode.MMC, "rows"))

    def _acc_slots(self, m, slots, take, rows_range, rows):
        """The accumulator ranges of the MMCs in flight, oldest first.

        Rows are stored in issue order, so an MMC's rows are all stored once
        the count of rows stored reaches the count of rows issued up to and
        including it (its ``end``); only the oldest slot can be next. Both
        counts wrap: the rows issued and not yet stored never exceed one MMC's
        (at most ``acc_rows``) plus those in the matrix unit's reader and the
        engine, so the width below keeps ``end - stored`` unambiguous.
        """
        cfg = self._config
        n = len(slots)
        if n < 2:
            raise ValueError("a merge into the youngest slot must never meet the oldest retiring")
        width = (cfg.acc_rows + cfg.rows + cfg.cols + 16).bit_length() + 1
        ends = Array(Signal(width, name=f"acc_slot{i}_end") for i in range(n))
        issued = Signal(width)
        stored = Signal(width)
        head = Signal(range(n))
        tail = Signal(range(n))
        used = Signal(range(n + 1))

        def advance(ptr):
            return Mux(ptr == n - 1, 0, ptr + 1)

        m.d.sync += stored.eq(stored + self.acc_stored)
        # Freed in the cycle after the MMC's last row is counted: two cycles
        # after it is stored, when an ACT may issue and read it.
        retire = (used != 0) & (stored == ends[head])
        end = Signal(width)
        m.d.comb += end.eq(issued + rows)
        allocate = take & (used != n)
        with m.If(take):
            m.d.sync += issued.eq(end)
        youngest = Mux(tail == 0, n - 1, tail - 1)
        for i, slot in enumerate(slots):
            with m.If(retire & (head == i)):
                m.d.sync += slot.valid.eq(0)
            with m.If(allocate & (tail == i)):
                m.d.sync += [*slot.copy_from(rows_range), ends[i].eq(end)]
            with m.Elif(take & ~allocate & (youngest == i)):
                lo, hi = rows_range.lo[:len(slot.lo)], rows_range.hi[:len(slot.hi)]
                m.d.sync += [slot.lo.eq(Mux(lo < slot.lo, lo, slot.lo)),
                             slot.hi.eq(Mux(hi > slot.hi, hi, slot.hi)),
                             ends[i].eq(end)]
        with m.If(retire):
            m.d.sync += head.eq(advance(head))
        with m.If(allocate):
            m.d.sync += tail.eq(advance(tail))
        m.d.sync += used.eq(used + allocate - retire)
