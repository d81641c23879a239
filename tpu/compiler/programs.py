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

from dataclasses import replace

from ..isa import Cfg, Halt, Ldl, Reg, Rhm, Whm, encode_program, ldq_rows
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
    return tuple((type(i), i.ub, i.rows) if isinstance(i, (Rhm, Whm)) else i for i in program)


def _chip_step(s, part, placement, host, layouts, config, batch, band_slots, estimates):
    """The `ChipStep` of part `s`: tables, activation registers, the lowered
    layer, HALT; RWs scheduled; its cycle estimate (`estimates`: those of
    the parts before, by `_timing_key`)."""
    chip, blocks, streamed = part.chip, placement.blocks, placement.streamed
    n0, n1 = part.n
    inl, outl = layouts(chip.input), layouts(chip.output)
    pre = []
    # The input: resident since an earlier part, or read from host memory now.
    ring_in = ring_out = None
    in_band = False
    if ("in", chip.input, s) in blocks:
        in_block = blocks[("in", chip.input, s)]
        load = True
        ring_in = ring_slots(chip, batch, config, part.reads) \
            if ("in", chip.input, s) in streamed else None
        in_band = band_slots.get(("in", chip.input, s), 0)
    else:
        in_block = blocks[("res", chip.input)]
        load = chip.input not in placement.producers and in_block.start == s
    prefix = 0
    out_band = ("out", chip.output) in band_slots
    if ("tables", s) in blocks:
        tables = blocks[("tables", s)]
        tables_load = [Rhm(ub=tables.base, rows=tables.rows, host=host.tables[s])]
    else:       # read with the input (`placement.Placement.prefixed`)
        prefix = len(part.tables) * ldq_rows(config)
        tables = Block(("tables", s), prefix, s, s, base=in_block.base)
        in_block = replace(in_block, base=in_block.base + prefix)
        tables_load = []
    if part.lut:
        tables_load.append(Ldl(ub=tables.base + len(part.tables) * ldq_rows(config)))
    zero, low, high, _ = act_settings(chip)
    pre += [Cfg(reg=Reg.OUT_ZERO_POINT, value=zero), Cfg(reg=Reg.CLAMP_MIN, value=low),
            Cfg(reg=Reg.CLAMP_MAX, value=high)]
    out_block = blocks.get(("res", chip.output))
    first_block = 0
    if out_block is None and ("out", chip.output, s) in blocks:
        out_block = blocks[("out", chip.output, s)]     # (only the part's N tiles' blocks)
        first_block = n0
        ring_out = ring_slots(chip, batch, config, part.reads, output=True) \
            if ("out", chip.output) in streamed else None
    elif out_block is None:
        out_block = blocks[("out", chip.output)]
        ring_out = ring_slots(chip, batch, config, part.reads, output=True) \
            if ("out", chip.output) in streamed else None
    out_host_layout = outl
    outl = placement.ub_layout(layouts, chip.output, out_block.key)
    fill = host.fills[outl.fill & 0xFF] if any(outl.pad) and not out_band else None
    k0, k1 = part.k
    window = part.window(batch, config, inl) if ("in", chip.input, s) in blocks else None
    if window:
        ring_in = None
    body = lower_part(chip, config, batch, part.k_tiles, (n0, n1), k_range=(k0, k1),
                      m_range=part.m, kept=part.kept, addr=PartAddresses(
        inl, in_block.base, outl, out_block.base, tables.base, part.mem_base,
        out_host_layout=out_host_layout,
        in_host=host.offsets[chip.input] if load else None,
        out_host=host.offsets[chip.output] if chip.output in placement.host_side else None,
        fill_host=fill,
        in_slots=ring_in, out_slots=ring_out, tables_load=tables_load,
        in_reads=part.reads if load else 1, in_prefix=prefix,
        in_band=in_band, out_band=out_band, in_window=window, out_first_block=first_block,
        in_blocks=part.in_blocks if in_band else None,
        in_tap_rows=part.in_tap_rows if in_band else None))
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
    kt = len(part.k_tiles)
    kept = part.kept[n0:n1, k0:k1]
    rows = m_rows(chip, batch, config, part.m)
    skipped_work = int(part.work[n0:n1, k0:k1][~kept].sum())
    m = part.m
    name = chip.name + (f"[n{n0}:{n1}" + (f" m{m[0]}:{m[1]}" if m else "")
                        + (f" k{k0}:{k1}" if k1 - k0 < kt else "") + "]"
                        if part.split else "")
    return ChipStep(name=name, layers=list(chip.layers), program=encode_program(program),
                    weights=part.weights, weight_base=part.mem_base,
                    estimated_cycles=estimate,
                    useful_macs=useful_macs(chip, batch) * (n1 - n0) * (k1 - k0) // (nt * kt),
                    performed_macs=int(kept.sum()) * rows * config.rows * config.cols,
                    skipped_tiles=int((~kept).sum()),
                    skipped_macs=skipped_work * (batch if chip.kind == "dense"
                                                 else batch * chip.conv_out[0] * chip.conv_out[1]))
