"""Pass: lay out the host region, the compiled model's part of host memory.

Input: the `placement.Placement`, the `stored_layouts.StoredLayouts` and
the chip configuration. Output: `HostRegion`: the constants (every part's
LDQ and lookup tables, rows of each fill value that outputs' padding
needs, the padded host copies of tensors whose padding is never written),
then a place for every tensor kept in host memory (model inputs and
outputs, host steps' tensors, spilled and relaid tensors), each at an
offset aligned to `ALIGN` bytes.
"""

from dataclasses import dataclass

from ..isa import ldl_rows
from .parts import Part


__all__ = ["ALIGN", "HostRegion", "lay_out_host"]

#: host offsets are multiples of this many bytes
ALIGN = 64


@dataclass
class HostRegion:
    """``constants``: the region's first bytes, fixed at compile time;
    ``size``: the region's bytes; ``offsets``: tensor -> its host offset;
    ``fills``: fill byte -> the offset of rows of it; ``tables``: part
    index -> the offset of its tables."""
    constants: bytes
    size: int
    offsets: dict
    fills: dict
    tables: dict


def lay_out_host(placement, layouts, config):
    """The `HostRegion` of `placement` (see the module docstring)."""
    R, l_rows = config.rows, ldl_rows(config)
    steps, banded, relayout = placement.steps, placement.banded, placement.relayout
    prefixed = placement.prefixed
    # A banded output is written band by band, its padding never: the host
    # copy holds the fill value from the start.
    prefill = {k[1] for k in banded if k[0] == "out" and any(layouts(k[1]).pad)} - relayout
    host = bytearray()

    def put(data):
        host.extend(bytes(-len(host) % ALIGN))
        offset = len(host)
        host.extend(data)
        return offset

    tables = {}
    for s, step in enumerate(steps):
        if isinstance(step, Part) and s != prefixed:
            data = b"".join(step.tables)
            if step.lut:
                data += step.lut.ljust(l_rows * R, b"\0")
            tables[s] = put(data)
    fills = {}
    for t in placement.producers:
        lay = layouts(t)
        runs = [n for j in range(lay.blocks) for _, n in lay.pad_runs(j)]
        if runs:
            byte = lay.fill & 0xFF
            fills[byte] = max(fills.get(byte, 0), max(runs))
    fill_host = {byte: put(bytes([byte]) * (rows * R)) for byte, rows in sorted(fills.items())}
    offsets = {}
    for t in sorted(relayout | prefill):   # padding rows hold the fill value from the start
        lay = layouts(t)
        offsets[t] = put(bytes([lay.fill & 0xFF]) * lay.nbytes)
    first = []
    if prefixed is not None:
        # (the tables end where the input starts, on an aligned offset)
        data = b"".join(steps[prefixed].tables)
        host.extend(bytes(-(len(host) + len(data)) % ALIGN))
        tables[prefixed] = len(host)
        host.extend(data)
        first = [steps[prefixed].chip.input]
    constants = bytes(host)
    for t in first + sorted(placement.host_side - relayout - prefill - set(first)):
        offsets[t] = put(bytes(0))
        host.extend(bytes(layouts(t).nbytes))
    return HostRegion(constants=constants, size=max(len(host), ALIGN), offsets=offsets,
                      fills=fill_host, tables=tables)
