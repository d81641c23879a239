"""The model commands of the ``tpu`` command line.

tpu compile MODEL(.onnx|.tflite) -o OUT.tpu [--batch N] [config options]
tpu run MODEL(.onnx|.tflite|.tpu) --input X.npy --output Y.npy [--backend B] [--batch N]
        [--json FILE]
tpu disasm MODEL.tpu          (`disassemble_model`, for the disasm command)

`add_model_commands(subparsers, add_config_options)` adds ``compile`` and
``run`` to the ``tpu`` parser (`tpu.cli`). Bad input (files, names, shapes,
models the compiler cannot take, options) raises ``tpu.cli.CommandError``
(exit status 2); a chip that faults or times out raises ``tpu.cli.ChipError``
(exit status 1).
"""

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from ..config import ConfigError, TPUConfig


__all__ = ["add_model_commands", "cmd_compile", "cmd_run", "disassemble_model", "is_model_file",
           "chip_failure"]


def chip_failure(message):
    """A ``tpu.cli.ChipError`` (one line, exit status 1): the chip faulted or
    timed out while running a model."""
    from .common import ChipError
    return ChipError(message)


def _command_error(message):
    from .common import CommandError
    return CommandError(message)


def _config(args, required=False):
    """The TPUConfig the options give, or None when none is given (and not `required`)."""
    values = {name: getattr(args, name) for name in TPUConfig.field_names()
              if getattr(args, name, None) is not None}
    profile = getattr(args, "profile", None)
    if not values and profile is None and not required:
        return None
    try:
        return TPUConfig.from_options(values, profile)
    except (ConfigError, TypeError) as error:
        raise _command_error(str(error)) from None


def _user_errors():
    """The exceptions that mean bad input rather than a broken chip."""
    from ..compiler.ir import IRError
    from ..compiler.errors import CompileError
    return (ValueError, TypeError, OSError, KeyError, IRError, CompileError)


def _serial_options(args):
    """The serial backend's options (`tpu.driver` "serial") from ``--port``,
    ``--baud`` and ``--clock-mhz``, checking that the port exists."""
    port = getattr(args, "port", None)
    if getattr(args, "backend", None) != "serial":
        if port is not None:
            raise _command_error(f"--port {port} is for --backend serial, not --backend {args.backend}")
        return {}
    if port is None:
        raise _command_error("--backend serial needs --port (the board's serial port, "
                             "e.g. /dev/ttyUSB1)")
    # A pyserial URL (loop://, socket://host:port, rfc2217://...) is not a file.
    if "://" not in port and not Path(port).exists():
        raise _command_error(f"serial port {port} does not exist: is the board plugged in? "
                             f"(on Linux its UART is usually /dev/ttyUSB1)")
    return {"port": port, "baudrate": args.baud, "clock_hz": args.clock_mhz * 1e6}


def _session(args, model, config, batch):
    from ..compiler.session import InferenceSession
    options = _serial_options(args)
    if getattr(args, "seed", None) is not None:
        options["seed"] = args.seed
    if getattr(args, "waves", None):
        if args.backend not in ("icarus", "verilator"):
            raise _command_error(f"--waves needs a simulation backend (icarus or verilator), "
                                 f"not {args.backend}")
        options["waves"] = args.waves
    try:
        return InferenceSession(model, backend=getattr(args, "backend", "golden"), config=config,
                                batch=batch, notice=_notice, **options)
    except _user_errors() as error:
        message = _one_line(error)
        raise _command_error(message if Path(model).name in message else f"{model}: {message}") \
            from None


def _notice(line):
    print(line, file=sys.stderr, flush=True)


def _one_line(error):
    text = str(error).strip() or type(error).__name__
    return text.splitlines()[0]


def _model_path(text, suffixes):
    path = Path(text)
    if path.suffix not in suffixes:
        raise _command_error(f"{path}: expected a {', '.join(suffixes)} model file")
    if not path.is_file():
        raise _command_error(f"{path}: no such file")
    return path


# compile ------------------------------------------------------------------------------------

