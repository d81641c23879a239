"""Pass: group the IR layers into chip layers and host steps.

A chip layer is one matrix layer (Dense or Conv2D) with everything the
activation unit can do after it in the same ACT: bias, requantization,
activation, and a following pooling (Pool2D max/avg without padding, square
window and stride up to 4, the same quantization in and out; images wider
than ``pool_max_width`` are pooled in chunks of columns; or GlobalAvgPool of
at most `MAX_POOL_COUNT` pixels). A standalone Elementwise, Pool2D or GlobalAvgPool that the unit can
do becomes an identity 1x1 matrix layer with that ACT; a padded max pool
too, over its input stored with padding that holds the type's lowest value
(`ChipLayer.in_fill`). A Reshape read only
by Dense layers costs nothing (the Dense weights are scattered to the stored
order). Everything else (Add, HostOp, pooling beyond the unit's limits, other
reshapes) is a host step that runs `tpu.compiler.reference`.

A first convolution whose input is a graph input with few channels reads
host-side im2col patches instead (a 3x3 conv of 1 channel is a 9-wide 1x1
conv instead of 9 taps at 1/8 of the array).
"""

from dataclasses import dataclass, field

import numpy as np

from . import ir
from ..isa import MAX_POOL_COUNT
from .layout import as_image


__all__ = ["ChipLayer", "HostLayer", "plan_layers"]


