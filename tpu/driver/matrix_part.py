"""`MatrixPart`: the host's handle on the matrix part of the chip on a board
too small for the whole chip (docs/fpga.md, "What fits the UP5K").

It speaks the registers of `tpu.driver.matrix_part_registers` through any
`Link` with ``read32`` and ``write32``: a `SerialLink` over pyserial on a
board, or over a simulated UART in the tests. Its methods follow the matrix
engine's golden model (`tpu.models.matrix_engine_model`): weight tiles
are written to the weight memory, queued for the array (`load`), and each
multiply (`matmul`) takes UB rows through the current tile into accumulator
rows, switching to the next queued tile first when asked::

    part = await MatrixPart.open(link, config)
    await part.write_tile(0, w)               # w: rows x cols int8
    await part.write_rows(0, x)               # x: B x rows int8 (or uint8)
    await part.load(0)
    await part.matmul(0, len(x), 0, switch=True)
    acc = await part.read_accumulators(0, len(x))   # B x cols int32: x @ w
"""

import numpy as np

from .errors import TpuError
from .matrix_part_registers import (MATRIX_PART_MAGIC, MM_ACCUMULATE, MM_SWITCH, MM_UNSIGNED,
                                    MatrixPartRegister as R, MatrixPartStatus)


__all__ = ["MatrixPart", "MatrixPartError", "open_matrix_part"]


class MatrixPartError(TpuError):
    """The matrix part refused a command, or is not the part this host expects."""


def _word(values, width):
    data = np.asarray(values, dtype=np.int64).reshape(-1)
    if len(data) != width:
        raise ValueError(f"a row has {width} elements, not {len(data)}")
    return int.from_bytes(bytes(int(v) & 0xFF for v in data), "little")


class MatrixPart:
    """The matrix part of `config` behind `link`; see the module docstring."""

    def __init__(self, link, config):
        self.link = link
        self.config = config

    @classmethod
    async def open(cls, link, config):
        """Check that `link` reaches a matrix part of `config`'s shape and sizes."""
        part = cls(link, config)
        ident = await link.read32(R.ID)
        if ident >> 16 != MATRIX_PART_MAGIC:
            raise MatrixPartError(f"{link!r} does not answer as a matrix part (ID 0x{ident:08x})")
        found = {"rows": ident >> 8 & 0xFF, "cols": ident & 0xFF,
                 "acc_rows": await link.read32(R.ACC_ROWS), "ub_rows": await link.read32(R.UB_ROWS),
                 "weight_mem_tiles": await link.read32(R.WEIGHT_TILES),
                 "weight_fifo_tiles": await link.read32(R.FIFO_TILES)}
        wrong = [f"{name} {value} (expected {getattr(config, name)})" for name, value in found.items()
                 if value != getattr(config, name)]
        if wrong:
            raise MatrixPartError(f"the matrix part differs from the configuration: {', '.join(wrong)}")
        await part.clear_error()
        return part

    async def status(self):
        """(MatrixPartStatus, tiles queued for the array)."""
        value = await self.link.read32(R.STATUS)
        return MatrixPartStatus(value & 0x3), value >> 8 & 0xFF

    async def clear_error(self):
        await self.link.write32(R.STATUS, int(MatrixPartStatus.ERROR))

    async def check(self, what):
        """Raise MatrixPartError if the part refused `what`."""
        status, _ = await self.status()
        if status & MatrixPartStatus.ERROR:
            await self.clear_error()
            raise MatrixPartError(f"the matrix part refused {what}")

    async def write_tile(self, tile, w):
        """Weight tile `tile` of the weight memory := `w` (rows x cols int8)."""
        cfg = self.config
        w = np.asarray(w)
        if w.shape != (cfg.rows, cfg.cols) or w.min() < -128 or w.max() > 127:
            raise ValueError(f"a weight tile is {cfg.rows}x{cfg.cols} int8, not {w.shape} "
                             f"from {w.min()} to {w.max()}")
        if not 0 <= tile < cfg.weight_mem_tiles:
            raise ValueError(f"tile {tile} is outside the weight memory's {cfg.weight_mem_tiles}")
        await self.link.write32(R.WMEM_ADDR, tile * cfg.rows)
        for k in range(cfg.rows):
            await self.link.write32(R.WMEM_DATA, _word(w[k], cfg.cols))

    async def write_rows(self, ub_addr, x):
        """UB rows ``ub_addr ..`` := the rows of `x` (B x rows, int8 or uint8)."""
        cfg = self.config
        x = np.asarray(x)
        if x.ndim != 2 or x.shape[1] != cfg.rows or x.size and (x.min() < -128 or x.max() > 255):
            raise ValueError(f"activation rows are B x {cfg.rows} bytes, not {x.shape}")
        if not 0 <= ub_addr or ub_addr + len(x) > cfg.ub_rows:
            raise ValueError(f"UB rows {ub_addr}..{ub_addr + len(x) - 1} are outside its {cfg.ub_rows}")
        await self.link.write32(R.UB_ADDR, ub_addr)
        for row in x:
            await self.link.write32(R.UB_DATA, _word(row, cfg.rows))

    async def load(self, tile, count=1):
        """Queue weight tiles ``tile .. tile + count - 1`` for the array."""
        await self.link.write32(R.LOAD, tile | count << 16)
        await self.check(f"LOAD of {count} tiles from {tile}")

    async def matmul(self, ub_addr, count, acc_addr, *, accumulate=False, unsigned=False, switch=False):
        """``acc[acc_addr + b] (+)= ub[ub_addr + b] @ W`` for b < `count`, W the
        current tile (the next queued one if `switch`)."""
        if count < 1:
            raise ValueError(f"a multiply takes at least one row, not {count}")
        await self.link.write32(R.MM_SRC, ub_addr)
        await self.link.write32(R.MM_COUNT, count)
        await self.link.write32(R.MM_GO, acc_addr | MM_ACCUMULATE * accumulate |
                                MM_UNSIGNED * unsigned | MM_SWITCH * switch)
        await self.check(f"the multiply of {count} rows at UB row {ub_addr}")

    async def read_accumulators(self, acc_addr, count):
        """Accumulator rows ``acc_addr .. acc_addr + count - 1`` (count x cols
        int32), once every multiply before has stored its rows."""
        cols = self.config.cols
        await self.link.write32(R.ACC_ADDR, acc_addr)
        words = [await self.link.read32(R.ACC_DATA) for _ in range(count * cols)]
        return np.array(words, dtype=np.uint32).view(np.int32).reshape(count, cols)

    async def cycles(self):
        """Clock cycles the part has been busy since reset (wrapping at 2**32)."""
        return await self.link.read32(R.CYCLES)


async def open_matrix_part(port, config, *, baudrate=115200, clock_hz=12e6, **link_options):
    """A `MatrixPart` on the board at serial `port` (a device or pyserial URL)."""
    from .serial_link import SerialLink
    link = SerialLink(port, config, baudrate=baudrate, clock_hz=clock_hz, **link_options)
    return await MatrixPart.open(link, config)