def cmd_compile(args):
    model = _model_path(args.model, (".onnx", ".tflite"))
    output = _checked_output(args.output, "-o", [("the model", model)]) if args.output \
        else _checked_output(model.with_suffix(".tpu"), "the compiled model", [("the model", model)])
    config = _config(args, required=True)
    session = _session(argparse.Namespace(backend="golden"), model, config, args.batch)
    compiled = session.compiled
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
        compiled.save(output)
    except OSError as error:
        raise _command_error(f"cannot write {output}: {error.strerror}") from None
    describe = getattr(compiled, "describe", None)
    if describe is not None:
        print(describe())
    from ..compiler.batching import batch_choice
    print(f"wrote {output} for {config.name}, "
          f"{batch_choice(session.graph, config, compiled, args.batch)}", file=sys.stderr)
    return 0


# run ----------------------------------------------------------------------------------------

def _load_array(path):
    try:
        data = np.load(path, allow_pickle=False)
    except OSError as error:
        raise _command_error(f"cannot read {path}: {error.strerror or _one_line(error)}") \
            from None
    except ValueError:
        # numpy's reason (e.g. "contains pickled data") misleads for a file of text or junk
        raise _command_error(f"cannot read {path}: not a numpy .npy or .npz array file "
                             f"(object arrays are not accepted)") from None
    if isinstance(data, np.lib.npyio.NpzFile):
        with data:
            return {name: data[name] for name in data.files}
    return data


def _as_model_dtype(name, value, spec_shape, dtype):
    """A CLI convenience onnxruntime does not offer: cast what ``np.save``
    wrote (float64, int64) to the model's dtype, and add a missing batch axis."""
    value = np.asarray(value)
    dtype = np.dtype(dtype)
    if spec_shape and value.ndim == len(spec_shape) - 1:
        value = value[None]
    if value.dtype == dtype:
        return value
    if dtype.kind == "f" and value.dtype.kind in "fiub":
        return value.astype(dtype)
    if dtype.kind in "iu" and value.dtype.kind in "iub":
        info = np.iinfo(dtype)
        if value.size and (value.min() < info.min or value.max() > info.max):
            raise _command_error(f"input {name!r}: values outside {dtype} "
                                 f"({info.min}..{info.max})")
        return value.astype(dtype)
    raise _command_error(f"input {name!r}: {value.dtype} values for a {dtype} input")


def _feeds(session, path):
    data = _load_array(path)
    specs = session.graph.inputs
    if not isinstance(data, dict):
        if len(specs) != 1:
            names = ", ".join(s.model_name for s in specs)
            raise _command_error(f"{path}: the model has inputs {names}; give them in an .npz "
                                 f"file under these names")
        data = {specs[0].model_name: data}
    by_name = {s.model_name: s for s in specs}
    return {name: _as_model_dtype(name, value, by_name[name].model_shape,
                                  by_name[name].model_dtype) if name in by_name else value
            for name, value in data.items()}


def _checked_output(path, what, inputs, outputs=()):
    """`path`, refused (exit status 2) if it is one of `inputs` or
    `outputs` (``(what, path)`` pairs) or a directory: `tpu.output_files`."""
    from ..output_files import OutputRefused, check_outputs
    try:
        check_outputs([*outputs, (what, path)], inputs)
    except OutputRefused as error:
        raise _command_error(str(error)) from None
    return Path(path)


def _save_outputs(path, names, values):
    """Written to exactly `path` (np.save given a name would add .npy)."""
    from ..output_files import write_output
    path = Path(path)
    if path.suffix == ".npz":
        def save(file):
            np.savez(file, **dict(zip(names, values)))
    elif len(values) == 1:
        def save(file):
            np.save(file, values[0])
    else:
        raise _command_error(f"{path}: the model has {len(values)} outputs "
                             f"({', '.join(names)}); write them to an .npz file")
    try:
        write_output(path, save)
    except OSError as error:
        raise _command_error(f"cannot write {path}: {error.strerror}") from None


