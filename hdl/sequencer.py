"""Sequencer: instruction queue, decode, hazard interlocks and in-order issue."""

from amaranth import *
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from ..config import TPUConfig
from ..isa import INSTRUCTION_BITS, Fault, Opcode, ldl_rows, ldq_rows
from .decoder import InstructionDecoder, field


__all__ = ["Sequencer", "Command", "UNITS"]


def Command():
    """An issued instruction: its word and what the decoder derived from it."""
    return data.StructLayout({
        "word":     INSTRUCTION_BITS,
        "ub_last":  25,
        "out_rows": 24,
    })


# The execution units; each runs one instruction at a time, in issue order.
UNITS = ("rhm", "whm", "mmc", "act")


class _Range:
    """An inclusive row range with a valid bit."""

    def __init__(self, name, width=25):
        self.valid = Signal(name=f"{name}_valid")
        self.lo = Signal(width, name=f"{name}_lo")
        self.hi = Signal(width, name=f"{name}_hi")

    def overlaps(self, other):
        return self.valid & other.valid & (self.lo <= other.hi) & (other.lo <= self.hi)

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
    would compute one instruction at a time. MMCs stay "in flight" for the
    accumulator rows they write until the matrix engine has stored every row.

    SYNC, INT and HALT wait until every unit is idle. A fault (from the
    decoder, or WEIGHT_FIFO_UNDERFLOW / WEIGHT_FIFO_OVERFLOW at issue) stops
    issue before the faulting instruction: earlier instructions finish, the
    chip halts with the fault code and the instruction's index.

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

        m.submodules.queue = queue = fifo.SyncFIFOBuffered(width=INSTRUCTION_BITS,
                                                           depth=self.QUEUE_DEPTH)
        m.d.comb += [
            queue.w_data.eq(self.instr.payload),
            queue.w_en.eq(self.instr.valid),
            self.instr.ready.eq(queue.w_rdy),
        ]

        m.submodules.decoder = decoder = InstructionDecoder(cfg)
        word = Signal(INSTRUCTION_BITS)
        loaded = Signal()           # `word` holds an instruction not yet issued
        index = Signal(32)          # its index in the program
        count = Signal(32)          # instructions loaded so far
        issue = Signal()

        halted = Signal()
        m.d.comb += [decoder.word.eq(word), self.halted.eq(halted)]

        load = Signal()
        halting = Signal()
        m.d.comb += load.eq(queue.r_rdy & ~halted & ~halting & (~loaded | issue))
        m.d.comb += [queue.r_en.eq(load), decoder.start.eq(load)]
        with m.If(load):
            m.d.sync += [word.eq(queue.r_data), loaded.eq(1), index.eq(count), count.eq(count + 1)]
        with m.Elif(issue):
            m.d.sync += loaded.eq(0)

        opcode = word[:8]
        ready = loaded & decoder.done & ~halted

        # What the instruction reads and writes.
        ub_r, ub_w, acc_r, acc_w = (_Range(n) for n in ("d_ub_r", "d_ub_w", "d_acc_r", "d_acc_w"))

        def rows_range(rng, first, count_):
            return rng.assign(count_ != 0, first, first + count_ - 1)

        with m.Switch(opcode):
            with m.Case(Opcode.RHM):
                m.d.comb += rows_range(ub_w, field(word, Opcode.RHM, "ub"), field(word, Opcode.RHM, "rows"))
            with m.Case(Opcode.WHM):
                m.d.comb += rows_range(ub_r, field(word, Opcode.WHM, "ub"), field(word, Opcode.WHM, "rows"))
            with m.Case(Opcode.MMC):
                rows = field(word, Opcode.MMC, "rows")
                m.d.comb += ub_r.assign(rows != 0, field(word, Opcode.MMC, "ub"), decoder.ub_last)
                m.d.comb += rows_range(acc_w, field(word, Opcode.MMC, "acc"), rows)
            with m.Case(Opcode.ACT):
                m.d.comb += rows_range(acc_r, field(word, Opcode.ACT, "acc"), field(word, Opcode.ACT, "rows"))
                m.d.comb += ub_w.assign(decoder.out_rows != 0, field(word, Opcode.ACT, "ub"),
                                        decoder.ub_last)
            with m.Case(Opcode.LDQ):
                m.d.comb += rows_range(ub_r, field(word, Opcode.LDQ, "ub"), ldq_rows(cfg))
            with m.Case(Opcode.LDL):
                m.d.comb += rows_range(ub_r, field(word, Opcode.LDL, "ub"), ldl_rows(cfg))

        # The unit each opcode goes to.
        target = {unit: Signal(name=f"to_{unit}") for unit in (*UNITS, "rw")}
        m.d.comb += [
            target["rhm"].eq(opcode == Opcode.RHM),
            target["whm"].eq(opcode == Opcode.WHM),
            target["mmc"].eq(opcode == Opcode.MMC),
            target["act"].eq((opcode == Opcode.ACT) | (opcode == Opcode.CFG) |
                             (opcode == Opcode.LDQ) | (opcode == Opcode.LDL)),
            target["rw"].eq(opcode == Opcode.RW),
        ]
        barrier = (opcode == Opcode.SYNC) | (opcode == Opcode.INT) | (opcode == Opcode.HALT)

        # What each running unit reads and writes.
        running = {unit: {kind: _Range(f"{unit}_{kind}") for kind in ("ub_r", "ub_w", "acc_r", "acc_w")}
                   for unit in UNITS}
        drain = _Range("mmc_drain")
        idle_in = {unit: getattr(self, f"{unit}_idle") for unit in UNITS}

        hazard_terms = []
        for unit in UNITS:
            r = running[unit]
            terms = [
                ub_w.overlaps(r["ub_r"]), ub_w.overlaps(r["ub_w"]), ub_r.overlaps(r["ub_w"]),
                acc_w.overlaps(r["acc_r"]), acc_w.overlaps(r["acc_w"]), acc_r.overlaps(r["acc_w"]),
            ]
            hazard_terms.append(~target[unit] & Cat(*terms).any())
        hazard_terms.append(~target["mmc"] & (acc_r.overlaps(drain) | acc_w.overlaps(drain)))
        # Host memory is one more shared memory: RHM and WHM wait for each
        # other, so a read never overtakes an earlier write, nor a write an
        # earlier read.
        hazard_terms.append(target["rhm"] & ~self.whm_idle)
        hazard_terms.append(target["whm"] & ~self.rhm_idle)
        hazard = Signal()
        m.d.comb += hazard.eq(Cat(*hazard_terms).any())

        all_idle = Signal()
        m.d.comb += all_idle.eq(Cat(*idle_in.values()).all() & self.mmc_drained)

        # Weight tiles requested by RW and not yet switched to.
        pending = Signal(range(cfg.weight_mem_tiles + cfg.weight_fifo_tiles + 3))
        rw_count = field(word, Opcode.RW, "count")
        switch = (opcode == Opcode.MMC) & field(word, Opcode.MMC, "switch") & \
            (field(word, Opcode.MMC, "rows") != 0)
        underflow = switch & (pending == 0)
        overflow = (opcode == Opcode.RW) & (pending + rw_count > cfg.weight_fifo_tiles + 2)

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
        with m.Elif(opcode == Opcode.RW):
            m.d.comb += unit_ready.eq((rw_count == 0) | self.rw.ready)
        with m.Elif(opcode == Opcode.NOP):
            m.d.comb += unit_ready.eq(1)
        with m.Else():
            # A unit's ready may come before it is idle (the matrix unit takes
            # the next MMC while issuing the last row of the previous one).
            m.d.comb += unit_ready.eq(Cat(*[target[u] & getattr(self, u).ready
                                            for u in UNITS]).any())

        go = Signal()
        m.d.comb += [
            go.eq(ready & (fault == Fault.NONE) & unit_ready & ~hazard),
            halting.eq(go & (opcode == Opcode.HALT)),
            issue.eq(go),
            self.raw_stall.eq(ready & (fault == Fault.NONE) & unit_ready & hazard),
        ]
        for unit in UNITS:
            port = getattr(self, unit)
            m.d.comb += [port.payload.eq(command), port.valid.eq(ready & (fault == Fault.NONE) &
                                                                 target[unit] & ~hazard)]
        m.d.comb += [self.rw.payload.eq(command),
                     self.rw.valid.eq(ready & (fault == Fault.NONE) & target["rw"] & (rw_count != 0))]

        with m.If(go & (opcode == Opcode.RW)):
            m.d.sync += pending.eq(pending + rw_count)
        with m.Elif(go & switch):
            m.d.sync += pending.eq(pending - 1)

        # Record what an issued instruction touches, until its unit is idle.
        for unit in UNITS:
            r = running[unit]
            with m.If(go & target[unit]):
                m.d.sync += [*r["ub_r"].copy_from(ub_r), *r["ub_w"].copy_from(ub_w),
                             *r["acc_r"].copy_from(acc_r),
                             *(r["acc_w"].copy_from(acc_w) if unit != "mmc" else [])]
            with m.Elif(idle_in[unit]):
                m.d.sync += [r[kind].valid.eq(0) for kind in r]
        with m.If(go & target["mmc"] & acc_w.valid):
            with m.If(drain.valid):
                m.d.sync += [drain.lo.eq(Mux(acc_w.lo < drain.lo, acc_w.lo, drain.lo)),
                             drain.hi.eq(Mux(acc_w.hi > drain.hi, acc_w.hi, drain.hi))]
            with m.Else():
                m.d.sync += drain.copy_from(acc_w)
        with m.Elif(self.mmc_drained):
            m.d.sync += drain.valid.eq(0)

        # Halting, faults and interrupts.
        m.d.sync += self.irq.eq(0)
        with m.If(ready & (fault != Fault.NONE) & all_idle):
            m.d.sync += [halted.eq(1), self.fault.eq(fault), self.fault_index.eq(index),
                         self.irq.eq(1), self.irq_code.eq(0)]
        with m.If(go & (opcode == Opcode.HALT)):
            m.d.sync += [halted.eq(1), self.irq.eq(1), self.irq_code.eq(0)]
        with m.If(go & (opcode == Opcode.INT)):
            m.d.sync += [self.irq.eq(1), self.irq_code.eq(field(word, Opcode.INT, "code"))]

        m.d.comb += self.idle.eq(~queue.r_rdy & ~loaded & all_idle)
        return m
