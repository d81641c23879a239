"""Pass: each step's program, its cycle estimate and its work.

Input: the `placement.Placement`, the `host_region.HostRegion`, the
`stored_layouts.StoredLayouts`, the chip configuration and the batch.
Output: the compiled model's steps in order: an `artifact.ChipStep` per
part (its tables read, the activation registers set, the layer lowered by
`lower.lower_part` with zero points folded into the biases, HALT; weight
reads scheduled by `schedule.insert_weight_reads`; cycles estimated by the
cycle model; the MACs it does and skips), an `artifact.HostStep` per host
step.
"""

from dataclasses import dataclass, replace

from ..isa import INSTRUCTION_BYTES, Cfg, Halt, Ldl, Reg, Rhm, Whm, encode_program, ldq_rows
from ..isa.layouts import LAYOUTS
from ..models.cycle_model import estimate_cycles
from .allocate import Block
from .artifact import ChipStep, HostStep
from .lower import PartAddresses, lower_part, ring_slots, useful_macs
from .parts import Part
from .schedule import insert_weight_reads
from .tiling import act_settings, m_rows


__all__ = ["make_programs"]


def make_programs(placement, host, layouts, config, batch):
    """The compiled model's steps (see the module docstring)."""
    out, estimates = [], {}
    band_slots = {k: 1 if k in placement.one_slot else 2 for k in placement.banded}
    for s, step in enumerate(placement.steps):
        if not isinstance(step, Part):
            out.append(HostStep(
                name=step.name, layer=step.layer.name,
                inputs=[(t, host.offsets[t], layouts(t)) for t in step.inputs],
                outputs=[(t, host.offsets[t], layouts(t)) for t in step.outputs]))
            continue
        out.append(_chip_step(s, step, placement, host, layouts, config, batch, band_slots,
                              estimates))
    return out


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


def _chip_step(s, part, placement, host, layouts, config, batch, band_slots, estimates):
    """The `ChipStep` of part `s`: tables, activation registers, the lowered
    layer, HALT; RWs scheduled; its cycle estimate (`estimates`: those of
    the parts before, by `_timing_key`)."""
    chip = part.chip
    source = _input_source(s, part, placement, config, batch, band_slots)
    tables, tables_load, prefix, in_block = _tables(s, part, placement, host, config, source)
    sink = _output_sink(s, part, placement, host, layouts, config, batch, band_slots)
    inl = layouts(chip.input)
    k0, k1 = part.k
    window = part.window(batch, config, inl) if source.own_block else None
    body = lower_part(chip, config, batch, part.k_tiles, part.n, k_range=(k0, k1),
                      m_range=part.m, kept=part.kept, addr=PartAddresses(
        inl, in_block.base, sink.layout, sink.block.base, tables.base, part.mem_base,
        out_host_layout=layouts(chip.output),
        in_host=host.offsets[chip.input] if source.load else None,
        out_host=host.offsets[chip.output] if chip.output in placement.host_side else None,
        fill_host=sink.fill,
        in_slots=None if window else source.ring, out_slots=sink.ring,
        tables_load=tables_load,
        in_reads=part.reads if source.load else 1, in_prefix=prefix,
        in_band=source.band, out_band=sink.band, in_window=window,
        out_first_block=sink.first_block,
        in_blocks=part.in_blocks if source.band else None,
        in_tap_rows=part.in_tap_rows if source.band else None))
    zero, low, high, _ = act_settings(chip)
    registers = [Cfg(reg=Reg.OUT_ZERO_POINT, value=zero), Cfg(reg=Reg.CLAMP_MIN, value=low),
                 Cfg(reg=Reg.CLAMP_MAX, value=high)]
    # The registers are for the ACTs, much later: set them behind the first
    # input read (the MMCs wait for it), not before it.
    lead = body[:1] if body and isinstance(body[0], Rhm) else []
    program = insert_weight_reads(lead + registers + body[len(lead):] + [Halt()], config)
    key = _timing_key(program)
    if key not in estimates:
        estimates[key] = int(estimate_cycles(config, program)["cycles"])
    return ChipStep(name=_part_name(part), layers=list(chip.layers),
                    program=encode_program(program), weights=part.weights,
                    weight_base=part.mem_base, estimated_cycles=estimates[key],
                    **_work(part, config, batch))


