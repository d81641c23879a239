"""Pass: cut the chip layers into parts of the weights that weight memory
holds, and make the weight image.

Input: the plan of `fuse.plan_layers` (chip layers and host layers), the
chip configuration, the batch and the chip layer settings to apply
(`hints`, from an earlier try of the placement: name -> fields of
`fuse.ChipLayer`). Output: `PlannedParts`, the program steps in order
(`Part`: a chip part; `fuse.HostLayer`: a host step) and the weight image.

A layer whose kept weight tiles exceed weight memory is split into parts by
N tiles; a layer one of whose N tiles needs more is also split by K tiles,
its partial sums kept in the accumulators from one part to the next, and
runs its M tiles as many at a time as the accumulators hold. The runtime
refills weight memory between parts.
"""

from dataclasses import dataclass, replace
from functools import cached_property

import numpy as np

from .fuse import ChipLayer
from .tiling import kept_tiles, lut, m_tiles, quant_tables, tile_work, weight_tiles


__all__ = ["Part", "PlannedParts", "plan_parts"]


@dataclass
class Part:
    """One chip program part: N tiles ``n = (n0, n1)`` and K tiles
    ``k = (k0, k1)`` of chip layer ``chip`` (``m``: its range of M tiles,
    None for all). ``k_tiles`` and ``kept`` are the layer's (all its K
    tiles; which (N, K) tiles are not all zero); ``weights = (first,
    count)`` its tiles in the weight image, loaded at weight-memory tile
    ``mem_base``; ``split`` whether the layer has more than one part;
    ``tables`` its N tiles' LDQ tables, ``lut`` the layer's lookup table
    (or None), ``work`` the model's MACs per (N, K) tile; ``reads`` M tiles
    per read of its input from host memory (`input_reads`)."""
    chip: ChipLayer
    n: tuple
    k: tuple
    m: tuple
    k_tiles: list
    kept: np.ndarray
    weights: tuple
    mem_base: int
    split: bool
    tables: list
    lut: bytes
    work: np.ndarray
    reads: int = 1

    @property
    def whole_k(self):
        """Whether the part holds all the layer's K tiles."""
        return self.k == (0, len(self.k_tiles))

    @property
    def tile_count(self):
        """Weight tiles of the part (its kept tiles)."""
        (n0, n1), (k0, k1) = self.n, self.k
        return int(self.kept[n0:n1, k0:k1].sum())

    @cached_property
    def in_blocks(self):
        """``(first, end)``: the input channel blocks the kept K tiles of a
        convolution part read (a depthwise convolution's N tile, one)."""
        return self._kept_span("j")

    @cached_property
    def in_tap_rows(self):
        """``(first, end)``: the kernel rows of the kept K tiles of a
        convolution part."""
        return self._kept_span("y")

    def _kept_span(self, field):
        """``(first, end)`` of the K tiles' `field` over the part's kept
        tiles."""
        (n0, n1), (k0, k1) = self.n, self.k
        ks = k0 + np.flatnonzero(self.kept[n0:n1, k0:k1].any(axis=0))
        values = [getattr(self.k_tiles[k], field) for k in ks]
        return (min(values), max(values) + 1) if values else None

    def window(self, batch, config, layout):
        """``(first, end)``: the input rows a dense part split by K reads
        (its K tiles' rows of its samples), when they are fewer than the
        whole input; else None. Such a part reads just these rows."""
        if self.chip.kind != "dense" or self.whole_k:
            return None
        tiles = m_tiles(self.chip, batch, config)
        if self.m is not None:
            tiles = tiles[self.m[0]:self.m[1]]
        samples = [b for t in tiles for b in t.samples]
        rows = [layout.row(b, kt.y, kt.x, kt.j) for kt in self.k_tiles[self.k[0]:self.k[1]]
                for b in (samples[0], samples[-1])]
        first, end = min(rows), max(rows) + 1
        return (first, end) if end - first < layout.rows else None


@dataclass
class PlannedParts:
    """The steps in program order (`Part`, or `fuse.HostLayer` for a host
    step) and the weight image's tiles, one array of tiles per part."""
    steps: list
    image: list

    def chip_parts(self):
        """``(index, Part)`` of every chip part."""
        return [(s, step) for s, step in enumerate(self.steps) if isinstance(step, Part)]


