"""The matrix part on a board: `SerialMatrixPart` on the board's FTDI UART, with LEDs.

The part of the chip that fits the iCEBreaker's UP5K when the whole chip
does not (docs/fpga.md, "What fits the UP5K"). It runs from the board
oscillator unless given another clock, which the board's PLL makes
(`tpu.fpga.board_top.board_clock`), with the UART divisor computed from
the clock as for the whole chip (`tpu.fpga.board_top.uart_divisor`). The LEDs are the whole chip's
(`tpu.fpga.board_top.BOARD_LEDS`) but for ``halted``, which the part does
not have: busy (multiplies or weight loads in flight), error (a command was
refused: STATUS.ERROR), link error and heartbeat.
"""

from ..hdl.serial_matrix_part import SerialMatrixPart, part_retransmit_cycles
from .board_top import BOARD_OSCILLATOR_HZ, BoardTop, board_clock


__all__ = ["BoardMatrixPart"]


class BoardMatrixPart(BoardTop):
    """`SerialMatrixPart(config)` on `board`'s UART and LEDs, at `baudrate`,
    with a clock of `clock_hz` (None: the board's oscillator; another from
    its PLL, `board_clock`). ``chip`` is the `SerialMatrixPart`;
    ``clock_hz`` the clock as made, ``pll`` the PLL settings or None."""

    def __init__(self, board, config, *, clock_hz=None, baudrate=115200):
        if board not in BOARD_OSCILLATOR_HZ:
            self._MustUse__silence = True   # refused, so never elaborated
            raise ValueError(f"unknown board {board!r}: choose one of {', '.join(BOARD_OSCILLATOR_HZ)}")
        clock_hz, pll = board_clock(board, BOARD_OSCILLATOR_HZ[board] if clock_hz is None else clock_hz)
        super().__init__(board, config, SerialMatrixPart, part_retransmit_cycles,
                         clock_hz=clock_hz, baudrate=baudrate, pll=pll)
