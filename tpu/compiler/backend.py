"""The back end: an IR `Graph` -> a `CompiledModel` for one chip configuration.

`compile_graph(graph, config, batch=1)` runs these passes in order, each a
module that reads the data the ones before made and returns its own:

1. `pools.split_pools`: the graph, pools the ACT cannot run in one go split;
2. `fuse.plan_layers`: the plan, chip layers (a matrix layer with its
   requantization, activation and pooling in one ACT) and host steps;
3. `stored_layouts.plan_layouts`: `StoredLayouts`, each tensor's stored
   layout, padded for the convolutions that read it;
4. `parts.plan_parts`: `PlannedParts`, the chip layers cut into parts of
   the weights that weight memory holds (by N tiles, and by K tiles with
   their M tiles grouped for the accumulators), and the weight image;
5. `placement.place_parts`: `Placement`, every part's data in the unified
   buffer, streamed through rings, in bands of output rows, a part's N
   tiles at a time or spilled to host memory until it fits;
6. `host_region.lay_out_host`: `HostRegion`, the constants and the host
   offset of every tensor kept in host memory;
7. `programs.make_programs`: each step's `ChipStep` (lowered by
   `lower.lower_part`, weight reads by `schedule.insert_weight_reads`,
   cycles by the cycle model) or `HostStep`;
8. `assemble.assemble`: the `CompiledModel`.

When the placement finds that a layer split by K tiles must change its
parts (smaller bands, or parts cut at rows of taps), it raises
`placement.Rebands` with those layer settings, and the passes from 4 on run
again with them.
"""

import re

from .assemble import assemble
from .errors import CompileError
from .fuse import plan_layers
from .host_region import lay_out_host
from .parts import plan_parts
from .placement import Rebands, place_parts
from .pools import split_pools
from .programs import make_programs
from .stored_layouts import plan_layouts


__all__ = ["compile_graph"]


def compile_graph(graph, config, batch=1):
    """Compile `graph` for `config`, `batch` samples per program run. An
    error about one layer names the model operator it came from, when the
    front end recorded it (``graph.origins``)."""
    try:
        check_config(config, batch)
        pooled = split_pools(graph.validate())
        plan, _ = plan_layers(pooled, config)
        layouts = plan_layouts(pooled, plan, batch, config.rows)
        hints = {}
        while True:
            planned = plan_parts(plan, config, batch, hints)
            try:
                placement = place_parts(pooled, planned, layouts, config, batch, hints)
                break
            except Rebands as again:
                hints = again.hints
        host = lay_out_host(placement, layouts, config)
        steps = make_programs(placement, host, layouts, config, batch)
        return assemble(pooled, planned, placement, host, layouts, steps, config, batch)
    except CompileError as e:
        named = _LAYER_ERROR.match(str(e))
        if named is None or named[1] not in graph.origins:
            raise
        raise type(e)(f"{graph.describe(named[1])}{str(e)[named.end():]}") from None


#: the start of an error about one layer, as the passes word it
_LAYER_ERROR = re.compile(r"layer '([^']+)'")


def check_config(config, batch):
    """Refuse a chip the compiler cannot target, or a batch that is not a
    positive integer."""
    if config.rows != config.cols:
        raise CompileError(f"the compiler needs a square array (rows == cols): ACT writes a "
                           f"result row of {config.cols} channels into a UB row of "
                           f"{config.rows} bytes; this chip is {config.rows}x{config.cols}")
    if config.acc_rows < 2:
        raise CompileError(f"the compiler needs at least 2 accumulator rows, not {config.acc_rows}")
    if not isinstance(batch, int) or batch < 1:
        raise CompileError(f"batch must be a positive integer, not {batch!r}")
