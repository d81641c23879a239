"""`InferenceSession`: run a quantized model on the chip like onnxruntime.

::

    session = InferenceSession("model.onnx", backend="golden")
    (probs,) = session.run(None, {"input": images})       # float32 NCHW in, float out
    print(report.format_table(session.last_profile))

The model is a path to an ``.onnx`` file (imported and compiled) or a
compiled ``.tpu`` file, an `ir.Graph` (compiled) or a `CompiledModel`.
`run` checks the feeds (names, shapes, dtypes), quantizes float inputs with
the graph input's quantization (ONNX ``QuantizeLinear``), turns the model's
layout (NCHW) into the IR's per-sample ``(H, W, C)``, cuts the batch into
chunks of the compiled batch (padding the last with the zero point), runs
every chunk on one device opened by `tpu.driver.run` and returns the
outputs in the model's layout, dequantized when the model's output is float.

Backends: every `tpu.driver` backend ("golden", "icarus", "verilator", ...),
and "reference", which runs the IR interpreter (`tpu.compiler.reference`)
without a chip. On the simulation backends the chip runs in another
process: the session writes the compiled model and the chunks to a
temporary directory named by the environment variable ``TPU_COMPILER_JOB``,
which the simulation process inherits, and `simulated_main` runs them
there, all in one simulation.
"""

import json
import os
import tempfile
import threading
import weakref
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..config import TPUConfig
from . import ir, reference
from .chunks import host_bytes, run_chunks


__all__ = ["InferenceSession", "NodeArg", "simulated_main", "JOB_VARIABLE",
           "SIMULATION_BACKENDS", "to_ir_layout", "from_ir_layout"]

#: the environment variable naming a simulation job's directory
JOB_VARIABLE = "TPU_COMPILER_JOB"
#: backends whose `main` runs in another process
SIMULATION_BACKENDS = ("icarus", "verilator")
REFERENCE = "reference"
#: host memory `Device.open` takes by default (the simulated host's arena)
DEFAULT_ARENA_BYTES = 1 << 20

_TYPE_NAMES = {np.dtype(np.float32): "tensor(float)", np.dtype(np.int8): "tensor(int8)",
               np.dtype(np.uint8): "tensor(uint8)", np.dtype(np.float16): "tensor(float16)",
               np.dtype(np.float64): "tensor(double)"}


@dataclass(frozen=True)
class NodeArg:
    """A model input or output as onnxruntime describes it."""
    name: str
    shape: list
    type: str


# Back-end modules, imported on use -------------------------------------------------------

def _compile(graph, config, batch):
    from .backend import compile_graph
    return compile_graph(graph, config) if batch is None else compile_graph(graph, config, batch)


def _check_batch(graph, config, batch, notice):
    """Refuse a batch beyond the machine's memory; announce one over a minute."""
    from ..estimate import check_batch, format_seconds
    seconds = check_batch(graph, config, batch)
    if seconds > 60 and notice is not None:
        notice(f"compiling at batch {batch} takes about {format_seconds(seconds)} (the work "
               f"grows with the batch; a smaller --batch compiles faster)")


def _load_compiled(path):
    from .artifact import CompiledModel
    return CompiledModel.load(path)


def _is_compiled(model):
    try:
        from .artifact import CompiledModel
    except ImportError:
        return False
    return isinstance(model, CompiledModel)


def _import_onnx(path):
    from .onnx_frontend import import_onnx
    return import_onnx(path)


def _import_tflite(path):
    from .tflite_frontend import import_tflite
    return import_tflite(path)


#: model file suffix -> importer (path -> ir.Graph)
IMPORTERS = {".onnx": _import_onnx, ".tflite": _import_tflite}


def interface_graph(compiled):
    """An `ir.Graph` of a compiled model's inputs and outputs only (no layers):
    what `InferenceSession` needs to check feeds and convert results."""
    tensors, inputs, outputs = {}, [], []
    for specs, kind, into in ((compiled.inputs, ir.GraphInput, inputs),
                              (compiled.outputs, ir.GraphOutput, outputs)):
        for spec in specs:
            tensors[spec.tensor] = ir.Tensor(spec.tensor, spec.shape, spec.quant)
            into.append(kind(spec.tensor, spec.model_name,
                             None if spec.model_shape is None else tuple(spec.model_shape),
                             np.dtype(spec.model_dtype), spec.model_layout))
    return ir.Graph(tensors, [], inputs, outputs, getattr(compiled, "source", ""))


# Layouts -------------------------------------------------------------------------------

