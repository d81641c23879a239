"""The back end: an IR `Graph` -> a `CompiledModel` for one chip configuration.

`compile_graph(graph, config, batch=1)` runs the passes in order:

1. `fuse.plan_layers`: chip layers (matrix layer + requantization,
   activation and pooling in one ACT) and host steps;
2. stored layouts (`layout.Layout`): each tensor padded for the
   convolutions that read it;
3. `tiling.weight_tiles`: the weight image; a layer whose tiles exceed weight
   memory is split into parts by N tiles, and the runtime refills weight
   memory between parts;
4. `allocate.place_blocks`: unified-buffer rows for every tensor kept between
   parts, and per part its tables; a tensor read from or written to host
   memory that does not fit whole is streamed through a ring, and tensors
   kept between parts that do not fit are spilled to host memory (written by
   their producer, read back by each reader); a pooled output that feeds a
   padded convolution is pooled unpadded and padded through host memory;
5. `lower.lower_part` and `schedule.insert_weight_reads`: each part's
   program (zero points folded into the biases by `fold`).
"""

import gc
import re
from dataclasses import replace

import numpy as np

from ..isa import (INSTRUCTION_BYTES, Cfg, Halt, Ldl, Reg, Rhm, Whm, encode_program, ldl_rows,
                   ldq_rows)
from ..isa.layouts import LAYOUTS
from ..models.cycle_model import estimate_cycles
from .allocate import Block, place_blocks
from .artifact import ChipStep, CompiledModel, HostStep, TensorSpec
from .errors import CompileError
from .fuse import ChipLayer, plan_layers
from .pools import split_pools
from .layout import Layout, as_image
from .lower import BandRing, PartAddresses, lower_part, ring_slots, useful_macs
from .schedule import insert_weight_reads
from .tiling import (act_settings, kept_tiles, lut, m_rows, m_tiles, quant_tables, tile_work,
                     weight_tiles)


__all__ = ["compile_graph"]

_ALIGN = 64


def _check_config(config, batch):
    if config.rows != config.cols:
        raise CompileError(f"the compiler needs a square array (rows == cols): ACT writes a "
                           f"result row of {config.cols} channels into a UB row of "
                           f"{config.rows} bytes; this chip is {config.rows}x{config.cols}")
    if config.acc_rows < 2:
        raise CompileError(f"the compiler needs at least 2 accumulator rows, not {config.acc_rows}")
    if not isinstance(batch, int) or batch < 1:
        raise CompileError(f"batch must be a positive integer, not {batch!r}")


def _parts(chip, config, batch):
    """Weight tiles and the ``(n0, n1, k0, k1, m)`` ranges of the parts of
    `chip`: N tiles as many as weight memory holds; a layer whose one N tile
    needs more is also split by K tiles, its partial sums kept in the
    accumulators from one part to the next. Those sums must have rows of
    the accumulators each, so such a layer runs its M tiles as many at a
    time as the accumulators hold (``m``: the range of M tiles of the part,
    None for all; `lower.lower_part` packs their sums one after another):
    per N tile, per group of M tiles, its K parts, the weights of each
    loaded again for each group."""
    k_tiles, tiles = _weight_tiles(chip, config)
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


class _Rebands(Exception):
    """Compile again with these chip layer settings, name -> fields (a
    layer split by K tiles whose bands must shrink, or whose parts must be
    cut at rows of taps: its parts change)."""
    def __init__(self, hints):
        super().__init__(hints)
        self.hints = hints


def compile_graph(graph, config, batch=1):
    """Compile `graph` for `config`, `batch` samples per program run. An
    error about one layer names the model operator it came from, when the
    front end recorded it (``graph.origins``)."""
    # (a compile for a small array makes millions of instructions that live
    # to its end, and the cyclic garbage collector's passes over them took
    # time, 15% of making 400 000 MMCs: it runs between tries only)
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _compile_with_hints(graph, config, batch, collecting)
    finally:
        _TILES.clear()
        if collecting:
            gc.enable()


#: `weight_tiles` by layer, for the tries of one compile (`compile_graph`
#: clears it): each try with other bands lays out the same weights, which
#: for MobileNetV2's depthwise layers on 8x8 was most of a try's time.
#: Kept with the weight array itself, so its id names no other array.
_TILES = {}


def _weight_tiles(chip, config):
    """`tiling.weight_tiles` of `chip`, laid out once per compile."""
    key = (id(chip.weight), chip.name, chip.kind, chip.k_by_rows, chip.in_shape,
           chip.input_view, config.rows, config.cols)
    if key not in _TILES or _TILES[key][0] is not chip.weight:
        _TILES[key] = (chip.weight, weight_tiles(chip, config))
    return _TILES[key][1]


