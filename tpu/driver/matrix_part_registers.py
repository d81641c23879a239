"""The registers of the matrix part (docs/fpga.md, "What fits the UP5K").

The matrix part is the chip's matrix unit alone (weight memory, weight FIFO,
a unified buffer, the systolic array and its accumulators) behind the UART
link, for a board too small for the whole chip. The host reaches it with
one-word register reads and writes (`tpu.hdl.register_target`); these are
their byte offsets, shared by the RTL (`tpu.hdl.matrix_part`) and the host
(`tpu.driver.matrix_part`).

A UB row or a weight-tile row is one word (the array is at most 4 x 4):
byte ``k`` is element ``k``. An accumulator row is ``cols`` words read one
after the other from ``ACC_DATA``.
"""

import enum


__all__ = ["MatrixPartRegister", "MatrixPartStatus", "MATRIX_PART_MAGIC", "MM_ACCUMULATE", "MM_UNSIGNED",
           "MM_SWITCH", "MAX_SIDE"]

#: ``ID`` bits 31:16; bits 15:8 are the array's rows, 7:0 its columns.
MATRIX_PART_MAGIC = 0x4D50

#: Rows and columns of the array at most: a row of either fits a word.
MAX_SIDE = 4

#: ``MM_GO`` flag bits, above the accumulator row in bits 15:0.
MM_ACCUMULATE = 1 << 16
MM_UNSIGNED = 1 << 17
MM_SWITCH = 1 << 18


class MatrixPartRegister(enum.IntEnum):
    """Byte offsets. (r) read only, (w) write only; a write waits, by holding
    the link, until it is safe (docs/fpga.md says when)."""
    ID = 0x00            #: (r) MATRIX_PART_MAGIC << 16 | rows << 8 | cols
    ACC_ROWS = 0x04      #: (r) accumulator rows
    UB_ROWS = 0x08       #: (r) unified buffer rows
    WEIGHT_TILES = 0x0C  #: (r) weight tiles the weight memory holds
    FIFO_TILES = 0x10    #: (r) tiles the weight FIFO holds
    STATUS = 0x14        #: (r) MatrixPartStatus, tiles queued in bits 15:8; (w) 1s clear ERROR
    WMEM_ADDR = 0x18     #: (w) weight-memory row (tile * rows + k) WMEM_DATA writes next
    WMEM_DATA = 0x1C     #: (w) row k of a tile, w[k, 0..cols-1] as int8 bytes; the address steps
    UB_ADDR = 0x20       #: (w) UB row UB_DATA writes next
    UB_DATA = 0x24       #: (w) one activation row, x[0..rows-1] as bytes; the address steps
    ACC_ADDR = 0x28      #: (w) accumulator row ACC_DATA reads next, from column 0
    ACC_DATA = 0x2C      #: (r) int32 of the row and column; steps column, then row
    LOAD = 0x30          #: (w) tile | count << 16: queue tiles tile..tile+count-1 for the array
    MM_SRC = 0x34        #: (w) UB row of the next multiply's first activation row
    MM_COUNT = 0x38      #: (w) rows of the next multiply
    MM_GO = 0x3C         #: (w) acc row | MM_* flags: multiply MM_COUNT rows from MM_SRC
    CYCLES = 0x40        #: (r) clock cycles spent busy since reset (wraps)


class MatrixPartStatus(enum.IntFlag):
    BUSY = 1 << 0        #: multiplies or weight loads in flight
    ERROR = 1 << 1       #: a LOAD or MM_GO was refused (sticky until written 1)