def to_ir_layout(array, layout, shape):
    """A model array ``(batch, ...)`` in `layout` -> the IR's ``(batch, *shape)``."""
    if layout == "nchw" and array.ndim == 4:
        array = array.transpose(0, 2, 3, 1)
    return np.ascontiguousarray(array).reshape((array.shape[0], *shape))


def from_ir_layout(array, layout, model_shape):
    """The IR's ``(batch, *shape)`` -> the model's array in `layout` and `model_shape`
    (its batch dimension taken from `array`)."""
    batch = array.shape[0]
    if layout == "nchw" and array.ndim == 4:
        array = array.transpose(0, 3, 1, 2)
    dims = list(model_shape[1:]) if model_shape else list(array.shape[1:])
    if None in dims or int(np.prod(dims)) != int(np.prod(array.shape[1:])):
        dims = list(array.shape[1:])
    return np.ascontiguousarray(array).reshape((batch, *dims))


def _config_difference(compiled, wanted):
    """``rows=8, ub_rows=2048, not rows=4, ub_rows=1024``: the fields that differ."""
    names = [n for n in TPUConfig.field_names() if getattr(compiled, n) != getattr(wanted, n)]
    text = lambda config: ", ".join(f"{n}={getattr(config, n)}" for n in names)
    return f"{text(compiled)}, not {text(wanted)}"


def _shape_text(shape):
    return "(" + ", ".join("N" if d is None else str(d) for d in shape) + ")"


# The session ----------------------------------------------------------------------------

