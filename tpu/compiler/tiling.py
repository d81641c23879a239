"""Pass: tile a chip layer over the array and the accumulators.

* **K over array rows.** A K tile is one stored input row per output pixel:
  for a convolution a kernel tap ``(dy, dx)`` and a block ``j`` of ``R``
  input channels, for a dense layer one stored pixel ``(y, x)`` and block
  ``j`` (the dense weights are scattered to that order, so a flatten needs no
  data movement). K tiles accumulate into the same accumulator rows.
* **N over array columns.** Output channels in blocks of ``C``: one weight
  tile per (N tile, K tile), one LDQ table per N tile.
* **M over accumulator rows.** The accumulators are split into two regions of
  ``acc_rows // 2`` rows that tiles alternate between, so the MMCs of one
  tile overlap the ACT of the one before. A dense tile is a run of samples; a
  convolution tile is a band of output rows of one sample, or whole images of
  several samples; with pooling, a band covers whole pooling windows.
"""

from dataclasses import dataclass

import numpy as np

from . import ir
from ..sim.programs import ldq_table
from ..sim.activation_model import sigmoid_table, tanh_table
from .errors import CompileError
from .fold import fold_zero_point


__all__ = ["KTile", "MTile", "weight_tiles", "m_tiles", "quant_tables", "lut"]


@dataclass(frozen=True)
class KTile:
    """dense: stored pixel (y, x), block j; conv: tap (dy, dx), block j."""
    y: int
    x: int
    j: int


@dataclass(frozen=True)
class MTile:
    """Samples ``samples`` (each ``rows_per_sample`` accumulator rows, one
    after another), conv output rows ``r0 .. r1 - 1`` (dense: 0..1), and for
    windowed pooling the pooled rows ``p0 .. p1 - 1``."""
    samples: tuple
    r0: int
    r1: int
    p0: int = 0
    p1: int = 0

    def rows_per_sample(self, ow):
        return (self.r1 - self.r0) * ow


