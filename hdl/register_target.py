"""A BAR of 32-bit registers behind the link stream: one-word MWr and MRd only.

`RegisterTarget` is the smallest completer the serial link (docs/serial_link.md)
can talk to: the driver's `SerialLink.read32` / `write32` send a one-word
MRd or MWr to a BAR offset, and a read is answered with a CplD. It serves
designs that are not the whole chip and have no `HostInterface` (the matrix
part of docs/fpga.md, "What fits the UP5K").

A TLP is taken whole (``link_dw`` 1: a word a beat) before it acts:

* MWr of one word with all four byte enables, inside the BAR: a write.
  Any other write (longer, partial, outside the BAR) is dropped.
* MRd of one word inside the BAR: a read, answered with a CplD of the word.
  Any other read is answered with an Unsupported Request completion.
* Anything else is dropped.
"""

from amaranth import *
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from .tlp import CplStatus, FmtType, link_stream


__all__ = ["RegisterTarget", "RegisterRequest"]


def RegisterRequest(addr_bits):
    """One register access: word address in the BAR, write or read, data to write."""
    return data.StructLayout({"addr": addr_bits, "write": 1, "data": 32})


class RegisterTarget(wiring.Component):
    """One-word MWr/MRd TLPs to a register bus; see the module docstring.

    Parameters
    ----------
    bar_bytes : int
        Size of the BAR, a power of two of at least 8; offsets at or above it
        are outside.
    completer_id : int
        The 16-bit ID the completions carry.

    Members
    -------
    rx : In(link_stream(1))
        TLPs from the host.
    tx : Out(link_stream(1))
        Completions to the host.
    request : Out(stream.Signature(RegisterRequest))
        Register accesses; the register file may hold one off (``ready``
        low) as long as it needs.
    read_data : In(stream.Signature(32, always_ready=True))
        The answer to each read request, one or more cycles after it was
        taken; no other request comes before it.
    """

    def __init__(self, *, bar_bytes=4096, completer_id=0x0100):
        if not isinstance(bar_bytes, int) or bar_bytes < 8 or bar_bytes & (bar_bytes - 1):
            raise ValueError(f"bar_bytes must be a power of two of at least 8, not {bar_bytes!r}")
        self._addr_bits = (bar_bytes // 4 - 1).bit_length()
        self._completer_id = completer_id
        super().__init__({
            "rx":        In(link_stream(1)),
            "tx":        Out(link_stream(1)),
            "request":   Out(stream.Signature(RegisterRequest(self._addr_bits))),
            "read_data": In(stream.Signature(32, always_ready=True)),
        })

    @property
    def addr_bits(self):
        return self._addr_bits

    def elaborate(self, platform):
        m = Module()
        bits = self._addr_bits

        # What the TLP said, field by field as its words arrive.
        fmt_type = Signal(8)
        length = Signal(10)
        requester = Signal(16)
        tag = Signal(8)
        first_be = Signal(4)
        addr = Signal(bits)
        lower = Signal(7)
        outside = Signal()          # an address bit at or above the BAR's size
        wdata = Signal(32)
        count = Signal(3)           # words taken of this TLP, saturating at 7
        words = Signal(3)           # words of the TLP just taken
        rdata = Signal(32)
        ok = Signal()               # the completion is successful (CplD), else UR (Cpl)

        word = self.rx.payload.data
        hdr4 = fmt_type[5]
        address_word = Mux(hdr4, 3, 2)

        with m.FSM():
            with m.State("TAKE"):
                m.d.comb += self.rx.ready.eq(1)
                with m.If(self.rx.valid):
                    taken = Mux(count == 7, 7, count + 1)
                    m.d.sync += count.eq(taken)
                    with m.If(count == 0):
                        m.d.sync += [fmt_type.eq(word[24:]), length.eq(word[:10]), outside.eq(0)]
                    with m.If(count == 1):
                        m.d.sync += [requester.eq(word[16:]), tag.eq(word[8:16]),
                                     first_be.eq(word[:4])]
                    with m.If((count == 2) & hdr4):
                        # The high half of a 64-bit address.
                        m.d.sync += outside.eq(word != 0)
                    with m.If((count >= 2) & (count == address_word)):
                        m.d.sync += [addr.eq(word[2:2 + bits]), lower.eq(word[:7]),
                                     outside.eq(outside | (word[2 + bits:] != 0))]
                    with m.If((count >= 2) & (count == address_word + 1)):
                        m.d.sync += wdata.eq(word)
                    with m.If(self.rx.payload.last):
                        m.d.sync += [count.eq(0), words.eq(taken)]
                        m.next = "DECIDE"
            with m.State("DECIDE"):
                header = Mux(hdr4, 4, 3)
                is_write = (fmt_type == FmtType.MWR_32) | (fmt_type == FmtType.MWR_64)
                is_read = (fmt_type == FmtType.MRD_32) | (fmt_type == FmtType.MRD_64)
                m.next = "TAKE"
                with m.If(is_write & (length == 1) & (first_be == 0xF) & ~outside &
                          (words == header + 1)):
                    m.next = "WRITE"
                with m.Elif(is_read & (words == header)):
                    with m.If((length == 1) & ~outside):
                        m.next = "READ"
                    with m.Else():
                        m.d.sync += [ok.eq(0), rdata.eq(0)]
                        m.next = "CPL0"
            with m.State("WRITE"):
                m.d.comb += [self.request.valid.eq(1), self.request.payload.addr.eq(addr),
                             self.request.payload.write.eq(1), self.request.payload.data.eq(wdata)]
                with m.If(self.request.ready):
                    m.next = "TAKE"
            with m.State("READ"):
                m.d.comb += [self.request.valid.eq(1), self.request.payload.addr.eq(addr)]
                with m.If(self.request.ready):
                    m.next = "READ_WAIT"
            with m.State("READ_WAIT"):
                with m.If(self.read_data.valid):
                    m.d.sync += [rdata.eq(self.read_data.payload), ok.eq(1)]
                    m.next = "CPL0"
            # The completion: three header words, then the data word (CplD),
            # or the header alone (Cpl, Unsupported Request).
            status = Mux(ok, C(CplStatus.SC, 3), C(CplStatus.UR, 3))
            cpl = [Cat(Mux(ok, C(1, 10), C(0, 10)), C(0, 14),
                       Mux(ok, C(FmtType.CPLD, 8), C(FmtType.CPL, 8))),
                   Cat(C(4, 12), C(0, 1), status, C(self._completer_id, 16)),
                   Cat(lower, C(0, 1), tag, requester),
                   rdata]
            for n, value in enumerate(cpl):
                with m.State(f"CPL{n}"):
                    last = C(1) if n == 3 else (~ok if n == 2 else C(0))
                    m.d.comb += [self.tx.valid.eq(1), self.tx.payload.data.eq(value),
                                 self.tx.payload.keep.eq(1), self.tx.payload.last.eq(last)]
                    with m.If(self.tx.ready):
                        if n == 3:
                            m.next = "TAKE"
                        else:
                            with m.If(last):
                                m.next = "TAKE"
                            with m.Else():
                                m.next = f"CPL{n + 1}"
        return m