class InferenceSession:
    """A model ready to run on one backend.

    Parameters
    ----------
    model : str, Path, onnx.ModelProto, ir.Graph or CompiledModel
        An ``.onnx`` file or ModelProto (`onnx_frontend.import_onnx`) or a
        ``.tflite`` file (`tflite_frontend.import_tflite`), imported and
        compiled; or a compiled ``.tpu`` file (`CompiledModel.load`).
    backend : str
        A `tpu.driver` backend, or "reference" for the IR interpreter.
    config : TPUConfig
        The chip to compile for (default `TPUConfig()`); must match a
        compiled model's.
    batch : int
        Samples per chip run when compiling (the back end's default if
        None); must match a compiled model's.
    devices : str, list or tpu.runtime.DevicePool
        Run on a pool of devices instead of one device of `backend`:
        ``"golden:4"``, ``"verilator:2"``, a list of `tpu.runtime.DeviceSpec`
        (or such strings), or a pool already open (shared, not closed by the
        session). Chunks are spread over the devices; `close()` (or ``with``)
        stops a pool the session opened.
    notice : callable or None
        Called with one line before a step estimated to take over a minute
        (compiling at a large `batch`). Compiling at a batch whose estimated
        memory exceeds the machine's available memory is refused first
        (`tpu.estimate.MachineTooSmall`, `tpu.estimate.check_batch`).
    backend_options
        Passed to `tpu.driver.run` (e.g. ``seed`` for the simulators).

    Attributes
    ----------
    graph : ir.Graph
    compiled : CompiledModel or None (backend "reference" of a graph or .onnx)
    progress : callable or None
        Set it to ``progress(done, total)`` to hear after each chunk of a
        `run` (on a simulator: polled from the simulation every 0.5 s).
    last_profile : list or None
        Per chunk, the back end's per-part profile of the last `run`
        (chip counters and cycle estimates); `tpu.compiler.report` reads it.
    """

    def __init__(self, model, backend="golden", config=None, batch=None, devices=None,
                 notice=None, **backend_options):
        if batch is not None and (not isinstance(batch, int) or batch < 1):
            raise ValueError(f"batch must be a positive integer, not {batch!r}")
        if config is not None and not isinstance(config, TPUConfig):
            raise TypeError(f"config must be a TPUConfig, not {config!r}")
        if backend != REFERENCE:
            from ..driver import BACKENDS
            if backend not in BACKENDS:
                raise ValueError(f"unknown backend {backend!r}; known: "
                                 f"{', '.join(sorted([*BACKENDS, REFERENCE]))}")
        self.backend = backend
        self.backend_options = backend_options
        self.last_profile = None
        self.last_samples = 0
        self.progress = None
        self.compiled = None
        self.source = None
        if isinstance(model, (str, Path)):
            path = Path(model)
            self.source = path
            if not path.exists():
                raise FileNotFoundError(f"{path}: no such model file")
            if path.suffix == ".tpu":
                self.compiled = _load_compiled(path)
            elif path.suffix in IMPORTERS:
                model = IMPORTERS[path.suffix](path)
            else:
                raise ValueError(f"{path}: a model is an .onnx or .tflite file or a compiled "
                                 f".tpu file")
        if type(model).__name__ == "ModelProto":
            model = _import_onnx(model)
        if isinstance(model, ir.Graph):
            self.graph = model.validate()
            if backend != REFERENCE:
                if batch is not None:
                    _check_batch(self.graph, config or TPUConfig(), batch, notice)
                self.compiled = _compile(self.graph, config or TPUConfig(), batch)
        elif self.compiled is None:
            if not _is_compiled(model):
                raise TypeError(f"a model is a path, an onnx.ModelProto, an ir.Graph or a "
                                f"CompiledModel, not {type(model).__name__}")
            self.compiled = model
        if self.compiled is not None:
            if not isinstance(model, ir.Graph):
                self.graph = interface_graph(self.compiled)
                if backend == REFERENCE:
                    raise ValueError("the reference backend runs the model's graph: give it an "
                                     ".onnx file or an ir.Graph, not a compiled model")
            if config is not None and config != self.compiled.config:
                raise ValueError(f"the model was compiled for a chip with "
                                 f"{_config_difference(self.compiled.config, config)}: "
                                 f"compile it again for this chip")
            if batch is not None and batch != self.compiled.batch:
                raise ValueError(f"the model was compiled for batch {self.compiled.batch}, "
                                 f"not {batch}: compile it again with this batch")
        self.config = self.compiled.config if self.compiled is not None else (config or TPUConfig())
        self.batch = self.compiled.batch if self.compiled is not None else batch
        self.pool, self._own_pool = None, False
        if devices is not None:
            self._open_pool(devices, backend_options)

    def _open_pool(self, devices, options):
        from ..runtime import DevicePool
        if self.compiled is None:
            raise ValueError("devices run a compiled model: the reference backend has no devices")
        if isinstance(devices, DevicePool):
            if devices.config != self.config:
                raise ValueError(f"the pool's devices are {devices.config}, the model was "
                                 f"compiled for {self.config}")
            self.pool = devices
            return
        self.pool = DevicePool(devices, self.config, arena_bytes=max(
            DEFAULT_ARENA_BYTES, host_bytes(self.compiled)), **options)
        self._own_pool = True
        self._finalizer = weakref.finalize(self, self.pool.close)

    def close(self):
        """Stop the device pool the session opened (a given pool stays open)."""
        if self._own_pool:
            self.pool.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # Description -----------------------------------------------------------------------

    def _node_arg(self, spec):
        dtype = np.dtype(spec.model_dtype)
        return NodeArg(spec.model_name, list(self._model_shape(spec)),
                       _TYPE_NAMES.get(dtype, str(dtype)))

    def _model_shape(self, spec):
        """The model's shape of an input or output, the batch first (None where
        dynamic); the IR's with a dynamic batch if the model declares none."""
        if spec.model_shape:
            return tuple(spec.model_shape)
        return (None, *self.graph.tensor(spec.tensor).shape)

    def get_inputs(self):
        return [self._node_arg(i) for i in self.graph.inputs]

    def get_outputs(self):
        return [self._node_arg(o) for o in self.graph.outputs]

    # Running ---------------------------------------------------------------------------

    def _prepare(self, feeds):
        """Feeds -> quantized IR arrays by tensor name, and the sample count."""
        if not isinstance(feeds, dict):
            raise TypeError(f"feeds must be a dict of input name -> array, not "
                            f"{type(feeds).__name__}")
        names = [i.model_name for i in self.graph.inputs]
        unknown = [n for n in feeds if n not in names]
        if unknown:
            raise ValueError(f"unknown input {unknown[0]!r}; the model's inputs are "
                             f"{', '.join(map(repr, names))}")
        missing = [n for n in names if n not in feeds]
        if missing:
            raise ValueError(f"missing input {missing[0]!r}; the model's inputs are "
                             f"{', '.join(map(repr, names))}")
        arrays, samples = {}, None
        for spec in self.graph.inputs:
            name = spec.model_name
            value = np.asarray(feeds[name])
            want = np.dtype(spec.model_dtype)
            if value.dtype != want:
                raise ValueError(f"input {name!r}: dtype {value.dtype} where the model "
                                 f"expects {want}")
            tensor = self.graph.tensor(spec.tensor)
            model_shape = self._model_shape(spec)
            if value.ndim != len(model_shape) or any(
                    d is not None and d != v for d, v in zip(model_shape[1:], value.shape[1:])):
                raise ValueError(f"input {name!r}: shape {tuple(value.shape)} where the model "
                                 f"expects {_shape_text((None, *model_shape[1:]))}")
            if samples is not None and value.shape[0] != samples:
                raise ValueError(f"input {name!r}: batch {value.shape[0]} differs from the "
                                 f"other inputs' {samples}")
            samples = value.shape[0]
            if value.dtype.kind == "f":
                if not np.isfinite(value).all():
                    raise ValueError(f"input {name!r}: contains NaN or infinite values")
                value = reference.quantize(value, tensor.quant)
            elif value.dtype != tensor.quant.dtype:
                raise ValueError(f"input {name!r}: dtype {value.dtype} where the chip's tensor "
                                 f"is {tensor.quant.dtype}")
            arrays[spec.tensor] = to_ir_layout(value, spec.layout, tensor.shape)
        if not samples:
            raise ValueError("the feeds hold no samples (batch 0)")
        return arrays, samples

    def _select(self, output_names):
        outputs = {o.model_name: o for o in self.graph.outputs}
        if output_names is None:
            return list(outputs.values())
        if isinstance(output_names, str):
            raise TypeError("output_names is a list of names (or None for all)")
        chosen = []
        for name in output_names:
            if name not in outputs:
                raise ValueError(f"unknown output {name!r}; the model's outputs are "
                                 f"{', '.join(map(repr, outputs))}")
            chosen.append(outputs[name])
        return chosen

    def _chunks(self, arrays, samples):
        """Cut every input into chunks of the compiled batch; the last is padded
        with the zero point."""
        batch = self.batch or samples
        chunks = []
        for start in range(0, samples, batch):
            chunk = {}
            for name, value in arrays.items():
                part = value[start:start + batch]
                if part.shape[0] < batch:
                    pad = np.full((batch - part.shape[0], *part.shape[1:]),
                                  self.graph.tensor(name).quant.zero_point, dtype=part.dtype)
                    part = np.concatenate([part, pad])
                chunk[name] = part
            chunks.append(chunk)
        return chunks

    def run_quantized(self, inputs):
        """Run quantized IR arrays (tensor name -> ``(samples, *shape)``); the
        quantized outputs by tensor name. Sets `last_profile`."""
        samples = next(iter(inputs.values())).shape[0]
        if self.backend == REFERENCE:
            self.last_profile = None
            return reference.run(self.graph, inputs, outputs_only=True)
        chunks = self._chunks(inputs, samples)
        self.last_samples = samples
        results = self._run_chunks(chunks)
        self.last_profile = [profile for _, profile in results]
        outputs = {}
        for o in self.graph.outputs:
            joined = np.concatenate([np.asarray(out[o.tensor]) for out, _ in results])
            outputs[o.tensor] = joined[:samples]
        return outputs

    def _run_chunks(self, chunks):
        from ..driver import run as driver_run
        compiled = self.compiled
        if self.pool is not None:
            results = self.pool.run(compiled, chunks)
            if self.progress is not None:
                self.progress(len(chunks), len(chunks))
            return results
        if self.backend in SIMULATION_BACKENDS:
            if host_bytes(compiled) > DEFAULT_ARENA_BYTES:
                raise ValueError(f"one chunk of batch {compiled.batch} needs "
                                 f"{host_bytes(compiled)} bytes of host memory, more than the "
                                 f"simulated host's {DEFAULT_ARENA_BYTES}: compile a smaller batch")
            with tempfile.TemporaryDirectory() as scratch:
                write_job(scratch, compiled, chunks)
                previous = os.environ.get(JOB_VARIABLE)
                os.environ[JOB_VARIABLE] = scratch
                stop = threading.Event()
                watcher = None
                if self.progress is not None:
                    watcher = threading.Thread(target=_watch_progress, daemon=True,
                                               args=(Path(scratch), len(chunks), self.progress,
                                                     stop))
                    watcher.start()
                try:
                    results = driver_run(simulated_main, backend=self.backend,
                                         config=compiled.config, **self.backend_options)
                finally:
                    stop.set()
                    if watcher is not None:
                        watcher.join()
                    if previous is None:
                        os.environ.pop(JOB_VARIABLE, None)
                    else:
                        os.environ[JOB_VARIABLE] = previous
                results = raise_remote_error(results)
                if self.progress is not None:
                    self.progress(len(chunks), len(chunks))
                return results

        progress = self.progress

        async def main(device):
            return await run_chunks(device, compiled, chunks,
                                    None if progress is None
                                    else lambda done: progress(done, len(chunks)))
        options = dict(self.backend_options)
        needed = host_bytes(compiled)
        if self.backend == "golden" and needed > DEFAULT_ARENA_BYTES and "open" not in options:
            options["open"] = {"arena_bytes": needed}
            options.setdefault("ram_bytes", max(16 << 20, 2 * needed))
        return driver_run(main, backend=self.backend, config=compiled.config, **options)

    def report(self, clock_hz=None):
        """The `tpu.compiler.report.Report` of the last `run` on the chip."""
        from .report import DEFAULT_CLOCK_HZ, build_report
        if self.last_profile is None:
            raise ValueError("no profile: run the model on a chip backend first")
        return build_report(self.graph, self.config, self.last_profile, self.last_samples,
                            clock_hz or DEFAULT_CLOCK_HZ, batch=self.batch)

    def run(self, output_names, feeds, run_options=None):
        """The outputs named (None: all), in order, for `feeds` (input name ->
        array with the batch first), as onnxruntime's ``run`` (which also
        takes `run_options`; none are supported)."""
        if run_options is not None:
            raise TypeError("run_options are not supported")
        chosen = self._select(output_names)
        arrays, samples = self._prepare(feeds)
        return self.model_outputs(self.run_quantized(arrays), chosen)

    def model_outputs(self, outputs, chosen):
        """Quantized IR outputs (tensor name -> array) as the model gives the
        `chosen` outputs (`ir.GraphOutput`s): dequantized if float, in its layout."""
        results = []
        for o in chosen:
            value = outputs[o.tensor]
            tensor = self.graph.tensor(o.tensor)
            if np.dtype(o.model_dtype).kind == "f":
                value = reference.dequantize(value, tensor.quant).astype(o.model_dtype)
            else:
                value = value.astype(o.model_dtype)
            results.append(from_ir_layout(value, o.layout, o.model_shape))
        return results


