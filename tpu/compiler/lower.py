"""Pass: lower one chip layer (its N tiles ``n0 .. n1 - 1``) to MMC, LDQ and
ACT instructions.

Per N tile, per M tile: the MMCs of every K tile whose weights are not all
zero (the first overwrites, the rest ACCUMULATE; an N tile whose weights
are all zero keeps one MMC, which clears the accumulators; a convolution
reads its taps with MMC's CONV addressing, a dense layer over an image one
stored pixel per K tile), then the ACTs that
requantize, activate and pool the tile into the output's stored layout.
M tiles alternate between the two halves of the accumulators, and the ACTs
of a tile are emitted after the MMCs of the next one, so the matrix unit
runs on while the activation unit drains the previous tile (the sequencer
interlocks on the rows, so this needs no NOPs). An MMC switches weights only
when its tile differs from the one in the array.

An input read from host memory is read tile by tile, one tile ahead, and an
output written to host memory is written two tiles behind; when the tensor is
streamed, its UB copy is a ring of two tiles' samples (`_Ring`). A
DMA-bound first convolution reads several tiles per RHM instead, with a
schedule built around its DMA unit (`_paced_reads`). DMA
instructions and ACTs are placed where their unit should be idle, since a
waiting instruction would hold up the MMCs behind it.

Fill and drain: the first tile's reads (of a dense layer: cut to its MMCs'
size) each go just before the first MMC that reads them, the next tile's
after them; the tables (RHM, LDL) are read after them (before them, with
the first LDQ, when the first tile's MMCs are shorter than the LDQ). The
last tile's LDQ (and a dense layer's WHMs of the tile before) go while its
MMCs run; a dense last tile runs in row pieces that shrink towards the
end, every K tile per piece, each piece's ACT issued once its rows are
stored and its WHMs once that ACT is done, so only the last small piece's
ACT and WHM are left when the array stops.
"""

from dataclasses import dataclass, replace

from ..hdl.decoder import decode_cycles
from ..isa import Act, Conv, Func, Ldq, Mmc, Pool, Rhm, Whm, ldq_rows
from . import ir
from .report import conv_macs_per_pixel
from .tiling import act_settings, m_tiles


__all__ = ["BandRing", "PartAddresses", "lower_part", "ring_slots", "useful_macs"]


_FUNC = {ir.ActivationKind.NONE: Func.NONE, ir.ActivationKind.RELU: Func.RELU,
         ir.ActivationKind.CLAMP: Func.CLAMP, ir.ActivationKind.SIGMOID: Func.SIGMOID,
         ir.ActivationKind.TANH: Func.TANH}


@dataclass
class PartAddresses:
    """Where a part's data is: stored layouts and UB bases of its input and
    output, the UB rows of its LDQ tables (one per N tile of the part), and
    the weight-memory tile of its first (N tile, K tile)."""
    in_layout: object
    in_base: int
    out_layout: object
    out_base: int
    tables_base: int
    mem_base: int
    in_host: int = None      # host offset to read the input from, tile by tile
    out_host: int = None     # host offset to write the output to, tile by tile
    fill_host: int = None    # host offset of fill rows for the output's padding
    out_host_layout: object = None   # the output's layout in host memory, if not out_layout
    in_slots: int = None     # samples of the input's ring in the UB (None: all)
    out_slots: int = None    # samples of the output's ring in the UB (None: all)
    tables_load: list = None  # RHM (and LDL) of the tables, read after the first tile's input
    in_reads: int = 1        # M tiles per input read (> 1: `_paced_reads`; rings of 2x that)
    in_prefix: int = 0       # rows (the tables) just before the input in the UB and host memory
    in_band: int = 0         # the input streamed in bands of rows (`BandRing`): its slots
    out_band: bool = False   # the output streamed in bands of rows (`BandRing`)
    in_window: tuple = None  # (first, end): only these input rows, read at once (a K part)
    in_blocks: tuple = None  # (first, end): the input channel blocks a banded part reads
    in_tap_rows: tuple = None  # (first, end): the kernel rows of a banded part's taps
    out_first_block: int = 0  # the output's first channel block in the UB (a part's N tiles)


