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

from ..hdl.serial_matrix_part import SerialMatrixPart, part_retransmit_cycles
from .board_top import BOARD_LEDS, connect_board_io, uart_divisor


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
        connect_board_io(m, platform, self.board, chip, self.clock_hz,
                         {"busy": chip.busy, "error": chip.error, "link_error": chip.link_error})
        return m
