#!/usr/bin/env python3
"""Check: the compiler's output is unchanged by a change that should not
change it (a faster compile, a refactoring).

Compiles a set of models for a set of chips and prints, per case, a
SHA-256 of the compiled artifact (every step's program bytes, weights
range, cycle estimate and MAC counts, the host steps, the weight image,
the constants, the host size and the notes: `digest`) and the cycle model's
cycles summed over the chip parts. ``--record FILE`` writes them as JSON;
``--check FILE`` compiles again and compares (exit status 1 on any
difference). The cases: the zoo's and the demo's models (quantized by ONNX
Runtime) on the default chip, the MLPerf Tiny models (../shared/models)
on the default chip, ``up5k`` and the 2x2 chip of 256 UB rows, 64
accumulator rows and 16 weight tiles, and ResNet-18 and MobileNetV2 at
224x224 on 8x8 (and with ``--all``, on 16x16 and TPU v1's 256x256 too).
``tests/test_compile_golden.py`` checks a quick subset of its own.

    .venv/bin/python scripts/compile_golden.py [--record F | --check F] [--only SUBSTR]
        [--all]
"""

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tpu import TPUConfig  # noqa: E402
from tpu.compiler.artifact import ChipStep  # noqa: E402
from tpu.config import UP5K_PROFILE, V1_PROFILE  # noqa: E402

#: the 2x2 chip of up5k's memories and the default chip's host interface
SMALL_2X2 = TPUConfig(rows=2, cols=2, ub_rows=256, acc_rows=64, weight_mem_tiles=16)


def digest(compiled):
    """(SHA-256 hex of everything the compiled model holds that a run reads
    or the report prints, the chip parts' summed cycle estimates)."""
    h = hashlib.sha256()

    def put(*values):
        h.update(repr(values).encode())

    # (not the chip's config itself: a new TPUConfig field changes no output)
    put(compiled.batch, compiled.host_size, compiled.notes)
    for s in compiled.inputs + compiled.outputs:
        put(s.tensor, s.storage, s.host_offset, s.im2col)
    for step in compiled.steps:
        if isinstance(step, ChipStep):
            put(step.name, step.layers, step.weights, step.weight_base, step.estimated_cycles,
                step.useful_macs, step.performed_macs, step.skipped_tiles, step.skipped_macs)
            h.update(step.program)
        else:
            put(step.name, step.layer, step.inputs, step.outputs)
    h.update(np.ascontiguousarray(compiled.weights, dtype=np.int8).tobytes())
    h.update(compiled.constants)
    cycles = sum(s.estimated_cycles for s in compiled.steps if isinstance(s, ChipStep))
    return h.hexdigest(), cycles


def _zoo_cases():
    from tpu.compiler import zoo

    def cnn():
        return zoo.conv_net((None, 1, 8, 8), [
            zoo.conv(8, k=3, pad=1), zoo.maxpool(2), zoo.conv(16, k=3, pad=1),
            zoo.global_avg_pool(), zoo.flatten(), zoo.dense(10, act=None)])

    def strided():
        return zoo.conv_net((None, 3, 9, 7), [
            zoo.conv(5, k=(3, 2), stride=2, pad=(1, 0, 1, 1), act="relu6"),
            zoo.avgpool(3, stride=1, pad=1), zoo.flatten(reshape=True),
            zoo.dense(4, act="tanh", op="matmul")])

    def residual():
        return zoo.conv_net((2, 4, 6, 6), [
            zoo.conv(8, k=1), zoo.residual([zoo.conv(8, k=3, pad=1),
                                            zoo.conv(8, k=3, pad=1, act=None)]),
            zoo.maxpool(3, stride=2, pad=1), zoo.flatten(), zoo.dense(3, act="sigmoid")])

    builders = {
        "mlp": (lambda: zoo.mlp([20, 16, 10]), (20,)),
        "mlp_matmul_sigmoid": (lambda: zoo.mlp([20, 12, 3], op="matmul",
                                               final_activation="sigmoid"), (20,)),
        "cnn": (cnn, (1, 8, 8)),
        "strided": (strided, (3, 9, 7)),
        "residual": (residual, (4, 6, 6)),
    }
    for name, (make, shape) in builders.items():
        batch = 2 if name == "residual" else 4      # (the residual net's batch is fixed)
        for form in ("qdq", "qoperator"):
            def load(make=make, shape=shape, form=form, batch=batch):
                from tpu.compiler.onnx_frontend import import_onnx
                x = np.random.default_rng(3).uniform(-1, 1, size=(batch, *shape))
                return import_onnx(zoo.quantize(make(), x.astype(np.float32), form=form))
            yield f"zoo {name} {form} default b{batch}", load, TPUConfig(), batch


