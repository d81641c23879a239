"""Fingerprints of what the compiler makes of a fixed set of models and
chips: per case, a hash of the compiled model (every part's program,
weight image, host region, tensor layouts and offsets, notes, per-part
counts) and the cycle model's cycles per run.

A change to the compiler that must not change its output (a refactor, a
faster pass) is checked by recording before and comparing after:

    python scripts/compiler_fingerprints.py --record before.json
    ... change ...
    python scripts/compiler_fingerprints.py --check before.json

Cases: the zoo's models and the demo's trained digit models (ONNX, QDQ and
QOperator), the MLPerf Tiny models (../shared/models) on the default chip,
on ``--profile up5k`` and on a 2x2 chip of 256 UB rows, 64 accumulator rows
and 16 weight tiles, ResNet-18 and MobileNetV2 at 32x32 and at 224x224 on
8x8 (``--all``: at 224x224 on 16x16 and TPU v1's 256x256 too), and random
layers of tests/test_compiler_bands.py's shapes on small memories.
``--quick`` leaves out the MLPerf Tiny models on the small chips and the
224x224 models (minutes each); ``--only SUBSTRING`` (repeatable) runs the
cases whose names hold it. The models are built once into ``--cache``
(build/fingerprint-models) so that both runs compile the same bytes. Each
line shows the compile's CPU time (`time.process_time`), so the same run
measures a faster compiler.

tests/test_compiler_fingerprints.py holds the quick cases' hashes: random
layers and the MLPerf Tiny models on the default chip, up5k and 2x2.
"""

import argparse
import hashlib
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

from tpu import TPUConfig
from tpu.compiler.artifact import ChipStep
from tpu.compiler.backend import compile_graph
from tpu.compiler.errors import CompileError
from tpu.config import UP5K_PROFILE, V1_PROFILE

#: the 2x2 chip of issue 26
SMALL_2X2 = TPUConfig(rows=2, cols=2, ub_rows=256, acc_rows=64, weight_mem_tiles=16)
DEFAULT = TPUConfig()
#: tests/test_compiler_backend.py's chip
SMALL = TPUConfig(rows=8, cols=8, acc_rows=64, ub_rows=4096, weight_mem_tiles=64)


def fingerprint(compiled):
    """A hash of everything `compiled` holds that the runtime uses or the
    report shows. The chip's configuration is left out: a new `TPUConfig`
    field changes no output, and the programs and cycles show any that does."""
    h = hashlib.sha256()

    def add(*parts):
        for p in parts:
            h.update(p if isinstance(p, bytes) else repr(p).encode())
            h.update(b"\x00")

    add(compiled.batch, compiled.host_size, compiled.constants,
        np.ascontiguousarray(compiled.weights).tobytes(), compiled.weights.shape, compiled.notes)
    for spec in compiled.inputs + compiled.outputs:
        add(spec.tensor, spec.shape, spec.model_name, spec.model_shape, spec.model_layout,
            spec.storage.to_json(), spec.host_offset,
            None if spec.im2col is None else repr(spec.im2col))
    for step in compiled.steps:
        if isinstance(step, ChipStep):
            add("chip", step.name, step.layers, step.program, step.weights, step.weight_base,
                step.estimated_cycles, step.useful_macs, step.performed_macs,
                step.skipped_tiles, step.skipped_macs)
        else:
            add("host", step.name, step.layer,
                [(t, o, lay.to_json()) for t, o, lay in step.inputs],
                [(t, o, lay.to_json()) for t, o, lay in step.outputs])
    return h.hexdigest()[:16]


def _cycles(compiled):
    return sum(s.estimated_cycles for s in compiled.chip_steps)


def _tests_importable():
    """The cases reuse the model builders of tests/ (test_zoo,
    test_compiler_backend, test_compiler_bands)."""
    tests = str(Path(__file__).resolve().parents[1] / "tests")
    if tests not in sys.path:
        sys.path.insert(0, tests)