@dataclass
class ChipLayer:
    """One fused layer the chip runs (a matrix layer and its ACT)."""
    name: str
    layers: list                 # IR layer names it covers
    kind: str                    # "conv" or "dense"
    input: str                   # the tensor whose storage it reads
    output: str                  # the tensor it writes
    weight: np.ndarray           # conv (KH, KW, Cin, Cout); dense (K, N)
    weight_scale: np.ndarray
    bias: np.ndarray
    activation: ir.Activation
    in_q: ir.QuantType
    out_q: ir.QuantType
    in_shape: tuple              # (H, W, C) of the stored input
    stride: tuple = (1, 1)
    padding: tuple = (0, 0, 0, 0)
    pool: tuple = None           # None, ("max" | "avg", k, s) or ("global",)
    input_view: str = "hwc"      # dense: how K indexes the stored (y, x, c)
    im2col: dict = None          # conv of host-made patches: the original geometry
    in_fill: int = None          # what the input's padding holds (None: its zero point)
    rounding: str = "double"     # "single", "float32", "mlas": ACTs with single_round (ir.ROUNDINGS)
    band_rows: int = None        # at most this many output rows (pooled rows) per M tile
    k_by_rows: bool = False      # conv K tiles ordered (dy, j, dx), split by K at rows of taps
    k_cap: int = None            # at most this many weight tiles a part (None: weight memory)

    @property
    def n_out(self):
        return self.weight.shape[-1]

    @property
    def conv_out(self):
        """(OH, OW) of the matrix layer before pooling (dense: (1, 1))."""
        if self.kind == "dense":
            return (1, 1)
        h, w, _ = self.in_shape
        kh, kw = self.weight.shape[:2]
        t, l, b, r = self.padding
        return ((h + t + b - kh) // self.stride[0] + 1, (w + l + r - kw) // self.stride[1] + 1)

    @property
    def out_shape(self):
        """(H, W, C) of the output."""
        oh, ow = self.conv_out
        if self.pool is None:
            return (oh, ow, self.n_out)
        if self.pool[0] == "global":
            return (1, 1, self.n_out)
        _, k, s = self.pool
        return ((oh - k) // s + 1, (ow - k) // s + 1, self.n_out)


@dataclass
class HostLayer:
    """An IR layer the host runs with `tpu.compiler.reference`."""
    name: str
    layer: object
    inputs: list = field(default_factory=list)
    outputs: list = field(default_factory=list)


def _outputs(layer):
    return list(layer.outputs) if isinstance(layer, ir.HostOp) else [layer.output]


def _window_fits(pool, image_shape, config, padded=False):
    """The activation unit can pool `image_shape` (H, W, C) with `pool`
    (`padded`: over the image with the pool's padding added)."""
    h, w, _ = image_shape
    if isinstance(pool, ir.GlobalAvgPool):
        return h * w <= min(MAX_POOL_COUNT, config.acc_rows // 2)
    (kh, kw), (sh, sw) = pool.size, pool.stride
    if padded:
        t, l, b, r = pool.padding
        h, w = h + t + b, w + l + r
    return (kh == kw and sh == sw and 1 <= kh <= 4 and 1 <= sh <= 4
            and (padded or not any(pool.padding))
            and kh <= min(h, w) and kh <= config.pool_max_width
            and kh * kh <= config.acc_rows // 2)


def _pool_tuple(pool):
    if isinstance(pool, ir.GlobalAvgPool):
        return ("global",)
    return (pool.kind, pool.size[0], pool.stride[0])


def _identity(graph, layer, config, pool=None):
    """A standalone activation or pooling as an identity 1x1 matrix layer."""
    t_in = graph.tensor(layer.input)
    shape = as_image(t_in.shape)
    c = shape[2]
    eye = np.eye(c, dtype=np.int8)
    activation = layer.activation if isinstance(layer, ir.Elementwise) else ir.NO_ACTIVATION
    kind = "conv" if len(t_in.shape) == 3 else "dense"
    weight = eye.reshape(1, 1, c, c) if kind == "conv" else eye
    return ChipLayer(
        name=layer.name, layers=[layer.name], kind=kind, input=layer.input, output=layer.output,
        weight=weight, weight_scale=np.ones(c), bias=np.zeros(c, dtype=np.int64),
        activation=activation, in_q=t_in.quant, out_q=graph.tensor(layer.output).quant,
        in_shape=shape, pool=_pool_tuple(pool) if pool is not None else None)


def _table_ok(activation, out_q):
    """sigmoid/tanh: the unit saturates to, indexes by and pools in one type."""
    if activation.kind in (ir.ActivationKind.SIGMOID, ir.ActivationKind.TANH):
        return activation.pre.unsigned == out_q.unsigned
    return True


def _matrix_on_chip(graph, layer):
    """A Dense or Conv2D the chip runs: either rounding (a layer that rounds
    once, TFLite's FULLY_CONNECTED, gets ACTs with ``single_round``)."""
    return (isinstance(layer, (ir.Dense, ir.Conv2D))
            and _table_ok(layer.activation, graph.tensor(layer.output).quant))


def _chip_rounding(rounding, config):
    """The rounding the chip of `config` gives a layer of `rounding`: a chip
    without the MLAS rounding (``mlas_rounding`` 0, the up5k profile) rounds
    an "mlas" layer once by the same float32 multiplier ("float32"), which
    differs from ONNX Runtime only where the product lies within float32's
    rounding of a half (docs/compiler.md)."""
    if rounding == "mlas" and not config.mlas_rounding:
        return "float32"
    return rounding


def plan_layers(graph, config):
    """The graph as a list of `ChipLayer` and `HostLayer`, in execution order,
    and ``aliases``: tensor -> (stored tensor, view) for free reshapes."""
    graph_outputs = {o.tensor for o in graph.outputs}
    graph_inputs = {i.tensor for i in graph.inputs}
    consumers = {}
    for layer in graph.layers:
        for name in layer.inputs:
            consumers.setdefault(name, []).append(layer)
    aliases = {}
    fused = set()
    plan = []

    def root(name):
        return aliases[name][0] if name in aliases else name

    for layer in graph.layers:
        if layer.name in fused:
            continue
        if _matrix_on_chip(graph, layer):
            in_t = graph.tensor(layer.input)
            out_q = graph.tensor(layer.output).quant
            chip = ChipLayer(
                name=layer.name, layers=[layer.name], kind="dense", input=root(layer.input),
                output=layer.output, weight=layer.weight, weight_scale=layer.weight_scale,
                bias=layer.bias, activation=layer.activation, in_q=in_t.quant, out_q=out_q,
                in_shape=as_image(graph.tensor(root(layer.input)).shape),
                rounding=_chip_rounding(getattr(layer, "rounding", "double"), config))
            if isinstance(layer, ir.Dense):
                chip.input_view = aliases[layer.input][1] if layer.input in aliases else "hwc"
            else:
                chip.kind = "conv"
                chip.stride, chip.padding = layer.stride, layer.padding
                _maybe_im2col(chip, graph, graph_inputs, consumers, config)
            users = consumers.get(layer.output, [])
            if (len(users) == 1 and layer.output not in graph_outputs
                    and isinstance(users[0], (ir.Pool2D, ir.GlobalAvgPool))
                    and graph.tensor(users[0].output).quant == out_q
                    and _window_fits(users[0], chip.conv_out + (chip.n_out,), config)
                    and not (chip.kind == "dense" and isinstance(users[0], ir.Pool2D))):
                pool = users[0]
                chip.pool = _pool_tuple(pool)
                chip.output = pool.output
                chip.layers.append(pool.name)
                fused.add(pool.name)
            plan.append(chip)
        elif isinstance(layer, ir.Elementwise) and _table_ok(layer.activation,
                                                             graph.tensor(layer.output).quant):
            plan.append(_identity(graph, layer, config))
        elif (isinstance(layer, (ir.Pool2D, ir.GlobalAvgPool))
              and len(graph.tensor(layer.input).shape) == 3
              and _window_fits(layer, graph.tensor(layer.input).shape, config)):
            plan.append(_identity(graph, layer, config, pool=layer))
        elif (isinstance(layer, ir.Pool2D) and layer.kind == "max"
              and len(graph.tensor(layer.input).shape) == 3
              and len(consumers[layer.input]) == 1 and layer.input not in aliases
              and _window_fits(layer, graph.tensor(layer.input).shape, config, padded=True)):
            # A padded max pool: the input's padding holds the type's lowest
            # value (it requantizes to at most any real pixel's value), so
            # the unit's unpadded pool over the padded image is exact.
            chip = _identity(graph, layer, config, pool=layer)
            chip.padding = layer.padding
            chip.in_fill = int(graph.tensor(layer.input).quant.range[0])
            plan.append(chip)
        elif (isinstance(layer, ir.Reshape) and layer.output not in graph_outputs
              and layer.input not in aliases and consumers.get(layer.output)
              and all(isinstance(c, ir.Dense) and _matrix_on_chip(graph, c)
                      for c in consumers[layer.output])
              and graph.tensor(layer.input).quant == graph.tensor(layer.output).quant):
            view = layer.order if len(graph.tensor(layer.input).shape) == 3 else "hwc"
            aliases[layer.output] = (layer.input, view)
        else:
            plan.append(HostLayer(name=layer.name, layer=layer,
                                  inputs=[root(n) for n in layer.inputs],
                                  outputs=_outputs(layer)))
    return plan, aliases


def _maybe_im2col(chip, graph, graph_inputs, consumers, config):
    """Make a first conv of few channels read host-made patches when that
    needs fewer weight tiles."""
    kh, kw, cin, cout = chip.weight.shape
    R = config.rows
    if (chip.input not in graph_inputs or len(consumers.get(chip.input, [])) != 1
            or chip.input in {o.tensor for o in graph.outputs}):
        return
    if kh * kw == 1 or 2 * cin > R or -(-kh * kw * cin // R) >= kh * kw * -(-cin // R):
        return
    oh, ow = chip.conv_out
    # the patches of two bands of one output row (a streamed input's ring
    # of bands, `backend`) must leave the unified buffer room: else the
    # image's taps are read from the image itself
    if 2 * ow * -(-kh * kw * cin // R) > config.ub_rows // 2:
        return
    chip.im2col = dict(kernel=[kh, kw], stride=list(chip.stride), padding=list(chip.padding),
                       fill=int(chip.in_q.zero_point))
    # Patches of g kernel rows: a (kh - g + 1) x 1 convolution over them, tap
    # t taking kernel row t from its first patch row (and the last tap all
    # its rows). With as many K tiles as whole patches but fewer stored
    # rows (a 3x3 kernel of 1 channel on 8 rows: 72 rows an 8x8 image
    # instead of 2 blocks of 64), the host link moves less.
    g = _patch_rows(kh, kw, cin, oh, chip.stride[0], R)
    if g < kh:
        w = np.zeros((kh - g + 1, 1, g * kw * cin, cout), dtype=chip.weight.dtype)
        for t in range(kh - g + 1):
            for dy in range(g) if t == kh - g else (0,):
                w[t, 0, dy * kw * cin:(dy + 1) * kw * cin] = \
                    chip.weight[t + dy].reshape(kw * cin, cout)
        chip.im2col["rows"] = g
        chip.weight = w
        chip.in_shape = (oh + kh - g, ow, g * kw * cin)
    else:
        chip.weight = chip.weight.reshape(1, 1, kh * kw * cin, cout)
        chip.in_shape = (oh, ow, kh * kw * cin)
    chip.stride, chip.padding = (1, 1), (0, 0, 0, 0)


def _patch_rows(kh, kw, cin, oh, sh, lanes):
    """Kernel rows per host-made patch: all of them, or fewer when that needs
    no more K tiles and fewer stored rows (stride 1 down only)."""
    def cost(g):
        blocks = -(-g * kw * cin // lanes)
        return (kh - g + 1) * blocks, (oh + kh - g) * blocks
    if sh != 1:
        return kh
    return min(range(1, kh + 1), key=lambda g: (cost(g), -g))
