"""Byte streams and the gearboxes that change their beat width.

A *byte stream* of width ``n`` carries a job's bytes in order, byte 0 of a
beat in bits 7:0 of ``data``. Every beat is full (``count == n``) except
possibly the last beat of a job, the one with ``last`` set. docs/dma.md shows
where the DMA engines and the units they feed use them.
"""

from amaranth import *
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out


__all__ = ["ByteBeat", "byte_stream", "ByteGearbox", "ByteAligner", "BeatShifter", "gearbox",
           "append_bytes", "append_bytes_in_words"]


def ByteBeat(n, **extra):
    """One beat of a byte stream `n` bytes wide; `extra` adds fields
    (the DMA reader's ``channel``)."""
    return data.StructLayout({"data": 8 * n, "count": range(n + 1), "last": 1, **extra})


def byte_stream(n, **extra):
    return stream.Signature(ByteBeat(n, **extra))


def append_bytes(m, buf, fill, take, in_data, in_count, in_fire):
    """Update a byte queue held in `buf` (byte 0 in bits 7:0) and `fill`:
    remove its first `take` bytes and append the first `in_count` bytes of
    `in_data` if `in_fire`.

    Bytes of `buf` at and above `fill` are kept zero, so an append is an OR
    and a queue can be started with a few zero bytes by setting `fill` alone.
    """
    in_bytes = len(in_data) // 8
    kept = Signal.like(fill)
    masked = Signal(len(in_data))
    m.d.comb += [
        kept.eq(fill - take),
        masked.eq(in_data & Cat((k < in_count).replicate(8) for k in range(in_bytes))),
    ]
    shifted = (buf >> (take * 8)) | (Mux(in_fire, masked, 0) << (kept * 8))
    m.d.sync += [
        buf.eq(shifted[:len(buf)]),
        fill.eq(kept + Mux(in_fire, in_count, 0)),
    ]


