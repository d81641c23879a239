"""The main job: trained networks classifying real digits on the chip.

`run_demo` trains (or loads) an MLP and a CNN on scikit-learn's
handwritten digits (`tpu.compiler.demo_models`), quantizes them with ONNX
Runtime's ``quantize_static`` (QDQ, int8), compiles them for the chip, and
classifies the whole test split four ways:

1. ONNX Runtime on the float model, and on the int8 model;
2. the compiler's reference interpreter of the imported graph;
3. the golden model of the chip, through the host driver;
4. the RTL of the whole chip (under Verilator or Icarus) through the driver
   and the PCIe-style host interface, with a progress bar.

It prints the accuracies, how many outputs differ from ONNX Runtime and by
how many steps of the output quantization, whether the chip equals the
golden model bit for bit, and the chip's own counters as cycles per
inference, MXU utilisation and inferences per second at a stated clock;
it saves a PNG (confusion matrix, sample digits, per-layer cycles) and
returns the numbers as a dict.
"""

import contextlib
import logging
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from .config import TPUConfig


__all__ = ["run_demo", "CLOCK_HZ", "simulated_demo_main"]

CLOCK_HZ = 100e6
CALIBRATION_IMAGES = 256
SAMPLE_DIGITS = 12


def _say(message):
    print(message, flush=True)


class Progress:
    """A one-line progress bar on stderr: ``label [#####.....] 3/6 12 s``,
    redrawn in place on a terminal, a line per tenth of the way elsewhere."""

    def __init__(self, label, total, width=30, stream=None):
        self.label, self.total, self.width = label, max(1, total), width
        self.stream = stream or sys.stderr
        self.tty = getattr(self.stream, "isatty", lambda: False)()
        self.started = time.perf_counter()
        self.done = None
        self.update(0)

    def update(self, done):
        if not self.tty and self.done is not None and (
                done == self.done or (10 * done // self.total == 10 * self.done // self.total
                                      and done < self.total)):
            return      # in a log, a line per tenth
        self.done = done
        filled = round(self.width * done / self.total)
        elapsed = time.perf_counter() - self.started
        start, end = ("\r", "") if self.tty else ("", "\n")
        self.stream.write(f"{start}  {self.label} [{'#' * filled}{'.' * (self.width - filled)}] "
                          f"{done}/{self.total} {elapsed:.0f} s{end}")
        self.stream.flush()

    def close(self):
        if self.tty:
            self.update(self.done)
            self.stream.write("\n")
            self.stream.flush()


# Running compiled models chunk by chunk ---------------------------------------------------

def _quantized_input(graph, x):
    """Float model input -> (IR tensor name, the IR's quantized array)."""
    from .compiler import reference
    from .compiler.session import to_ir_layout
    spec = graph.inputs[0]
    tensor = graph.tensor(spec.tensor)
    return spec.tensor, to_ir_layout(reference.quantize(x, tensor.quant), spec.layout, tensor.shape)


def _chunks(name, array, batch, zero_point):
    """Chunks of exactly `batch` samples, the last padded with the zero point."""
    chunks = []
    for start in range(0, len(array), batch):
        part = array[start:start + batch]
        if len(part) < batch:
            pad = np.full((batch - len(part), *part.shape[1:]), zero_point, part.dtype)
            part = np.concatenate([part, pad])
        chunks.append({name: part})
    return chunks


async def _run_jobs(device, jobs, report):
    """``jobs``: name -> (compiled, chunks); name -> [(outputs, profile)] per
    chunk, all on one device. ``report(chunks done)`` after each chunk."""
    from .compiler.session import run_chunks
    results, before = {}, 0
    for name, (compiled, chunks) in jobs.items():
        results[name] = await run_chunks(device, compiled, chunks,
                                         done=lambda n, before=before: report(before + n))
        before += len(chunks)
    return results


