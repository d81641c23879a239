"""Run a `CompiledModel` on a `tpu.driver.Device` (any backend).

`execute` allocates one host region, writes the constants and the packed
inputs, and runs the steps in order: before a chip part it loads the weight
tiles the part needs unless they are resident already (so a model whose
weights exceed weight memory is refilled between parts), relocates the
part's host addresses into the region and runs it; a host step reads its
inputs from the region, runs `tpu.compiler.reference` and writes its
outputs back. It returns the unpacked outputs and a profile per step.
"""

import numpy as np

from ..isa import decode_program
from ..programs import relocate
from ..models.cycle_model import estimate_cycles
from . import reference
from .artifact import ChipStep


__all__ = ["execute", "part_timeout"]


def part_timeout(config, program, clock_hz, cycles=None):
    """Link seconds to allow a part: ten times its cycle estimate plus 100k
    cycles for host latency (simulated links answer reads slowly). The
    estimate is `cycles` when known (a `ChipStep`'s, made when it was
    compiled: host offsets do not change it), else the cycle model's."""
    if not cycles:
        cycles = estimate_cycles(config, program)["cycles"]
    return (10 * cycles + 100_000) / clock_hz


def _pack_input(spec, values, batch):
    v = np.asarray(values)
    if v.shape != (batch, *spec.shape):
        raise ValueError(f"input {spec.tensor!r}: shape {v.shape} is not "
                         f"({batch}, {', '.join(map(str, spec.shape))})")
    low, high = spec.quant.range
    if v.size and (v.min() < low or v.max() > high):
        raise ValueError(f"input {spec.tensor!r}: values outside {spec.quant.dtype} "
                         f"({low}..{high})")
    return spec.pack(v)


async def execute(device, compiled, inputs, *, profile=True):
    """Run `compiled` on `device` for one batch.

    `inputs` maps IR input tensor names to integer arrays ``(batch, *shape)``.
    Returns ``(outputs, profile)``: outputs by IR tensor name, and per step a
    dict (``name``, ``kind``, ``layers``; for chip parts ``counters`` from the
    chip, ``estimated_cycles``, ``useful_macs``, ``performed_macs``,
    ``skipped_tiles``, ``skipped_macs``, ``weights_loaded``).
    """
    cfg = compiled.config
    if device.config != cfg:
        raise ValueError(f"the model was compiled for {cfg.name} {cfg}, the device is "
                         f"{device.config.name} {device.config}")
    expected = {s.tensor for s in compiled.inputs}
    if set(inputs) != expected:
        raise ValueError(f"inputs {sorted(inputs)} do not match the model's {sorted(expected)}")
    # 4 KiB-aligned, so the parts' reads split as the cycle model of the host
    # link (which sees the programs' offsets) expects.
    region = device.alloc(compiled.host_size, 4096)
    clock = getattr(device.link, "clock_hz", None) or 100e6
    try:
        device.write(region, compiled.constants)
        for spec in compiled.inputs:
            device.write(region, _pack_input(spec, inputs[spec.tensor], compiled.batch),
                         spec.host_offset)
        resident = {}           # weight-memory tile -> weight image tile
        steps = []
        graph = compiled.host_graph()
        for step in compiled.steps:
            if isinstance(step, ChipStep):
                steps.append(await _run_part(device, compiled, step, region, resident, clock))
            else:
                steps.append(_run_host(device, compiled, graph, step, region))
        outputs = {spec.tensor: spec.unpack(device.read(region, spec.storage.nbytes,
                                                        spec.host_offset))
                   for spec in compiled.outputs}
    finally:
        device.free(region)
    return outputs, (steps if profile else [])


async def _run_part(device, compiled, step, region, resident, clock):
    first, count = step.weights
    base = step.weight_base
    loaded = 0
    if count and any(resident.get(base + i) != first + i for i in range(count)):
        await device.load_weights(compiled.weights[first:first + count], first_tile=base,
                                  timeout=max(1.0, 100 * count * compiled.config.rows / clock))
        resident.update({base + i: first + i for i in range(count)})
        loaded = count
    program = relocate(decode_program(step.program), [(0, compiled.host_size, region)])
    result = await device.run(program, timeout=part_timeout(compiled.config, program, clock,
                                                            step.estimated_cycles))
    return dict(name=step.name, kind="chip", layers=list(step.layers),
                counters=dict(result.counters), estimated_cycles=step.estimated_cycles,
                useful_macs=step.useful_macs, performed_macs=step.performed_macs,
                skipped_tiles=step.skipped_tiles, skipped_macs=step.skipped_macs,
                weights_loaded=loaded)


def _run_host(device, compiled, graph, step, region):
    values = {}
    for tensor, offset, layout in step.inputs:
        v = layout.unpack(device.read(region, layout.nbytes, offset))
        t = compiled.tensors[tensor]
        values[tensor] = v.reshape(v.shape[0], *t.shape).astype(t.quant.dtype)
    result = reference.run_layer(graph, compiled.host_layers[step.layer], values)
    for tensor, offset, layout in step.outputs:
        device.write(region, layout.pack(np.asarray(result[tensor], dtype=np.int64)), offset)
    return dict(name=step.name, kind="host", layers=[step.layer])
