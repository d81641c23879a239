"""The whole chip on a board: `SerialChip` on the board's FTDI UART, with LEDs.

The chip runs from the board oscillator (12 MHz on the iCEBreaker, 25 MHz on
the ULX3S), so no PLL is needed; the UART divisor is the oscillator over the
baud rate, rounded. The LEDs (docs/fpga.md):

==========  ===========================  =============================
signal      iCEBreaker                   ULX3S
==========  ===========================  =============================
busy        break-off PMOD LED 2         LED 1
halted      green LED (and PMOD LED 3)   LED 2
error       red LED (and PMOD LED 4)     LED 3
link error  PMOD LED 5                   LED 4
heartbeat   PMOD LED 6                   LED 0
==========  ===========================  =============================

`link error` lights for about a second after a frame from the host arrived
damaged; `heartbeat` blinks at about 1 Hz while the clock runs.
"""

from amaranth import *
from amaranth.build import ResourceError
from amaranth.lib import io

from ..hdl.serial_chip import SerialChip, retransmit_cycles


__all__ = ["BoardChip", "BOARD_LEDS", "uart_divisor"]

#: board -> {signal: [LED resource numbers]} (``led`` resources of the platform)
BOARD_LEDS = {
    "icebreaker": {"halted": [1, 3], "error": [0, 4], "busy": [2], "link_error": [5],
                   "heartbeat": [6]},
    "ulx3s-85f": {"heartbeat": [0], "busy": [1], "halted": [2], "error": [3], "link_error": [4]},
}


def uart_divisor(clock_hz, baudrate):
    """Clock cycles per UART bit, or ValueError when the rate is more than
    2% off what the clock can make (or needs fewer than 4 cycles a bit)."""
    divisor = round(clock_hz / baudrate)
    if divisor < 4:
        raise ValueError(f"{baudrate:g} baud is too fast for a {clock_hz / 1e6:g} MHz clock: "
                         f"the UART needs at least 4 clock cycles a bit")
    error = abs(clock_hz / divisor - baudrate) / baudrate
    if error > 0.02:
        raise ValueError(f"{baudrate:g} baud is {100 * error:.1f}% off what a {clock_hz / 1e6:g} MHz "
                         f"clock makes (divisor {divisor}); choose another baud rate")
    return divisor


class BoardChip(Elaboratable):
    """`SerialChip(config)` on `board`'s UART and LEDs, at `baudrate`."""

    def __init__(self, board, config, *, clock_hz, baudrate=115200):
        if board not in BOARD_LEDS:
            raise ValueError(f"unknown board {board!r}: choose one of {', '.join(BOARD_LEDS)}")
        self.board = board
        self.config = config
        self.clock_hz = clock_hz
        self.baudrate = baudrate
        divisor = uart_divisor(clock_hz, baudrate)
        # A host's round trip through USB and the OS: allow 50 ms.
        self.chip = SerialChip(config, divisor=divisor,
                               retransmit=retransmit_cycles(config, divisor, int(0.05 * clock_hz)),
                               led_hold=int(clock_hz))

    def elaborate(self, platform):
        m = Module()
        m.submodules.chip = chip = self.chip
        uart = platform.request("uart", 0, dir="-")
        m.submodules.rx = rx = io.Buffer("i", uart.rx)
        m.submodules.tx = tx = io.Buffer("o", uart.tx)
        m.d.comb += [chip.rx.eq(rx.i), tx.o.eq(chip.tx)]

        heartbeat = Signal(range(int(self.clock_hz)))
        blink = Signal()
        with m.If(heartbeat == 0):
            m.d.sync += [heartbeat.eq(int(self.clock_hz) // 2 - 1), blink.eq(~blink)]
        with m.Else():
            m.d.sync += heartbeat.eq(heartbeat - 1)
        signals = {"busy": chip.busy, "halted": chip.halted, "error": chip.error,
                   "link_error": chip.link_error, "heartbeat": blink}
        for name, leds in BOARD_LEDS[self.board].items():
            for n in leds:
                try:
                    pin = platform.request("led", n, dir="-")
                except ResourceError:
                    continue            # e.g. the iCEBreaker's break-off PMOD is not fitted
                buffer = io.Buffer("o", pin)
                m.submodules[f"led_{n}"] = buffer
                m.d.comb += buffer.o.eq(signals[name])
        return m
