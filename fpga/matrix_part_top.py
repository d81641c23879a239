"""The matrix part on a board: `SerialMatrixPart` on the board's FTDI UART, with LEDs.

The part of the chip that fits the iCEBreaker's UP5K when the whole chip
does not (docs/fpga.md, "What fits the UP5K"). It runs from the board
oscillator, with the UART divisor computed from it as for the whole chip
(`tpu.fpga.board_top.uart_divisor`). The LEDs are the whole chip's
(`tpu.fpga.board_top.BOARD_LEDS`) but for ``halted``, which the part does
not have: busy (multiplies or weight loads in flight), error (a command was
refused: STATUS.ERROR), link error and heartbeat.
"""

from ..hdl.serial_matrix_part import SerialMatrixPart, part_retransmit_cycles
from .board_top import BoardTop


__all__ = ["BoardMatrixPart"]


class BoardMatrixPart(BoardTop):
    """`SerialMatrixPart(config)` on `board`'s UART and LEDs, at `baudrate`.
    ``chip`` is the `SerialMatrixPart`."""

    def __init__(self, board, config, *, clock_hz, baudrate=115200):
        super().__init__(board, config, SerialMatrixPart, part_retransmit_cycles,
                         clock_hz=clock_hz, baudrate=baudrate)