def _compile_with_hints(graph, config, batch, collecting):
    try:
        hints = {}
        while True:
            try:
                return _compile_graph(graph, config, batch, hints)
            except _Rebands as again:
                hints = again.hints
                if collecting:
                    gc.collect()      # (the try's passes hold each other: a cycle)
    except CompileError as e:
        named = _LAYER_ERROR.match(str(e))
        if named is None or named[1] not in graph.origins:
            raise
        raise type(e)(f"{graph.describe(named[1])}{str(e)[named.end():]}") from None


#: the start of an error about one layer, as the passes word it
_LAYER_ERROR = re.compile(r"layer '([^']+)'")


def _compile_graph(graph, config, batch, hints=None):
    _check_config(config, batch)
    graph = split_pools(graph.validate())
    R = config.rows
    plan, aliases = plan_layers(graph, config)

    # Stored layouts: padded for the convolutions that read each tensor.
    pads, im2col_of, pad_fill = {}, {}, {}
    for item in plan:
        if isinstance(item, ChipLayer) and item.kind == "conv":
            if item.im2col:
                im2col_of[item.input] = (item.im2col, item.in_shape)
            else:
                old = pads.get(item.input, (0, 0, 0, 0))
                pads[item.input] = tuple(max(a, b) for a, b in zip(old, item.padding))
            if item.in_fill is not None:     # (its only reader: fuse.plan_layers)
                pad_fill[item.input] = item.in_fill
    layouts = {}

    def layout_of(name):
        if name not in layouts:
            t = graph.tensor(name)
            shape = im2col_of[name][1] if name in im2col_of else as_image(t.shape)
            layouts[name] = Layout(*shape, lanes=R, batch=batch, pad=pads.get(name, (0, 0, 0, 0)),
                                   fill=pad_fill.get(name, int(t.quant.zero_point)),
                                   unsigned=bool(t.quant.unsigned))
        return layouts[name]

    # Steps: chip parts (weights split by N tiles) and host steps.
    steps, image, mem_cursor, image_tiles = [], [], 0, 0
    for item in plan:
        if not isinstance(item, ChipLayer):
            steps.append(dict(kind="host", item=item))
            continue
        if hints and item.name in hints:
            item = replace(item, **hints[item.name])
        k_tiles, tiles, ranges = _parts(item, config, batch)
        kept = kept_tiles(tiles)
        tables, table = quant_tables(item, config), lut(item)
        work = tile_work(item, config)
        for n0, n1, k0, k1, m in ranges:
            part = tiles[n0:n1, k0:k1][kept[n0:n1, k0:k1]]
            if mem_cursor + len(part) > config.weight_mem_tiles:
                mem_cursor = 0
            steps.append(dict(kind="chip", item=item, n=(n0, n1), k=(k0, k1), m=m, k_tiles=k_tiles,
                              kept=kept,
                              weights=(image_tiles, len(part)),
                              mem_base=mem_cursor, split=len(ranges) > 1,
                              tables=tables[n0:n1], lut=table, work=work))
            image.append(part)
            image_tiles += len(part)
            mem_cursor += len(part)

    # Who produces and reads each stored tensor.
    graph_inputs = {i.tensor for i in graph.inputs}
    graph_outputs = {o.tensor for o in graph.outputs}
    chip_prod, chip_cons, host_side = {}, {}, set(graph_inputs) | graph_outputs
    for s, step in enumerate(steps):
        item = step["item"]
        if step["kind"] == "chip":
            chip_cons.setdefault(item.input, []).append(s)
            chip_prod.setdefault(item.output, []).append(s)
        else:
            host_side.update(item.inputs)
            host_side.update(item.outputs)

    # Pooled outputs that a padded layout would split into one windowed ACT
    # per pooled row (79 decode cycles each) are pooled into an unpadded
    # stage instead and laid out padded by their trip through host memory.
    relayout = {step["item"].output for step in steps if step["kind"] == "chip"
                and step["item"].pool is not None and step["item"].pool[0] != "global"
                and step["item"].pool[1] == step["item"].pool[2]
                and (layout_of(step["item"].output).pad[1] or layout_of(step["item"].output).pad[3])}

    def ub_layout(t, key):
        lay = layout_of(t)
        return replace(lay, pad=(0, 0, 0, 0)) if key[0] == "out" and t in relayout else lay

    q_rows, l_rows = ldq_rows(config), ldl_rows(config)
    for step in steps:
        if step["kind"] == "chip":
            step["reads"] = _input_reads(step["item"], batch, config)
    # The first part reading a model input several tiles at a time (bound by
    # its DMA, which pays the host link's round trip per read) reads its
    # tables in its first input read: the tables sit just before the input
    # in host memory and just before its ring in the UB.
    prefixed = next((s for s, step in enumerate(steps) if step["kind"] == "chip"
                     and step["reads"] > 1 and not step["lut"]
                     and step["item"].input in graph_inputs
                     and chip_cons.get(step["item"].input) == [s]), None)

    streamed = set()        # keys of in/out blocks that hold a ring, not the whole tensor
    banded = set()          # keys of in/out blocks streamed in bands of rows
    band_limit = {}         # chip layer name -> output rows per band
    one_slot = set()        # keys of banded inputs read into one slot (no double buffering)
    chunked = set()         # outputs whose parts (split by N) each hold only their blocks

    def chip_of(s):
        item = steps[s]["item"]
        return replace(item, band_rows=band_limit[item.name]) if item.name in band_limit else item

    def slots(key, s):
        # (a part reading its input several tiles at a time paces its writes
        # behind those reads: its output ring is as deep)
        return ring_slots(chip_of(s), batch, config, steps[s]["reads"], key[0] == "out")

    memo = {}

    def ring_rows(key, t, s):
        # (the allocator asks again after every change: remembered by what
        # the answer depends on)
        name = steps[s]["item"].name
        at = (key, key in streamed, key in banded, key in one_slot, band_limit.get(name),
              steps[s]["reads"])
        if at not in memo:
            memo[at] = _ring_rows(key, t, s)
        return memo[at]

    def _ring_rows(key, t, s):
        lay = ub_layout(t, key)
        if key in banded:
            parts = chip_prod[t] if key[0] == "out" else [s]
            return max(band_ring_rows(t, p, key[0] == "out", 1 if key in one_slot else 2)
                       for p in parts)
        return lay.blocks * min(batch, slots(key, s)) * lay.sample_stride if key in streamed \
            else lay.rows

    def band_ring_rows(t, p, output, slots):
        # (the parts of a layer mostly share their band rings: remembered
        # by what a ring's size depends on)
        name = steps[p]["item"].name
        blocks = steps[p]["n"] if output else _in_blocks(steps[p])
        taps = None if output else _in_tap_rows(steps[p])
        at = ("band", t, name, band_limit.get(name), output, slots, blocks, taps)
        if at not in memo:
            memo[at] = BandRing(layout_of(t), chip_of(p), m_tiles(chip_of(p), batch, config),
                                output, slots, blocks, taps).rows
        return memo[at]

    def bandable(key):
        """Whether the part(s) of `key` can stream it in bands: a
        convolution not pooled globally and not split by K tiles."""
        if key[0] not in ("in", "out"):
            return False
        parts = [key[2]] if key[0] == "in" else chip_prod[key[1]]
        return all(steps[p]["item"].kind == "conv"
                   and (steps[p]["item"].pool is None or steps[p]["item"].pool[0] != "global")
                   for p in parts)

    def band_rows_of(s):
        tiles = m_tiles(chip_of(s), batch, config)
        pooled = chip_of(s).pool is not None
        return max((t.p1 - t.p0) if pooled else (t.r1 - t.r0) for t in tiles)

    # (what `blocks_for` needs of the steps and tensors that no try changes)
    table_rows = [(("tables", s), len(step["tables"]) * q_rows + (l_rows if step["lut"] else 0), s)
                  for s, step in enumerate(steps) if step["kind"] == "chip" and s != prefixed]
    stored_tensors = sorted(set(chip_prod) | set(chip_cons))
    several_readers = {t for t in stored_tensors if len(set(chip_cons.get(t, []))) > 1}

    def blocks_for(spilled):
        blocks = {key: Block(key, rows, s, s) for key, rows, s in table_rows}
        for t in stored_tensors:
            rows = layout_of(t).rows
            prod, cons = chip_prod.get(t, []), chip_cons.get(t, [])
            # Kept in the UB whole: from its producer to its last reader, or,
            # read from host memory by several parts, from the first on.
            if t not in spilled and t not in relayout and ((prod and cons)
                                                           or t in several_readers):
                blocks[("res", t)] = Block(("res", t), rows, min(prod + cons), max(prod + cons), t)
                continue
            # Streamed through a ring of a few M tiles' samples.
            if prod and t in chunked:
                for p in prod:
                    key = ("out", t, p)
                    blocks[key] = Block(key, chunk_rows(t, p), p, p)
            elif prod:
                key = ("out", t)
                blocks[key] = Block(key, ring_rows(key, t, prod[0]), min(prod), max(prod))
            for c in cons:
                key = ("in", t, c)
                extra = len(steps[c]["tables"]) * q_rows if c == prefixed else 0
                if ("window", c) not in memo:
                    memo[("window", c)] = _window(steps[c], batch, config, layout_of(t))
                window = memo[("window", c)]
                if window:
                    streamed.add(key)       # (a window is never held whole)
                rows = window[1] - window[0] if window else ring_rows(key, t, c)
                blocks[key] = Block(key, extra + rows, c, c)
        return blocks

    def chunk_rows(t, p):
        """UB rows of part `p`'s chunk of output `t`: the blocks of its N
        tiles (none for a part that leaves its sums to the next)."""
        step = steps[p]
        if step["k"][1] != len(step["k_tiles"]):
            return 0
        key = ("out", t)
        lay = ub_layout(t, key)
        per = min(batch, slots(key, p)) * lay.sample_stride if key in streamed \
            else lay.block_stride
        return (step["n"][1] - step["n"][0]) * per

    def chunkable(key):
        """Whether output `key` can be held a part's N tiles at a time: not
        banded, its producer split into parts of different N tiles."""
        return (len(key) == 2 and key[0] == "out" and key not in banded
                and len({steps[p]["n"] for p in chip_prod[key[1]]}) > 1)

    def again_with(name, **fields):
        """The settings to compile again with: these fields of layer
        `name`, and the bands found so far."""
        out = {n: dict(h) for n, h in (hints or {}).items()}
        for n, rows in band_limit.items():
            out.setdefault(n, {})["band_rows"] = rows
        out.setdefault(name, {}).update(fields)
        return out

    def siblings(key):
        """`key` and the same input's keys of the other parts of its layer
        (split by N, K or M tiles: they need the same, so they get it at
        once)."""
        if key[0] != "in":
            return [key]
        name = steps[key[2]]["item"].name
        return [("in", key[1], c) for c in chip_cons[key[1]] if steps[c]["item"].name == name]

    def allocate():
        """Stream, spill and place until every part fits (see the module
        docstring); the blocks and the spilled tensors."""
        spilled = set()
        while True:
            blocks = blocks_for(spilled)
            bad = place_blocks(list(blocks.values()), config.ub_rows)
            if bad is None:
                return blocks, spilled
            # Stream the block that does not fit, if it can be; else spill the
            # largest tensor kept across the parts there; else stream another
            # block of those parts.
            # (an output a part at a time, ("out", t, part), is never a ring)
            if bad.key not in streamed and (bad.key[0] == "in"
                                            or bad.key[0] == "out" and len(bad.key) == 2):
                streamed.update(siblings(bad.key))
                continue
            at = [b for b in blocks.values() if b.start <= bad.end and bad.start <= b.end]
            live = [b for b in at if b.tensor and b.start < b.end and b.tensor not in spilled]
            if live:
                spilled.add(max(live, key=lambda b: b.rows).tensor)
                continue
            if bad.key in streamed and bad.key not in banded and bandable(bad.key) \
                    and bad.end > bad.start:
                # (a ring across many parts, as a layer split by K or N
                # writes: banded itself rather than everything beside it)
                banded.add(bad.key)
                for p in chip_prod[bad.key[1]]:
                    steps[p]["reads"] = 1
                continue
            # (a layer split by N writes its output a part's N tiles at a time)
            if chunkable(bad.key) and bad.key in streamed:
                chunked.add(bad.key[1])
                continue
            ring = [b for b in at if b.key[0] in ("in", "out") and b.key not in streamed
                    and not (b.key[0] == "out" and len(b.key) == 3)]
            if ring:
                streamed.add(max(ring, key=lambda b: b.rows).key)
                continue
            # (a ring for reads of several tiles at a time shrinks a tile at a time)
            wide = [b.start for b in at if b.key in streamed and b.key[0] in ("in", "out")
                    and steps[b.start]["reads"] > 1]
            if wide:
                steps[wide[0]]["reads"] -= 1
                continue
            # Stream a convolution's input or output in bands of output rows
            # (each band's input rows with their halo), then make the bands
            # of the parts there smaller, down to one row.
            here = [b for b in blocks.values() if b.start <= bad.start <= b.end]
            band = [b for b in here if b.key not in banded and bandable(b.key)]
            if band:
                for key in siblings(max(band, key=lambda b: b.rows).key):
                    banded.add(key)
                    streamed.discard(key)
                    for p in ([key[2]] if key[0] == "in" else chip_prod[key[1]]):
                        steps[p]["reads"] = 1
                continue
            shrink = [b for b in here if b.key in banded and band_rows_of(b.start) > 1]
            if shrink:
                s = max(shrink, key=lambda b: b.rows).start
                name = steps[s]["item"].name
                if steps[s]["k"] != (0, len(steps[s]["k_tiles"])):
                    raise _Rebands(again_with(name, band_rows=band_rows_of(s) // 2))
                band_limit[name] = band_rows_of(s) // 2
                continue
            rows_split = [b for b in here if b.key in banded and b.key[0] == "in"
                          and steps[b.start]["k"] != (0, len(steps[b.start]["k_tiles"]))
                          and not steps[b.start]["item"].k_by_rows]
            if rows_split:
                raise _Rebands(again_with(steps[max(rows_split, key=lambda b: b.rows).start]
                                          ["item"].name, k_by_rows=True))
            chunk = [b for b in here if chunkable(b.key) and b.key in streamed]
            if chunk:
                chunked.add(max(chunk, key=lambda b: b.rows).key[1])
                continue
            single = [b for b in here if b.key in banded and b.key[0] == "in"
                      and b.key not in one_slot]
            if single:
                one_slot.update(siblings(max(single, key=lambda b: b.rows).key))
                continue
            # (a part reading several input blocks or kernel rows of a
            # banded input: parts of fewer weight tiles, cut at rows of taps
            # and blocks, each reading less)
            fewer = [b for b in here if b.key in banded and b.key[0] == "in"
                     and _part_tiles(steps[b.start]) > 1
                     and (_span_of(_in_blocks(steps[b.start])) > 1
                          or _span_of(_in_tap_rows(steps[b.start])) > 1)]
            if fewer:
                s = max(fewer, key=lambda b: b.rows).start
                raise _Rebands(again_with(steps[s]["item"].name, k_by_rows=True,
                                          k_cap=max(1, _part_tiles(steps[s]) // 2)))
            need = sum(b.rows for b in here)
            if any(b.key in banded for b in here):
                raise CompileError(
                    f"layer {steps[bad.start]['item'].name!r}: streamed in bands of one output "
                    f"row, its input and output bands, tables and the tensors kept there need "
                    f"{need} unified-buffer rows; the unified buffer has {config.ub_rows}: "
                    f"compile with --ub-rows {_at_least(need)} or more (batch {batch})")
            raise CompileError(f"layer {steps[bad.start]['item'].name!r}: its input, output and "
                               f"tables need {need} unified-buffer rows at once; the unified "
                               f"buffer has {config.ub_rows} (batch {batch}; a smaller batch "
                               f"may fit)")

    # A part reading several tiles at a time (deeper rings) must not cost
    # another part a spill: then every part reads a tile at a time.
    deep = {s: step["reads"] for s, step in enumerate(steps) if step.get("reads", 1) > 1}
    blocks, spilled = allocate()
    if deep:
        kept = (blocks, spilled, set(streamed), {s: steps[s]["reads"] for s in deep},
                set(banded), dict(band_limit), set(one_slot), set(chunked))
        for s in deep:
            steps[s]["reads"] = 1
        streamed.clear()
        banded.clear()
        band_limit.clear()
        one_slot.clear()
        chunked.clear()
        blocks, spilled = allocate()
        if not kept[1] - spilled:      # no more spills with the deeper rings
            blocks, spilled = kept[:2]
            streamed.clear()
            streamed.update(kept[2])
            for s, reads in kept[3].items():
                steps[s]["reads"] = reads
            banded.clear()
            banded.update(kept[4])
            band_limit.clear()
            band_limit.update(kept[5])
            one_slot.clear()
            one_slot.update(kept[6])
            chunked.clear()
            chunked.update(kept[7])
    for s, step in enumerate(steps):
        if step["kind"] == "chip":
            step["item"] = chip_of(s)
    host_side |= spilled | relayout
    # A banded output is written band by band, its padding never: the host
    # copy holds the fill value from the start.
    prefill = {k[1] for k in banded if k[0] == "out" and any(layout_of(k[1]).pad)} - relayout

    # The host region: constants, then tensors kept in host memory.
    host = bytearray()

    def put(data):
        host.extend(bytes(-len(host) % _ALIGN))
        offset = len(host)
        host.extend(data)
        return offset

    for s, step in enumerate(steps):
        if step["kind"] == "chip" and s != prefixed:
            data = b"".join(step["tables"])
            if step["lut"]:
                data += step["lut"].ljust(l_rows * R, b"\0")
            step["tables_host"] = put(data)
    fills = {}
    for t in chip_prod:
        lay = layout_of(t)
        runs = [n for j in range(lay.blocks) for _, n in lay.pad_runs(j)]
        if runs:
            byte = lay.fill & 0xFF
            fills[byte] = max(fills.get(byte, 0), max(runs))
    fill_host = {byte: put(bytes([byte]) * (rows * R)) for byte, rows in sorted(fills.items())}
    host_off = {}
    for t in sorted(relayout | prefill):   # padding rows hold the fill value from the start
        lay = layout_of(t)
        host_off[t] = put(bytes([lay.fill & 0xFF]) * lay.nbytes)
    first = []
    if prefixed is not None:
        # (the tables end where the input starts, on an aligned offset)
        data = b"".join(steps[prefixed]["tables"])
        host.extend(bytes(-(len(host) + len(data)) % _ALIGN))
        steps[prefixed]["tables_host"] = len(host)
        host.extend(data)
        first = [steps[prefixed]["item"].input]
    constants = bytes(host)
    for t in first + sorted(host_side - relayout - prefill - set(first)):
        host_off[t] = put(bytes(0))
        host.extend(bytes(layout_of(t).nbytes))
    host_size = max(len(host), _ALIGN)

    # Programs.
    out_steps = []
    band_slots = {k: 1 if k in one_slot else 2 for k in banded}
    estimates = {}
    for s, step in enumerate(steps):
        item = step["item"]
        if step["kind"] == "host":
            out_steps.append(HostStep(
                name=item.name, layer=item.layer.name,
                inputs=[(t, host_off[t], layout_of(t)) for t in item.inputs],
                outputs=[(t, host_off[t], layout_of(t)) for t in item.outputs]))
            continue
        out_steps.append(_chip_step(s, step, item, config, batch, blocks, layout_of, host_off,
                                    fill_host, chip_prod, host_side, streamed, ub_layout,
                                    band_slots, estimates))

    weights = (np.concatenate(image) if image
               else np.zeros((0, R, config.cols), dtype=np.int8)).astype(np.int8)
    host_layers = {s.layer: _layer(graph, s.layer) for s in out_steps if isinstance(s, HostStep)}

    def spec(g, kind):
        t = graph.tensor(g.tensor)
        return TensorSpec(tensor=g.tensor, shape=t.shape, quant=t.quant, model_name=g.model_name,
                          model_shape=tuple(g.model_shape), model_dtype=str(np.dtype(g.model_dtype)),
                          model_layout=g.layout, storage=layout_of(g.tensor),
                          host_offset=host_off[g.tensor],
                          im2col=im2col_of[g.tensor][0] if kind == "in" and g.tensor in im2col_of
                          else None)

    notes = [f"tensor {t!r} spilled to host memory" for t in sorted(spilled)]
    for k in sorted(banded, key=str):
        s = blocks[k].start
        tiles = m_tiles(steps[s]["item"], batch, config)
        notes.append(f"tensor {k[1]!r} streamed in {len(tiles)} bands of at most "
                     f"{band_rows_of(s)} output rows ({'written by' if k[0] == 'out' else 'read by'} "
                     f"{steps[s]['item'].name!r}, {blocks[k].rows} unified-buffer rows)")
    notes += [f"tensor {t!r} written a part's N tiles at a time" for t in sorted(chunked)]
    notes += [f"tensor {k[1]!r} streamed through the unified buffer "
              f"({'written by' if k[0] == 'out' else 'read by'} {steps[blocks[k].start]['item'].name!r})"
              for k in sorted(streamed, key=str) if k in blocks]
    notes = list(dict.fromkeys(notes))     # (a layer's parts share their notes)
    return CompiledModel(config=config, batch=batch,
                         inputs=[spec(g, "in") for g in graph.inputs],
                         outputs=[spec(g, "out") for g in graph.outputs],
                         steps=out_steps, weights=weights, host_size=host_size,
                         constants=constants, tensors=dict(graph.tensors),
                         host_layers=host_layers, source=graph.source, notes=notes)


def _input_reads(chip, batch, config):
    """M tiles per read of the layer's input from host memory: 3 (an input
    ring of six tiles, an output ring of four, `lower._paced_reads`) for a
    first convolution of one N tile over host-made patches, which moves
    about as many rows over the host link as its MMCs stream, so that it
    pays the link's round trip once per three tiles (the demo CNN's conv4
    at a host latency of 200: 13 841 cycles with 1, 11 857 with 2, 11 232
    with 3); else 1. The allocator takes a tile off while the rings do not
    fit, and uses single reads if the deeper rings would cost a spill."""
    return 3 if chip.kind == "conv" and chip.im2col and chip.n_out <= config.cols else 1


def _layer(graph, name):
    for layer in graph.layers:
        if layer.name == name:
            return layer
    raise CompileError(f"no layer named {name!r}")


def _window(step, batch, config, layout):
    """``(first, end)``: the input rows a dense part split by K reads (its
    K tiles' rows of its samples), when they are fewer than the whole
    input; else None. Such a part reads just these rows."""
    chip = step["item"]
    if chip.kind != "dense" or step["k"] == (0, len(step["k_tiles"])):
        return None
    tiles = m_tiles(chip, batch, config)
    if step["m"] is not None:
        tiles = tiles[step["m"][0]:step["m"][1]]
    samples = [b for t in tiles for b in t.samples]
    rows = [layout.row(b, kt.y, kt.x, kt.j) for kt in step["k_tiles"][step["k"][0]:step["k"][1]]
            for b in (samples[0], samples[-1])]
    first, end = min(rows), max(rows) + 1
    return (first, end) if end - first < layout.rows else None


def _in_blocks(step):
    """``(first, end)``: the input channel blocks the kept K tiles of a
    convolution part read (a depthwise convolution's N tile, one)."""
    return _kept_span(step, "j")


def _in_tap_rows(step):
    """``(first, end)``: the kernel rows of the kept K tiles of a
    convolution part."""
    return _kept_span(step, "y")


def _kept_span(step, field):
    """``(first, end)`` of the K tiles' `field` over the part's kept tiles
    (remembered in the step: its tiles do not change)."""
    at = ("span", field)
    if at not in step:
        (n0, n1), (k0, k1) = step["n"], step["k"]
        ks = k0 + np.flatnonzero(step["kept"][n0:n1, k0:k1].any(axis=0))
        values = [getattr(step["k_tiles"][k], field) for k in ks]
        step[at] = (min(values), max(values) + 1) if values else None
    return step[at]


def _timing_key(program):
    """What the cycle model of an ideal host sees of `program`: not the
    host offsets of its DMA (the parts of a layer's M tiles, which differ
    only in those, are estimated once)."""
    # (the encodings, a DMA's host field cleared: equal words are equal
    # instructions, and bytes hash and compare faster than instructions)
    return b"".join(_without_host(i) if isinstance(i, (Rhm, Whm)) else i.encode()
                    for i in program)


#: the bits of RHM's and WHM's host field
_HOST_BITS = next(f.mask for f in LAYOUTS[Rhm.OPCODE] if f.name == "host")
assert _HOST_BITS == next(f.mask for f in LAYOUTS[Whm.OPCODE] if f.name == "host")


def _without_host(dma):
    """The encoding of RHM or WHM `dma` with its host field 0."""
    word = int.from_bytes(dma.encode(), "little") & ~_HOST_BITS
    return word.to_bytes(INSTRUCTION_BYTES, "little")


def _span_of(first_end):
    return 0 if first_end is None else first_end[1] - first_end[0]


def _part_tiles(step):
    """Weight tiles of the part (its kept tiles)."""
    (n0, n1), (k0, k1) = step["n"], step["k"]
    return int(step["kept"][n0:n1, k0:k1].sum())


def _at_least(rows):
    """`rows` rounded up to a multiple of 64 (a `--ub-rows` to suggest)."""
    return -(-rows // 64) * 64


def _chip_step(s, step, chip, config, batch, blocks, layout_of, host_off, fill_host,
               chip_prod, host_side, streamed, ub_layout, banded=None, estimates=None):
    """The `ChipStep` of part `s`: tables, activation registers, the lowered
    layer, HALT; RWs scheduled; its cycle estimate (`estimates`: those of
    the parts before, by `_timing_key`)."""
    banded = banded or {}
    estimates = {} if estimates is None else estimates
    n0, n1 = step["n"]
    inl, outl = layout_of(chip.input), layout_of(chip.output)
    pre = []
    # The input: resident since an earlier part, or read from host memory now.
    ring_in = ring_out = None
    in_band = False
    if ("in", chip.input, s) in blocks:
        in_block = blocks[("in", chip.input, s)]
        load = True
        ring_in = ring_slots(chip, batch, config, step["reads"]) \
            if ("in", chip.input, s) in streamed else None
        in_band = banded.get(("in", chip.input, s), 0)
    else:
        in_block = blocks[("res", chip.input)]
        load = chip.input not in chip_prod and in_block.start == s
    prefix = 0
    out_band = ("out", chip.output) in banded
    if ("tables", s) in blocks:
        tables = blocks[("tables", s)]
        tables_load = [Rhm(ub=tables.base, rows=tables.rows, host=step["tables_host"])]
    else:       # read with the input (`prefixed`)
        prefix = len(step["tables"]) * ldq_rows(config)
        tables = Block(("tables", s), prefix, s, s, base=in_block.base)
        in_block = replace(in_block, base=in_block.base + prefix)
        tables_load = []
    if step["lut"]:
        tables_load.append(Ldl(ub=tables.base + len(step["tables"]) * ldq_rows(config)))
    zero, low, high, _ = act_settings(chip)
    pre += [Cfg(reg=Reg.OUT_ZERO_POINT, value=zero), Cfg(reg=Reg.CLAMP_MIN, value=low),
            Cfg(reg=Reg.CLAMP_MAX, value=high)]
    out_block = blocks.get(("res", chip.output))
    first_block = 0
    if out_block is None and ("out", chip.output, s) in blocks:
        out_block = blocks[("out", chip.output, s)]     # (only the part's N tiles' blocks)
        first_block = n0
        ring_out = ring_slots(chip, batch, config, step["reads"], output=True) \
            if ("out", chip.output) in streamed else None
    elif out_block is None:
        out_block = blocks[("out", chip.output)]
        ring_out = ring_slots(chip, batch, config, step["reads"], output=True) \
            if ("out", chip.output) in streamed else None
    out_host_layout = outl
    outl = ub_layout(chip.output, out_block.key)
    fill = fill_host[outl.fill & 0xFF] if any(outl.pad) and not out_band else None
    k0, k1 = step["k"]
    window = _window(step, batch, config, inl) if ("in", chip.input, s) in blocks else None
    if window:
        ring_in = None
    body = lower_part(chip, config, batch, step["k_tiles"], (n0, n1), k_range=(k0, k1),
                      m_range=step["m"], kept=step["kept"], addr=PartAddresses(
        inl, in_block.base, outl, out_block.base, tables.base, step["mem_base"],
        out_host_layout=out_host_layout,
        in_host=host_off[chip.input] if load else None,
        out_host=host_off[chip.output] if chip.output in host_side else None,
        fill_host=fill,
        in_slots=ring_in, out_slots=ring_out, tables_load=tables_load,
        in_reads=step["reads"] if load else 1, in_prefix=prefix,
        in_band=in_band, out_band=out_band, in_window=window, out_first_block=first_block,
        in_blocks=_in_blocks(step) if in_band else None,
        in_tap_rows=_in_tap_rows(step) if in_band else None))
    post = [Halt()]
    # The registers are for the ACTs, much later: set them behind the first
    # input read (the MMCs wait for it), not before it.
    lead = body[:1] if body and isinstance(body[0], Rhm) else []
    program = insert_weight_reads(lead + pre + body[len(lead):] + post, config)
    key = _timing_key(program)
    if key not in estimates:
        estimates[key] = int(estimate_cycles(config, program)["cycles"])
    estimate = estimates[key]
    nt = -(-chip.n_out // config.cols)
    kt = len(step["k_tiles"])
    kept = step["kept"][n0:n1, k0:k1]
    rows = m_rows(chip, batch, config, step["m"])
    skipped_work = int(step["work"][n0:n1, k0:k1][~kept].sum())
    m = step["m"]
    name = chip.name + (f"[n{n0}:{n1}" + (f" m{m[0]}:{m[1]}" if m else "")
                        + (f" k{k0}:{k1}" if k1 - k0 < kt else "") + "]"
                        if step["split"] else "")
    return ChipStep(name=name, layers=list(chip.layers), program=encode_program(program),
                    weights=step["weights"], weight_base=step["mem_base"],
                    estimated_cycles=estimate,
                    useful_macs=useful_macs(chip, batch) * (n1 - n0) * (k1 - k0) // (nt * kt),
                    performed_macs=int(kept.sum()) * rows * config.rows * config.cols,
                    skipped_tiles=int((~kept).sum()),
                    skipped_macs=skipped_work * (batch if chip.kind == "dense"
                                                 else batch * chip.conv_out[0] * chip.conv_out[1]))
