"""Benchmark: each convolution and dense layer of ResNet-18 and MobileNetV2
against ONNX Runtime's QLinearConv, with the chip's rounding and with ONNX
Runtime's float32 requantization (`tpu.models.mlas_rounding`) in its place
(docs/compiler.md).

The reference interpreter runs the model on one random image; then every
matrix layer that rounds by ONNX Runtime's float32 multiplier runs again
on its input there, twice (with the chip's one rounding, "float32", and
with ONNX Runtime's, "mlas", ACT's mlas_round), and ONNX Runtime runs a QLinearConv of
the same weights, bias and scales on the same input (a dense layer as a
1x1 convolution): what ONNX Runtime computes where it fuses the layer.
Prints per layer how many values differ from ONNX Runtime's each way.

    .venv/bin/python scripts/bench_mlas_rounding.py [--size 224] [--seed 1] [MODEL ...]
    .venv/bin/python scripts/bench_mlas_rounding.py --size 32 --end-to-end 8
"""

import argparse
import time

import numpy as np

from tpu.compiler import imagenet_models, reference, zoo
from tpu.compiler.onnx_frontend import import_onnx


def _with_rounding(chip_requantize, rounding):
    """`reference.requantize_accumulators` with a layer that rounds by ONNX
    Runtime's float32 multiplier ("float32" or "mlas") rounded by
    `rounding`: "float32", the chip's one rounding, or "mlas", ONNX
    Runtime's (ACT's mlas_round); the other roundings unchanged."""
    def requantize(acc, in_q, weight_scale, out_q, activation=reference.ir.NO_ACTIVATION,
                   rounding_of_layer="double"):
        chosen = rounding if rounding_of_layer in ("float32", "mlas") else rounding_of_layer
        return chip_requantize(acc, in_q, weight_scale, out_q, activation, chosen)
    return requantize