def append_bytes_in_words(m, size, fill, take, in_data, in_count, in_fire):
    """`append_bytes` for a queue of `size` bytes from which only whole
    words (``len(in_data) // 8`` bytes, a power of two) leave, or all it
    holds (`take` is 0, a word, or `fill`): the DMA writer's on a one-word
    link, whose TLPs end on word boundaries but for a job's last.

    The queue is held in word slots, the first word in slot 0. A word
    leaving shifts the slots down by one (bytes at and above `fill` read
    zero, as with `append_bytes`), and appended bytes are written in place,
    rotated to the lanes their positions fall on: one multiplexer `n` ways
    over the input, where `append_bytes` shifts the whole queue by any
    number of bytes.

    Returns the first word of the queue (`append_bytes`'s ``buf``'s) and
    the statements that empty the queue (with ``fill`` set to 0)."""
    n = len(in_data) // 8
    assert n & (n - 1) == 0, n
    lane_bits = n.bit_length() - 1
    count = -(-size // n)
    slots = [Signal(8 * n, name=f"word_slot{k}") for k in range(count)]
    kept = Signal.like(fill)
    pop = Signal()
    m.d.comb += [
        kept.eq(fill - take),
        pop.eq(take != 0),
    ]
    # Byte i of the input lands on lane (r + i) % n of slot (kept + i) // n:
    # for lane l, byte (l - r) % n, in the slot holding position kept or
    # the one after it (l < r).
    r = kept[:lane_bits] if lane_bits else C(0, 1)
    rotated = Signal(8 * n)
    with m.Switch(r):
        for rr in range(n):
            with m.Case(rr):
                m.d.comb += rotated.eq(Cat(in_data.word_select((lane - rr) % n, 8) for lane in range(n)))
    for lane in range(n):
        target = Signal(range(count + 1), name=f"word_lane{lane}_slot")
        write = Signal(name=f"word_lane{lane}_write")
        m.d.comb += [
            target.eq(kept[lane_bits:] + (lane < r)),
            write.eq(in_fire & (((lane - r) % n if lane_bits else 0) < in_count)),
        ]
        for k in range(count):
            byte = slots[k].word_select(lane, 8)
            with m.If(write & (target == k)):
                m.d.sync += byte.eq(rotated.word_select(lane, 8))
            with m.Elif(pop):
                m.d.sync += byte.eq(slots[k + 1].word_select(lane, 8) if k + 1 < count else 0)
    m.d.sync += fill.eq(kept + Mux(in_fire, in_count, 0))
    return slots[0], [*(slot.eq(0) for slot in slots), fill.eq(0)]


class ByteGearbox(wiring.Component):
    """Re-packs a byte stream of `in_bytes`-wide beats into `out_bytes`-wide
    beats, job by job.

    Members
    -------
    i : In(byte_stream(in_bytes))
    o : Out(byte_stream(out_bytes))
        The same bytes; the beat that ends a job has ``last`` set.
    idle : Out(1)
        No byte is held.

    Sustains one beat per cycle on the slower side. After the beat that ends
    a job is taken, input waits until that job's bytes have left (at most
    ``ceil(in_bytes / out_bytes) + 1`` cycles), so jobs never share a beat.
    """

    def __init__(self, in_bytes, out_bytes):
        if not (in_bytes >= 1 and out_bytes >= 1):
            raise ValueError(f"ByteGearbox needs at least one byte per side, not "
                             f"{in_bytes} -> {out_bytes}")
        self._in, self._out = in_bytes, out_bytes
        super().__init__({
            "i":    In(byte_stream(in_bytes)),
            "o":    Out(byte_stream(out_bytes)),
            "idle": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        n_in, n_out = self._in, self._out
        # With room for in + 2 * out - 1 bytes and `ready` taken from the
        # registered fill alone, neither side ever waits in steady state and
        # no combinational path joins o.ready to i.ready.
        size = n_in + 2 * n_out - 1
        buf = Signal(8 * size)
        fill = Signal(range(size + 1))
        ending = Signal()   # the rest of the buffer ends a job

        full = fill >= n_out
        m.d.comb += [
            self.i.ready.eq(~ending & (fill <= size - n_in)),
            self.o.valid.eq(full | ending),
            self.o.payload.data.eq(buf[:8 * n_out]),
            self.o.payload.count.eq(Mux(full, n_out, fill)),
            self.o.payload.last.eq(ending & (fill <= n_out)),
            self.idle.eq((fill == 0) & ~ending),
        ]
        out_fire = self.o.valid & self.o.ready
        in_fire = self.i.valid & self.i.ready
        append_bytes(m, buf, fill, Mux(out_fire, self.o.payload.count, 0),
                     self.i.payload.data, self.i.payload.count, in_fire)
        with m.If(out_fire & self.o.payload.last):
            m.d.sync += ending.eq(0)
        with m.If(in_fire & self.i.payload.last):
            m.d.sync += ending.eq(1)
        return m


class ByteAligner(wiring.Component):
    """The cheap `ByteGearbox` for equal beat widths (`n` bytes both sides)
    on a stream where, within a job, every beat but the first and the last
    is full (the DMA reader's: only a transfer's first TLP starts unaligned).

    A beat's bytes may start at any lane (``lane``) instead of byte 0, so
    the sender need not shift them down. Such a job's bytes keep one
    alignment from its first beat on, so the byte queue is held as whole
    `n`-byte slots with the job's first byte at a fixed offset ``d`` of the
    first slot, and an output beat is the two lowest slots read from ``d``:
    one `n`-way multiplexer, where `ByteGearbox` has two barrel shifters over
    ``3 n - 1`` bytes. A beat that comes into an empty queue sets ``d`` to
    its lane.

    Members
    -------
    i : In(byte_stream(n, lane=range(n)))
        Bytes ``lane .. lane + count - 1`` of ``data`` are the beat's.
    o : Out(byte_stream(n))
    idle : Out(1)

    Handshakes, cycle timing and output beats are ``ByteGearbox(n, n)``'s
    on such streams (its input's bytes shifted down by ``lane``), except
    that output bytes past ``count`` are undefined.
    """

    def __init__(self, n):
        if not n >= 1:
            raise ValueError(f"ByteAligner needs at least one byte per beat, not {n}")
        self._n = n
        super().__init__({
            "i":    In(byte_stream(n, lane=range(n))),
            "o":    Out(byte_stream(n)),
            "idle": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        n = self._n
        # Handshakes and byte counts exactly as ByteGearbox(n, n).
        size = 3 * n - 1
        fill = Signal(range(size + 1))
        ending = Signal()
        full = fill >= n
        m.d.comb += [
            self.i.ready.eq(~ending & (fill <= size - n)),
            self.o.valid.eq(full | ending),
            self.o.payload.count.eq(Mux(full, n, fill)),
            self.o.payload.last.eq(ending & (fill <= n)),
            self.idle.eq((fill == 0) & ~ending),
        ]
        out_fire = self.o.valid & self.o.ready
        in_fire = self.i.valid & self.i.ready
        # What is kept is `fill` less the output beat's count: all of it
        # (`fill - n`, 0 when the beat is a short last one) if a beat
        # leaves. Both cases are worked out beside the handshake, which only
        # chooses between them, so no subtraction follows `o.ready`.
        kept = Signal(range(size + 1))
        after_beat = Signal(range(size + 1))
        m.d.comb += [
            after_beat.eq(Mux(full, fill - n, 0)),
            kept.eq(Mux(out_fire, after_beat, fill)),
        ]
        m.d.sync += fill.eq(kept + Mux(in_fire, self.i.payload.count, 0))
        with m.If(out_fire & self.o.payload.last):
            m.d.sync += ending.eq(0)
        with m.If(in_fire & self.i.payload.last):
            m.d.sync += ending.eq(1)

        # The queue is bytes d .. d + fill - 1 of the slots. While a job's
        # beats still come in it ends on a slot boundary, so a beat into a
        # non-empty queue fills slot (d + kept) / n: 1 or 2, since input
        # waits above 2 n - 1 bytes.
        slots = [Signal(8 * n, name=f"slot{k}") for k in range(3)]
        d = Signal(range(n))
        with m.Switch(d):
            for offset in range(n):
                with m.Case(offset):
                    m.d.comb += self.o.payload.data.eq(
                        Cat(slots[0][8 * offset:], slots[1][:8 * offset]))
        data = self.i.payload.data
        # Both read `fill` and `d + fill` alone (a beat that leaves takes
        # `n` bytes if the queue is full, else all of it), so the handshake
        # only chooses.
        ahead = Signal(range(size + n))
        m.d.comb += ahead.eq(d + fill)
        realign = in_fire & Mux(out_fire, ~full | (fill == n), fill == 0)
        into_first = Mux(out_fire, full & (ahead == 2 * n), ahead == n)
        popped = out_fire & full & (fill != n)      # a whole slot left and bytes stay: shift down
        with m.If(realign):
            m.d.sync += [d.eq(self.i.payload.lane), slots[0].eq(data)]
        with m.Elif(popped):
            m.d.sync += slots[0].eq(slots[1])
        with m.If(in_fire & ~realign & into_first):
            m.d.sync += slots[1].eq(data)
        with m.Elif(popped):
            m.d.sync += slots[1].eq(slots[2])
        with m.If(in_fire & ~realign & ~into_first):
            m.d.sync += slots[2].eq(data)
        return m


class BeatShifter(wiring.Component):
    """The cheap `ByteGearbox` for beat widths of which one divides the
    other: whole input beats are written into slots (packing narrow beats
    into wide ones) or whole output beats picked from a register in turn
    (cutting wide beats into narrow ones), so no byte moves by a variable
    amount and it takes a register and a counter instead of a barrel
    shifter.

    What the stream must keep to (the DMA jobs of the program fetcher, the
    weight filler and RHM/WHM do):

    - packing (`out_bytes` a multiple of `in_bytes`): every input beat is
      full; a job that ends inside an output beat sends that beat short,
      ``count`` saying how much of it is the job's, its bytes past
      ``count`` undefined (`whole`, jobs are whole output beats, is for the
      callers that say so; packing needs no alignment either way);
    - cutting (`in_bytes` a multiple of `out_bytes`): every input beat's
      ``count`` is a multiple of `out_bytes` (every beat is full but a job's
      last, and the job is whole output beats).

    Members
    -------
    i : In(byte_stream(in_bytes))
    o : Out(byte_stream(out_bytes))
        The same bytes; the beat that ends a job has ``last`` set.
    idle : Out(1)
        No byte is held.

    Takes one beat per cycle on the slower side, with the same latency as
    `ByteGearbox`: an output beat is offered the cycle after the input beat
    that completes it arrived. After a job's last input beat, input waits
    until that job's bytes have left, so jobs never share a beat.
    """

    def __init__(self, in_bytes, out_bytes, *, whole=False):
        if not (in_bytes >= 1 and out_bytes >= 1 and
                (out_bytes % in_bytes == 0 or in_bytes % out_bytes == 0)):
            raise ValueError(f"BeatShifter needs one beat width a multiple of the other, not "
                             f"{in_bytes} -> {out_bytes}")
        self._in, self._out = in_bytes, out_bytes
        self._whole = whole
        super().__init__({
            "i":    In(byte_stream(in_bytes)),
            "o":    Out(byte_stream(out_bytes)),
            "idle": Out(1),
        })

    def elaborate(self, platform):
        if self._out >= self._in:
            return self._pack()
        return self._cut()

    def _pack(self):
        m = Module()
        n_in, n_out = self._in, self._out
        beats = n_out // n_in
        held = Signal(range(beats + 1))   # input beats in the slots
        ending = Signal()                 # they end a job

        # Input beat k of an output beat is written to slot k, in byte
        # order, so a short beat's bytes are already at the bottom. A slot
        # is written in every cycle the next beat would go there, whether
        # one comes or not (`held` counts only the ones that did): its
        # enable is a function of `held` alone, not of the input's valid
        # and the sender's error and flush, which reached these enables
        # across the die through the DMA reader. The slots keep no reset:
        # a flush empties them by `held`.
        slots = [Signal(8 * n_in, name=f"slot{k}", reset_less=True) for k in range(beats)]
        full = held == beats
        m.d.comb += [
            self.o.valid.eq(full | ending),
            self.o.payload.data.eq(Cat(*slots)),
            self.o.payload.count.eq(held * n_in),
            self.o.payload.last.eq(ending),
            self.i.ready.eq(~ending & (~full | self.o.ready)),
            self.idle.eq(held == 0),
        ]
        out_fire = self.o.valid & self.o.ready
        in_fire = self.i.valid & self.i.ready
        for k, slot in enumerate(slots):
            # Slot 0 also takes the beat that comes as a full one leaves.
            with m.If((held == k) | ((held == beats) & self.o.ready) if k == 0 else held == k):
                m.d.sync += slot.eq(self.i.payload.data)
        m.d.sync += held.eq(Mux(out_fire, 0, held) + in_fire)
        with m.If(out_fire):
            m.d.sync += ending.eq(0)
        with m.If(in_fire & self.i.payload.last):
            m.d.sync += ending.eq(1)
        return m

    def _cut(self):
        m = Module()
        n_in, n_out = self._in, self._out
        words = n_in // n_out
        left = Signal(range(words + 1))   # output beats of `buf` still to send
        index = Signal(range(words))      # the next one's word in `buf`
        last = Signal()                   # they end a job

        # The buffer is loaded in every cycle a beat would be taken, whether
        # one comes or not (`left` counts only the ones that did), and the
        # output beat is picked from it by `index` instead of shifted down:
        # its enable is `ready` alone, not the input's valid, and no longer
        # also the output handshake. The buffer keeps no reset: `left`
        # empties it.
        buf = Signal(8 * n_in, reset_less=True)
        taken = Signal(range(words + 1))  # output beats in the input beat
        with m.Switch(self.i.payload.count):
            for k in range(1, words + 1):
                with m.Case(k * n_out):
                    m.d.comb += taken.eq(k)
        m.d.comb += [
            self.o.valid.eq(left != 0),
            self.o.payload.data.eq(buf.word_select(index, 8 * n_out)),
            self.o.payload.count.eq(n_out),
            self.o.payload.last.eq(last & (left == 1)),
            self.i.ready.eq((left == 0) | ((left == 1) & self.o.ready)),
            self.idle.eq(left == 0),
        ]
        out_fire = self.o.valid & self.o.ready
        in_fire = self.i.valid & self.i.ready
        with m.If(self.i.ready):
            m.d.sync += [buf.eq(self.i.payload.data), index.eq(0)]
        with m.Elif(out_fire):
            m.d.sync += index.eq(index + 1)
        with m.If(in_fire):
            m.d.sync += [left.eq(taken), last.eq(self.i.payload.last)]
        with m.Elif(out_fire):
            m.d.sync += left.eq(left - 1)
        return m


def gearbox(in_bytes, out_bytes, *, whole=False):
    """A `BeatShifter` where one width divides the other, else a `ByteGearbox`;
    only for streams that keep to what `BeatShifter` needs (`whole`: jobs
    are whole output beats)."""
    if out_bytes % in_bytes == 0 or in_bytes % out_bytes == 0:
        return BeatShifter(in_bytes, out_bytes, whole=whole)
    return ByteGearbox(in_bytes, out_bytes)