async def simulated_demo_main(device):
    """`main` of a simulation run: the jobs in the directory named by
    ``TPU_COMPILER_JOB`` (one `write_job` directory per model), writing how
    many chunks are done to ``progress`` there."""
    import json
    from .compiler.session import JOB_VARIABLE, read_job
    directory = Path(os.environ[JOB_VARIABLE])
    names = json.loads((directory / "models.json").read_text())
    jobs = {name: read_job(directory / name) for name in names}

    def report(done):
        # written whole and renamed, so the watcher never reads half a number
        (directory / "progress.tmp").write_text(str(done))
        (directory / "progress.tmp").replace(directory / "progress")
    try:
        return await _run_jobs(device, jobs, report)
    except Exception as error:
        # a failed simulation only says "failed": bring the error's own words back
        from .compiler.session import RemoteError, _error_kind
        return RemoteError(type(error).__name__, str(error), _error_kind(error))


@contextlib.contextmanager
def _environment(name, value):
    previous = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = previous


def _run_on_chip(jobs, backend, label, seed=1):
    """Run ``jobs`` (name -> (compiled, chunks)) on one device of `backend`
    with a progress bar; name -> [(outputs, profile)] per chunk."""
    import json
    from .compiler.session import (DEFAULT_ARENA_BYTES, JOB_VARIABLE, SIMULATION_BACKENDS,
                                   host_bytes, raise_remote_error, write_job)
    from .driver import run as driver_run
    config = next(iter(jobs.values()))[0].config
    bar = Progress(label, sum(len(chunks) for _, chunks in jobs.values()))
    try:
        if backend not in SIMULATION_BACKENDS:
            async def main(device):
                return await _run_jobs(device, jobs, bar.update)
            options = {}
            needed = max(host_bytes(compiled) for compiled, _ in jobs.values())
            if backend == "golden" and needed > DEFAULT_ARENA_BYTES:
                options = {"open": {"arena_bytes": needed}, "ram_bytes": max(16 << 20, 2 * needed)}
            return driver_run(main, backend=backend, config=config, **options)
        with tempfile.TemporaryDirectory(prefix="tpu-demo-") as scratch:
            for name, (compiled, chunks) in jobs.items():
                (Path(scratch) / name).mkdir()
                write_job(Path(scratch) / name, compiled, chunks)
            (Path(scratch) / "models.json").write_text(json.dumps(list(jobs)))
            stop = threading.Event()

            def watch():
                progress = Path(scratch) / "progress"
                while not stop.wait(0.5):
                    bar.update(int(progress.read_text()) if progress.exists() else 0)
            watcher = threading.Thread(target=watch, daemon=True)
            watcher.start()
            # the simulator runner logs each command it starts: keep the bar clean
            logging_was = logging.root.manager.disable
            logging.disable(logging.INFO)
            try:
                with _environment(JOB_VARIABLE, scratch):
                    results = raise_remote_error(driver_run(
                        simulated_demo_main, backend=backend, config=config, seed=seed))
            finally:
                logging.disable(logging_was)
                stop.set()
                watcher.join()
            bar.update(sum(len(r) for r in results.values()))
            return results
    finally:
        bar.close()


def _joined(graph, results, samples):
    """The graph output of every chunk, joined, without the padding."""
    name = graph.outputs[0].tensor
    out = np.concatenate([np.asarray(o[name]) for o, _ in results])[:samples]
    return out.reshape(samples, -1).astype(np.int64)


