"""Merges several parsed-TLP streams into one, a whole packet at a time."""

from amaranth import *
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .tlp import tlp_stream


__all__ = ["TlpArbiter"]


class TlpArbiter(wiring.Component):
    """Round-robin between `count` packet streams; a stream granted keeps the
    output from the cycle its packet is first offered until its ``last`` beat
    is taken, so packets never interleave and an offered beat never changes.

    Round robin rather than fixed priority: completions, read requests and
    writes all make progress, so no source can starve another (a starved
    completion would stall the host's MMIO reads).

    Ports
    -----
    i : In(tlp_stream) x count (``i__0`` ...)
    o : Out(tlp_stream)
    """

    def __init__(self, link_dw, count):
        self._count = count
        super().__init__({
            **{f"i{n}": In(tlp_stream(link_dw)) for n in range(count)},
            "o": Out(tlp_stream(link_dw)),
        })

    def inputs(self):
        return [getattr(self, f"i{n}") for n in range(self._count)]

    def elaborate(self, platform):
        m = Module()
        inputs = self.inputs()
        grant = Signal(range(self._count))
        locked = Signal()   # inside a packet of `grant`

        # Next grant: the first valid input after the current one.
        choice = Signal.like(grant)
        m.d.comb += choice.eq(grant)
        with m.If(~locked):
            with m.Switch(grant):
                for g in range(self._count):
                    with m.Case(g):
                        for offset in reversed(range(1, self._count + 1)):
                            n = (g + offset) % self._count
                            with m.If(inputs[n].valid):
                                m.d.comb += choice.eq(n)

        # The output is an OR of the inputs gated by a one-hot select: two
        # LUT4s a bit for three inputs, where a multiplexer indexed by
        # `choice` took three.
        chosen = [Signal(name=f"chosen{n}") for n in range(self._count)]
        m.d.comb += [c.eq(choice == n) for n, c in enumerate(chosen)]
        valid = Cat(c & s.valid for c, s in zip(chosen, inputs)).any()
        payload = 0
        for c, s in zip(chosen, inputs):
            payload = payload | (s.payload.as_value() & c.replicate(len(s.payload.as_value())))
        m.d.comb += [self.o.valid.eq(valid), self.o.payload.eq(payload)]
        for n, s in enumerate(inputs):
            m.d.comb += s.ready.eq(chosen[n] & self.o.ready)

        # Locked from the first cycle a packet is offered, not from its first
        # accepted beat: the transmitter sends header-only link beats before
        # it takes the first parsed beat, and a grant that moved meanwhile
        # would splice another packet's words into the header on the link.
        with m.If(self.o.valid):
            m.d.sync += [grant.eq(choice), locked.eq(~(self.o.ready & self.o.payload.last))]
        return m