def _blocks(n, width):
    return -(-n // width)


def weight_tiles(chip, config):
    """``(k_tiles, tiles)``: the K tiles in order and the int8 weight tiles
    ``(N tiles, K tiles, rows, cols)``."""
    R, C = config.rows, config.cols
    nt = _blocks(chip.n_out, C)
    if chip.kind == "conv":
        kh, kw, cin, cout = chip.weight.shape
        jb = _blocks(cin, R)
        k_tiles = [KTile(dy, dx, j) for dy in range(kh) for dx in range(kw) for j in range(jb)]
        w = np.zeros((kh, kw, jb * R, nt * C), dtype=np.int8)
        w[:, :, :cin, :cout] = chip.weight
        tiles = np.stack([np.stack([w[k.y, k.x, k.j * R:(k.j + 1) * R, n * C:(n + 1) * C]
                                    for k in k_tiles]) for n in range(nt)])
        return k_tiles, tiles
    h, wd, c = chip.in_shape
    K, N = chip.weight.shape
    if K != h * wd * c:
        raise CompileError(f"layer {chip.name!r}: {K} weight rows for an input of "
                           f"{h * wd * c} values")
    jb = _blocks(c, R)
    k_tiles = [KTile(y, x, j) for y in range(h) for x in range(wd) for j in range(jb)]
    # Physical row (k tile, lane) -> the logical K index it multiplies.
    y, x, ch = np.meshgrid(np.arange(h), np.arange(wd), np.arange(jb * R), indexing="ij")
    if chip.input_view == "chw":
        logical = ch * h * wd + y * wd + x
    else:
        logical = (y * wd + x) * c + ch
    logical = np.where(ch < c, logical, -1).reshape(-1)
    w = np.zeros((len(logical), nt * C), dtype=np.int8)
    real = logical >= 0
    w[real, :N] = chip.weight[logical[real]]
    tiles = w.reshape(len(k_tiles), R, nt, C).transpose(2, 0, 1, 3)
    return k_tiles, np.ascontiguousarray(tiles)


def m_tiles(chip, batch, region):
    """The M tiles of `chip` for `batch` samples, each at most `region`
    accumulator rows."""
    if chip.kind == "dense":
        per = min(batch, region)
        return [MTile(tuple(range(b, min(b + per, batch))), 0, 1) for b in range(0, batch, per)]
    oh, ow = chip.conv_out
    pool = chip.pool
    if pool is not None and pool[0] == "global":
        if oh * ow > region:
            raise CompileError(f"layer {chip.name!r}: global pooling of {oh * ow} pixels needs "
                               f"more than the {region} accumulator rows of a region")
        bands = [(0, oh, 0, 1)]
    elif pool is not None:
        _, k, s = pool
        ph = (oh - k) // s + 1
        per = 0
        while per < ph and ((per) * s + k) * ow <= region:
            per += 1
        if per == 0:
            raise CompileError(f"layer {chip.name!r}: a pooling band of {k} output rows of "
                               f"{ow} pixels needs more than the {region} accumulator rows "
                               f"of a region")
        bands = [(p * s, (min(p + per, ph) - 1) * s + k, p, min(p + per, ph))
                 for p in range(0, ph, per)]
    else:
        if ow > region:
            raise CompileError(f"layer {chip.name!r}: an output row of {ow} pixels needs more "
                               f"than the {region} accumulator rows of a region")
        per = min(oh, region // ow)
        bands = [(r, min(r + per, oh), 0, 0) for r in range(0, oh, per)]
    tiles = []
    if len(bands) == 1:
        r0, r1, p0, p1 = bands[0]
        group = max(1, region // ((r1 - r0) * ow))
        for b in range(0, batch, group):
            tiles.append(MTile(tuple(range(b, min(b + group, batch))), r0, r1, p0, p1))
    else:
        for b in range(batch):
            for r0, r1, p0, p1 in bands:
                tiles.append(MTile((b,), r0, r1, p0, p1))
    return tiles


def _target(chip):
    if chip.activation.kind in (ir.ActivationKind.SIGMOID, ir.ActivationKind.TANH):
        return chip.activation.pre
    return chip.out_q


def quant_tables(chip, config):
    """The LDQ table bytes of each N tile (folded bias, multiplier, shift)."""
    C = config.cols
    nt = _blocks(chip.n_out, C)
    bias = fold_zero_point(chip.name, chip.bias, chip.weight, chip.in_q.zero_point)
    m, s = ir.requant_multipliers(chip.in_q, chip.weight_scale, _target(chip),
                                  getattr(chip, "scale_product", "float64"))
    full = [np.zeros(nt * C, dtype=np.int64) for _ in range(3)]
    for dst, src in zip(full, (bias, m, s)):
        dst[:chip.n_out] = src
    return [ldq_table(config, *(a[n * C:(n + 1) * C] for a in full)) for n in range(nt)]


def act_settings(chip):
    """``(zero point, clamp_min, clamp_max, unsigned)`` of the layer's ACTs."""
    target = _target(chip)
    a = chip.activation
    lo, hi = chip.out_q.range
    if a.kind == ir.ActivationKind.CLAMP:
        lo, hi = (min(max(int(v), -256), 255) for v in (a.clamp_min, a.clamp_max))
    return int(target.zero_point), lo, hi, bool(target.unsigned)


def lut(chip):
    """The 256-byte table for sigmoid/tanh, or None."""
    a = chip.activation
    if a.kind not in (ir.ActivationKind.SIGMOID, ir.ActivationKind.TANH):
        return None
    make = sigmoid_table if a.kind == ir.ActivationKind.SIGMOID else tanh_table
    table = make(np.float32(a.pre.scale), a.pre.zero_point, np.float32(chip.out_q.scale),
                 chip.out_q.zero_point, chip.out_q.unsigned)
    return (np.asarray(table) & 0xFF).astype(np.uint8).tobytes()
