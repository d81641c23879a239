"""Performance counters kept in one block RAM (`TPUConfig.ram_counters`)."""

from amaranth import *
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out


__all__ = ["CounterRam", "CounterReadSignature"]


def CounterReadSignature(counters, bits):
    """A read of counter ``addr`` (of `counters`): ``data`` is its value the
    cycle after ``en``, as `tpu.hdl.unified_buffer.UbReadSignature` reads."""
    return wiring.Signature({"en": Out(1), "addr": Out(range(counters)), "data": In(bits)})


class CounterRam(wiring.Component):
    """Counters that read as flip-flop counters would, kept as the words of
    one RAM.

    Each counter keeps in flip-flops only what it counted since its word was
    last written (``pending``). One counter a cycle, in turn, has its word
    read and, the cycle after, written back with its pending count added
    (and its pending count restarted from that cycle's event). A read of a
    counter takes the RAM's read port in place of that cycle's flush: the
    cycle after, ``data`` is its word plus the pending count it had in the
    read's cycle, which is the value a flip-flop counter would have had
    then. A read of the word being written in that cycle does not read the
    RAM: its port still holds that word as the flush read it the cycle
    before. So no word is ever read and written in one cycle, and the RAM
    is built without logic for that case (``no_rw_check``: on an iCE40,
    Yosys would otherwise bypass a write to the read port through 32
    flip-flops and as many LUT4s).

    ``clear`` marks every word stale (a stale word reads as 0, and its next
    flush writes the pending count alone) and drops the pending counts, so
    the counters read 0 from the next cycle, as after a reset.

    Parameters
    ----------
    increments : list of int
        What counter ``i`` adds in a cycle its event is high.
    bits : int
        Width of each counter; they wrap modulo ``2**bits``.

    Members
    -------
    events : In(len(increments))
        Bit ``i``: counter ``i`` counts in this cycle.
    clear : In(1)
        The counters are 0 from the next cycle.
    read : In(CounterReadSignature)
        ``en`` at most every other cycle: each read delays the flushes by a
        cycle, and the pending counts are sized for a counter's turn coming
        at least every ``2 * len(increments)`` cycles.
    """

    def __init__(self, increments, bits):
        self._increments = list(increments)
        self._bits = bits
        n = len(self._increments)
        super().__init__({
            "events": In(n),
            "clear":  In(1),
            "read":   In(CounterReadSignature(n, bits)),
        })

    def elaborate(self, platform):
        m = Module()
        n, bits = len(self._increments), self._bits

        m.submodules.ram = ram = Memory(shape=unsigned(bits), depth=n, init=[],
                                        attrs={"no_rw_check": 1})
        write = ram.write_port()
        read = ram.read_port()
        self._ram_ports = read, write        # for tests/test_counter_ram.py

        # A counter's turn comes every n cycles, and every 2n at most while
        # reads take every other cycle: its pending count adds at most 2n
        # events between two flushes.
        pending = [Signal((2 * n * inc).bit_length(), name=f"pending_{i}")
                   for i, inc in enumerate(self._increments)]
        stale = Signal(n, init=(1 << n) - 1)
        turn = Signal(range(n))
        added = [Mux(self.events[i], inc, 0) for i, inc in enumerate(self._increments)]

        # The port: a host read, or else the counter whose turn it is.
        host = self.read.en
        index = Signal(range(n))
        m.d.comb += [index.eq(Mux(host, self.read.addr, turn)), read.addr.eq(index)]
        with m.If(~host):
            m.d.sync += turn.eq(Mux(turn == n - 1, 0, turn + 1))

        # What the word lacks, as of the cycle it was read: for a flush also
        # this cycle's event, as its pending count restarts after it.
        lacking = Signal(max(len(p) for p in pending))
        lacking_stale = Signal()
        flushing = Signal()
        flushed = Signal(range(n))
        m.d.sync += [
            lacking.eq(Array(pending)[index] + Mux(host, 0, Array(added)[index])),
            lacking_stale.eq(stale.bit_select(index, 1)),
            flushing.eq(~host),
            flushed.eq(index),
        ]
        m.d.comb += read.en.eq(~(host & flushing & (flushed == self.read.addr)))
        total = Signal(bits)
        m.d.comb += [
            total.eq(Mux(lacking_stale, 0, read.data) + lacking),
            self.read.data.eq(total),
            write.en.eq(flushing),
            write.addr.eq(flushed),
            write.data.eq(total),
        ]
        for i, p in enumerate(pending):
            with m.If(flushing & (flushed == i)):
                m.d.sync += [p.eq(added[i]), stale[i].eq(0)]
            with m.Else():
                m.d.sync += p.eq(p + added[i])

        # After the flush's statements, so that a clear wins over it (a word
        # read before the clear is not written back).
        with m.If(self.clear):
            m.d.sync += [p.eq(0) for p in pending]
            m.d.sync += [stale.eq((1 << n) - 1), flushing.eq(0)]
        return m
