"""Pass: rewrite pooling that the activation unit cannot do in one ACT into
pooling it can, where the result stays exactly the same.

* An average pool whose window covers the whole unpadded image is a
  `ir.GlobalAvgPool` (the same sum and rounded division by the pixels).
* A square max pool of a window wider than the unit's (5x5 to 7x7) is two
  max pools: an ``a x a`` window at stride 1 (with the padding), then a
  ``b x b`` window at the pool's stride over that, ``a + b - 1`` wide: the
  max of maxes over windows that cover the original one exactly.

What is left (non-square windows, average pools wider than the unit or
with padding) runs on the host (`fuse.plan_layers`).
"""

from dataclasses import replace

from . import ir
from ..isa import MAX_POOL_SIZE


__all__ = ["split_pools"]


def split_pools(graph):
    """`graph` with its pooling rewritten as above (a new `ir.Graph` when
    anything changed; the intermediate tensors of split max pools are named
    after the pool)."""
    tensors, layers, changed = dict(graph.tensors), [], False
    for layer in graph.layers:
        if not isinstance(layer, ir.Pool2D) or len(graph.tensor(layer.input).shape) != 3:
            layers.append(layer)
            continue
        h, w, _ = graph.tensor(layer.input).shape
        (kh, kw), (sh, sw) = layer.size, layer.stride
        if layer.kind == "avg" and (kh, kw) == (h, w) and not any(layer.padding):
            layers.append(ir.GlobalAvgPool(layer.name, layer.input, layer.output))
            changed = True
        elif (layer.kind == "max" and kh == kw and sh == sw and MAX_POOL_SIZE < kh
              <= 2 * MAX_POOL_SIZE - 1 and sh <= MAX_POOL_SIZE):
            b = MAX_POOL_SIZE
            a = kh - b + 1
            t, l, bottom, r = layer.padding
            mid = f"{layer.name}.window{a}x{a}"
            source = graph.tensor(layer.input)
            tensors[mid] = ir.Tensor(mid, (h + t + bottom - a + 1, w + l + r - a + 1,
                                           source.shape[2]), source.quant)
            layers.append(ir.Pool2D(mid, layer.input, mid, "max", (a, a), (1, 1),
                                    layer.padding))
            layers.append(replace(layer, input=mid, size=(b, b), padding=(0, 0, 0, 0)))
            changed = True
        else:
            layers.append(layer)
    if not changed:
        return graph
    return replace(graph, tensors=tensors, layers=layers).validate()