def plan_parts(plan, config, batch, hints=None):
    """The `PlannedParts` of `plan` (see the module docstring). Weight
    memory is filled part after part from tile 0, starting again at 0 when
    a part's tiles do not fit after the last one's."""
    steps, image, mem_cursor, image_tiles = [], [], 0, 0
    for item in plan:
        if not isinstance(item, ChipLayer):
            steps.append(item)
            continue
        if hints and item.name in hints:
            item = replace(item, **hints[item.name])
        k_tiles, tiles, ranges = part_ranges(item, config, batch)
        kept = kept_tiles(tiles)
        tables, table = quant_tables(item, config), lut(item)
        work = tile_work(item, config)
        for n0, n1, k0, k1, m in ranges:
            part = tiles[n0:n1, k0:k1][kept[n0:n1, k0:k1]]
            if mem_cursor + len(part) > config.weight_mem_tiles:
                mem_cursor = 0
            steps.append(Part(chip=item, n=(n0, n1), k=(k0, k1), m=m, k_tiles=k_tiles, kept=kept,
                              weights=(image_tiles, len(part)), mem_base=mem_cursor,
                              split=len(ranges) > 1, tables=tables[n0:n1], lut=table, work=work,
                              reads=input_reads(item, config)))
            image.append(part)
            image_tiles += len(part)
            mem_cursor += len(part)
    return PlannedParts(steps, image)


def input_reads(chip, config):
    """M tiles per read of the layer's input from host memory: 3 (an input
    ring of six tiles, an output ring of four, `lower._paced_reads`) for a
    first convolution of one N tile over host-made patches, which moves
    about as many rows over the host link as its MMCs stream, so that it
    pays the link's round trip once per three tiles (the demo CNN's conv4
    at a host latency of 200: 13 841 cycles with 1, 11 857 with 2, 11 232
    with 3); else 1. The placement takes a tile off while the rings do not
    fit, and uses single reads if the deeper rings would cost a spill."""
    return 3 if chip.kind == "conv" and chip.im2col and chip.n_out <= config.cols else 1


def part_ranges(chip, config, batch):
    """Weight tiles and the ``(n0, n1, k0, k1, m)`` ranges of the parts of
    `chip`: N tiles as many as weight memory holds; a layer whose one N tile
    needs more is also split by K tiles, its partial sums kept in the
    accumulators from one part to the next. Those sums must have rows of
    the accumulators each, so such a layer runs its M tiles as many at a
    time as the accumulators hold (``m``: the range of M tiles of the part,
    None for all; `lower.lower_part` packs their sums one after another):
    per N tile, per group of M tiles, its K parts, the weights of each
    loaded again for each group."""
    k_tiles, tiles = weight_tiles(chip, config)
    nt, kt = tiles.shape[:2]
    # (fewer for a layer whose banded input must be read a few blocks a part)
    cap = min(config.weight_mem_tiles, chip.k_cap or config.weight_mem_tiles)
    # (only the tiles kept, `kept_tiles`, take weight memory: a depthwise
    # convolution's block-diagonal weights need a tile a tap per N tile)
    kept = kept_tiles(tiles)
    count = kept.sum(axis=1)
    if count.max() <= cap:
        ranges, n = [], 0
        while n < nt:
            end, used = n, 0
            while end < nt and used + count[end] <= cap:
                used += count[end]
                end += 1
            ranges.append((n, end, 0, kt, None))
            n = end
        return k_tiles, tiles, ranges
    groups, start, used = [], 0, 0
    mts = m_tiles(chip, batch, config)
    for i, mt in enumerate(mts):
        rows = mt.rows_per_sample * len(mt.samples)
        if i > start and used + rows > config.acc_rows:
            groups.append((start, i))
            start, used = i, 0
        used += rows
    pairs = [None] if start == 0 else groups + [(start, len(mts))]
    ranges = []
    for n in range(nt):
        ks = np.flatnonzero(kept[n])
        cuts = [0] + [int(ks[i]) for i in range(cap, len(ks), cap)] + [kt]
        if chip.k_by_rows:
            # (parts of one kernel row's taps of a few input blocks each,
            # which read only those rows and blocks of a banded input)
            per = max(1, cap // chip.weight.shape[1])
            group = [(k_tiles[k].y, k_tiles[k].j // per) for k in ks]
            cuts, count_ = [0], 0
            for i, k in enumerate(ks):
                if i and (group[i] != group[i - 1] or count_ == cap):
                    cuts.append(int(k))
                    count_ = 0
                count_ += 1
            cuts.append(kt)
        ranges += [(n, n + 1, k0, k1, m) for m in pairs for k0, k1 in zip(cuts, cuts[1:])]
    return k_tiles, tiles, ranges