def _demo_cases():
    def load(name):
        from tpu.compiler import demo_models, zoo
        from tpu.compiler.onnx_frontend import import_onnx
        model = demo_models.demo_models("build/demo", names=(name,))[name]
        x = demo_models.digits_split()[0][:64]
        return import_onnx(zoo.quantize(model, demo_models.model_input(name, x), form="qdq"))
    for name in ("mlp", "cnn"):
        for size in (8, 16):
            yield (f"demo {name} {size}x{size} b16", lambda name=name: load(name),
                   TPUConfig(rows=size, cols=size), 16)


def _tiny_cases():
    from tpu.compiler.mlperf_tiny import MODELS, missing_reason, model_path
    for name in MODELS:
        if missing_reason(name):
            continue

        def load(name=name):
            from tpu.compiler.tflite_frontend import import_tflite
            return import_tflite(model_path(name))
        for chip, config in (("default", TPUConfig()), ("up5k", UP5K_PROFILE),
                             ("2x2", SMALL_2X2)):
            yield f"tiny {name} {chip} b1", load, config, 1


def _imagenet_cases(every_chip):
    chips = [("8x8", TPUConfig())]
    if every_chip:
        chips += [("16x16", TPUConfig(rows=16, cols=16)), ("v1", V1_PROFILE)]
    for name in ("resnet18", "mobilenet_v2"):
        def load(name=name):
            from tpu.compiler import imagenet_models
            from tpu.compiler.onnx_frontend import import_onnx
            return import_onnx(imagenet_models.quantized(name, 224))
        for chip, config in chips:
            yield f"imagenet {name} 224 {chip} b1", load, config, 1


def cases(every_chip=False):
    yield from _zoo_cases()
    yield from _demo_cases()
    yield from _tiny_cases()
    yield from _imagenet_cases(every_chip)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    what = parser.add_mutually_exclusive_group()
    what.add_argument("--record", help="write the digests to this JSON file")
    what.add_argument("--check", help="compare with the digests in this JSON file")
    parser.add_argument("--only", help="only the cases whose label contains this")
    parser.add_argument("--all", action="store_true",
                        help="the ImageNet models on 16x16 and v1 too")
    args = parser.parse_args(argv)
    from tpu.compiler.backend import compile_graph
    expected = json.loads(Path(args.check).read_text()) if args.check else {}
    results, graphs, bad = {}, {}, 0
    for label, load, config, batch in cases(args.all):
        if args.only and args.only not in label:
            continue
        key = label.rsplit(" ", 2)[0]
        if key not in graphs:
            graphs = {key: load()}
        start = time.process_time()
        compiled = compile_graph(graphs[key], config, batch)
        seconds = time.process_time() - start
        sha, cycles = digest(compiled)
        results[label] = {"digest": sha, "cycles": cycles}
        verdict = ""
        if args.check:
            want = expected.get(label)
            if want is None:
                verdict = "  (not recorded)"
            elif want != results[label]:
                verdict = f"  DIFFERS (recorded {want['digest'][:16]}, {want['cycles']} cycles)"
                bad += 1
            else:
                verdict = "  same"
        print(f"{label}: {sha[:16]} {cycles} cycles, compile {seconds:.1f} s CPU{verdict}",
              flush=True)
    if args.record:
        old = json.loads(Path(args.record).read_text()) if Path(args.record).exists() else {}
        Path(args.record).write_text(json.dumps({**old, **results}, indent=1) + "\n")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
