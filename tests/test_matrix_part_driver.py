"""The host's `MatrixPart` without hardware: the register accesses it makes
and the bad input it refuses (the RTL tests run it against the part)."""

import asyncio

import numpy as np
import pytest

from tpu import TPUConfig
from tpu.driver.matrix_part import MatrixPart, MatrixPartError
from tpu.driver.matrix_part_registers import MATRIX_PART_MAGIC, MatrixPartRegister as R


CONFIG = TPUConfig(rows=4, cols=3, acc_rows=32, ub_rows=64, weight_mem_tiles=8, weight_fifo_tiles=2)


class RecordingLink:
    """Registers as a dict; every access recorded."""

    def __init__(self, ident=MATRIX_PART_MAGIC << 16 | 4 << 8 | 3, values=()):
        self.values = {R.ID: ident, R.ACC_ROWS: 32, R.UB_ROWS: 64, R.WEIGHT_TILES: 8, R.FIFO_TILES: 2,
                       R.STATUS: 0, **dict(values)}
        self.log = []

    async def read32(self, offset):
        self.log.append(("r", offset))
        return self.values.get(offset, 0)

    async def write32(self, offset, value):
        self.log.append(("w", offset, value))


def _open(link):
    return asyncio.run(MatrixPart.open(link, CONFIG))


def test_open_checks_the_part():
    assert isinstance(_open(RecordingLink()), MatrixPart)
    with pytest.raises(MatrixPartError, match="does not answer as a matrix part"):
        _open(RecordingLink(ident=0x1234_0000))
    with pytest.raises(MatrixPartError, match="ub_rows 128 \\(expected 64\\)"):
        _open(RecordingLink(values={R.UB_ROWS: 128}))


def test_rows_are_packed_a_word_each():
    link = RecordingLink()
    part = _open(link)
    link.log.clear()
    w = np.array([[1, -1, 2], [-128, 127, 0], [3, 4, 5], [0, 0, -2]])
    asyncio.run(part.write_tile(2, w))
    assert link.log == [("w", R.WMEM_ADDR, 8), ("w", R.WMEM_DATA, 0x02FF01), ("w", R.WMEM_DATA, 0x007F80),
                        ("w", R.WMEM_DATA, 0x050403), ("w", R.WMEM_DATA, 0xFE0000)]
    link.log.clear()
    asyncio.run(part.matmul(5, 3, 7, accumulate=True, switch=True))
    assert link.log[:3] == [("w", R.MM_SRC, 5), ("w", R.MM_COUNT, 3), ("w", R.MM_GO, 7 | 1 << 16 | 1 << 18)]


def test_a_refused_command_raises():
    link = RecordingLink(values={R.STATUS: 2})
    part = MatrixPart(link, CONFIG)
    with pytest.raises(MatrixPartError, match="refused LOAD"):
        asyncio.run(part.load(0, 1))


def test_bad_input_is_a_value_error():
    part = _open(RecordingLink())
    with pytest.raises(ValueError, match="a weight tile is 4x3 int8"):
        asyncio.run(part.write_tile(0, np.zeros((3, 3))))
    with pytest.raises(ValueError, match="a weight tile is 4x3 int8"):
        asyncio.run(part.write_tile(0, np.full((4, 3), 128)))
    with pytest.raises(ValueError, match="tile 8 is outside"):
        asyncio.run(part.write_tile(8, np.zeros((4, 3))))
    with pytest.raises(ValueError, match="UB rows 62..65 are outside"):
        asyncio.run(part.write_rows(62, np.zeros((4, 4))))
    with pytest.raises(ValueError, match="at least one row"):
        asyncio.run(part.matmul(0, 0, 0))
