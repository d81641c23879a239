"""Accumulator memory: int32 sums written by the matrix unit."""

from amaranth import *
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from .ram import Ram


__all__ = ["Accumulators", "AccReadSignature", "AccWriteSignature"]


def AccReadSignature(*, acc_rows, cols):
    """A synchronous read port, from the reader's side: ``data`` is valid the
    cycle after ``en`` with ``addr``."""
    return wiring.Signature({
        "en":   Out(1),
        "addr": Out(range(acc_rows)),
        "data": In(data.ArrayLayout(signed(32), cols)),
    })


def AccWriteSignature(*, acc_rows, cols):
    """One accumulator-row update, from the writer's side; never back-pressured."""
    return wiring.Signature({
        "valid":      Out(1),
        "addr":       Out(range(acc_rows)),
        "accumulate": Out(1),
        "data":       Out(data.ArrayLayout(signed(32), cols)),
    })


class Accumulators(wiring.Component):
    """``acc_rows x cols`` int32 accumulator memory.

    An update either overwrites a row or adds to it (two's complement, wrapping
    at 32 bits). Updates are read-modify-write over two pipeline stages, with a
    read port transparent to the write port, so back-to-back updates of the
    same row see each other: any sequence of updates, one per cycle, gives the
    same result as applying them in order.

    Members
    -------
    update : In(AccWriteSignature)
        Row updates, one per cycle at most, taking effect one cycle later.
    written : Out(AccWriteSignature)
        The value each update stored (``accumulate`` as requested), in the
        cycle it is stored: a monitor for testbenches and performance counters.
    read : In(AccReadSignature)
        A read port for the activation stage.

    With ``shared_read`` the activation stage's reads and the updates' reads
    share one read port of the memory (half its block RAM), updates first:
    only for a chip whose sequencer never runs ACT while matrix rows are in
    flight (``TPUConfig.serial_issue``), where the two never meet. The
    activation stage's ``data`` then holds only while no update comes.
    """

    def __init__(self, *, acc_rows, cols, shared_read=False):
        self._acc_rows = acc_rows
        self._cols = cols
        self._shared_read = shared_read
        self._mem = Ram(shape=data.ArrayLayout(signed(32), cols), depth=acc_rows)
        super().__init__({
            "update":  In(AccWriteSignature(acc_rows=acc_rows, cols=cols)),
            "written": Out(AccWriteSignature(acc_rows=acc_rows, cols=cols)),
            "read":    In(AccReadSignature(acc_rows=acc_rows, cols=cols)),
        })

    @property
    def acc_rows(self):
        return self._acc_rows

    @property
    def cols(self):
        return self._cols

    def elaborate(self, platform):
        m = Module()
        m.submodules.mem = mem = self._mem
        wr = mem.write_port()
        rmw_rd = mem.read_port(transparent_for=(wr,))
        if self._shared_read:
            user_rd = rmw_rd
            m.d.comb += [
                rmw_rd.addr.eq(Mux(self.update.valid, self.update.addr, self.read.addr)),
                rmw_rd.en.eq(self.update.valid | self.read.en),
            ]
        else:
            user_rd = mem.read_port(transparent_for=(wr,))
            # Stage 1: fetch the old row while the new sums are registered.
            m.d.comb += [
                rmw_rd.addr.eq(self.update.addr),
                rmw_rd.en.eq(self.update.valid),
            ]
        valid = Signal()
        addr = Signal.like(self.update.addr)
        accumulate = Signal()
        sums = Signal.like(self.update.data)
        m.d.sync += [
            valid.eq(self.update.valid),
            addr.eq(self.update.addr),
            accumulate.eq(self.update.accumulate),
            sums.eq(self.update.data),
        ]

        # Stage 2: add (or not) and store.
        result = Signal.like(self.update.data)
        for n in range(self._cols):
            old = Mux(accumulate, rmw_rd.data[n], 0)
            m.d.comb += result[n].eq((old + sums[n])[:32])
        m.d.comb += [
            wr.en.eq(valid),
            wr.addr.eq(addr),
            wr.data.eq(result),
            self.written.valid.eq(valid),
            self.written.addr.eq(addr),
            self.written.accumulate.eq(accumulate),
            self.written.data.eq(result),
        ]

        if not self._shared_read:
            m.d.comb += [user_rd.addr.eq(self.read.addr), user_rd.en.eq(self.read.en)]
        m.d.comb += self.read.data.eq(user_rd.data)
        return m