def _onnx_models(cache):
    """name -> quantized ONNX model path (built once into `cache`)."""
    import onnx
    from tpu.compiler import demo_models, imagenet_models, zoo
    cache.mkdir(parents=True, exist_ok=True)
    _tests_importable()
    from test_zoo import BUILDERS
    floats = {f"zoo_{name}": builder for name, builder in BUILDERS.items()}
    paths = {}
    for name, (make, shape) in floats.items():
        for form in ("qdq", "qoperator"):
            path = cache / f"{name}_{form}.onnx"
            if not path.exists():
                n = 2 if name == "zoo_residual" else 24
                seed = int.from_bytes(hashlib.sha256(name.encode()).digest()[:4], "little")
                x = np.random.default_rng(seed).uniform(-1, 1, size=(n, *shape)).astype(np.float32)
                onnx.save(zoo.quantize(make(), x, form=form, per_channel=form == "qdq"),
                          str(path))
            paths[f"{name}_{form}"] = path
    demo = demo_models.demo_models(cache_dir=str(cache / "demo"))
    x_train = demo_models.digits_split()[0][:64]
    for name, model in demo.items():
        path = cache / f"demo_{name}.onnx"
        if not path.exists():
            onnx.save(zoo.quantize(model, demo_models.model_input(name, x_train)), str(path))
        paths[f"demo_{name}"] = path
    for name in imagenet_models.MODELS:
        path = cache / f"{name}_32_uint8.onnx"   # uint8 activations since 7 December 2026
        if not path.exists():
            onnx.save(imagenet_models.quantized(name, 32), str(path))
        paths[f"{name}_32"] = path
    return paths


def _imagenet_224(cache, name):
    """ResNet-18's or MobileNetV2's quantized ONNX model at 224x224, built
    into `cache` the first time it is compiled."""
    import onnx
    from tpu.compiler import imagenet_models
    path = cache / f"{name}_224_uint8.onnx"
    if not path.exists():
        onnx.save(imagenet_models.quantized(name, 224), str(path))
    return str(path)


def random_layers():
    """name -> (graph, config, batch): tests/test_compiler_bands.py's
    random convolutions on a third of the UB they need, and random weight
    splits, from fixed seeds."""
    _tests_importable()
    from test_compiler_backend import Builder
    from test_compiler_bands import conv_graph, random_conv_case
    cases = {}
    for seed in range(6):
        rng = np.random.default_rng(100 + seed)
        shape, cout, kernel, stride, pad, pool = random_conv_case(rng)
        graph = conv_graph(rng, shape, cout, kernel, stride, pad, pool, second=seed % 2 == 1)
        batch = 1 + seed % 2
        for ub_rows in (SMALL.ub_rows, 256, 160):
            cases[f"random_conv{seed}_ub{ub_rows}"] = (graph, SMALL.replace(ub_rows=ub_rows), batch)
    for seed in range(4):
        rng = np.random.default_rng(200 + seed)
        tiles = int(rng.integers(1, 7))
        b = Builder(rng)
        x = b.input((int(rng.integers(4, 9)), int(rng.integers(4, 9)), int(rng.integers(1, 20))))
        h = b.conv(x, int(rng.integers(1, 20)), (3, 3), padding=(1, 1, 1, 1), act="relu")
        y = b.dense(b.reshape(h), int(rng.integers(1, 12)))
        cases[f"random_split{seed}_w{tiles}"] = (b.graph(y), SMALL.replace(weight_mem_tiles=tiles),
                                                 int(rng.integers(1, 4)))
    for batch in (1, 3):
        rng = np.random.default_rng(300 + batch)
        b = Builder(rng)
        x = b.input((24,))
        y = b.dense(b.dense(x, 640, "relu"), 10)
        cases[f"dense_chunked_b{batch}"] = (b.graph(y), SMALL.replace(weight_mem_tiles=4,
                                                                      ub_rows=64), batch)
        rng = np.random.default_rng(400 + batch)
        b = Builder(rng)
        x = b.input((10, 5, 9))
        y = b.conv(x, 10, (3, 3), padding=(1, 0, 1, 0), act="clamp")
        cases[f"conv_ksplit_b{batch + 2}"] = (b.graph(y), SMALL.replace(weight_mem_tiles=4),
                                              batch + 2)
    rng = np.random.default_rng(11)
    b = Builder(rng)
    x = b.input((8, 24, 64))
    y = b.conv(x, 16, (1, 1), (2, 2), act="relu")
    cases["wide_1x1_stride2"] = (b.graph(y), SMALL.replace(ub_rows=128), 1)
    return cases