def _watch_progress(directory, total, progress, stop):
    """Report the simulation's ``progress`` file every half second until `stop`."""
    path, last = directory / "progress", -1
    while not stop.wait(0.5):
        try:
            done = int(path.read_text())
        except (OSError, ValueError):
            continue
        if done != last:
            progress(done, total)
            last = done


# Simulation jobs -------------------------------------------------------------------------

def write_job(directory, compiled, chunks):
    """Save the compiled model and the chunks where `read_job` finds them."""
    directory = Path(directory)
    compiled.save(directory / "model.tpu")
    names = list(chunks[0])
    arrays = {f"c{i}_{j}": chunk[name] for i, chunk in enumerate(chunks)
              for j, name in enumerate(names)}
    np.savez(directory / "inputs.npz", **arrays)
    (directory / "job.json").write_text(json.dumps({"names": names, "chunks": len(chunks)}))


def read_job(directory):
    """``(compiled, chunks)`` written by `write_job`."""
    directory = Path(directory)
    job = json.loads((directory / "job.json").read_text())
    compiled = _load_compiled(directory / "model.tpu")
    with np.load(directory / "inputs.npz") as data:
        chunks = [{name: data[f"c{i}_{j}"] for j, name in enumerate(job["names"])}
                  for i in range(job["chunks"])]
    return compiled, chunks


