"""An 8N1 UART: a receiver and a transmitter with a fixed clock divisor.

A bit lasts `divisor` clock cycles (the clock frequency over the baud rate,
rounded: the receiver samples mid-bit, so a few percent of error is fine).
Bits go least significant first, framed by a low start bit and a high stop
bit; the idle line is high.
"""

from amaranth import *
from amaranth.lib import stream, wiring
from amaranth.lib.cdc import FFSynchronizer
from amaranth.lib.wiring import In, Out


__all__ = ["UartRx", "UartTx", "check_divisor"]


def check_divisor(divisor):
    if not isinstance(divisor, int) or isinstance(divisor, bool) or divisor < 4:
        raise ValueError(f"the UART divisor (clock cycles a bit) must be an int of at least 4, "
                         f"not {divisor!r}")
    return divisor


class UartTx(wiring.Component):
    """Sends each byte of `data` on `tx`; `data` is ready while the line is idle."""

    def __init__(self, divisor):
        self._divisor = check_divisor(divisor)
        super().__init__({"data": In(stream.Signature(8)), "tx": Out(1, init=1)})

    def elaborate(self, platform):
        m = Module()
        # Stop bit, data, start bit: shifted out from bit 0, refilled with
        # ones, so the line rests high once a byte is out. `tx` is a
        # register's output: no glitch reaches the pin.
        shift = Signal(10, init=0x3FF)
        bits = Signal(range(11))
        count = Signal(range(self._divisor))
        m.d.comb += [self.tx.eq(shift[0]), self.data.ready.eq(bits == 0)]
        with m.If(bits == 0):
            with m.If(self.data.valid):
                m.d.sync += [shift.eq(Cat(C(0, 1), self.data.payload, C(1, 1))),
                             bits.eq(10), count.eq(self._divisor - 1)]
        with m.Elif(count == 0):
            m.d.sync += [shift.eq(Cat(shift[1:], C(1, 1))), bits.eq(bits - 1),
                         count.eq(self._divisor - 1)]
        with m.Else():
            m.d.sync += count.eq(count - 1)
        return m


class UartRx(wiring.Component):
    """Receives bytes from `rx`: each one is on `data` for one cycle (there
    is no backpressure on a wire). A byte whose stop bit is low is dropped
    and pulses `error`."""

    def __init__(self, divisor):
        self._divisor = check_divisor(divisor)
        super().__init__({"rx": In(1, init=1), "data": Out(stream.Signature(8, always_ready=True)),
                          "error": Out(1)})

    def elaborate(self, platform):
        m = Module()
        line = Signal(init=1)
        m.submodules.sync = FFSynchronizer(self.rx, line, init=1)
        count = Signal(range(self._divisor))
        bits = Signal(range(8))
        shift = Signal(8)
        m.d.comb += self.data.payload.eq(shift)
        with m.FSM():
            with m.State("IDLE"):
                with m.If(~line):
                    m.d.sync += count.eq(self._divisor // 2 - 1)
                    m.next = "START"
            with m.State("START"):
                with m.If(count != 0):
                    m.d.sync += count.eq(count - 1)
                with m.Elif(line):
                    m.next = "IDLE"       # a glitch, not a start bit
                with m.Else():
                    m.d.sync += [count.eq(self._divisor - 1), bits.eq(0)]
                    m.next = "DATA"
            with m.State("DATA"):
                with m.If(count != 0):
                    m.d.sync += count.eq(count - 1)
                with m.Else():
                    m.d.sync += [shift.eq(Cat(shift[1:], line)), bits.eq(bits + 1),
                                 count.eq(self._divisor - 1)]
                    with m.If(bits == 7):
                        m.next = "STOP"
            with m.State("STOP"):
                with m.If(count != 0):
                    m.d.sync += count.eq(count - 1)
                with m.Else():
                    m.d.comb += [self.data.valid.eq(line), self.error.eq(~line)]
                    m.next = "IDLE"
        return m