def cmd_run(args):
    from ..driver import TpuError
    model = _model_path(args.model, (".onnx", ".tflite", ".tpu"))
    inputs = [("the model", model), ("--input", args.input)]
    written = []
    for option in ("output", "json", "trace", "waves"):
        if getattr(args, option, None):
            _checked_output(getattr(args, option), f"--{option}", inputs, written)
            written.append((f"--{option}", getattr(args, option)))
    if args.trace and args.backend == "reference":
        raise _command_error("--trace: the reference backend runs no chip program to trace")
    session = _session(args, model, _config(args), args.batch)
    feeds = _feeds(session, args.input)
    names = [o.name for o in session.get_outputs()]
    from ..compiler.session import SIMULATION_BACKENDS
    if args.backend == "golden":
        _warn_if_long(session, "golden", next(iter(feeds.values())).shape[0])
    if args.backend in SIMULATION_BACKENDS:
        long = _warn_if_long(session, args.backend, next(iter(feeds.values())).shape[0])
        if sys.stderr.isatty():
            session.progress = lambda done, total: print(
                f"\r{args.backend}: {done}/{total} chunks", end="\n" if done == total else "",
                file=sys.stderr, flush=True)
        elif long:
            # In a log: a line at every tenth.
            def tenths(done, total, said=[-1]):
                if 10 * done // total != said[0]:
                    said[0] = 10 * done // total
                    print(f"{args.backend}: {done}/{total} chunks", file=sys.stderr, flush=True)
            session.progress = tenths
    try:
        outputs = session.run(None, feeds)
    except TpuError as error:
        if getattr(error, "counters", None) is not None:
            from ..host_registers import counters_line
            print(counters_line(error.counters), flush=True)
        raise chip_failure(f"{model} on {args.backend}: {_one_line(error)}") from None
    except _user_errors() as error:
        raise _command_error(_one_line(error)) from None
    except RuntimeError as error:
        # Not installed, or too large for this machine: the user's to fix.
        if type(error).__name__ in ("SimulatorMissing", "MachineTooSmall"):
            raise _command_error(_one_line(error)) from None
        raise chip_failure(f"{model} on {args.backend}: {_one_line(error)}") from None
    if args.output:
        _save_outputs(args.output, names, outputs)
    samples = next(iter(feeds.values())).shape[0]
    if session.last_profile is not None:
        result = session.report(clock_hz=args.clock_mhz * 1e6)
        print(result.format_table())
        data = result.to_json()
    else:
        print(f"{samples} inferences on the reference interpreter (no chip, no counters)")
        data = {"samples": samples}
    if args.json:
        data["model"] = str(model)
        data["backend"] = args.backend
        from ..output_files import write_output
        try:
            write_output(args.json, (json.dumps(data, indent=1) + "\n").encode())
        except OSError as error:
            raise _command_error(f"cannot write {args.json}: {error.strerror}") from None
    if args.output:
        shapes = ", ".join(f"{n} {tuple(v.shape)} {v.dtype}" for n, v in zip(names, outputs))
        print(f"wrote {args.output}: {shapes}", file=sys.stderr)
    if args.trace:
        _write_trace(args.trace, session, model)
    return 0


LONG_RUN_SECONDS = 60