async def simulated_main(device):
    """`main` of a simulation backend: the job named by ``TPU_COMPILER_JOB``."""
    directory = os.environ.get(JOB_VARIABLE)
    if not directory:
        raise RuntimeError(f"{JOB_VARIABLE} is not set: no compiled-model job to run")
    compiled, chunks = read_job(directory)
    progress = Path(directory) / "progress"

    def done(n):
        # Written whole and renamed, so the watcher never reads half a number.
        progress.with_suffix(".tmp").write_text(str(n))
        progress.with_suffix(".tmp").replace(progress)
    try:
        return await run_chunks(device, compiled, chunks, done)
    except Exception as error:
        # A failed simulation only says "failed": bring the error's own words back.
        return RemoteError(type(error).__name__, str(error),
                           _error_kind(error))


@dataclass(frozen=True)
class RemoteError:
    """An error raised inside a simulation, as its result (it pickles)."""
    name: str
    message: str
    kind: str            #: "chip" (a tpu.driver.TpuError), "input" (ValueError) or "other"


def _error_kind(error):
    from ..driver import TpuError
    if isinstance(error, TpuError):
        return "chip"
    return "input" if isinstance(error, ValueError) else "other"


def raise_remote_error(result):
    """`result` unless it is a `RemoteError`, which is raised here as a
    `TpuError` (chip), `ValueError` (input) or `RuntimeError` naming the
    original class."""
    if not isinstance(result, RemoteError):
        return result
    from ..driver import TpuError
    kind = {"chip": TpuError, "input": ValueError}.get(result.kind, RuntimeError)
    raise kind(f"{result.name} in the simulation: {result.message}")
