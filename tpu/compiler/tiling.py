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
from functools import lru_cache

import numpy as np

from . import ir
from ..sim.stimulus.programs import ldq_table
from ..models.activation_model import sigmoid_table, tanh_table
from .errors import CompileError
from .fold import fold_zero_point


__all__ = ["KTile", "MTile", "weight_tiles", "kept_tiles", "tile_work", "m_rows", "m_tiles",
           "quant_tables", "lut"]


@dataclass(frozen=True)
class KTile:
    """dense: stored pixel (y, x), block j; conv: tap (dy, dx), block j."""
    y: int
    x: int
    j: int


@dataclass(frozen=True)
class MTile:
    """Samples ``samples``, each ``rows_per_sample`` accumulator rows, one
    after another: conv output rows ``r0 .. r1 - 1`` and columns ``c0 ..
    c1 - 1`` (dense: one row and column), and for windowed pooling the pooled
    rows ``p0 .. p1 - 1`` and columns ``q0 .. q1 - 1``."""
    samples: tuple
    r0: int
    r1: int
    c0: int
    c1: int
    p0: int = 0
    p1: int = 0
    q0: int = 0
    q1: int = 0

    @property
    def width(self):
        return self.c1 - self.c0

    @property
    def rows_per_sample(self):
        return (self.r1 - self.r0) * self.width