class _Ring:
    """A stored layout whose UB copy holds only `slots` samples (None: every
    sample, as stored). Output samples go to slot ``b % slots``; input
    samples take the next group of slots when they are read in (`take`),
    so a tile never reads in over the samples the tile before still uses."""

    def __init__(self, layout, slots, group=1, first_block=0):
        # (an output written a part's N tiles at a time holds blocks from `first_block`)
        self.first_block = first_block
        self.slots = slots if slots is not None and slots < layout.batch else None
        self.layout = layout if self.slots is None else replace(layout, batch=self.slots)
        self.group = group
        self.taken = 0
        self.where, self.holder = {}, {}

    def take(self, samples):
        first = (self.taken % (self.slots // self.group)) * self.group if self.slots else None
        self.taken += 1
        for i, b in enumerate(samples):
            slot = b if first is None else first + i
            self.where[b], self.holder[slot] = slot, b

    def holds(self, b):
        return b in self.where and self.holder.get(self.where[b]) == b

    def slot(self, b):
        if self.slots is None:
            return b
        return self.where.get(b, b % self.slots)

    def row(self, b, y, x, j, mt=None):
        return self.layout.row(self.slot(b), y, x, j - self.first_block)

    def pad_runs(self, block, samples=None):
        return self.layout.pad_runs(block - self.first_block, samples)

    def __getattr__(self, name):
        return getattr(self.layout, name)


class BandRing:
    """The UB copy of a tensor streamed in bands of rows: M tile ``t``'s
    rows (the input rows its output rows read, halo included, or the output
    rows it writes) in slot ``t % slots``, so the DMA of the next band goes
    on while the array works on this one. A slot holds per channel block,
    per sample of the tile, the band's rows one after another: an input
    band in the layout's padded width (MMC's CONV addressing steps rows of
    ``padded_w``), an output band unpadded (its WHMs write it row by row
    where the host's layout is padded)."""

    def __init__(self, layout, chip, tiles, output, slots=2, block_range=None, tap_rows=None):
        self.full = layout
        # (an input band of a part of some kernel rows' taps holds only the
        # input rows those taps read)
        self.tap_rows = tap_rows or (0, chip.weight.shape[0] if chip.kind == "conv" else 1)
        # (an output band holds the channel blocks of the part's N tiles)
        self.first_block, end = block_range or (0, layout.blocks)
        self.output = output
        self.index = {id(mt): i for i, mt in enumerate(tiles)}
        self.spans = {id(mt): self._span(chip, mt) for mt in tiles}
        self.pad = (0, 0, 0, 0) if output else layout.pad
        self.padded_w = layout.width if output else layout.padded_w
        self.width, self.height, self.blocks = layout.width, layout.height, end - self.first_block
        self.band = max((b - a for a, b in self.spans.values()), default=1)
        self.group = max((len(mt.samples) for mt in tiles), default=1)
        self.sample_rows = self.band * self.padded_w
        self.block_rows = self.group * self.sample_rows
        self.slot_rows = self.blocks * self.block_rows
        self.slots = slots
        self.rows = slots * self.slot_rows
        self.read = set()

    def _span(self, chip, mt):
        """Rows ``[y0, y1)`` of the band: output rows (unpadded), input rows
        in padded coordinates (the taps' reach)."""
        if self.output:
            if chip.pool is not None and chip.pool[0] == "global":
                return 0, 1
            if chip.pool is not None:
                return mt.p0, mt.p1
            return mt.r0, mt.r1
        dy0, dy1 = self.tap_rows
        sh, pt = chip.stride[0], chip.padding[0]
        top = self.full.pad[0]
        return (max(0, mt.r0 * sh - pt + top + dy0),
                min(self.full.padded_h, (mt.r1 - 1) * sh - pt + dy1 + top))

    def row(self, b, y, x, j, mt):
        y0 = self.spans[id(mt)][0]
        return ((self.index[id(mt)] % self.slots) * self.slot_rows
                + (j - self.first_block) * self.block_rows
                + mt.samples.index(b) * self.sample_rows
                + (y + self.pad[0] - y0) * self.padded_w + x + self.pad[1])

    def reads(self, mt, base, host, lanes):
        """The RHMs of tile `mt`'s input band (none once read)."""
        if id(mt) in self.read:
            return []
        self.read.add(id(mt))
        y0, y1 = self.spans[id(mt)]
        top, left = self.full.pad[0], self.full.pad[1]
        return [Rhm(ub=base + self.row(b, y0 - top, -left, j, mt), rows=(y1 - y0) * self.padded_w,
                    host=host + self.full.row(b, y0 - top, -left, j) * lanes)
                for j in range(self.first_block, self.first_block + self.blocks)
                for b in mt.samples]

    def writes(self, mt, n, chip, base, host, lanes):
        """The WHMs of tile `mt`'s output band of channel block `n`."""
        y0, y1 = self.spans[id(mt)]
        if chip.pool is not None and chip.pool[0] == "global":
            x0, x1 = 0, 1
        elif chip.pool is not None:
            x0, x1 = mt.q0, mt.q1
        else:
            x0, x1 = mt.c0, mt.c1
        out = []
        for b in mt.samples:
            if x0 == 0 and x1 == self.width and not (self.full.pad[1] or self.full.pad[3]):
                out.append(Whm(ub=base + self.row(b, y0, 0, n, mt), rows=(y1 - y0) * self.width,
                               host=host + self.full.row(b, y0, 0, n) * lanes))
            else:
                out += [Whm(ub=base + self.row(b, y, x0, n, mt), rows=x1 - x0,
                            host=host + self.full.row(b, y, x0, n) * lanes) for y in range(y0, y1)]
        return out


def _merge(pairs):
    """(acc, ub) row pairs -> runs ``(acc, ub, rows)`` consecutive in both."""
    runs = []
    for acc, ub, n in pairs:
        if runs and runs[-1][0] + runs[-1][2] == acc and runs[-1][1] + runs[-1][2] == ub:
            runs[-1][2] += n
        else:
            runs.append([acc, ub, n])
    return runs


def lower_part(chip, config, batch, k_tiles, n_range, addr, k_range=None, kept=None,
               m_range=None):
    """Instructions (switching MMCs as ``(Mmc, weight-memory tile)``) of N
    tiles `n_range` of `chip`, K tiles `k_range` (default all; a part that
    does not end K leaves its sums in the accumulators for the next, and
    only the last activates). `kept` (``tiling.kept_tiles``, default all)
    says which (N tile, K tile) to multiply; the part's kept tiles are in
    weight memory from ``addr.mem_base`` on, N-major. `m_range` (default
    all) is the range of M tiles the part runs (a layer split by K runs
    them two at a time, a region of the accumulators each)."""
    n0, n1 = n_range
    k0, k1 = k_range or (0, len(k_tiles))
    memory, first = {}, {}
    for n in range(n0, n1):
        ks = [k for k in range(len(k_tiles)) if kept is None or kept[n, k]]
        first[n] = ks[0]
        for k in ks:
            if k0 <= k < k1:
                memory[(n, k)] = addr.mem_base + len(memory)
    finish = k1 == len(k_tiles)
    region = config.acc_rows // 2
    q_rows = ldq_rows(config)
    _, _, _, unsigned_out = act_settings(chip)
    func = _FUNC[chip.activation.kind]
    # UB addressing goes through the ring (if any); host offsets use the
    # full layouts.
    in_full, out_full = addr.in_layout, addr.out_host_layout or addr.out_layout
    tiles = m_tiles(chip, batch, config)
    others = []
    if m_range is not None:
        others = tiles[:m_range[0]] + tiles[m_range[1]:]
        tiles = tiles[m_range[0]:m_range[1]]
    group = max(len(t.samples) for t in tiles)
    inl = BandRing(in_full, chip, tiles, False, addr.in_band, addr.in_blocks,
                   addr.in_tap_rows) if addr.in_band else \
        _Ring(in_full, addr.in_slots, group)
    outl = BandRing(out_full, chip, tiles, True, block_range=n_range) if addr.out_band else \
        _Ring(addr.out_layout, addr.out_slots, first_block=addr.out_first_block)
    unsigned_in = bool(chip.in_q.unsigned)
    ow = chip.conv_out[1]
    # M tiles outermost: a tile's input, read once, serves every N tile
    # before the next tile's is needed (N outermost needed two tiles' input
    # at the start and a streamed input read again per N tile).
    jobs = [(n, mt) for mt in tiles for n in range(n0, n1)]
    # The accumulator rows of each job's tile: the two halves in turn, or,
    # for a layer split by K (its sums kept from part to part), the tiles'
    # rows one after another (`parts.part_ranges` runs as many tiles a part as
    # the accumulators hold).
    if (k0, k1) != (0, len(k_tiles)):
        acc_base, at = [], 0
        for _, mt in jobs:
            acc_base.append(at)
            at += mt.rows_per_sample * len(mt.samples)
        if at > config.acc_rows:
            raise AssertionError(f"{chip.name}: {at} rows of sums kept in {config.acc_rows} "
                                 f"accumulator rows")
    else:
        acc_base = [(i % 2) * region for i in range(len(jobs))]

    current = [None]

    def mmc(ub, rows, acc, accumulate, tile, conv):
        ins = Mmc(ub=ub, rows=rows, acc=acc, accumulate=accumulate, switch=tile != current[0],
                  unsigned=unsigned_in, conv=conv)
        if ins.switch:
            current[0] = tile
            return (ins, tile)
        return ins

    # (the kept K tiles of each N tile in the part: a depthwise layer's are
    # a few of many)
    part_ks = {n: [k for k in range(k0, k1) if (n, k) in memory] for n in range(n0, n1)}

    def mmcs(index, n, mt):
        base = acc_base[index]
        out = []
        if not part_ks[n]:
            return out
        if chip.kind == "dense":
            b0 = mt.samples[0]
            rows = len(mt.samples)
            ss = inl.sample_stride
            conv = Conv(out_w=1, col_step=0, row_step=ss) if ss != 1 and rows > 1 else None
            shift = addr.in_window[0] if addr.in_window else 0
        else:
            sh, sw = chip.stride
            pt, pl = chip.padding[0], chip.padding[1]
            rps, cw = mt.rows_per_sample, mt.width
            # Rows the tap reads consecutively (a 1x1 conv of an unpadded
            # image) need no CONV addressing, and whole images one MMC.
            dense_rows = sw == 1 and sh * inl.padded_w == cw
            conv = None if dense_rows else Conv(out_w=cw, col_step=sw, row_step=sh * inl.padded_w)
        for k in part_ks[n]:
            kt_ = k_tiles[k]
            tile = memory[(n, k)]
            accumulate = k > first[n]
            if chip.kind == "dense":
                out.append(mmc(addr.in_base + inl.row(b0, kt_.y, kt_.x, kt_.j) - shift, rows, base,
                               accumulate, tile, conv))
                continue
            runs = []
            for si, b in enumerate(mt.samples):
                ub = addr.in_base + inl.row(b, mt.r0 * sh + kt_.y - pt, mt.c0 * sw + kt_.x - pl,
                                            kt_.j, mt)
                if dense_rows and runs and runs[-1][0] + runs[-1][1] == ub:
                    runs[-1][1] += rps
                else:
                    runs.append([ub, rps, base + si * rps])
            for ub, rows, acc in runs:
                out.append(mmc(ub, rows, acc, accumulate, tile, conv))
        return out

    def acts(index, n, mt):
        base = acc_base[index]
        flags = dict(func=func, unsigned=unsigned_out,
                     single_round=chip.rounding in ("single", "float32", "mlas"),
                     mlas_round=chip.rounding == "mlas")
        out = []
        if chip.kind == "dense":
            pairs = [(base + si, addr.out_base + outl.row(b, 0, 0, n), 1)
                     for si, b in enumerate(mt.samples)]
            return [Act(acc=a, ub=u, rows=r, **flags) for a, u, r in _merge(pairs)]
        rps, cw = mt.rows_per_sample, mt.width
        pool = chip.pool
        pairs = []
        if (pool is not None and pool[0] != "global" and pool[1] == pool[2]
                and not any(outl.pad) and cw == ow):
            # Windows as wide as their stride never straddle two images
            # stacked one after another: one ACT pools the whole tile (each
            # windowed ACT's decode costs 3 serial divisions).
            mode = Pool.MAX if pool[0] == "max" else Pool.AVG
            return [Act(acc=base, ub=addr.out_base + outl.row(mt.samples[0], mt.p0, 0, n, mt),
                        rows=rps * len(mt.samples), pool=mode, pool_size=pool[1],
                        pool_stride=pool[2], in_w=cw, **flags)]
        for si, b in enumerate(mt.samples):
            first = base + si * rps
            if pool is None:
                pairs += [(first + (oy - mt.r0) * cw, addr.out_base + outl.row(b, oy, mt.c0, n, mt),
                           cw)
                          for oy in range(mt.r0, mt.r1)]
            elif pool[0] == "global":
                out.append(Act(acc=first, ub=addr.out_base + outl.row(b, 0, 0, n, mt), rows=rps,
                               pool=Pool.GLOBAL_AVG, **flags))
            else:
                kind, k, s = pool
                mode = Pool.MAX if kind == "max" else Pool.AVG
                window = dict(pool=mode, pool_size=k, pool_stride=s, in_w=cw)
                if outl.pad[1] == 0 and outl.pad[3] == 0 and cw == ow:
                    out.append(Act(acc=first, ub=addr.out_base + outl.row(b, mt.p0, 0, n, mt),
                                   rows=rps, **window, **flags))
                else:
                    for py in range(mt.p0, mt.p1):
                        out.append(Act(acc=first + (py * s - mt.r0) * cw,
                                       ub=addr.out_base + outl.row(b, py, mt.q0, n, mt),
                                       rows=k * cw,
                                       **window, **flags))
        out += [Act(acc=a, ub=u, rows=r, **flags) for a, u, r in _merge(pairs)]
        return out

    R = config.rows
    chunk = max(R, config.acc_rows // 8)   # rows of the first reads' and the last drain's pieces
    filled = set()
    filled_window = []

    def reads(unit):
        """RHMs of the M tiles `unit` (one after another in the ring) that
        are not in the UB yet: one per block when they are consecutive in
        host memory and in the ring."""
        out = []
        if addr.in_window and addr.in_host is not None:
            if not filled_window:
                filled_window.append(True)
                first, end = addr.in_window
                out.append(Rhm(ub=addr.in_base, rows=end - first, host=addr.in_host + first * R))
            return out
        if addr.in_band:
            for mt in unit:
                out += inl.reads(mt, addr.in_base, addr.in_host, R)
            return _coalesce(out, R)
        unit = [mt for mt in unit if not all(inl.holds(b) for b in mt.samples)]
        if addr.in_host is None:
            return out
        for mt in unit:
            inl.take(mt.samples)
        for j in range(inl.blocks):
            for mt in unit:
                for b in mt.samples:
                    first = inl.row(b, -inl.pad[0], -inl.pad[1], j)
                    host = in_full.row(b, -inl.pad[0], -inl.pad[1], j)
                    out.append(Rhm(ub=addr.in_base + first, rows=inl.sample_stride,
                                   host=addr.in_host + host * R))
        return _coalesce(out, R)

    def loads(n, mt):
        """RHMs of the input samples the tile reads for the first time, and
        of the padding of its output samples (fill rows)."""
        out = reads([mt])
        if addr.fill_host is not None and finish:
            for b in mt.samples:
                slot = outl.slot(b)
                if (n, slot) not in filled:
                    filled.add((n, slot))
                    out += [Rhm(ub=addr.out_base + off, rows=rows, host=addr.fill_host)
                            for off, rows in outl.pad_runs(n, samples=(slot,))]
        return _coalesce(out, R)

    def stores(index):
        """WHM of the output samples the tile completes."""
        if addr.out_host is None or not finish:
            return []
        n, mt = jobs[index]
        if addr.out_band:
            return _coalesce(outl.writes(mt, n, chip, addr.out_base, addr.out_host, R), R)
        oh, ow_ = chip.conv_out
        last = chip.kind == "dense" or (
            (mt.r1 == oh or (mt.p1 and mt.p1 == chip.out_shape[0]))
            and (mt.c1 == ow_ or (mt.q1 and mt.q1 == chip.out_shape[1])))
        done = list(mt.samples) if last else []
        out = []
        for b in done:
            if out_full.pad == outl.pad:
                first = outl.row(b, -outl.pad[0], -outl.pad[1], n)
                host = out_full.row(b, -outl.pad[0], -outl.pad[1], n)
                out.append(Whm(ub=addr.out_base + first, rows=outl.sample_stride,
                               host=addr.out_host + host * R))
            else:
                # Unpadded in the UB, padded in host memory: image row by row.
                out += [Whm(ub=addr.out_base + outl.row(b, y, 0, n), rows=outl.width,
                            host=addr.out_host + out_full.row(b, y, 0, n) * R)
                        for y in range(outl.height)]
        return _coalesce(out, R)

    body = []
    table = [None]

    def drain(index):
        """LDQ (when the N tile changes) and the ACTs of tile `index`."""
        n, mt = jobs[index]
        if not finish:
            return []
        out = []
        if table[0] != n:
            out.append(Ldq(ub=addr.tables_base + (n - n0) * q_rows))
            table[0] = n
        return out + acts(index, n, mt)

    # Tile i: the WHMs of tile i - 2 (whose ACTs are done once tile i may
    # overwrite its accumulators); its MMCs, with the ACTs of tile i - 1
    # spread among them once the array's drain is covered, each after MMC
    # rows that outlast the ACT before (issue is in order: an ACT waiting
    # for the unit would stop the MMCs behind it); the RHMs tile i + 1
    # needs once the WHMs should be done. The DMA unit does one transfer at
    # a time and a DMA waiting for it would stop the MMCs too, so the WHMs
    # and RHMs are spread the same way, each after MMC rows that outlast the
    # one before. The first tile's RHMs go each just before the first MMC
    # that reads its rows, so the array starts after one transfer, not all.
    lead = config.matrix_latency + 30
    # An ACT after an MMC that ends at least this many rows after the
    # accumulator rows it reads issues without waiting for them to be stored.
    stored = config.matrix_latency + 6

    def mt_base(index):
        return acc_base[index]
    # A dense layer's first reads in pieces no longer than its MMCs
    # (coalescing joins its blocks), so each MMC waits for its own rows
    # only. (A convolution's MMCs read a few rows each: pieces that small
    # cost more in DMA overhead than they save.)
    piece = 1 << 30
    if jobs and chip.kind == "dense":
        piece = max([chunk] + [(op[0] if isinstance(op, tuple) else op).rows
                               for op in mmcs(0, *jobs[0])])
        current[0] = None
    first_loads = [Rhm(ub=d.ub + o, rows=min(d.rows - o, piece), host=d.host + o * R)
                   for d in (loads(*jobs[0]) if jobs else [])
                   for o in range(0, d.rows, piece)]
    if addr.in_prefix:
        # (the first read, of sample 0's first rows, also reads the tables)
        d = first_loads[0]
        if (d.ub, d.host) != (addr.in_base, addr.in_host):
            raise AssertionError(f"the first read {d} does not start the input")
        first_loads[0] = Rhm(ub=d.ub - addr.in_prefix, rows=d.rows + addr.in_prefix,
                             host=d.host - addr.in_prefix * R)
    # The tables are needed by the first LDQ only: read after the first
    # tile's input, whose reads the array waits for, not before it. Unless
    # the first tile's MMCs are shorter than the LDQ (19 cycles a column):
    # then the LDQ is the longer path to the first ACT, so the tables are
    # read, and the LDQ issued, before the input.
    tables_load = list(addr.tables_load or [])
    if finish and jobs and tables_load:
        first_rows = sum((op[0] if isinstance(op, tuple) else op).rows for op in mmcs(0, *jobs[0]))
        current[0] = None
        if first_rows < _busy(Ldq(ub=0), config):
            n = jobs[0][0]
            body.extend(tables_load + [Ldq(ub=addr.tables_base + (n - n0) * q_rows)])
            table[0] = n
            tables_load = []
    if addr.in_reads > 1 and _pacing_applies(chip, addr, jobs, finish) and not others:
        return body + _paced_reads(addr.in_reads, [mt for _, mt in jobs], first_loads,
                                   tables_load, lambda t: mmcs(t, *jobs[t]), drain,
                                   reads, stores, config, lead)
    # The next M tile's input is read while the current M tile runs all its
    # N tiles, when the input's ring has room for both (or there is none).
    # (a band ring of one slot is read once the tile before is done with it)
    single = addr.in_band == 1
    ahead_ok = (addr.in_band == 2 or inl.slots is None or inl.slots // group >= 2) and not single
    dense = chip.kind == "dense"
    ahead, steps, late = [], [], []
    # The last tile's pieces: [ACTs, WHMs, rows from which the ACTs may go]
    # not yet issued, and the WHMs of issued ACTs with the rows from which
    # those ACTs are done.
    piece_acts, written = [], []
    for i, (n, mt) in enumerate(jobs):
        starts = i == 0 or jobs[i - 1][1] is not mt
        following = next((j for j in range(i + 1, len(jobs)) if jobs[j][1] is not mt), None)
        ahead_at = lead if starts and ahead_ok and following is not None else None
        out = stores(i - 2) if i >= 2 else []
        if i == 1:
            body.extend(tables_load)
            tables_load = []
        body.extend(out[:1])
        queue = out[1:]
        dma_at = out[0].rows + 2 if out else 0
        pending = drain(i - 1) if i else []
        last = i == len(jobs) - 1
        tail = []
        if last and i and finish:
            # The last tile's LDQ and the WHMs of the tile before go while
            # its MMCs run, not after them.
            if table[0] != n:
                pending.append(Ldq(ub=addr.tables_base + (n - n0) * q_rows))
                table[0] = n
            # (Only a dense layer's WHMs: among a DMA-bound convolution's
            # last reads they delayed them, e.g. the demo CNN's im2col conv4
            # on 16x16 by 185 cycles.)
            tail = stores(i - 1) if chip.kind == "dense" else []
            late = [] if chip.kind == "dense" else stores(i - 1)
        threshold, rows = lead, 0
        load_at = float("inf") if single else sum(w.rows for w in out) + lead
        loaded_next = i + 1 >= len(jobs)
        before = current[0]
        ops = mmcs(i, n, mt)
        steps, ends = [], {}
        if last and i and finish and chip.kind == "dense":
            sizes = _piece_sizes(len(mt.samples), len(ops), config, chunk, stored)
            pieces = _row_pieces(ops, before, sizes)
            if pieces:
                # The last tile's rows in pieces, every K tile per piece,
                # smaller towards the end: a piece's ACT goes once the
                # array's drain of its rows is covered and its WHMs once
                # that ACT is done, so the tile drains while the array
                # works and only the last small piece is left after it.
                current[0] = before
                ops = [mmc(m.ub, m.rows, m.acc, m.accumulate, t, None) for m, t, _ in pieces]
                ends = {x: p for x, (_, _, p) in enumerate(pieces)
                        if x + 1 == len(pieces) or pieces[x + 1][2] != p}
                steps = _drain_steps(drain(i), stores(i), mt_base(i), sizes, R)
        left = sum((op[0] if isinstance(op, tuple) else op).rows for op in ops)
        for x, op in enumerate(ops):
            if first_loads:
                lo, hi = _reads(op)
                needed = [x for x, d in enumerate(first_loads)
                          if d.ub < hi and lo < d.ub + d.rows]
                if needed:
                    body.extend(first_loads[:needed[-1] + 1])
                    del first_loads[:needed[-1] + 1]
            body.append(op)
            rows += (op[0] if isinstance(op, tuple) else op).rows
            left -= (op[0] if isinstance(op, tuple) else op).rows
            if x in ends:
                piece_acts.append(list(steps[ends[x]]) + [rows + stored])
            # An instruction after this MMC issues about when it does, as
            # many rows back as it has, or once its unit is done with the
            # one before (`threshold`). (In a convolution, counted from after
            # the MMC: its pooling ACTs' decode, 79 cycles with the divider
            # of a bit per cycle, held up the MMCs behind them; so counted,
            # the demo CNN's conv4 was 119 cycles shorter. With a cycle per
            # bit of the dividend the two counts give the demo CNN at batch
            # 64 on 8x8 the same cycles.)
            issued = rows - (op[0] if isinstance(op, tuple) else op).rows
            while pending and rows >= threshold:
                body.append(pending.pop(0))
                threshold = max(rows, max(threshold, issued) + _busy(body[-1], config)) \
                    if chip.kind == "dense" else rows + _busy(body[-1], config)
                if tail and not any(isinstance(a, Act) for a in pending):
                    # the tile before is activated: its WHMs once that is done
                    written.append((threshold, tail))
                    tail = []
            if not pending and piece_acts and rows >= max(threshold, piece_acts[0][2]):
                acts_, whms_, _ = piece_acts.pop(0)
                body.extend(acts_)
                threshold = max(rows, max(threshold, issued)
                                + sum(_busy(a, config) for a in acts_))
                written.append((threshold, whms_))
            while written and rows >= written[0][0]:
                queue.extend(written.pop(0)[1])
            if not loaded_next and rows >= load_at:
                queue.extend(loads(*jobs[i + 1]))
                loaded_next = True
                if sum(d.rows for d in queue) > left:
                    # more transfers than MMC rows left: the DMA unit bounds
                    # the tile, so keep it busy from here on
                    body.extend(queue)
                    queue = []
            if ahead_at is not None and rows >= ahead_at:
                ahead.extend(loads(*jobs[following]))
                ahead_at = None
            # (The next tile's reads only once this one's first reads are
            # out: the DMA unit reads the blocks the array waits for first.)
            while (queue or (ahead and not first_loads)) and rows >= dma_at:
                body.append((queue or ahead).pop(0))
                # (a convolution's small WHMs: several after one MMC, from
                # its issue, so the next tile's reads are not held behind
                # them; the demo CNN's conv4 12 551 -> 10 085 cycles)
                dma_at = (rows if dense else max(dma_at, issued)) + body[-1].rows + 2
        body.extend(first_loads)
        first_loads = []
        body.extend(pending)
        body.extend(queue)
        body.extend(tail)
        if not steps:
            # WHMs waiting for ACTs issued in this tile (the last tile's
            # pieces drain below)
            body.extend(w for _, whms_ in written for w in whms_)
            written = []
        if i + 1 < len(jobs) and jobs[i + 1][1] is not mt:
            body.extend(ahead)
            ahead = []
        if not loaded_next:
            body.extend(loads(*jobs[i + 1]))
    body.extend(tables_load)
    if steps:
        # The pieces left when the array stops: each one's ACTs, then the
        # WHMs of the one before (which wait for their ACT, and would hold
        # up the next ACT if they went first).
        done = [w for _, whms_ in written for w in whms_]
        for acts_, whms_, _ in piece_acts:
            body.extend(acts_ + done)
            done = whms_
        body.extend(done)
    elif jobs:
        body.extend(_drain_in_chunks(drain(len(jobs) - 1), late + stores(len(jobs) - 1),
                                     chunk, R))
    if others and addr.in_host is not None and addr.in_slots is None and not addr.in_band \
            and not addr.in_window:
        # (a part of some M tiles that reads an input the other parts keep
        # in the UB reads the other tiles' samples too, after its own work)
        body.extend(reads(others))
    return body


def _pacing_applies(chip, addr, jobs, finish):
    """Whether `_paced_reads` can lower the part: a convolution of one N
    tile that activates, whose input is read from host memory and whose
    output (without padding rows to fill) is written there."""
    return (chip.kind == "conv" and finish and len(jobs) > 2 * addr.in_reads
            and len({n for n, _ in jobs}) == 1 and addr.in_host is not None
            and addr.out_host is not None and addr.fill_host is None)


#: What `_paced_reads` counts for a read's round trip on the host link when
#: it places the first tile's DMA (the ideal host's, about 50 cycles; a
#: slower host's is longer, but counting 100-400 placed the tables and the
#: next reads later than the DMA unit was free: the demo CNN's conv4 at a
#: host latency of 200 took 11 298-12 319 cycles against 11 232)
_READ_ROUND_TRIP = 50


def _link_cost(dma):
    """About how many cycles the DMA unit is busy with `dma` on the host
    link: a read's round trip and a row a cycle; a write's two header beats
    and its next job's two cycles."""
    if isinstance(dma, Rhm):
        return _READ_ROUND_TRIP + dma.rows
    return dma.rows + 5


def _paced_reads(r, tiles, first_loads, tables_load, mmcs, drain, reads, stores, config, lead):
    """The body of a DMA-bound convolution (`_pacing_applies`) that reads
    its input `r` M tiles per RHM into a ring of 2r tiles, so the host
    link's round trip is paid once per r tiles.

    Period p is tiles ``p*r .. p*r + r - 1``. Its first MMC waits for its
    read; the DMA unit is free then, so the WHMs of the r tiles before the
    last go right after it (their ACTs are done), each after MMC rows that
    outlast the one before, then the read
    of period p + 1 (over the tiles of period p - 1, done); a WHM still
    waiting when a later ACT would write over its rows (the output ring
    holds r + 1 tiles) goes before that ACT. No DMA
    instruction waits for its unit in front of an MMC, so the array only
    ever waits for its data. Period 0 reads tile 0, then tiles 1 .. r - 1,
    the tables and period 1's tiles, paced by their cost on the link."""
    body = []
    count = len(tiles)
    # (tile, or None) and DMA instructions waiting for the DMA unit
    queue = ([(None, d) for d in reads(tiles[1:r])] + [("tables", d) for d in tables_load]
             + [(None, d) for d in reads(tiles[r:2 * r])])
    written = 0                  # tiles whose WHMs are queued
    pending, threshold = [], lead
    for t in range(count):
        ops = mmcs(t)
        if t % r == 0 and t >= r:
            # (the period's reads before its MMCs, if they have not gone yet)
            body.extend(d for _, d in queue)
            queue = []
        if t:
            # (ACT t - 1 writes over the output of tile t - r - 2)
            body.extend(d for w, d in queue if isinstance(w, int) and w <= t - r - 2)
            queue = [(w, d) for w, d in queue if not isinstance(w, int) or w > t - r - 2]
            pending = drain(t - 1)
            threshold = lead
        p = t // r
        if (t % r == 0 and t >= r) or (p + 1) * r >= count:
            # The WHMs of the tiles whose ACTs are done, then the next read
            # (in the last period, the WHMs at each tile).
            while written <= t - 2:
                queue += [(written, w) for w in stores(written)]
                written += 1
            if t % r == 0:
                queue += [(None, d) for d in reads(tiles[(p + 1) * r:(p + 2) * r])]
        rows = 0
        # DMA unit free from this MMC row of the tile (it is free when the
        # period's first MMC issues, or, in tile 0, when it does)
        dma_free = 0 if t % r == 0 else dma_free - last_rows
        for x, op in enumerate(ops):
            if t == 0 and x == 0:
                body.extend(first_loads)
            m = op[0] if isinstance(op, tuple) else op
            body.append(op)
            start, rows = rows, rows + m.rows
            while pending and rows >= threshold and all(w != "tables" for w, _ in queue):
                body.append(pending.pop(0))
                threshold = rows + _busy(body[-1], config)
            while queue and max(dma_free, start) < rows - 2:
                body.append(queue.pop(0)[1])
                dma_free = max(dma_free, start) + _link_cost(body[-1])
        if pending:
            # (the LDQ reads the tables: their read goes first)
            tables = [x for x, (w, _) in enumerate(queue) if w == "tables"]
            if tables:
                body.extend(d for _, d in queue[:tables[-1] + 1])
                del queue[:tables[-1] + 1]
        body.extend(pending)
        last_rows = rows
    body.extend(d for _, d in queue)
    # The last tile's ACTs, then the WHMs left (the DMA unit writes the
    # tiles before while the activation unit works), the last tile's last.
    body.extend(drain(count - 1))
    for t in range(written, count):
        body.extend(stores(t))
    return body


def _piece_sizes(rows, k_count, config, chunk, lead):
    """Rows of the pieces a dense last tile of `rows` rows and `k_count` MMCs
    per piece runs in, first to last. The last piece is as short as lets the
    ACT of the one before it finish in time (it goes `lead` rows after that
    piece ends and takes its rows + 16 cycles) and its switches load their
    tiles in time; each piece before is as long as the array's work on the
    one after it covers its ACT the same way, at most `chunk`. With fewer
    than 4 MMCs per piece the activation unit, which also activates the tile
    before, cannot keep up with small pieces: `chunk` rows each."""
    gap = -(-config.cols // min(config.weight_mem_bytes_per_cycle, config.cols))
    overhead = lead + 16
    if k_count < 4:
        return [chunk] * (-(-rows // chunk))
    size = max(config.rows * gap, -(-overhead // (k_count - 1)))
    sizes = []
    while sum(sizes) < rows:
        sizes.append(min(size, rows - sum(sizes)))
        size = min(chunk, max(size, k_count * size - overhead))
    sizes.reverse()
    if len(sizes) > 1 and sizes[0] < config.rows * gap:
        short = sizes.pop(0)         # a first piece too short to load its tiles in time
        sizes[0] += short
    return sizes


def _offsets(sizes):
    """Start rows of pieces of `sizes` rows, and the end of the last."""
    out = [0]
    for size in sizes:
        out.append(out[-1] + size)
    return out


def _row_pieces(ops, tile, sizes):
    """The dense MMCs `ops` (``tile`` in the array before them) cut into
    pieces of `sizes` rows, piece-major: ``(Mmc, weight tile, piece)``; None
    when they cannot be cut (CONV addressing) or fit one piece."""
    cut = []
    for op in ops:
        m, tile = (op if isinstance(op, tuple) else (op, tile))
        if m.conv is not None:
            return None
        cut.append((m, tile))
    starts = _offsets(sizes)
    if len(sizes) < 2 or any(m.rows != starts[-1] for m, _ in cut):
        return None
    return [(replace(m, ub=m.ub + starts[p], acc=m.acc + starts[p], rows=sizes[p],
                     switch=False), t, p)
            for p in range(len(sizes)) for m, t in cut]


def _drain_steps(acts, whms, base, sizes, lanes):
    """The last tile's ACTs (accumulator rows from `base`) cut at the
    boundaries of pieces of `sizes` rows from `base`, and its WHMs in pieces
    of `sizes` rows: per piece of accumulator rows ``(ACTs, WHMs)``, the
    WHMs those ACTs complete."""
    starts = _offsets(sizes)
    steps = [([], []) for _ in sizes]
    written = set()
    for a in acts:
        written.update(range(a.ub, a.ub + a.rows))
        o = 0
        while o < a.rows:
            p = max(q for q in range(len(sizes)) if starts[q] <= a.acc + o - base)
            rows = min(a.rows - o, base + starts[p + 1] - a.acc - o)
            steps[p][0].append(replace(a, acc=a.acc + o, ub=a.ub + o, rows=rows))
            o += rows
    pieces = []
    for w in whms:
        cuts = [o for o in starts if o < w.rows] + [w.rows]
        pieces += [type(w)(ub=w.ub + o, rows=e - o, host=w.host + o * lanes)
                   for o, e in zip(cuts, cuts[1:])]
    done = set()
    for act_list, ready in steps:
        for a in act_list:
            done.update(range(a.ub, a.ub + a.rows))
        while pieces and all(r in done or r not in written
                             for r in range(pieces[0].ub, pieces[0].ub + pieces[0].rows)):
            ready.append(pieces.pop(0))
    steps[-1][1].extend(pieces)
    return steps


def _drain_in_chunks(acts, whms, chunk, lanes):
    """The last tile's ACTs (after its LDQ, if any) and WHMs, cut into
    `chunk`-row pieces, each WHM piece after the ACT pieces that write its
    rows, so the activation unit and the DMA unit drain the tile side by
    side, not one after the other. Pooling ACTs are not cut (their rows do
    not map 1:1 to the UB's)."""
    head = [a for a in acts if not isinstance(a, Act)]
    acts = [a for a in acts if isinstance(a, Act)]
    if not whms or any(a.pool != Pool.NONE for a in acts):
        return head + acts + whms
    written = set()
    for a in acts:
        written.update(range(a.ub, a.ub + a.rows))
    pieces = [w.__class__(ub=w.ub + o, rows=min(chunk, w.rows - o), host=w.host + o * lanes)
              for w in whms for o in range(0, w.rows, chunk)]
    out, done = list(head), set()
    for a in acts:
        for o in range(0, a.rows, chunk):
            rows = min(chunk, a.rows - o)
            out.append(replace(a, acc=a.acc + o, ub=a.ub + o, rows=rows))
            done.update(range(a.ub + o, a.ub + o + rows))
            while pieces and all(r in done or r not in written
                                 for r in range(pieces[0].ub, pieces[0].ub + pieces[0].rows)):
                out.append(pieces.pop(0))
    return out + pieces


def _reads(op):
    """The unified-buffer rows ``[start, end)`` an MMC (or ``(Mmc, tile)``)
    reads, or a range that holds them."""
    m = op[0] if isinstance(op, tuple) else op
    if m.conv is None:
        return m.ub, m.ub + m.rows
    lines = -(-m.rows // m.conv.out_w)
    return m.ub, m.ub + (lines - 1) * m.conv.row_step + (m.conv.out_w - 1) * m.conv.col_step + 1


def _busy(instruction, config):
    """About how many cycles the activation unit is busy with `instruction`
    (docs/core_performance.md)."""
    if isinstance(instruction, Ldq):
        return 19 * config.cols + 1
    cost = instruction.rows * config.act_row_cycles + 16
    if instruction.pool in (Pool.MAX, Pool.AVG):
        cost += decode_cycles(instruction.encode(), config) - 2      # its divisions
    if instruction.pool in (Pool.AVG, Pool.GLOBAL_AVG):
        cost += 34                                           # the reciprocal
    return cost


def _coalesce(dmas, lanes):
    """Merge DMA instructions of consecutive UB rows and host bytes."""
    out = []
    for d in dmas:
        last = out[-1] if out else None
        if (last is not None and type(last) is type(d) and last.ub + last.rows == d.ub
                and last.host + last.rows * lanes == d.host):
            out[-1] = type(d)(ub=last.ub, rows=last.rows + d.rows, host=last.host)
        else:
            out.append(d)
    return out


def ring_slots(chip, batch, config, reads=1, output=False):
    """Samples a streamed input or output of `chip` needs in the UB: two M
    tiles' worth (the tile computing and the one reading in or writing out:
    by the time a tile reads in over the samples of the tile before last, or
    its ACTs write over them, those are done with), a multiple of the tile's
    samples so no tile wraps. A part reading `reads` > 1 M tiles at a time
    (`_paced_reads`) holds two reads' worth of input and `reads` + 1 tiles
    of output."""
    group = max(len(t.samples) for t in m_tiles(chip, batch, config))
    tiles = 2 if reads == 1 else reads + 1 if output else 2 * reads
    return min(batch, tiles * group)


def useful_macs(chip, batch):
    """Multiply-accumulates of the layer's own arithmetic (no padding lanes,
    no structural zeros of depthwise weights)."""
    if chip.kind == "dense":
        return batch * chip.weight.shape[0] * chip.weight.shape[1]
    oh, ow = chip.conv_out
    if chip.im2col and "rows" in chip.im2col:
        # patches of fewer kernel rows: the original kernel's, not the zero lanes'
        kh, kw, cin, cout = chip.weight.shape
        (kh, kw), cin = chip.im2col["kernel"], cin // (chip.im2col["rows"] * chip.im2col["kernel"][1])
        return batch * oh * ow * kh * kw * cin * cout
    return batch * oh * ow * conv_macs_per_pixel(chip.weight)