def _qlinearconv(layer, in_q, out_q, batch_shape):
    """A QLinearConv of `layer` (a Conv2D, or a Dense as a 1x1 convolution)
    from ``in_q`` to ``out_q``: ONNX Runtime's integer kernel on the
    layer's own weights, bias and scales."""
    from onnx import TensorProto, helper, numpy_helper
    if isinstance(layer, reference.ir.Dense):
        weight = layer.weight.T.reshape(layer.weight.shape[1], -1, 1, 1)
        stride, pads = (1, 1), [0, 0, 0, 0]
    else:
        weight = layer.weight.transpose(3, 2, 0, 1)
        stride, pads = layer.stride, list(layer.padding)
    types = {np.dtype(np.int8): (TensorProto.INT8, np.int8),
             np.dtype(np.uint8): (TensorProto.UINT8, np.uint8)}
    x_type, x_np = types[np.dtype(in_q.dtype)]
    y_type, y_np = types[np.dtype(out_q.dtype)]
    inits = [numpy_helper.from_array(np.float32(in_q.scale), "sx"),
             numpy_helper.from_array(x_np(in_q.zero_point), "zx"),
             numpy_helper.from_array(weight.astype(np.int8), "w"),
             numpy_helper.from_array(layer.weight_scale.astype(np.float32), "sw"),
             numpy_helper.from_array(np.zeros(weight.shape[0], np.int8), "zw"),
             numpy_helper.from_array(np.float32(out_q.scale), "sy"),
             numpy_helper.from_array(y_np(out_q.zero_point), "zy"),
             numpy_helper.from_array(layer.bias.astype(np.int32), "b")]
    node = helper.make_node("QLinearConv", ["x", "sx", "zx", "w", "sw", "zw", "sy", "zy", "b"],
                            ["y"], kernel_shape=list(weight.shape[2:]), strides=list(stride),
                            pads=pads)
    graph = helper.make_graph([node], layer.name,
                              [helper.make_tensor_value_info("x", x_type, list(batch_shape))],
                              [helper.make_tensor_value_info("y", y_type, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", zoo.OPSET)])
    model.ir_version = zoo.IR_VERSION
    return model


def compare(model, x):
    """Rows ``(layer, values, differ with the chip's rounding, differ with
    MLAS's)``: every matrix layer of `model`'s graph that rounds by ONNX
    Runtime's float32 multiplier ("float32" or "mlas"), given the
    reference's values of its input for the quantized image `x`, against
    ONNX Runtime's QLinearConv of the same layer and input."""
    graph = import_onnx(model)
    (gin,) = graph.inputs
    in_q = graph.tensor(gin.tensor).quant
    values = reference.run(graph, {gin.tensor: reference.quantize(x.transpose(0, 2, 3, 1), in_q)})
    chip = reference.requantize_accumulators
    rows = []
    for layer in graph.layers:
        if getattr(layer, "rounding", None) not in ("float32", "mlas") or layer.activation.kind.value in (
                "sigmoid", "tanh"):
            continue
        in_q, out_q = graph.tensor(layer.input).quant, graph.tensor(layer.output).quant
        feed = values[layer.input]
        nchw = (feed.reshape(feed.shape[0], -1, 1, 1) if isinstance(layer, reference.ir.Dense)
                else feed.transpose(0, 3, 1, 2))
        (theirs,) = zoo.ort_run(_qlinearconv(layer, in_q, out_q, nchw.shape), nchw)
        theirs = theirs.transpose(0, 2, 3, 1).reshape(values[layer.output].shape)
        # the fused function (relu, relu6) clamps ONNX Runtime's output as the chip's does
        theirs = reference.activate(theirs, out_q, layer.activation).astype(np.int64)
        counts = []
        for requantize in (_with_rounding(chip, "float32"), _with_rounding(chip, "mlas")):
            reference.requantize_accumulators = requantize
            try:
                ours = reference.run_layer(graph, layer, {layer.input: feed})[layer.output]
            finally:
                reference.requantize_accumulators = chip
            counts.append(int(np.count_nonzero(ours.astype(np.int64) != theirs)))
        rows.append((layer.name, type(layer).__name__, theirs.size, *counts))
    return rows


def end_to_end(model, x):
    """Shares of the outputs of `model` on images `x` equal to ONNX Runtime's
    (the whole network, as ONNX Runtime optimizes it: fused layers in
    QLinearConv, the others in float32), for the reference with the chip's
    rounding and with MLAS's."""
    graph = import_onnx(model)
    (gin,), (gout,) = graph.inputs, graph.outputs
    in_q, out_q = graph.tensor(gin.tensor).quant, graph.tensor(gout.tensor).quant
    feeds = {gin.tensor: reference.quantize(x.transpose(0, 2, 3, 1), in_q)}
    (theirs,) = zoo.ort_run(model, x)
    theirs = reference.quantize(theirs, out_q).astype(np.int64)
    chip = reference.requantize_accumulators
    shares = []
    for requantize in (_with_rounding(chip, "float32"), _with_rounding(chip, "mlas")):
        reference.requantize_accumulators = requantize
        try:
            ours = reference.run(graph, feeds, outputs_only=True)[gout.tensor]
        finally:
            reference.requantize_accumulators = chip
        shares.append(float(np.mean(ours.astype(np.int64) == theirs)))
    return shares


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", default=list(imagenet_models.MODELS))
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--seed", type=int, default=1, help="the random image's seed")
    parser.add_argument("--end-to-end", type=int, default=0, metavar="N",
                        help="instead: the whole network on N random images")
    args = parser.parse_args(argv)
    for name in args.models:
        if args.end_to_end:
            start = time.time()
            model = imagenet_models.quantized(name, args.size)
            x = np.random.default_rng(args.seed).standard_normal(
                (args.end_to_end, 3, args.size, args.size)).astype(np.float32)
            chip, mlas = end_to_end(model, x)
            print(f"{name} at {args.size}x{args.size}, {args.end_to_end} images (seed "
                  f"{args.seed}): outputs equal to ONNX Runtime's {chip:.1%} with the chip's "
                  f"rounding, {mlas:.1%} with MLAS's ({time.time() - start:.0f} s)")
            continue
        start = time.time()
        model = imagenet_models.quantized(name, args.size)
        x = np.random.default_rng(args.seed).standard_normal(
            (1, 3, args.size, args.size)).astype(np.float32)
        rows = compare(model, x)
        print(f"## {name} at {args.size}x{args.size}, image seed {args.seed} "
              f"({time.time() - start:.0f} s)")
        print("| layer | kind | values | chip's rounding differs | MLAS's differs |")
        print("|---|---|---|---|---|")
        for row in rows:
            print("| " + " | ".join(str(v) for v in row) + " |")
        total = [sum(r[i] for r in rows) for i in (2, 3, 4)]
        print(f"{len(rows)} layers, {total[0]:,} values: the chip's rounding differs from ONNX "
              f"Runtime's QLinearConv in {total[1]} ({sum(r[3] > 0 for r in rows)} layers), "
              f"MLAS's in {total[2]}")


if __name__ == "__main__":
    main()
