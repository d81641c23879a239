"""The matrix part on a board: `SerialMatrixPart` on the board's FTDI UART, with LEDs.

The part of the chip that fits the iCEBreaker's UP5K when the whole chip
does not (docs/fpga.md, "What fits the UP5K"). It runs from the board
oscillator, with the UART divisor computed from it as for the whole chip
(`tpu.fpga.board_top.uart_divisor`). The LEDs are the whole chip's
(`tpu.fpga.board_top.BOARD_LEDS`) but for ``halted``, which the part does
not have: busy (multiplies or weight loads in flight), error (a command was
refused: STATUS.ERROR), link error and heartbeat.
"""

from amaranth import *
from amaranth.build import ResourceError
from amaranth.lib import io

from ..hdl.serial_matrix_part import SerialMatrixPart, part_retransmit_cycles
from .board_top import BOARD_LEDS, uart_divisor


__all__ = ["BoardMatrixPart"]


class BoardMatrixPart(Elaboratable):
    """`SerialMatrixPart(config)` on `board`'s UART and LEDs, at `baudrate`.
    ``chip`` is the `SerialMatrixPart`."""

    def __init__(self, board, config, *, clock_hz, baudrate=115200):
        if board not in BOARD_LEDS:
            raise ValueError(f"unknown board {board!r}: choose one of {', '.join(BOARD_LEDS)}")
        self.board = board
        self.config = config
        self.clock_hz = clock_hz
        self.baudrate = baudrate
        divisor = uart_divisor(clock_hz, baudrate)
        # A host's round trip through USB and the OS: allow 50 ms.
        self.chip = SerialMatrixPart(config, divisor=divisor,
                                     retransmit=part_retransmit_cycles(divisor, int(0.05 * clock_hz)),
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
        signals = {"busy": chip.busy, "error": chip.error, "link_error": chip.link_error,
                   "heartbeat": blink}
        for name, leds in BOARD_LEDS[self.board].items():
            if name not in signals:
                continue
            for n in leds:
                try:
                    pin = platform.request("led", n, dir="-")
                except ResourceError:
                    continue            # e.g. the iCEBreaker's break-off PMOD is not fitted
                m.submodules[f"led_{n}"] = buffer = io.Buffer("o", pin)
                m.d.comb += buffer.o.eq(signals[name])
        return m
