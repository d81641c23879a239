"""Fetches a program from host memory by DMA into the core's instruction stream."""

from amaranth import *
from amaranth.lib import fifo, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ..host_registers import register_bits
from ..isa import INSTRUCTION_BITS, INSTRUCTION_BYTES
from .byte_gearbox import ByteBeat, gearbox
from .dma_read import read_job
from .dma_split import address_counter


__all__ = ["ProgramFetcher"]


class _WordQueue(Elaboratable):
    """`SyncFIFOBuffered`'s ports and timing (a word written is offered two
    cycles later, from the block RAM's own output register) with a
    power-of-two memory: its pointers wrap by themselves and equal pointers
    are an empty memory, where `SyncFIFOBuffered` keeps a level beside them
    and compares each with its depth. The fetcher never asks for more words
    than the queue holds (`committed`), so the memory never holds more than
    ``depth - 1`` and ``w_rdy`` is not kept."""

    def __init__(self, *, width, depth):
        assert depth & (depth - 1) == 0
        self.depth = depth
        self.w_en = Signal()
        self.w_data = Signal(width)
        self.w_rdy = Const(1)
        self.r_en = Signal()
        self.r_rdy = Signal()
        self.r_data = Signal(width)

    def elaborate(self, platform):
        m = Module()
        m.submodules.ram = ram = Memory(shape=unsigned(len(self.w_data)), depth=self.depth, init=[])
        write = ram.write_port()
        read = ram.read_port()
        produce = Signal(range(self.depth))
        consume = Signal(range(self.depth))
        refill = (produce != consume) & (~self.r_rdy | self.r_en)
        m.d.comb += [
            write.en.eq(self.w_en),
            write.addr.eq(produce),
            write.data.eq(self.w_data),
            read.en.eq(refill),
            read.addr.eq(consume),
            self.r_data.eq(read.data),
        ]
        with m.If(self.w_en):
            m.d.sync += produce.eq(produce + 1)
        with m.If(refill):
            m.d.sync += [consume.eq(consume + 1), self.r_rdy.eq(1)]
        with m.Elif(self.r_en):
            m.d.sync += self.r_rdy.eq(0)
        return m