def cases(cache, quick=False, every_chip=False):
    """Yield ``(name, make_graph, config, batch)``."""
    from tpu.compiler.mlperf_tiny import MODELS, model_path, missing_reason
    from tpu.compiler.onnx_frontend import import_onnx
    from tpu.compiler.tflite_frontend import import_tflite
    for name, path in _onnx_models(cache).items():
        load = lambda p=path: import_onnx(str(p))  # noqa: E731
        for config, label in ((DEFAULT, "default"), (SMALL_2X2, "2x2")):
            if name.startswith(("resnet", "mobilenet")) and label == "2x2":
                continue
            for batch in (1, 4):
                yield f"{name}_{label}_b{batch}", load, config, batch
    for name, (graph, config, batch) in random_layers().items():
        yield name, lambda g=graph: g, config, batch
    for name in MODELS:
        if missing_reason(name):
            print(f"skipping {name}: {missing_reason(name)}", file=sys.stderr)
            continue
        chips = [("default", DEFAULT)]
        if not quick:
            chips += [("up5k", UP5K_PROFILE), ("2x2", SMALL_2X2)]
        load = lambda n=name: import_tflite(str(model_path(n)))  # noqa: E731
        for label, config in chips:
            yield f"{name}_{label}", load, config, 1
    if quick:
        return
    from tpu.compiler import imagenet_models
    chips = [("8x8", DEFAULT)]
    if every_chip:
        chips += [("16x16", TPUConfig(rows=16, cols=16)), ("v1", V1_PROFILE)]
    for name in imagenet_models.MODELS:
        load = lambda n=name: import_onnx(_imagenet_224(cache, n))  # noqa: E731
        for label, config in chips:
            yield f"{name}_224_{label}_b1", load, config, 1


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    group = ap.add_mutually_exclusive_group(required=True)
    group.add_argument("--record", metavar="FILE", help="write the fingerprints to FILE (JSON)")
    group.add_argument("--check", metavar="FILE", help="compare with FILE's fingerprints")
    ap.add_argument("--quick", action="store_true",
                    help="leave out the MLPerf Tiny models on the small chips and the "
                         "224x224 models")
    ap.add_argument("--all", action="store_true",
                    help="the 224x224 models on 16x16 and v1 too")
    ap.add_argument("--only", metavar="SUBSTRING", action="append",
                    help="only the cases whose names hold it (repeatable)")
    ap.add_argument("--cache", default="build/fingerprint-models", type=Path,
                    help="where the built ONNX models are kept")
    args = ap.parse_args(argv)
    want = json.loads(Path(args.check).read_text()) if args.check else {}
    got, bad = {}, []
    graphs = {}
    for name, make, config, batch in cases(args.cache, args.quick, args.all):
        if args.only and not any(part in name for part in args.only):
            continue
        if args.check and name not in want:
            continue
        if make not in graphs:          # (a model compiled for several chips is read once)
            graphs = {make: make()}
        start = time.process_time()
        try:
            compiled = compile_graph(graphs[make], config, batch)
        except CompileError as e:       # (a refusal's words are output too)
            got[name] = {"hash": hashlib.sha256(str(e).encode()).hexdigest()[:16],
                         "cycles": None, "parts": None}
        else:
            got[name] = {"hash": fingerprint(compiled), "cycles": _cycles(compiled),
                         "parts": len(compiled.chip_steps)}
        same = "" if not args.check else (" same" if want[name] == got[name] else " DIFFERS")
        if args.check and want[name] != got[name]:
            bad.append(name)
        print(f"{name}: {got[name]['hash']} {got[name]['cycles']} cycles "
              f"{got[name]['parts']} parts (compile {time.process_time() - start:.1f} s CPU){same}",
              flush=True)
    if args.record:
        Path(args.record).write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
        return 0
    if bad:
        print(f"{len(bad)} of {len(got)} cases differ: {', '.join(bad)}")
        return 1
    print(f"all {len(got)} cases the same")
    return 0


if __name__ == "__main__":
    sys.exit(main())
