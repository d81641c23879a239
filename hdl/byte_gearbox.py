"""Byte streams and the gearbox that changes their beat width.

A *byte stream* of width ``n`` carries a job's bytes in order, byte 0 of a
beat in bits 7:0 of ``data``. Every beat is full (``count == n``) except
possibly the last beat of a job, the one with ``last`` set. docs/dma.md shows
where the DMA engines and the units they feed use them.
"""

from amaranth import *
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out


__all__ = ["ByteBeat", "byte_stream", "ByteGearbox", "append_bytes"]


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
