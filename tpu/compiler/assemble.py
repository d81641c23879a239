"""Pass: put the compiled model together.

Input: the validated graph, the `parts.PlannedParts` (its weight image),
the `placement.Placement`, the `host_region.HostRegion`, the
`stored_layouts.StoredLayouts`, the steps of `programs.make_programs`, the
chip configuration and the batch. Output: the `artifact.CompiledModel`:
its steps, weight image, host region constants and size, the model's
inputs and outputs (`artifact.TensorSpec`: stored layout and host offset),
the IR layers of its host steps and notes on what the placement streamed,
banded, chunked or spilled.
"""

import numpy as np

from .artifact import CompiledModel, HostStep, TensorSpec
from .errors import CompileError
from .placement import band_height
from .tiling import m_tiles


__all__ = ["assemble"]


def assemble(graph, planned, placement, host, layouts, steps, config, batch):
    """The `CompiledModel` (see the module docstring)."""
    weights = (np.concatenate(planned.image) if planned.image
               else np.zeros((0, config.rows, config.cols), dtype=np.int8)).astype(np.int8)
    host_layers = {s.layer: _layer(graph, s.layer) for s in steps if isinstance(s, HostStep)}

    def spec(g, kind):
        t = graph.tensor(g.tensor)
        im2col = layouts.im2col_of.get(g.tensor)
        return TensorSpec(tensor=g.tensor, shape=t.shape, quant=t.quant, model_name=g.model_name,
                          model_shape=tuple(g.model_shape), model_dtype=str(np.dtype(g.model_dtype)),
                          model_layout=g.layout, storage=layouts(g.tensor),
                          host_offset=host.offsets[g.tensor],
                          im2col=im2col[0] if kind == "in" and im2col else None)

    return CompiledModel(config=config, batch=batch,
                         inputs=[spec(g, "in") for g in graph.inputs],
                         outputs=[spec(g, "out") for g in graph.outputs],
                         steps=steps, weights=weights, host_size=host.size,
                         constants=host.constants, tensors=dict(graph.tensors),
                         host_layers=host_layers, source=graph.source,
                         notes=placement_notes(placement, config, batch))


def placement_notes(placement, config, batch):
    """What the placement did to which tensor, in words (a layer's parts
    share their notes)."""
    blocks, parts = placement.blocks, placement.steps
    notes = [f"tensor {t!r} spilled to host memory" for t in sorted(placement.spilled)]
    for k in sorted(placement.banded, key=str):
        chip = parts[blocks[k].start].chip
        tiles = m_tiles(chip, batch, config)
        notes.append(f"tensor {k[1]!r} streamed in {len(tiles)} bands of at most "
                     f"{band_height(chip, batch, config)} output rows "
                     f"({'written by' if k[0] == 'out' else 'read by'} "
                     f"{chip.name!r}, {blocks[k].rows} unified-buffer rows)")
    notes += [f"tensor {t!r} written a part's N tiles at a time" for t in sorted(placement.chunked)]
    notes += [f"tensor {k[1]!r} streamed through the unified buffer "
              f"({'written by' if k[0] == 'out' else 'read by'} "
              f"{parts[blocks[k].start].chip.name!r})"
              for k in sorted(placement.streamed, key=str) if k in blocks]
    return list(dict.fromkeys(notes))


def _layer(graph, name):
    for layer in graph.layers:
        if layer.name == name:
            return layer
    raise CompileError(f"no layer named {name!r}")
