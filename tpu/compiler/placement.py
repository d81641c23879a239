"""Pass: place every part's data in the unified buffer, streaming,
banding and spilling until it fits.

Input: the validated graph, the `parts.PlannedParts`, the
`stored_layouts.StoredLayouts`, the chip configuration, the batch and the
chip layer settings the parts were planned with (``hints``). Output:
`Placement`: the UB `allocate.Block` of every tensor kept between parts,
every streamed input and output and every part's tables; what is streamed
through a ring, in bands of rows, spilled to host memory or written a
part's N tiles at a time; and the parts with their final band heights and
input reads.

A tensor read from or written to host memory that does not fit whole is
streamed through a ring; tensors kept between parts that do not fit are
spilled to host memory (written by their producer, read back by each
reader); a convolution's input or output is streamed in bands of output
rows (each band's input rows with their halo), the bands made smaller down
to one row; a layer split by N writes its output a part's N tiles at a
time. A pooled output that feeds a padded convolution is pooled unpadded
and padded through host memory. When a layer split by K must change its
parts (smaller bands, or parts cut at rows of taps), the pass raises
`Rebands` with the settings to plan the parts again with.
"""

from dataclasses import dataclass, field, replace
from functools import cached_property

from ..isa import ldl_rows, ldq_rows
from .allocate import Block, place_blocks
from .errors import CompileError
from .lower import BandRing, ring_slots
from .parts import Part
from .tiling import m_tiles


__all__ = ["Placement", "Rebands", "band_height", "place_parts"]


class Rebands(Exception):
    """Plan the parts again with these chip layer settings, name -> fields
    (a layer split by K tiles whose bands must shrink, or whose parts must
    be cut at rows of taps: its parts change)."""
    def __init__(self, hints):
        super().__init__(hints)
        self.hints = hints


@dataclass
class Placement:
    """Where each part's data is. ``steps``: the planned steps, each `Part`
    with its final band height (``chip.band_rows``) and input ``reads``;
    ``blocks``: key -> placed `Block`, keyed ``("res", tensor)`` (kept
    whole from its first to its last part), ``("in", tensor, part)`` (a
    part's input read from host memory), ``("out", tensor)`` (an output
    written to host memory), ``("out", tensor, part)`` (a part's N tiles of
    it) and ``("tables", part)``; ``streamed``: keys of blocks that hold a
    ring, not the whole tensor; ``banded``: keys of blocks streamed in bands
    of rows; ``one_slot``: banded inputs read into one slot (no double
    buffering); ``chunked``: outputs held a part's N tiles at a time;
    ``spilled``: tensors kept in host memory between parts; ``relayout``:
    pooled outputs pooled unpadded and padded through host memory;
    ``prefixed``: the part that reads its tables with its first input
    read, or None; ``producers``: tensor -> the parts that write it;
    ``host_side``: the tensors with a place in host memory."""
    steps: list
    blocks: dict
    streamed: set
    banded: set
    one_slot: set
    chunked: set
    spilled: set
    relayout: set
    prefixed: int
    producers: dict
    host_side: set

    def ub_layout(self, layouts, t, key):
        """The layout of tensor `t` in UB block `key`."""
        return _ub_layout(layouts, self.relayout, t, key)


def _ub_layout(layouts, relayout, t, key):
    """The layout of tensor `t` in UB block `key`: a relaid output is
    pooled unpadded."""
    lay = layouts(t)
    return replace(lay, pad=(0, 0, 0, 0)) if key[0] == "out" and t in relayout else lay


def band_height(chip, batch, config):
    """The most output rows (pooled rows, for a pooled layer) of one band
    (M tile) of `chip`."""
    tiles = m_tiles(chip, batch, config)
    pooled = chip.pool is not None
    return max((t.p1 - t.p0) if pooled else (t.r1 - t.r0) for t in tiles)


def place_parts(graph, planned, layouts, config, batch, hints=None):
    """The `Placement` of `planned`'s parts (see the module docstring)."""
    return _Placer(graph, planned, layouts, config, batch, hints).run()


@dataclass
class _Choices:
    """What the placement has decided so far (see `Placement`);
    ``band_limit``: chip layer name -> output rows per band; ``reads``:
    part -> M tiles per input read."""
    reads: dict
    streamed: set = field(default_factory=set)
    banded: set = field(default_factory=set)
    band_limit: dict = field(default_factory=dict)
    one_slot: set = field(default_factory=set)
    chunked: set = field(default_factory=set)

    def copy(self):
        return _Choices(dict(self.reads), set(self.streamed), set(self.banded),
                        dict(self.band_limit), set(self.one_slot), set(self.chunked))


