"""How the DMA engines cut a transfer into memory-request TLPs.

Both engines cut at every `max_bytes`-aligned address: `max_bytes` (the
Max_Payload_Size or Max_Read_Request_Size) is a power of two no larger than
4096, so no TLP exceeds it or crosses a 4 KiB boundary, and every TLP but a
transfer's first starts aligned.
"""

from amaranth import *


__all__ = ["chunk_ahead", "fits_in_block", "split_chunk", "request_header", "address_counter"]


def split_chunk(m, addr, chunk, max_bytes, *, fmt32, fmt64):
    """Comb signals describing a TLP of `chunk` bytes at byte address `addr`
    (`chunk_ahead`'s registered count).

    Returns a dict: ``bytes`` (its byte count), ``words`` (its Length in
    words, 1024 as 0 like the header field), ``dwords`` (its word count),
    ``first_be``, ``last_be`` (a one-word TLP has ``last_be`` 0) and
    ``fmt_type`` (`fmt32` while the TLP lies below 4 GiB, else `fmt64`).
    """
    dwords = Signal(range(max_bytes // 4 + 2))
    end = Signal(2)        # lane of the last byte in its word
    first_be = Signal(4)
    last_be = Signal(4)
    lead = addr[:2]
    m.d.comb += [
        dwords.eq((lead + chunk + 3) >> 2),
        end.eq(lead + chunk - 1),
        first_be.eq(0xF << lead),
        last_be.eq(0xF >> ~end),
    ]
    one = dwords == 1
    return {
        "bytes": chunk,
        "words": dwords[:10],
        "dwords": dwords,
        "first_be": Mux(one, first_be & last_be, first_be),
        "last_be": Mux(one, 0, last_be),
        # A TLP never crosses 4 KiB, so its first byte decides.
        "fmt_type": Mux(addr[32:] == 0, int(fmt32), int(fmt64)),
    }


def chunk_ahead(m, max_bytes):
    """The byte count of a transfer's next TLP, chosen a TLP ahead so that
    making its header reads registers: ``(chunk, after, final, load,
    advance)``. ``chunk`` is the next TLP's byte count, ``after`` the
    transfer's bytes after it and ``final`` whether it is the last;
    ``load(addr, length)`` sets them for a transfer's first TLP (from the
    job, as it is taken), ``advance()`` for the TLP after ``chunk``'s. Every
    TLP but a transfer's first starts `max_bytes`-aligned, so its count is
    `max_bytes` or the transfer's rest."""
    bits = max_bytes.bit_length() - 1
    chunk = Signal(range(max_bytes + 1))
    after = Signal(32)
    final = Signal()
    room = Signal(range(max_bytes + 1))

    def load(addr, length):
        fits, _ = fits_in_block(m, addr, length, max_bytes)
        m.d.comb += room.eq(max_bytes - addr[:bits])
        return [chunk.eq(Mux(fits, length, room)), after.eq(Mux(fits, 0, length - room)),
                final.eq(fits)]

    def advance():
        small = after[bits:] == 0
        return [chunk.eq(Mux(small, after, max_bytes)), after.eq(Mux(small, 0, after - max_bytes)),
                final.eq(after <= max_bytes)]

    return chunk, after, final, load, advance


def fits_in_block(m, addr, length, max_bytes):
    """Whether `length` bytes at `addr` end at or before the next
    `max_bytes`-aligned address, and the sum of `addr`'s offset in its block
    and `length`'s low bits (the offset after the transfer when it fits).
    `length <= max_bytes - offset` as one short sum and a test of `length`'s
    high bits in parallel, not a chain the job's width after a subtraction."""
    bits = max_bytes.bit_length() - 1
    low_sum = Signal(bits + 2)
    m.d.comb += low_sum.eq(addr[:bits] + length[:bits + 1])
    return (length[bits + 1:] == 0) & (low_sum <= max_bytes), low_sum


def request_header(header, split, addr, requester_id, tag=0):
    """Assignments setting `header` (a TlpHeader view) for the TLP described
    by `split`; the other fields are left alone (zero)."""
    return [
        header.fmt_type.eq(split["fmt_type"]),
        header.length.eq(split["words"]),
        header.requester_id.eq(requester_id),
        header.tag.eq(tag),
        header.first_be.eq(split["first_be"]),
        header.last_be.eq(split["last_be"]),
        header.address.eq(Cat(C(0, 2), addr[2:])),
    ]


def address_counter(m, addr, max_bytes):
    """Statements that set and advance the transfer address `addr` without a
    carry chain its whole width: ``load(value)`` sets it, ``advance(chunk)``
    adds a TLP's byte count (`chunk_ahead`'s ``chunk``).

    A TLP ends at or before the next `max_bytes`-aligned address, so the
    sum's low ``log2(max_bytes)`` bits take a short chain and the bits above
    either stay or step by one; that step is kept ready in a register (the
    high bits plus one, themselves stepped only as the high bits are), so no
    path adds the whole address after the TLP's byte count was chosen."""
    bits = max_bytes.bit_length() - 1
    high_next = Signal(len(addr) - bits, name=f"{addr.name}_high_next")

    def load(value):
        return [addr.eq(value), high_next.eq(value[bits:] + 1)]

    def advance(chunk):
        low = Signal(bits + 1, name=f"{addr.name}_low_sum")
        m.d.comb += low.eq(addr[:bits] + chunk)
        crosses = low[bits]
        return [addr.eq(Cat(low[:bits], Mux(crosses, high_next, addr[bits:]))),
                high_next.eq(Mux(crosses, high_next + 1, high_next))]

    return load, advance