class ProgramFetcher(wiring.Component):
    """Reads ``length`` instructions from host address ``addr`` in chunks, and
    only ever asks for as many as its instruction queue has room for: fetched
    instructions always have somewhere to land, so their DMA data can never
    block the host reads queued behind them (an RHM's bytes).

    Ports
    -----
    start : In(1)
        Pulse: fetch ``length`` instructions from ``addr``.
    addr : In(host_addr_bits)
    length : In(32)
        As wide as PROG_LEN keeps (`tpu.host_registers.register_bits`).
        With ``registered_valid``, held from the cycle before ``start``.
    job : Out(stream of read_job(host_addr_bits))
        Read jobs for the DMA reader (``channel`` left 0).
    data : In(byte_stream)
        The jobs' bytes.
    instr : Out(stream.Signature(128))
        Instructions in program order.
    busy : Out(1)
        Instructions left to fetch or to hand over.
    flush : In(1)
        Forget the program (the DMA reader is flushed alongside).

    With ``registered_valid`` (by default on every form but the narrow
    host's) the job's ``valid`` is a flip-flop, set from the comparison the
    next cycle's job needs, and jobs come in the same cycles as with the
    comparison made in the cycle itself: the DMA reader's job sums then
    start from a register, not from a sum and a comparison. The narrow
    form keeps the comparison (its UART is slow, its LUTs scarce).
    """

    def __init__(self, config, *, depth=32, chunk=16, registered_valid=None):
        assert chunk <= depth
        self._config = config
        self._depth = depth
        self._chunk = chunk
        self._registered_valid = registered_valid
        super().__init__({
            "start":  In(1),
            "addr":   In(config.host_addr_bits),
            "length": In(register_bits(config).get("PROG_LEN", 32)),
            "job":    Out(stream.Signature(read_job(config.host_addr_bits))),
            "data":   In(stream.Signature(ByteBeat(4 * config.link_dw))),
            "instr":  Out(stream.Signature(INSTRUCTION_BITS)),
            "busy":   Out(1),
            "flush":  In(1),
        })

    @property
    def max_job_bytes(self):
        """The longest job it asks for."""
        return self._chunk * INSTRUCTION_BYTES

    def elaborate(self, platform):
        m = Module()
        depth, chunk = self._depth, self._chunk
        beat_bytes = 4 * self._config.link_dw
        # On a one-word link the queue holds link words and the packer
        # follows it: a 32-bit queue takes a quarter of the block RAM of an
        # instruction-wide one (2 EBR on the iCE40 where it took 8).
        words = self._config.link_dw == 1
        per_instruction = INSTRUCTION_BYTES // beat_bytes if words else 1
        # With the narrow host protocol an instruction's last word is the
        # queue's output itself: 32 flip-flops fewer than a whole
        # instruction's register.
        narrow = words and self._config.narrow_host

        if not narrow:
            # Jobs are whole instructions, as a `BeatShifter` needs.
            m.submodules.gearbox = packer = ResetInserter(self.flush)(
                gearbox(beat_bytes, INSTRUCTION_BYTES, whole=True))
        if narrow:
            m.submodules.queue = queue = ResetInserter(self.flush)(
                _WordQueue(width=8 * beat_bytes, depth=depth * per_instruction))
        else:
            m.submodules.queue = queue = ResetInserter(self.flush)(
                fifo.SyncFIFOBuffered(width=8 * beat_bytes if words else INSTRUCTION_BITS,
                                      depth=depth * per_instruction))
        if narrow:
            m.d.comb += [
                queue.w_data.eq(self.data.payload.data),
                queue.w_en.eq(self.data.valid),
                self.data.ready.eq(queue.w_rdy),
            ]
            held = self._pack_three(m, queue)
            popped = queue.r_en & queue.r_rdy
        elif words:
            m.d.comb += [
                queue.w_data.eq(self.data.payload.data),
                queue.w_en.eq(self.data.valid),
                self.data.ready.eq(queue.w_rdy),
                packer.i.payload.data.eq(queue.r_data),
                packer.i.payload.count.eq(beat_bytes),
                packer.i.valid.eq(queue.r_rdy),
                queue.r_en.eq(packer.i.ready),
                self.instr.payload.eq(packer.o.payload.data),
                self.instr.valid.eq(packer.o.valid),
                packer.o.ready.eq(self.instr.ready),
            ]
            popped = queue.r_en & queue.r_rdy
        else:
            wiring.connect(m, wiring.flipped(self.data), packer.i)
            m.d.comb += [
                queue.w_data.eq(packer.o.payload.data),
                queue.w_en.eq(packer.o.valid),
                packer.o.ready.eq(queue.w_rdy),
                self.instr.payload.eq(queue.r_data),
                self.instr.valid.eq(queue.r_rdy),
                queue.r_en.eq(self.instr.ready),
            ]
            popped = queue.r_en & queue.r_rdy

        addr = Signal(self._config.host_addr_bits)
        left = Signal(len(self.length))    # instructions not yet asked for
        # Queue entries asked for and not yet popped: those on their way and
        # the queue's level, counted here rather than summed from the level.
        committed = Signal(range(depth * per_instruction + 1))
        # The next job's instructions, min(left, chunk), kept in a register
        # beside `left` so that neither the job's handshake nor the address
        # waits on a 32-bit comparison: after a job it is worked out from
        # `left` before the job (left - chunk, chunk or 0).
        take = Signal(range(chunk + 1))
        asked = self.job.valid & self.job.ready
        job_bytes = 1 << (chunk * INSTRUCTION_BYTES - 1).bit_length()
        if narrow:
            # A job a round trip over the UART: one sum, no stepped high bits
            # kept beside the address.
            load_addr = lambda value: [addr.eq(value)]
            advance_addr = lambda count: [addr.eq(addr + count)]
        else:
            load_addr, advance_addr = address_counter(m, addr, job_bytes)

        registered = not narrow if self._registered_valid is None else self._registered_valid
        if not registered:
            m.d.comb += self.job.valid.eq((take != 0) & (committed + take * per_instruction
                                                         <= depth * per_instruction))
        m.d.comb += [
            self.job.payload.addr.eq(addr),
            self.job.payload.length.eq(take * INSTRUCTION_BYTES),
        ]
        # Both sums are ready before the handshake, which only chooses.
        m.d.sync += [
            committed.eq(Mux(asked, committed + take * per_instruction - popped, committed - popped)),
        ]
        with m.If(asked):
            m.d.sync += [
                *advance_addr(take * INSTRUCTION_BYTES),
                left.eq(left - take),
                take.eq(Mux(left > 2 * chunk, chunk, Mux(left > chunk, left[:len(take)] - chunk, 0))),
            ]
        if registered:
            self._next_valid(m, left=left, take=take, committed=committed, asked=asked, popped=popped,
                             per_instruction=per_instruction)
        with m.If(self.start):
            m.d.sync += [*load_addr(self.addr), left.eq(self.length),
                         take.eq(Mux(self.length > chunk, chunk, self.length))]

        # From `committed`, not from the entries on their way and the queue's
        # output: an entry written to the queue is offered two cycles later,
        # and in between neither would show it, so a program ending without HALT
        # could be taken as done while its last instruction is on its way.
        packing = (held != 0) if narrow else (~packer.idle if words else 0)
        m.d.comb += self.busy.eq((left != 0) | (committed != 0) | packing)
        with m.If(self.flush):
            m.d.sync += [left.eq(0), take.eq(0), committed.eq(0)]
        return m

    def _next_valid(self, m, *, left, take, committed, asked, popped, per_instruction):
        """Registers into ``job.valid`` next cycle's ``(take != 0) &
        (committed + take * per_instruction <= room)``. A job taken and a
        queue entry popped this cycle both change next cycle's ``committed``
        (and the job ``take``), and the pop comes late in the cycle, from
        the core: so the comparison is made from registers for each case of
        the two, and they only choose among the results."""
        depth, chunk = self._depth, self._chunk
        room = depth * per_instruction

        def fits(count, pop):
            # `count` instructions more than `committed` fit the queue
            # after `pop` entries leave it.
            return committed + count * per_instruction <= room + pop

        # No job taken: the same job, against a queue one entry emptier
        # when one is popped.
        same = [(take != 0) & fits(take, pop) for pop in (0, 1)]
        # A job taken: the next job follows a whole chunk (take is
        # min(left, chunk), so more than a chunk left means this job is
        # one), and is a chunk or the rest; none after the last.
        after = [Mux(left > 2 * chunk, fits(2 * chunk, pop),
                     (left > chunk) & fits(left[:len(take) + 1], pop)) for pop in (0, 1)]
        # START: its first job, after this cycle's job if one is taken,
        # against the room its first job leaves, worked out from ``length``
        # as it was a cycle before: the host holds PROG_LEN for cycles
        # before it starts a program, and its 32-bit comparison and the
        # subtraction are then no part of this cycle's sums.
        some = Signal()
        limit = Signal(range(room + 1))
        m.d.sync += [
            some.eq(self.length != 0),
            limit.eq(room - Mux(self.length > chunk, chunk, self.length[:len(take)]) * per_instruction),
        ]
        started = [[some & (committed + (take * per_instruction if job else 0) <= limit + pop)
                    for pop in (0, 1)] for job in (0, 1)]

        def by_pop(pair):
            return Mux(popped, pair[1], pair[0])
        m.d.sync += self.job.valid.eq(Mux(asked, by_pop(after), by_pop(same)))
        with m.If(self.start):
            m.d.sync += self.job.valid.eq(Mux(asked, by_pop(started[1]), by_pop(started[0])))
        with m.If(self.flush):
            m.d.sync += self.job.valid.eq(0)

    def _pack_three(self, m, queue):
        """An instruction's first three words in registers, its fourth the
        queue's output, taken from the queue as the instruction leaves:
        instructions one after another come every 4 cycles, as from a
        4-word register, and one whose last word comes alone a cycle
        sooner. Returns the count of words held."""
        per_instruction = INSTRUCTION_BYTES // 4
        held = Signal(range(per_instruction))
        # A slot is written whenever its word is due, whether it comes or
        # not (`held` counts the ones that did), as `BeatShifter`'s are.
        slots = [Signal(32, name=f"slot{k}", reset_less=True) for k in range(per_instruction - 1)]
        full = held == per_instruction - 1
        m.d.comb += [
            self.instr.valid.eq(full & queue.r_rdy),
            self.instr.payload.eq(Cat(*slots, queue.r_data)),
            queue.r_en.eq(~full | self.instr.ready),
        ]
        for k, slot in enumerate(slots):
            with m.If(held == k):
                m.d.sync += slot.eq(queue.r_data)
        with m.If(self.instr.valid & self.instr.ready):
            m.d.sync += held.eq(0)
        with m.Elif(~full & queue.r_rdy):
            m.d.sync += held.eq(held + 1)
        with m.If(self.flush):
            m.d.sync += held.eq(0)
        return held