def _span_of(first_end):
    return 0 if first_end is None else first_end[1] - first_end[0]


def _at_least(rows):
    """`rows` rounded up to a multiple of 64 (a `--ub-rows` to suggest)."""
    return -(-rows // 64) * 64


class _Placer:
    """The state of one placement: who produces and reads each tensor, the
    choices so far and what the allocator asked before."""

    def __init__(self, graph, planned, layouts, config, batch, hints):
        self.steps, self.layouts = planned.steps, layouts
        self.config, self.batch, self.hints = config, batch, hints
        self.q_rows, self.l_rows = ldq_rows(config), ldl_rows(config)
        steps = self.steps
        graph_inputs = {i.tensor for i in graph.inputs}
        graph_outputs = {o.tensor for o in graph.outputs}
        # Who produces and reads each stored tensor.
        self.producers, self.readers = {}, {}
        self.host_side = set(graph_inputs) | graph_outputs
        for s, step in enumerate(steps):
            if isinstance(step, Part):
                self.readers.setdefault(step.chip.input, []).append(s)
                self.producers.setdefault(step.chip.output, []).append(s)
            else:
                self.host_side.update(step.inputs)
                self.host_side.update(step.outputs)
        # Pooled outputs that a padded layout would split into one windowed
        # ACT per pooled row (79 decode cycles each) are pooled into an
        # unpadded stage instead and laid out padded by their trip through
        # host memory.
        self.relayout = {step.chip.output for step in steps if isinstance(step, Part)
                         and step.chip.pool is not None and step.chip.pool[0] != "global"
                         and step.chip.pool[1] == step.chip.pool[2]
                         and (layouts(step.chip.output).pad[1]
                              or layouts(step.chip.output).pad[3])}
        # The first part reading a model input several tiles at a time
        # (bound by its DMA, which pays the host link's round trip per
        # read) reads its tables in its first input read: the tables sit
        # just before the input in host memory and just before its ring in
        # the UB.
        self.prefixed = next((s for s, step in enumerate(steps) if isinstance(step, Part)
                              and step.reads > 1 and not step.lut
                              and step.chip.input in graph_inputs
                              and self.readers.get(step.chip.input) == [s]), None)
        self.choices = _Choices({s: step.reads for s, step in planned.chip_parts()})
        self.memo = {}

    def run(self):
        # A part reading several tiles at a time (deeper rings) must not
        # cost another part a spill: then every part reads a tile at a time.
        deep = [s for s, reads in self.choices.reads.items() if reads > 1]
        blocks, spilled = self.allocate()
        if deep:
            kept = (blocks, spilled, self.choices.copy())
            self.choices = _Choices({s: 1 for s in self.choices.reads})
            blocks, spilled = self.allocate()
            if not kept[1] - spilled:      # no more spills with the deeper rings
                blocks, spilled, self.choices = kept
        ch = self.choices
        steps = [replace(step, chip=self.chip_of(s), reads=ch.reads[s])
                 if isinstance(step, Part) else step for s, step in enumerate(self.steps)]
        return Placement(steps=steps, blocks=blocks, streamed=ch.streamed, banded=ch.banded,
                         one_slot=ch.one_slot, chunked=ch.chunked, spilled=spilled,
                         relayout=self.relayout, prefixed=self.prefixed,
                         producers=self.producers,
                         host_side=self.host_side | spilled | self.relayout)

    # What a block needs ----------------------------------------------------------------

    def chip_of(self, s):
        chip = self.steps[s].chip
        limit = self.choices.band_limit
        return replace(chip, band_rows=limit[chip.name]) if chip.name in limit else chip

    def ub_layout(self, t, key):
        return _ub_layout(self.layouts, self.relayout, t, key)

    def slots(self, key, s):
        # (a part reading its input several tiles at a time paces its writes
        # behind those reads: its output ring is as deep)
        return ring_slots(self.chip_of(s), self.batch, self.config, self.choices.reads[s],
                          key[0] == "out")

    def ring_rows(self, key, t, s):
        # (the allocator asks again after every change: remembered by what
        # the answer depends on)
        ch = self.choices
        name = self.steps[s].chip.name
        at = (key, key in ch.streamed, key in ch.banded, key in ch.one_slot,
              ch.band_limit.get(name), ch.reads[s])
        if at not in self.memo:
            self.memo[at] = self._ring_rows(key, t, s)
        return self.memo[at]

    def _ring_rows(self, key, t, s):
        ch = self.choices
        lay = self.ub_layout(t, key)
        if key in ch.banded:
            out = key[0] == "out"
            parts = self.producers[t] if out else [s]
            return max(self.band_ring_rows(t, p, out, 1 if key in ch.one_slot else 2)
                       for p in parts)
        return lay.blocks * min(self.batch, self.slots(key, s)) * lay.sample_stride \
            if key in ch.streamed else lay.rows

    def band_ring_rows(self, t, p, output, slots):
        # (the parts of a layer mostly share their band rings: remembered
        # by what a ring's size depends on)
        part = self.steps[p]
        name = part.chip.name
        blocks = part.n if output else part.in_blocks
        taps = None if output else part.in_tap_rows
        at = ("band", t, name, self.choices.band_limit.get(name), output, slots, blocks, taps)
        if at not in self.memo:
            chip = self.chip_of(p)
            self.memo[at] = BandRing(self.layouts(t), chip, m_tiles(chip, self.batch, self.config),
                                     output, slots, blocks, taps).rows
        return self.memo[at]

    def bandable(self, key):
        """Whether the part(s) of `key` can stream it in bands: a
        convolution not pooled globally and not split by K tiles."""
        if key[0] not in ("in", "out"):
            return False
        parts = [key[2]] if key[0] == "in" else self.producers[key[1]]
        return all(self.steps[p].chip.kind == "conv"
                   and (self.steps[p].chip.pool is None or self.steps[p].chip.pool[0] != "global")
                   for p in parts)

    def band_rows_of(self, s):
        return band_height(self.chip_of(s), self.batch, self.config)

    def chunk_rows(self, t, p):
        """UB rows of part `p`'s chunk of output `t`: the blocks of its N
        tiles (none for a part that leaves its sums to the next)."""
        step = self.steps[p]
        if step.k[1] != len(step.k_tiles):
            return 0
        key = ("out", t)
        lay = self.ub_layout(t, key)
        per = min(self.batch, self.slots(key, p)) * lay.sample_stride \
            if key in self.choices.streamed else lay.block_stride
        return (step.n[1] - step.n[0]) * per

    def chunkable(self, key):
        """Whether output `key` can be held a part's N tiles at a time: not
        banded, its producer split into parts of different N tiles."""
        return (len(key) == 2 and key[0] == "out" and key not in self.choices.banded
                and len({self.steps[p].n for p in self.producers[key[1]]}) > 1)

    def blocks_for(self, spilled):
        steps, ch, q_rows = self.steps, self.choices, self.q_rows
        blocks = {}
        for s, step in enumerate(steps):
            if isinstance(step, Part) and s != self.prefixed:
                rows = len(step.tables) * q_rows + (self.l_rows if step.lut else 0)
                blocks[("tables", s)] = Block(("tables", s), rows, s, s)
        for t in sorted(set(self.producers) | set(self.readers)):
            rows = self.layouts(t).rows
            prod, cons = self.producers.get(t, []), self.readers.get(t, [])
            # Kept in the UB whole: from its producer to its last reader, or,
            # read from host memory by several parts, from the first on.
            if t not in spilled | self.relayout and ((prod and cons) or len(set(cons)) > 1):
                blocks[("res", t)] = Block(("res", t), rows, min(prod + cons), max(prod + cons), t)
                continue
            # Streamed through a ring of a few M tiles' samples.
            if prod and t in ch.chunked:
                for p in prod:
                    key = ("out", t, p)
                    blocks[key] = Block(key, self.chunk_rows(t, p), p, p)
            elif prod:
                key = ("out", t)
                blocks[key] = Block(key, self.ring_rows(key, t, prod[0]), min(prod), max(prod))
            for c in cons:
                key = ("in", t, c)
                extra = len(steps[c].tables) * q_rows if c == self.prefixed else 0
                if ("window", c) not in self.memo:
                    self.memo[("window", c)] = steps[c].window(self.batch, self.config,
                                                               self.layouts(t))
                window = self.memo[("window", c)]
                if window:
                    ch.streamed.add(key)       # (a window is never held whole)
                rows = window[1] - window[0] if window else self.ring_rows(key, t, c)
                blocks[key] = Block(key, extra + rows, c, c)
        return blocks

    # Choosing ---------------------------------------------------------------------------

    def again_with(self, name, **fields):
        """The settings to compile again with: these fields of layer
        `name`, and the bands found so far."""
        out = {n: dict(h) for n, h in (self.hints or {}).items()}
        for n, rows in self.choices.band_limit.items():
            out.setdefault(n, {})["band_rows"] = rows
        out.setdefault(name, {}).update(fields)
        return out

    def siblings(self, key):
        """`key` and the same input's keys of the other parts of its layer
        (split by N, K or M tiles: they need the same, so they get it at
        once)."""
        if key[0] != "in":
            return [key]
        name = self.steps[key[2]].chip.name
        return [("in", key[1], c) for c in self.readers[key[1]]
                if self.steps[c].chip.name == name]

    def allocate(self):
        """Stream, spill and place until every part fits: at each block
        that does not fit, the first of `_REMEDIES` that applies (see the
        module docstring); the blocks and the spilled tensors."""
        spilled = set()
        while True:
            blocks = self.blocks_for(spilled)
            bad = place_blocks(list(blocks.values()), self.config.ub_rows)
            if bad is None:
                return blocks, spilled
            trouble = _Trouble(bad, blocks, spilled)
            if not any(remedy(self, trouble) for remedy in _REMEDIES):
                self.refuse(trouble)

    # What to do about a block that does not fit: each remedy changes the
    # choices (or the spilled tensors) and says True, or says False and
    # changes nothing; one that needs other parts raises `Rebands`.

    def stream_the_block(self, trouble):
        """Stream the block that does not fit through a ring (an output a
        part at a time, ``("out", t, part)``, is never a ring)."""
        key = trouble.bad.key
        if key in self.choices.streamed or not (key[0] == "in"
                                                or key[0] == "out" and len(key) == 2):
            return False
        self.choices.streamed.update(self.siblings(key))
        return True

    def spill_the_largest(self, trouble):
        """Spill the largest tensor kept across the parts there."""
        live = [b for b in trouble.at if b.tensor and b.start < b.end
                and b.tensor not in trouble.spilled]
        if not live:
            return False
        trouble.spilled.add(_largest(live).tensor)
        return True

    def band_the_ring(self, trouble):
        """Band a ring across many parts (as a layer split by K or N
        writes) itself rather than everything beside it."""
        ch, bad = self.choices, trouble.bad
        if not (bad.key in ch.streamed and bad.key not in ch.banded and self.bandable(bad.key)
                and bad.end > bad.start):
            return False
        ch.banded.add(bad.key)
        for p in self.producers[bad.key[1]]:
            ch.reads[p] = 1
        return True

    def chunk_the_output(self, trouble):
        """Write the output of a layer split by N a part's N tiles at a
        time."""
        key = trouble.bad.key
        if not (self.chunkable(key) and key in self.choices.streamed):
            return False
        self.choices.chunked.add(key[1])
        return True

    def stream_another(self, trouble):
        """Stream the largest other input or output of the parts there."""
        streamed = self.choices.streamed
        ring = [b for b in trouble.at if b.key[0] in ("in", "out") and b.key not in streamed
                and not (b.key[0] == "out" and len(b.key) == 3)]
        if not ring:
            return False
        streamed.add(_largest(ring).key)
        return True

    def narrow_the_reads(self, trouble):
        """Shrink a ring for reads of several tiles at a time by a tile."""
        ch = self.choices
        wide = [b.start for b in trouble.at if b.key in ch.streamed
                and b.key[0] in ("in", "out") and ch.reads[b.start] > 1]
        if not wide:
            return False
        ch.reads[wide[0]] -= 1
        return True

    def band_here(self, trouble):
        """Stream the largest convolution input or output there in bands
        of output rows (each band's input rows with their halo)."""
        ch = self.choices
        band = [b for b in trouble.here if b.key not in ch.banded and self.bandable(b.key)]
        if not band:
            return False
        for key in self.siblings(_largest(band).key):
            ch.banded.add(key)
            ch.streamed.discard(key)
            for p in ([key[2]] if key[0] == "in" else self.producers[key[1]]):
                ch.reads[p] = 1
        return True

    def halve_the_bands(self, trouble):
        """Halve the bands of the largest banded block there (a layer split
        by K: its parts change, `Rebands`)."""
        shrink = [b for b in trouble.here if b.key in self.choices.banded
                  and self.band_rows_of(b.start) > 1]
        if not shrink:
            return False
        s = _largest(shrink).start
        name = self.steps[s].chip.name
        if not self.steps[s].whole_k:
            raise Rebands(self.again_with(name, band_rows=self.band_rows_of(s) // 2))
        self.choices.band_limit[name] = self.band_rows_of(s) // 2
        return True

    def cut_at_tap_rows(self, trouble):
        """Cut the K parts of a banded input's layer at rows of taps, each
        reading fewer input rows (`Rebands`)."""
        steps = self.steps
        rows_split = [b for b in trouble.here if b.key in self.choices.banded and b.key[0] == "in"
                      and not steps[b.start].whole_k and not steps[b.start].chip.k_by_rows]
        if rows_split:
            raise Rebands(self.again_with(steps[_largest(rows_split).start].chip.name,
                                          k_by_rows=True))
        return False

    def chunk_an_output(self, trouble):
        """Write the largest chunkable output there a part's N tiles at a
        time."""
        chunk = [b for b in trouble.here if self.chunkable(b.key) and b.key in self.choices.streamed]
        if not chunk:
            return False
        self.choices.chunked.add(_largest(chunk).key[1])
        return True

    def read_into_one_slot(self, trouble):
        """Read the largest banded input there into one slot (no double
        buffering)."""
        ch = self.choices
        single = [b for b in trouble.here if b.key in ch.banded and b.key[0] == "in"
                  and b.key not in ch.one_slot]
        if not single:
            return False
        ch.one_slot.update(self.siblings(_largest(single).key))
        return True

    def fewer_tiles_a_part(self, trouble):
        """Give a part reading several input blocks or kernel rows of a
        banded input half the weight tiles, cut at rows of taps and blocks,
        each reading less (`Rebands`)."""
        steps = self.steps
        fewer = [b for b in trouble.here if b.key in self.choices.banded and b.key[0] == "in"
                 and steps[b.start].tile_count > 1
                 and (_span_of(steps[b.start].in_blocks) > 1
                      or _span_of(steps[b.start].in_tap_rows) > 1)]
        if fewer:
            s = _largest(fewer).start
            raise Rebands(self.again_with(steps[s].chip.name, k_by_rows=True,
                                          k_cap=max(1, steps[s].tile_count // 2)))
        return False

    def refuse(self, trouble):
        """No remedy left: the error names the UB the parts there need."""
        config, batch, bad, here = self.config, self.batch, trouble.bad, trouble.here
        need = sum(b.rows for b in here)
        name = self.steps[bad.start].chip.name
        if any(b.key in self.choices.banded for b in here):
            raise CompileError(
                f"layer {name!r}: streamed in bands of one output "
                f"row, its input and output bands, tables and the tensors kept there need "
                f"{need} unified-buffer rows; the unified buffer has {config.ub_rows}: "
                f"compile with --ub-rows {_at_least(need)} or more (batch {batch})")
        raise CompileError(f"layer {name!r}: its input, output and "
                           f"tables need {need} unified-buffer rows at once; the unified "
                           f"buffer has {config.ub_rows} (batch {batch}; a smaller batch "
                           f"may fit)")


#: what the placement tries, in order, at a block that does not fit
_REMEDIES = (_Placer.stream_the_block, _Placer.spill_the_largest, _Placer.band_the_ring,
             _Placer.chunk_the_output, _Placer.stream_another, _Placer.narrow_the_reads,
             _Placer.band_here, _Placer.halve_the_bands, _Placer.cut_at_tap_rows,
             _Placer.chunk_an_output, _Placer.read_into_one_slot, _Placer.fewer_tiles_a_part)


@dataclass
class _Trouble:
    """A block that does not fit (``bad``), the blocks of that try and the
    tensors spilled so far."""
    bad: Block
    blocks: dict
    spilled: set

    @cached_property
    def at(self):
        """The blocks whose parts overlap the bad block's."""
        return [b for b in self.blocks.values()
                if b.start <= self.bad.end and self.bad.start <= b.end]

    @cached_property
    def here(self):
        """The blocks live at the bad block's first part."""
        return [b for b in self.blocks.values() if b.start <= self.bad.start <= b.end]


def _largest(blocks):
    """The first block of the most rows."""
    return max(blocks, key=lambda b: b.rows)