@dataclass(frozen=True)
class _Source:
    """Where part `s` reads its input: `block`, its own block (`own_block`:
    read for this part) or the resident tensor's; `load`, whether the part
    reads it from host memory; `ring`, the slots of a streamed input;
    `band`, the band slots (0: not banded)."""
    block: Block
    own_block: bool
    load: bool
    ring: object
    band: int


def _input_source(s, part, placement, config, batch, band_slots):
    """The input of part `s`: resident since an earlier part, or read from
    host memory now."""
    chip, key = part.chip, ("in", part.chip.input, s)
    if key in placement.blocks:
        ring = ring_slots(chip, batch, config, part.reads) if key in placement.streamed else None
        return _Source(placement.blocks[key], True, True, ring, band_slots.get(key, 0))
    block = placement.blocks[("res", chip.input)]
    load = chip.input not in placement.producers and block.start == s
    return _Source(block, False, load, None, 0)


def _tables(s, part, placement, host, config, source):
    """Part `s`'s tables: (their block, the instructions that load them, the
    rows they take ahead of the input, the input's block after them). Tables
    without a block of their own are read with the input
    (`placement.Placement.prefixed`)."""
    in_block, prefix = source.block, 0
    if ("tables", s) in placement.blocks:
        tables = placement.blocks[("tables", s)]
        load = [Rhm(ub=tables.base, rows=tables.rows, host=host.tables[s])]
    else:
        prefix = len(part.tables) * ldq_rows(config)
        tables = Block(("tables", s), prefix, s, s, base=in_block.base)
        in_block = replace(in_block, base=in_block.base + prefix)
        load = []
    if part.lut:
        load.append(Ldl(ub=tables.base + len(part.tables) * ldq_rows(config)))
    return tables, load, prefix, in_block


@dataclass(frozen=True)
class _Sink:
    """Where part `s` writes its output: `block`, its UB layout `layout`,
    the first N tile the block holds (`first_block`), the slots of a
    streamed output (`ring`), whether it is banded (`band`) and the host
    fill of its padding (`fill`)."""
    block: Block
    layout: object
    first_block: int
    ring: object
    band: bool
    fill: object


def _output_sink(s, part, placement, host, layouts, config, batch, band_slots):
    """The output of part `s`: resident, or a block of its own (the whole
    tensor's, or only the part's N tiles')."""
    chip, blocks = part.chip, placement.blocks
    band = ("out", chip.output) in band_slots
    streamed = ("out", chip.output) in placement.streamed
    block, first_block, ring = blocks.get(("res", chip.output)), 0, None
    if block is None:
        if ("out", chip.output, s) in blocks:
            block, first_block = blocks[("out", chip.output, s)], part.n[0]
        else:
            block = blocks[("out", chip.output)]
        if streamed:
            ring = ring_slots(chip, batch, config, part.reads, output=True)
    layout = placement.ub_layout(layouts, chip.output, block.key)
    fill = host.fills[layout.fill & 0xFF] if any(layout.pad) and not band else None
    return _Sink(block, layout, first_block, ring, band, fill)


def _part_name(part):
    """The layer's name, and for a split part its N (M, K) ranges."""
    if not part.split:
        return part.chip.name
    (n0, n1), (k0, k1), m = part.n, part.k, part.m
    return (part.chip.name + f"[n{n0}:{n1}" + (f" m{m[0]}:{m[1]}" if m else "")
            + (f" k{k0}:{k1}" if k1 - k0 < len(part.k_tiles) else "") + "]")


def _work(part, config, batch):
    """The part's MACs: the model's share (`useful_macs`), the array's
    (`performed_macs`, kept tiles only), and the all-zero tiles skipped."""
    chip, (n0, n1), (k0, k1) = part.chip, part.n, part.k
    nt, kt = -(-chip.n_out // config.cols), len(part.k_tiles)
    kept = part.kept[n0:n1, k0:k1]
    skipped_work = int(part.work[n0:n1, k0:k1][~kept].sum())
    per_row = batch if chip.kind == "dense" else batch * chip.conv_out[0] * chip.conv_out[1]
    return dict(useful_macs=useful_macs(chip, batch) * (n1 - n0) * (k1 - k0) // (nt * kt),
                performed_macs=int(kept.sum()) * m_rows(chip, batch, config, part.m)
                * config.rows * config.cols,
                skipped_tiles=int((~kept).sum()), skipped_macs=skipped_work * per_row)