def _blocks(n, width):
    return -(-n // width)


def _k_tiles(chip, config):
    """The K tiles of `chip` in order."""
    R = config.rows
    if chip.kind == "conv":
        kh, kw, cin, _ = chip.weight.shape
        jb = _blocks(cin, R)
        if chip.k_by_rows:
            # (a part of one kernel row's taps of a few input blocks reads
            # only those input rows and blocks: `parts.part_ranges`)
            return [KTile(dy, dx, j) for dy in range(kh) for j in range(jb) for dx in range(kw)]
        return [KTile(dy, dx, j) for dy in range(kh) for dx in range(kw) for j in range(jb)]
    h, wd, c = chip.in_shape
    return [KTile(y, x, j) for y in range(h) for x in range(wd) for j in range(_blocks(c, R))]


def weight_tiles(chip, config):
    """``(k_tiles, tiles)``: the K tiles in order and the int8 weight tiles
    ``(N tiles, K tiles, rows, cols)``."""
    R, C = config.rows, config.cols
    nt = _blocks(chip.n_out, C)
    k_tiles = _k_tiles(chip, config)
    if chip.kind == "conv":
        kh, kw, cin, cout = chip.weight.shape
        jb = _blocks(cin, R)
        w = np.zeros((kh, kw, jb * R, nt * C), dtype=np.int8)
        w[:, :, :cin, :cout] = chip.weight
        # one gather of every K tile's (lanes, columns), not a copy per tile
        y, x, j = (np.array([getattr(k, a) for k in k_tiles]) for a in "yxj")
        tiles = w.reshape(kh, kw, jb, R, nt, C)[y, x, j].transpose(2, 0, 1, 3)
        return k_tiles, np.ascontiguousarray(tiles)
    h, wd, c = chip.in_shape
    K, N = chip.weight.shape
    if K != h * wd * c:
        raise CompileError(f"layer {chip.name!r}: {K} weight rows for an input of "
                           f"{h * wd * c} values")
    jb = _blocks(c, R)
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


def kept_tiles(tiles):
    """``(N tiles, K tiles)`` booleans: the weight tiles the chip multiplies.
    An all-zero tile adds nothing (depthwise convolutions lowered to
    block-diagonal weights are mostly such tiles) and is skipped, except
    that an N tile whose K tiles are all zero keeps the first: its MMC
    clears the accumulators that the ACT then reads (the bias alone)."""
    kept = tiles.any(axis=(2, 3))
    kept[~kept.any(axis=1), 0] = True
    return kept


def tile_work(chip, config):
    """``(N tiles, K tiles)`` counts of the model's multiply-accumulates
    per output pixel (dense: per sample) that each weight tile holds: its
    real input lanes times real output channels, or for a depthwise
    convolution (block-diagonal weights, `report.conv_macs_per_pixel`) its
    diagonal entries only. What a skipped all-zero tile leaves undone."""
    from .report import conv_macs_per_pixel
    R, C = config.rows, config.cols
    nt = _blocks(chip.n_out, C)
    n = np.arange(nt)
    # (counted per tile from the shapes: the same as summing a mask of the
    # real weights laid out as `weight_tiles` lays them)
    cols = np.minimum(C, chip.n_out - n * C)
    if chip.kind == "conv":
        kh, kw, cin, cout = chip.weight.shape
        js = np.array([k.j for k in _k_tiles(chip, config)], dtype=np.int64)
        if conv_macs_per_pixel(chip.weight) < kh * kw * cin * cout:
            o = np.arange(cout)
            per = np.zeros((nt, _blocks(cin, R)), dtype=np.int64)
            np.add.at(per, (o // C, (o // (cout // cin)) // R), 1)
            return per[:, js]
        lanes = np.minimum(R, cin - js * R)
    else:
        c = chip.in_shape[2]
        js = np.array([k.j for k in _k_tiles(chip, config)], dtype=np.int64)
        lanes = np.minimum(R, c - js * R)
    return cols[:, None].astype(np.int64) * lanes[None, :].astype(np.int64)


def m_rows(chip, batch, config, m_range=None):
    """Rows each MMC of a K tile streams over the whole batch (or M tiles
    `m_range`): the M tiles' rows (a pooled layer's bands of whole windows
    may overlap)."""
    tiles = m_tiles(chip, batch, config)
    if m_range is not None:
        tiles = tiles[m_range[0]:m_range[1]]
    return sum(t.rows_per_sample * len(t.samples) for t in tiles)


def _ranges(n, per):
    return [(i, min(i + per, n)) for i in range(0, n, per)]


def m_tiles(chip, batch, config):
    """The M tiles of `chip` for `batch` samples, each at most half the
    accumulator rows: runs of samples, whole images of several samples, or
    bands of rows (and, for images wider than an accumulator region or, with
    windowed pooling, than ``pool_max_width``, chunks of columns) of one.
    A layer streamed in bands (``chip.band_rows``, `backend`) has bands of
    at most that many output rows (pooled rows when it pools)."""
    # (asked for again and again while a model is compiled: remembered by
    # what the answer depends on; the tiles are the same objects each time)
    return list(_m_tiles(chip.name, chip.kind, chip.conv_out, chip.pool, chip.band_rows, batch,
                         config.acc_rows, config.pool_max_width))


@lru_cache(maxsize=4096)
def _m_tiles(name, kind, conv_out, pool, band_rows, batch, acc_rows, pool_max_width):
    region = acc_rows // 2
    if kind == "dense":
        per = min(batch, region)
        return tuple(MTile(tuple(range(b, e)), 0, 1, 0, 1) for b, e in _ranges(batch, per))
    oh, ow = conv_out
    if pool is not None and pool[0] == "global":
        if oh * ow > region:
            raise CompileError(f"layer {name!r}: global pooling of {oh * ow} pixels needs "
                               f"more than the {region} accumulator rows of a region")
        bands = [(0, oh, 0, ow, 0, 1, 0, 1)]
    elif pool is not None:
        _, k, s = pool
        ph, pw = (oh - k) // s + 1, (ow - k) // s + 1
        # Pooled columns per chunk: its conv columns within the line buffer
        # and k rows of them within a region.
        limit = min(pool_max_width, region // k, ow)
        if limit < k:
            raise CompileError(f"layer {name!r}: a {k}x{k} pooling window needs {k * k} "
                               f"accumulator rows and a line of {k} pixels; a region has "
                               f"{region} rows and pool_max_width is {pool_max_width}")
        qn = min(pw, (limit - k) // s + 1)
        chunks = _ranges(pw, qn)
        cw = max((q1 - 1) * s + k - q0 * s for q0, q1 in chunks)
        pr = 1
        while pr < min(ph, band_rows or ph) and (pr * s + k) * cw <= region:
            pr += 1
        bands = [(p0 * s, (p1 - 1) * s + k, q0 * s, (q1 - 1) * s + k, p0, p1, q0, q1)
                 for p0, p1 in _ranges(ph, pr) for q0, q1 in chunks]
    elif ow <= region:
        per = min(oh, region // ow, band_rows or oh)
        bands = [(r0, r1, 0, ow, 0, 0, 0, 0) for r0, r1 in _ranges(oh, per)]
    else:
        bands = [(r, r + 1, c0, c1, 0, 0, 0, 0) for r in range(oh) for c0, c1 in _ranges(ow, region)]
    if len(bands) == 1:
        r0, r1, c0, c1, p0, p1, q0, q1 = bands[0]
        group = max(1, region // ((r1 - r0) * (c1 - c0)))
        return tuple(MTile(tuple(range(b, e)), r0, r1, c0, c1, p0, p1, q0, q1)
                     for b, e in _ranges(batch, group))
    return tuple(MTile((b,), *band) for b in range(batch) for band in bands)


def _target(chip):
    if chip.activation.kind in (ir.ActivationKind.SIGMOID, ir.ActivationKind.TANH):
        return chip.activation.pre
    return chip.out_q


def quant_tables(chip, config):
    """The LDQ table bytes of each N tile (folded bias, multiplier, shift)."""
    C = config.cols
    nt = _blocks(chip.n_out, C)
    bias = fold_zero_point(chip.name, chip.bias, chip.weight, chip.in_q.zero_point)
    m, s = ir.requant_multipliers(chip.in_q, chip.weight_scale, _target(chip), chip.rounding)
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