def _compile(graph, config, batch):
    """Compile for `batch`, or the largest power-of-two fraction of it whose
    layers fit the chip's memories; (compiled, batch)."""
    from .compiler.errors import CompileError
    from .compiler.session import InferenceSession
    while True:
        try:
            return InferenceSession(graph, backend="golden", config=config, batch=batch).compiled, batch
        except CompileError as error:
            if batch == 1 or "smaller batch" not in str(error):
                raise
            batch = max(1, batch // 2)


# One model ---------------------------------------------------------------------------------

def _ort_quantized(y, quant):
    """ONNX Runtime's dequantized output back to integers of `quant`."""
    return np.rint(y / np.float32(quant.scale)).astype(np.int64) + quant.zero_point


def _check_fit(name, split, *, config, batch):
    """Raise the compiler's error if network `name` cannot fit the chip, in
    seconds and before any training: whether a network fits depends on its
    layers' shapes, which the untrained network has."""
    from .compiler import demo_models, zoo
    from .compiler.onnx_frontend import import_onnx
    x_train, _, y_train, _ = split
    train, export = demo_models.TRAINERS[name]
    untrained = export(train(x_train[:1], y_train[:1], epochs=0))
    quantized = zoo.quantize(untrained, demo_models.model_input(name, x_train[:8]), form="qdq",
                             activation_type="int8")
    _compile(import_onnx(quantized, name=f"digits_{name}"), config, batch)


def _prepare(name, float_model, split, *, config, batch, out_dir):
    """Float and int8 accuracy on ONNX Runtime, the imported graph, its
    compiled form and the reference interpreter's outputs."""
    from .compiler import demo_models, reference, zoo
    from .compiler.onnx_frontend import import_onnx

    x_train, x_test, y_train, y_test = split
    x = demo_models.model_input(name, x_test)
    m = {"name": name, "images": len(x_test), "timings": {}}
    started = time.perf_counter()
    m["float_accuracy"] = float((zoo.ort_run(float_model, x)[0].argmax(1) == y_test).mean())
    quantized = zoo.quantize(float_model, demo_models.model_input(name, x_train[:CALIBRATION_IMAGES]),
                             form="qdq", activation_type="int8")
    (Path(out_dir) / f"digits_{name}_int8.onnx").write_bytes(quantized.SerializeToString())
    ort_logits = zoo.ort_run(quantized, x)[0]
    m["ort_accuracy"] = float((ort_logits.argmax(1) == y_test).mean())
    m["timings"]["quantize_and_ort"] = time.perf_counter() - started

    started = time.perf_counter()
    graph = m["graph"] = import_onnx(quantized, name=f"digits_{name}")
    m["compiled"], m["batch"] = _compile(graph, config, batch)
    m["timings"]["compile"] = time.perf_counter() - started
    m["ort_q"] = _ort_quantized(ort_logits, graph.tensor(graph.outputs[0].tensor).quant)

    tensor, inputs = _quantized_input(graph, x)
    ref = reference.run(graph, {tensor: inputs}, outputs_only=True)[graph.outputs[0].tensor]
    m["reference_q"] = np.asarray(ref).reshape(len(x), -1).astype(np.int64)
    m["chunks"] = _chunks(tensor, inputs, m["batch"], graph.tensor(tensor).quant.zero_point)
    return m


def _measure(m, golden, chip, y_test):
    """The numbers of one model from its golden and chip runs."""
    from .compiler.report import build_report
    graph = m["graph"]
    n = min(len(chip) * m["batch"], m["images"])
    golden_q = _joined(graph, golden, m["images"])
    chip_q = _joined(graph, chip, n)
    ort_q = m["ort_q"][:n]
    diff = np.abs(chip_q - ort_q)
    report = build_report(graph, m["compiled"].config, [p for _, p in chip], n, clock_hz=CLOCK_HZ,
                          batch=m["batch"])
    total = report.total
    return {
        "images": m["images"],
        "chip_images": n,
        "batch": m["batch"],
        "float_accuracy": m["float_accuracy"],
        "ort_accuracy": m["ort_accuracy"],
        "reference_accuracy": float((m["reference_q"].argmax(1) == y_test).mean()),
        "golden_accuracy": float((golden_q.argmax(1) == y_test).mean()),
        # On the images the chip ran, so that --quick compares like with like.
        "golden_accuracy_chip_images": float((golden_q[:n].argmax(1) == y_test[:n]).mean()),
        "chip_accuracy": float((chip_q.argmax(1) == y_test[:n]).mean()),
        "golden_equals_reference": bool(np.array_equal(golden_q, m["reference_q"])),
        "chip_equals_golden": bool(np.array_equal(chip_q, golden_q[:n])),
        "chip_golden_mismatches": int(np.count_nonzero(chip_q != golden_q[:n])),
        "outputs": int(diff.size),
        "ort_mismatches": int(np.count_nonzero(diff)),
        "ort_max_lsb": int(diff.max()) if diff.size else 0,
        "ort_prediction_mismatches": int(np.count_nonzero(chip_q.argmax(1) != ort_q.argmax(1))),
        "cycles": int(total.cycles),
        "cycles_per_inference": float(report.cycles_per_inference),
        "mxu_utilisation": float(total.utilisation),
        "mxu_active_utilisation": float(total.active_utilisation),
        "inferences_per_second": float(report.inferences_per_second),
        "clock_hz": CLOCK_HZ,
        "timings": m["timings"],
        "layers": [(row.name, row.where, int(row.cycles)) for row in report.rows],
        "predictions": chip_q.argmax(1),
        "labels": y_test[:n],
        "report": report,
    }


# The picture -------------------------------------------------------------------------------

def _save_png(path, results, x_test, backend):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(results)
    fig = plt.figure(figsize=(5 * len(names) + 4, 8.5), layout="constrained")
    grid = fig.add_gridspec(2, len(names) + 1, width_ratios=[*(1,) * len(names), 0.9])
    for i, name in enumerate(names):
        r = results[name]
        confusion = np.zeros((10, 10), int)
        np.add.at(confusion, (r["labels"], r["predictions"]), 1)
        ax = fig.add_subplot(grid[0, i])
        ax.imshow(confusion, cmap="Blues")
        for (t, p), count in np.ndenumerate(confusion):
            if count:
                ax.text(p, t, str(count), ha="center", va="center", fontsize=7,
                        color="white" if count > confusion.max() / 2 else "black")
        ax.set(xticks=range(10), yticks=range(10), xlabel="chip's prediction", ylabel="true digit",
               title=f"{name}: {100 * r['chip_accuracy']:.1f}% on {r['chip_images']} test digits\n"
                     f"({backend}; ONNX Runtime int8 {100 * r['ort_accuracy']:.1f}%)")
        ax = fig.add_subplot(grid[1, i])
        rows = [row for row in r["report"].rows if row.where == "chip"][::-1]
        per_inference = [row.cycles / r["chip_images"] for row in rows]
        bars = ax.barh([row.name for row in rows], per_inference, color="tab:orange")
        ax.bar_label(bars, [f"MXU {100 * row.utilisation:.0f}%" for row in rows], padding=3,
                     fontsize=8)
        ax.set_xlim(0, 1.25 * max(per_inference, default=1))
        ax.set(xlabel="cycles per inference",
               title=f"{name}: {r['cycles_per_inference']:.0f} cycles/inference, "
                     f"MXU utilisation {100 * r['mxu_utilisation']:.0f}%")
    # A few digits with the CNN's (or the last model's) predictions.
    name = "cnn" if "cnn" in results else names[-1]
    r = results[name]
    sub = grid[:, -1].subgridspec(4, 3)
    wrong = np.flatnonzero(r["predictions"] != r["labels"])[:3]
    right = np.flatnonzero(r["predictions"] == r["labels"])[:SAMPLE_DIGITS - len(wrong)]
    for i, k in enumerate(sorted([*wrong, *right])):
        ax = fig.add_subplot(sub[i // 3, i % 3])
        ax.imshow(x_test[k].reshape(8, 8), cmap="gray_r")
        ok = r["predictions"][k] == r["labels"][k]
        ax.set_title(f"chip says {r['predictions'][k]}" + ("" if ok else f" ({r['labels'][k]})"),
                     fontsize=9, color="green" if ok else "red")
        ax.axis("off")
    fig.suptitle(f"handwritten digits on the chip ({backend}); the {name}'s predictions on test "
                 f"digits (red: wrong, true digit in brackets)", fontsize=11)
    fig.savefig(path, dpi=80)
    plt.close(fig)


# The demo ----------------------------------------------------------------------------------

def run_demo(backend="verilator", config=None, out_dir="build/demo", batch=64, quick=False,
             models=("mlp", "cnn"), images=None):
    """Run the main job; print what happens and return the numbers per model
    (``result["models"][name]``) and the PNG's path (``result["png"]``).

    ``backend`` is where the chip runs: "verilator" or "icarus" (the RTL) or
    "golden" (its model only). ``batch`` is the samples per chip run (halved
    for a model whose layers do not fit the chip's memories at that batch).
    ``quick`` runs one batch of the test split on the chip instead of all of
    it (everything else still sees all of it); ``images`` limits the test
    split to its first ``images`` digits."""
    from .compiler import demo_models
    config = config or TPUConfig()
    started = time.perf_counter()
    split = demo_models.digits_split()
    if images is not None:
        split = [split[0], split[1][:images], split[2], split[3][:images]]
    y_test = split[3]
    _say(f"digits: {len(split[0])} training and {len(split[1])} test images of 8x8 pixels "
         f"(scikit-learn's handwritten digits)")
    for name in models:
        _check_fit(name, split, config=config, batch=batch)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    floats = demo_models.demo_models(out_dir, names=models, log=_say)
    prepared = {}
    for name in models:
        m = prepared[name] = _prepare(name, floats[name], split, config=config, batch=batch,
                                      out_dir=out_dir)
        _say(f"{name}: float {100 * m['float_accuracy']:.1f}%, ONNX Runtime int8 (quantize_static, "
             f"QDQ) {100 * m['ort_accuracy']:.1f}%; compiled for a {config.rows}x{config.cols} array, "
             f"batch {m['batch']}, in {m['timings']['compile']:.1f} s")

    golden = _run_on_chip({n: (m["compiled"], m["chunks"]) for n, m in prepared.items()},
                          "golden", "golden model")
    if backend == "golden":
        chip = {n: r[:1] for n, r in golden.items()} if quick else golden
    else:
        # A model not built yet is announced by the harness as its build starts.
        t = time.perf_counter()
        chip = _run_on_chip({n: (m["compiled"], m["chunks"][:1] if quick else m["chunks"])
                             for n, m in prepared.items()}, backend, f"{backend} RTL of the chip")
        chip_seconds = time.perf_counter() - t

    results = {}
    for name, m in prepared.items():
        r = results[name] = _measure(m, golden[name], chip[name], y_test)
        if backend != "golden":
            r["timings"]["chip_all_models"] = chip_seconds
        _say(f"\n{name} ({r['chip_images']} test images on the chip, {backend})")
        if r["chip_images"] == r["images"]:
            _say(f"  accuracy: float {100 * r['float_accuracy']:.1f}%, ONNX Runtime int8 "
                 f"{100 * r['ort_accuracy']:.1f}%, golden model {100 * r['golden_accuracy']:.1f}%, "
                 f"chip {100 * r['chip_accuracy']:.1f}%")
        else:
            _say(f"  accuracy on all {r['images']} test images: float "
                 f"{100 * r['float_accuracy']:.1f}%, ONNX Runtime int8 {100 * r['ort_accuracy']:.1f}%, "
                 f"golden model {100 * r['golden_accuracy']:.1f}%; on the {r['chip_images']} the "
                 f"chip ran: golden model {100 * r['golden_accuracy_chip_images']:.1f}%, chip "
                 f"{100 * r['chip_accuracy']:.1f}%")
        _say(f"  chip vs ONNX Runtime: {r['ort_mismatches']} of {r['outputs']} logits differ "
             f"(at most {r['ort_max_lsb']} step{'' if r['ort_max_lsb'] == 1 else 's'} of the output "
             f"quantization), {r['ort_prediction_mismatches']} predictions differ")
        _say(f"  chip vs golden model: {'bit-exact' if r['chip_equals_golden'] else 'DIFFERENT'} "
             f"({r['chip_golden_mismatches']} of {r['outputs']} outputs differ); golden model vs "
             f"reference interpreter: {'bit-exact' if r['golden_equals_reference'] else 'DIFFERENT'}")
        _say(f"  chip counters: {r['cycles_per_inference']:.0f} cycles per inference, MXU "
             f"utilisation {100 * r['mxu_utilisation']:.1f}% overall, "
             f"{100 * r['mxu_active_utilisation']:.1f}% while active; "
             f"{r['inferences_per_second']:,.0f} inferences/s at {CLOCK_HZ / 1e6:g} MHz")
    png = out_dir / "demo.png"
    _save_png(png, results, split[1], backend)
    elapsed = time.perf_counter() - started
    ok = all(r["chip_equals_golden"] and r["golden_equals_reference"] for r in results.values())
    _save_json(out_dir / "demo.json", results, backend, config, elapsed)
    _say(f"\nsaved {png} and {out_dir / 'demo.json'}")
    return {"backend": backend, "config": config, "models": results, "png": str(png),
            "seconds": elapsed, "ok": ok}


def _save_json(path, results, backend, config, seconds):
    """The printed numbers and each model's per-layer report, as JSON."""
    import json
    models = {}
    for name, r in results.items():
        numbers = {k: v for k, v in r.items() if isinstance(v, (bool, int, float, dict))}
        numbers["report"] = r["report"].to_json()
        models[name] = numbers
    path.write_text(json.dumps({"backend": backend, "config": config.to_dict(),
                                "seconds": seconds, "models": models}, indent=1, default=float))