def _warn_if_long(session, simulator, samples):
    """Say before a run on `simulator` ("golden", "icarus" or "verilator")
    that will take more than `LONG_RUN_SECONDS` how long it will roughly
    take; True if it did."""
    from ..estimate import format_seconds, golden_cycles_per_second, simulated_cycles_per_second
    compiled = session.compiled
    if compiled is None:
        return False
    cycles = sum(getattr(step, "estimated_cycles", 0) for step in compiled.steps)
    chunks = -(-samples // max(1, compiled.batch))
    if simulator == "golden":
        speed = golden_cycles_per_second(compiled.config)
    else:
        speed = simulated_cycles_per_second(compiled.config, simulator)
    seconds = cycles * chunks / speed
    if seconds <= LONG_RUN_SECONDS:
        return False
    if simulator == "golden":
        print(f"this run models about {cycles * chunks:,} chip cycles ({chunks} chunks of batch "
              f"{compiled.batch}) on the golden chip: about {format_seconds(seconds)} at roughly "
              f"{speed:,.0f} cycles/s; a smaller input is faster", file=sys.stderr, flush=True)
        return True
    print(f"this run simulates about {cycles * chunks:,} chip cycles ({chunks} chunks of batch "
          f"{compiled.batch}) under {simulator}: about {format_seconds(seconds)} at roughly "
          f"{speed:,.0f} cycles/s; a smaller input or the golden backend is faster",
          file=sys.stderr, flush=True)
    return True


def _write_trace(path, session, model):
    """The run's timeline: the cycle model's schedule of the parts it executed (one batch)."""
    from ..bench.trace import write_trace
    try:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        write_trace(path, session.compiled, Path(model).stem)
    except OSError as error:
        raise _command_error(f"cannot write {path}: {error.strerror}") from None
    print(f"wrote {path}: a Perfetto trace of one batch (open at ui.perfetto.dev; "
          f"1 us = 1 cycle)", file=sys.stderr)


# disasm -------------------------------------------------------------------------------------

def is_model_file(path):
    """True for a compiled model (``.tpu``), which `disassemble_model` prints."""
    return Path(path).suffix == ".tpu"


def disassemble_model(path):
    """The text of a compiled model: its description and every program part's assembly."""
    from ..compiler.artifact import CompiledModel
    path = Path(path)
    if not path.is_file():
        raise _command_error(f"{path}: no such file")
    try:
        compiled = CompiledModel.load(path)
    except _user_errors() as error:
        raise _command_error(f"{path}: {_one_line(error)}") from None
    for name in ("disassemble", "disassembly"):
        method = getattr(compiled, name, None)
        if callable(method):
            return method()
    return compiled.describe()


def cmd_disasm_model(args):
    text = disassemble_model(args.file)
    output = getattr(args, "output", None)
    if output in (None, "-"):
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
    else:
        from ..output_files import write_output
        _checked_output(output, "-o", [("the model", args.file)])
        try:
            write_output(output, text.encode())
        except OSError as error:
            raise _command_error(f"cannot write {output}: {error.strerror}") from None
    return 0


# The parser -----------------------------------------------------------------------------------

def _positive_float(text):
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be a positive number, not {text!r}")
    return value


def add_model_commands(subparsers, add_config_options):
    """Add ``compile`` and ``run`` to the ``tpu`` parser's `subparsers`."""
    from .common import _positive_count
    p = subparsers.add_parser(
        "compile", help="compile a quantized ONNX or TFLite model for a chip",
        description="Import MODEL (a quantized .onnx file, QDQ or QOperator form, or an int8 "
                    ".tflite file), compile it for the chip the options give and write the "
                    "compiled model (.tpu).")
    p.add_argument("model", metavar="MODEL", help="quantized .onnx or .tflite model")
    p.add_argument("-o", "--output", metavar="OUT", help="compiled model (default: MODEL.tpu)")
    p.add_argument("--batch", type=_positive_count, metavar="N",
                   help="samples per chip run (default: the compiler's)")
    add_config_options(p)
    p.set_defaults(func=cmd_compile)

    p = subparsers.add_parser(
        "run", help="run a model on the chip and print its per-layer performance",
        description="Run MODEL (.onnx or .tflite, compiled on the fly, or .tpu) on the inputs in X "
                    "(.npy for a model of one input, .npz by input name; the batch first, model "
                    "layout, e.g. NCHW) and print cycles, MXU utilisation and the counter "
                    "breakdown per layer.")
    p.add_argument("model", metavar="MODEL", help="quantized .onnx/.tflite or compiled .tpu model")
    p.add_argument("--input", required=True, metavar="X", help="input array (.npy or .npz)")
    p.add_argument("--output", metavar="Y", help="outputs to write (.npy, or .npz for several)")
    p.add_argument("--backend", default="golden",
                   choices=["golden", "icarus", "verilator", "serial", "reference"],
                   help="golden model (default), RTL simulation, a board over its serial "
                        "port (serial), or the IR interpreter")
    p.add_argument("--port", metavar="PORT",
                   help="--backend serial: the board's serial port (e.g. /dev/ttyUSB1) or a "
                        "pyserial URL")
    p.add_argument("--baud", type=_positive_count, default=115200, metavar="BAUD",
                   help="--backend serial: the UART's bit rate, as built (default 115200)")
    p.add_argument("--batch", type=_positive_count, metavar="N",
                   help="samples per chip run when compiling (default: the compiler's)")
    p.add_argument("--json", metavar="FILE", help="write the report as JSON")
    p.add_argument("--trace", metavar="FILE",
                   help="write a Chrome/Perfetto trace-event JSON of the chip's units over "
                        "cycles (the cycle model's schedule of one batch's program parts)")
    p.add_argument("--clock-mhz", type=_positive_float, default=100.0, metavar="MHZ",
                   help="chip clock for inferences per second (default 100; a board's clock, "
                        "e.g. 12 on the iCEBreaker, for --backend serial)")
    p.add_argument("--seed", type=int, help="simulation backends: host behaviour seed")
    p.add_argument("--waves", metavar="FILE",
                   help="simulation backends: write the waveforms to FILE (VCD if it ends in "
                        ".vcd, else FST); of the last chip run when the model needs several")
    add_config_options(p)
    p.set_defaults(func=cmd_run)
