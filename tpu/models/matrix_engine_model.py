"""Golden model of the matrix engine (numpy).

The RTL must equal it bit for bit: the same accumulator contents after any
sequence of operations, and the same cycle of every row under ideal input.
"""

from collections import deque
from dataclasses import dataclass

import numpy as np

from ..config import TPUConfig


__all__ = ["MatrixEngineModel", "MatMul", "ideal_schedule", "wrap_int32"]


def wrap_int32(values):
    """Two's complement wrap to int32, as the accumulators do."""
    return ((np.asarray(values, dtype=np.int64) + (1 << 31)) % (1 << 32) - (1 << 31)).astype(np.int32)


@dataclass(frozen=True)
class MatMul:
    """One matrix-multiply operation: ``len(x)`` rows through the current tile.

    ``acc_addr`` is either the first accumulator row (rows ``acc_addr + b``)
    or an explicit address per row.
    """
    x: np.ndarray
    acc_addr: object
    accumulate: bool = False
    unsigned: bool = False
    switch: bool = False

    def addresses(self, acc_rows):
        if np.ndim(self.acc_addr) == 0:
            return [(int(self.acc_addr) + b) % acc_rows for b in range(len(self.x))]
        return [int(a) for a in self.acc_addr]


class MatrixEngineModel:
    """Functional model: weight-tile queue, current tile, accumulator memory."""

    def __init__(self, config=TPUConfig()):
        self.config = config
        self.acc = np.zeros((config.acc_rows, config.cols), dtype=np.int32)
        self.tiles = deque()
        self.weights = None

    def push_tile(self, w):
        w = np.asarray(w)
        if w.shape != (self.config.rows, self.config.cols):
            raise ValueError(f"weight tile has shape {w.shape}, the array is "
                             f"{self.config.rows}x{self.config.cols}")
        if w.min() < -128 or w.max() > 127:
            raise ValueError("weight tile values must be int8 (-128..127)")
        self.tiles.append(w.astype(np.int64))

    def matmul(self, op):
        cfg = self.config
        x = np.asarray(op.x)
        if x.ndim != 2 or x.shape[1] != cfg.rows:
            raise ValueError(f"activation rows have shape {x.shape}, expected (B, {cfg.rows})")
        low, high = (0, 255) if op.unsigned else (-128, 127)
        if x.size and (x.min() < low or x.max() > high):
            raise ValueError(f"activations must be in {low}..{high}")
        if op.switch:
            if not self.tiles:
                raise RuntimeError("switch with no weight tile queued")
            self.weights = self.tiles.popleft()
        if self.weights is None:
            raise RuntimeError("matmul before any weight tile was switched in")
        sums = x.astype(np.int64) @ self.weights
        for b, addr in enumerate(op.addresses(cfg.acc_rows)):
            old = self.acc[addr].astype(np.int64) if op.accumulate else 0
            self.acc[addr] = wrap_int32(old + sums[b])
        return wrap_int32(sums)


def ideal_schedule(config, ops):
    """Cycle in which each row of `ops` is accepted when nothing is idle.

    The weight tiles are streamed one row per cycle from cycle 0 on, each as
    soon as the engine can take it, and rows are presented back to back from
    cycle 0. This is the engine's documented timing:

    * a tile's rows enter the transit chain one per cycle; the chain hands the
      tile to the shadow registers (a *capture*) once it is complete, the
      shadow is empty and ``rows - 1`` cycles have passed since the last switch;
    * the next tile starts entering the chain in the capture cycle;
    * a row that switches tiles waits until the cycle after the capture.

    Returns a list (per op) of lists (per row) of cycle numbers.
    """
    rows = config.rows
    cycle = 0
    transit_full_at = rows          # capture possible from this cycle
    last_switch = None
    result = []
    for op in ops:
        starts = []
        for b in range(len(op.x)):
            if b == 0 and op.switch:
                guard_ok = 0 if last_switch is None else last_switch + rows - 1
                capture = max(transit_full_at, guard_ok)
                cycle = max(cycle, capture + 1)
                last_switch = cycle
                transit_full_at = capture + rows
            starts.append(cycle)
            cycle += 1
        result.append(starts)
    return result
