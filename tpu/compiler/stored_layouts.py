"""Pass: the stored layout of every tensor the parts and host steps touch.

Input: the validated graph, the plan of `fuse.plan_layers`, the batch and
the array's lanes. Output: `StoredLayouts`, which gives each tensor's
`layout.Layout`: padded for the convolutions that read it (the largest
padding of its readers on each side, filled with what the reader's
padding holds), or the shape of host-made patches for a convolution over
im2col patches.
"""

from dataclasses import dataclass, field

from .fuse import ChipLayer
from .layout import Layout, as_image


__all__ = ["StoredLayouts", "plan_layouts"]


@dataclass
class StoredLayouts:
    """The layouts of a graph's tensors, made when first asked for.
    ``im2col_of``: tensor -> (patch geometry, patch image shape) of a
    convolution's host-made patches; ``pads``: tensor -> (top, left,
    bottom, right) its readers need; ``fills``: tensor -> the value its
    padding holds, where not its zero point."""
    graph: object
    batch: int
    lanes: int
    im2col_of: dict = field(default_factory=dict)
    pads: dict = field(default_factory=dict)
    fills: dict = field(default_factory=dict)
    _made: dict = field(default_factory=dict, repr=False)

    def __call__(self, name):
        """The `Layout` of tensor `name`."""
        if name not in self._made:
            t = self.graph.tensor(name)
            shape = self.im2col_of[name][1] if name in self.im2col_of else as_image(t.shape)
            self._made[name] = Layout(*shape, lanes=self.lanes, batch=self.batch,
                                      pad=self.pads.get(name, (0, 0, 0, 0)),
                                      fill=self.fills.get(name, int(t.quant.zero_point)),
                                      unsigned=bool(t.quant.unsigned))
        return self._made[name]


def plan_layouts(graph, plan, batch, lanes):
    """The `StoredLayouts` of `plan`'s tensors (see the module docstring)."""
    layouts = StoredLayouts(graph, batch, lanes)
    for item in plan:
        if isinstance(item, ChipLayer) and item.kind == "conv":
            if item.im2col:
                layouts.im2col_of[item.input] = (item.im2col, item.in_shape)
            else:
                old = layouts.pads.get(item.input, (0, 0, 0, 0))
                layouts.pads[item.input] = tuple(max(a, b) for a, b in zip(old, item.padding))
            if item.in_fill is not None:     # (its only reader: fuse.plan_layers)
                layouts.fills[item.input] = item.in_fill
    return layouts
