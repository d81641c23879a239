"""The ``tpu`` command line.

Commands
--------
tpu verilog   write the Verilog of a configuration (and the map of its ports)
tpu sim       run the cocotb testbenches of a top level under a simulator
tpu exec      run a program on the chip through the host driver
tpu selftest  check a chip (board or simulation) with its own checks
tpu demo      the main job: digits classified by compiled networks on the chip
tpu compile   compile a quantized ONNX or TFLite model (tpu.cli.model)
tpu run       run a model on the chip with a per-layer report (tpu.cli.model)
tpu bench     measure the chip: GEMMs, roofline, models, simulation speed (tpu.cli.bench)
tpu build     synthesise, place and route the chip for a board (tpu.cli.fpga)
tpu flash     program a board with a bitstream (tpu.cli.fpga)
tpu asm       assemble a program (docs/isa.md) into its binary
tpu disasm    disassemble a binary program or a compiled model

Exit status: 0 success, 1 the chip (or a simulation of it) reported an
error (a fault, a failed testcase, a model that did not build), 2 a usage or
input error, printed as one line ``tpu: error: ...``.

Adding a command: write ``cmd_NAME(args)`` (returns the exit status, raises
`CommandError` for bad input) and ``_NAME_parser(commands)``, and list the
latter in `_PARSERS`. `main` maps every expected error to its one line. A
family of commands goes in a module of its own beside this one (`tpu.cli.model`),
taking the errors and helpers it shares with the others from `tpu.cli.common`.
"""

import argparse
import os
import sys
import time
from pathlib import Path

from ..config import ConfigError
from .common import (EXIT_CHIP_ERROR, EXIT_OK, EXIT_USAGE, ChipError, CommandError, _Parser,
                     _add_config_options, _check_memory, _config_from, _given_config_options,
                     _input_path, _output_path, _positive_count, _read, _seed_option,
                     _simulator, _top_option, _write)


__all__ = ["main", "CommandError", "ChipError", "EXIT_OK", "EXIT_CHIP_ERROR", "EXIT_USAGE"]


# tpu verilog ---------------------------------------------------------------------------


def cmd_verilog(args):
    from ..hdl.verilog import TOPS, design, format_port_map, generate_verilog, generate_with_ports
    config = _config_from(args)
    module = TOPS[args.top]
    if args.ports:
        if args.output not in (None, "-"):
            raise CommandError("--ports prints the port map to stdout; -o writes the Verilog "
                               "and the port map next to it: give one of them")
        sys.stdout.write(format_port_map(design(config, args.top), module))
        return EXIT_OK
    output = None if args.output in (None, "-") else _output_path(args.output, what="Verilog output")
    if output is not None:
        ports = _output_path(output.with_suffix(".ports"), what="port map", outputs=[output])
    _check_memory(config, args.top)
    if output is None:
        sys.stdout.write(generate_verilog(config, top=args.top))
        return EXIT_OK
    text, port_list = generate_with_ports(config, top=args.top)
    _write(output, text.encode())
    _write(ports, format_port_map(port_list, module).encode())
    print(f"wrote {output} (module {module}, {len(text.splitlines())} lines) and its port map "
          f"{ports} for {config.name}", file=sys.stderr)
    return EXIT_OK


def _verilog_parser(commands):
    p = commands.add_parser("verilog", help="write the Verilog of a configuration",
                            description="Write the Verilog of a configuration. With -o FILE, the "
                                        "map of every flattened port to its fields and bit "
                                        "offsets goes to FILE with suffix .ports.")
    _add_config_options(p)
    p.add_argument("-o", "--output", metavar="FILE", help="output file (default: stdout)")
    p.add_argument("--ports", action="store_true",
                   help="print the port map (ports, fields, bit offsets) instead of the Verilog")
    _top_option(p, "what to generate", serial=True)
    p.set_defaults(func=cmd_verilog)


# tpu sim -------------------------------------------------------------------------------


def cmd_sim(args):
    from ..hdl.verilog import TOPS
    from ..sim.harness import SimulationError, build, run_outcomes, trace_format, waves_requested
    from ..sim.suites import testcases
    config = _config_from(args)
    cases = testcases(args.top)
    if args.list:
        for case in cases:
            reason = case.why_not(config)
            print(f"{case.name:<28} {case.doc}" + (f" [not for this configuration: {reason}]"
                                                    if reason else ""))
        return EXIT_OK
    if args.testcase:
        by_name = {case.name: case for case in cases}
        unknown = [name for name in args.testcase if name not in by_name]
        if unknown:
            raise CommandError(f"unknown testcase {', '.join(unknown)} of --top {args.top}; "
                               f"its testcases are {', '.join(by_name)}")
        cases = [by_name[name] for name in dict.fromkeys(args.testcase)]
        for case in cases:
            reason = case.why_not(config)
            if reason:
                raise CommandError(f"testcase {case.name} cannot run on {config.name} as given: "
                                   f"{reason}")
    skipped = [case for case in cases if case.why_not(config)]
    cases = [case for case in cases if not case.why_not(config)]
    _check_memory(config, args.top)
    _simulator(args.sim)
    seed = args.seed if args.seed is not None else int(time.time()) % 1000000
    module = TOPS[args.top]
    print(f"{args.top} ({module}) of {config.name} under {args.sim}, seed {seed} "
          f"(replay with --seed {seed}): {len(cases)} testcase{'s' if len(cases) != 1 else ''}",
          flush=True)
    started = time.perf_counter()
    # A model not built yet is announced, with its estimated time, as its build starts.
    # A model that does not build is one error (exit status 1), not one per testcase.
    waves = None
    if args.waves or waves_requested():
        try:
            waves = trace_format(args.sim, args.waves)
        except SimulationError as error:
            raise CommandError(str(error)) from None
    model = build(config, args.sim, top=args.top, waves=waves)
    print(f"model: {model} ({time.perf_counter() - started:.1f} s)", flush=True)
    passed = 0
    for case in cases:
        started = time.perf_counter()
        try:
            outcomes = run_outcomes(config, args.sim, case.module, testcase=case.test, seed=seed,
                                    top=args.top, run_name=case.name, waves=_waves_file(args, case, cases),
                                    extra_env={"TPU_SIMULATOR": args.sim, **case.env}, quiet=True)
        except SimulationError as error:
            print(f"ERROR {case.name}: {error}", flush=True)
            continue
        seconds = time.perf_counter() - started
        if not outcomes:
            print(f"ERROR {case.name}: the testcase did not run; see the logs under {model}",
                  flush=True)
            continue
        outcome = outcomes[0]
        if outcome.passed:
            passed += 1
            print(f"pass  {case.name} ({seconds:.1f} s)", flush=True)
        else:
            word = "FAIL " if outcome.kind == "failed" else "ERROR"
            print(f"{word} {case.name} ({seconds:.1f} s): {outcome.message.splitlines()[0][:300]}"
                  f"\n      log: {outcome.log}", flush=True)
    failed = len(cases) - passed
    note = f"; {len(skipped)} not for this configuration (see --list)" if skipped else ""
    print(f"{passed} passed, {failed} failed{note}")
    return EXIT_CHIP_ERROR if failed else EXIT_OK


def _waves_file(args, case, cases):
    """The waveform file of `case`: --waves FILE, named after the testcase
    (FILE-<testcase>.fst) when several run; None without --waves."""
    if not args.waves:
        return None
    if len(cases) == 1:
        return args.waves
    path = Path(args.waves)
    return str(path.with_name(f"{path.stem}-{case.name}{path.suffix}"))


def _sim_parser(commands):
    p = commands.add_parser("sim", help="run the RTL testbenches of a top level",
                            description="Run every cocotb testcase of a top level (or those "
                                        "named with --testcase), each in a simulation of its "
                                        "own, under Icarus or Verilator.")
    _add_config_options(p)
    _top_option(p, "which testbenches")
    p.add_argument("--sim", choices=["icarus", "verilator"], default="icarus",
                   help="simulator (default icarus)")
    _seed_option(p, "default: new each run")
    p.add_argument("--testcase", action="append", metavar="NAME",
                   help="run this testcase only (repeatable; --list names them)")
    p.add_argument("--list", action="store_true", help="list the testcases of --top and exit")
    p.add_argument("--waves", metavar="FILE",
                   help="write the waveforms to FILE (VCD if it ends in .vcd, else FST), one file per "
                        "testcase (FILE-TESTCASE.fst) when several run; uses a model built for "
                        "tracing")
    p.set_defaults(func=cmd_sim)


# tpu exec ------------------------------------------------------------------------------


def _parse_input(text):
    addr, sep, name = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"--input {text!r}: expected ADDR=FILE")
    return _parse_addr(addr, "--input"), name


def _parse_output(text):
    spec, sep, name = text.partition("=")
    addr, sep2, nbytes = spec.partition(":")
    if not sep or not sep2 or not name:
        raise argparse.ArgumentTypeError(f"--output {text!r}: expected ADDR:NBYTES=FILE")
    n = _parse_addr(nbytes, "--output NBYTES")
    if n == 0:
        raise argparse.ArgumentTypeError(f"--output {text!r}: NBYTES is 0")
    return _parse_addr(addr, "--output"), n, name


def _parse_addr(text, what):
    try:
        value = int(text, 0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{what}: {text!r} is not a number") from None
    if value < 0 or value >= 1 << 32:
        raise argparse.ArgumentTypeError(f"{what}: {text} is out of range 0..0xffffffff")
    return value


def _positive_seconds(text):
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 < value <= 3600:
        raise argparse.ArgumentTypeError(f"{text} is not in 0 < seconds <= 3600")
    return value


def cmd_exec(args):
    from ..exec_program import ExecError, execute, load_program
    from ..host_registers import counters_line
    config = _config_from(args)
    program_path = _input_path(args.program, "program")
    inputs = []
    for addr, name in args.input or ():
        path = _input_path(name, "input file")
        inputs.append((addr, _read(path, text=False, what="input data")))
    weights = None
    if args.weights:
        weights = _read(_input_path(args.weights, "weights file"), text=False, what="weights")
    sources = [program_path] + [Path(name) for _, name in args.input or ()]
    if args.weights:
        sources.append(Path(args.weights))
    outputs = []
    for addr, nbytes, name in args.output or ():
        outputs.append((addr, nbytes, _output_path(name, sources, what="output",
                                                   outputs=[path for *_, path in outputs])))
    if args.waves:
        _output_path(args.waves, sources, what="waves file",
                     outputs=[path for *_, path in outputs])
    if args.waves and args.backend == "golden":
        raise CommandError("--waves needs a simulation backend (--backend icarus or verilator)")
    if args.backend != "golden":
        _check_memory(config, "chip")
        _simulator(args.backend)
    try:
        code = load_program(program_path, _read(program_path, text=False, what="program"), config)
        result = execute(code, config, backend=args.backend, inputs=inputs,
                         outputs=[(addr, n) for addr, n, _ in outputs], weights=weights,
                         seed=args.seed if args.seed is not None else 1, timeout=args.timeout,
                         waves=args.waves)
    except ExecError as error:
        raise CommandError(str(error)) from None
    print(f"{program_path}: {len(code) // 16} instructions on the {args.backend} backend "
          f"({config.name})")
    if result["fault"]:
        print(f"status: error: {result['fault']}")
    else:
        print(f"status: {'halted' if result['halted'] else 'ran off the end of the program (no HALT)'}"
              f" after {result['elapsed'] * 1e6:.1f} us of link time")
    if result["int_codes"]:
        print(f"interrupt codes: {', '.join(str(code) for code in result['int_codes'])}")
    print(counters_line(result["counters"]))
    for (addr, nbytes, path), data in zip(outputs, result["outputs"]):
        _write(path, data)
        print(f"wrote {path} ({nbytes} bytes from host offset 0x{addr:x})")
    return EXIT_CHIP_ERROR if result["fault"] else EXIT_OK


def _exec_parser(commands):
    p = commands.add_parser("exec", help="run a program on the chip through the host driver",
                            description="Run PROGRAM (assembly .s, or a binary from 'tpu asm') "
                                        "through tpu.driver on a backend, and print its status, "
                                        "fault and counters. Host addresses in the program, "
                                        "--input and --output are offsets into one host buffer "
                                        "that tpu exec allocates inside the driver's DMA window; "
                                        "exec adds the buffer's address to every RHM and WHM.")
    p.add_argument("program", metavar="PROGRAM", help="assembly (.s) or binary (.bin) program")
    p.add_argument("--backend", choices=["golden", "icarus", "verilator"], default="golden",
                   help="the golden model (default) or the chip's RTL under a simulator")
    p.add_argument("--input", action="append", type=_parse_input, metavar="ADDR=FILE",
                   help="copy FILE's bytes to host offset ADDR before the run (repeatable)")
    p.add_argument("--output", action="append", type=_parse_output, metavar="ADDR:NBYTES=FILE",
                   help="after the run, write NBYTES bytes from host offset ADDR to FILE "
                        "(repeatable)")
    p.add_argument("--weights", metavar="FILE",
                   help="int8 weight tiles (rows x cols bytes each, row-major) loaded into "
                        "weight memory from tile 0 before the run")
    p.add_argument("--timeout", type=_positive_seconds, default=0.1,
                   help="link seconds to wait for the program to end (default 0.1)")
    _seed_option(p, "simulation backends: draws the host's timing; default 1")
    p.add_argument("--waves", metavar="FILE",
                   help="simulation backends: write the run's waveforms to FILE (VCD if it ends "
                        "in .vcd, else FST)")
    _add_config_options(p)
    p.set_defaults(func=cmd_exec)


# tpu demo ------------------------------------------------------------------------------


def cmd_demo(args):
    from ..compiler.errors import CompileError
    from ..driver import TpuError
    from ..hdl.verilog import DEFAULT_TOP, TOPS, format_port_map, generate_with_ports
    config = _config_from(args)
    output = _output_path(args.output, what="Verilog output")
    ports_path = _output_path(output.with_suffix(".ports"), what="port map", outputs=[output])
    given = " ".join(_given_config_options(args)) or "the default configuration"
    if config.rows != config.cols:
        raise CommandError(f"the demo does not fit {given}: rows must equal cols "
                           f"(the compiler needs a square array: docs/isa.md, open points)")
    _check_memory(config, DEFAULT_TOP)
    module = TOPS[DEFAULT_TOP]
    demo_started = time.perf_counter()
    print(f"configuration: {_config_line(config)}", flush=True)

    from ..demo import run_demo
    try:
        # run_demo refuses a chip the networks do not fit in seconds, before
        # this Verilog's generation and the training.
        result = run_demo(backend=args.backend, config=config, out_dir=args.out, batch=args.batch,
                          quick=args.quick)
    except CompileError as error:
        raise CommandError(f"the demo does not fit {given}: {error}") from None
    except TpuError as error:
        raise ChipError(f"the chip failed running the demo: {error}") from None
    started = time.perf_counter()
    text, ports = generate_with_ports(config, top=DEFAULT_TOP)
    elapsed = time.perf_counter() - started
    # Written last, so that a configuration the networks do not fit leaves nothing behind.
    _write(output, text.encode())
    _write(ports_path, format_port_map(ports, module).encode())
    print(f"module {module} (the chip): {len(text.splitlines())} lines of Verilog in {output} "
          f"(generated in {elapsed:.2f} s), {len(ports)} ports; port map in {ports_path}")
    # Last, once everything is done and written.
    print(f"the demo took {time.perf_counter() - demo_started:.0f} s")
    return EXIT_OK if result["ok"] else EXIT_CHIP_ERROR


def _config_line(config):
    """A configuration in one short line: its array and the memories that
    bound a model, and any other field that differs from the default."""
    from ..config import TPUConfig
    default = TPUConfig()
    shown = ("rows", "cols", "ub_rows", "acc_rows", "weight_mem_tiles")
    others = [f"{name}={value}" for name, value in config.to_dict().items()
              if name not in shown and value != getattr(default, name)]
    return (f"{config.rows}x{config.cols} array, {config.ub_rows} UB rows, {config.acc_rows} "
            f"accumulator rows, {config.weight_mem_tiles} weight tiles"
            + (f" ({', '.join(others)})" if others else ""))


def _demo_parser(commands):
    p = commands.add_parser("demo", help="the main job: digits classified by compiled networks on the chip",
                            description="Generate the chip's Verilog and port map; train an MLP and "
                                        "a CNN on scikit-learn's handwritten digits, quantize them "
                                        "with ONNX Runtime, compile them and classify the test split "
                                        "on the chip (the RTL under Verilator by default), compared "
                                        "with ONNX Runtime, the golden model and the reference "
                                        "interpreter; writes a PNG and JSON of the results.")
    _add_config_options(p)
    p.add_argument("-o", "--output", metavar="FILE", default="build/tpu_chip.v",
                   help="where to write the Verilog (default build/tpu_chip.v; the port map "
                        "goes next to it, suffix .ports)")
    p.add_argument("--backend", default="verilator", choices=["golden", "icarus", "verilator"],
                   help="where the chip runs: the RTL under Verilator (default) or Icarus, "
                        "or the golden model")
    p.add_argument("--batch", type=_positive_count, default=64, metavar="N",
                   help="images per chip run (default 64)")
    p.add_argument("--quick", action="store_true",
                   help="run one batch of the test split on the chip instead of all of it")
    p.add_argument("--out", metavar="DIR", default="build/demo",
                   help="where the trained models, the PNG and the JSON go (default build/demo)")
    p.set_defaults(func=cmd_demo)


# tpu asm / disasm ----------------------------------------------------------------------


def cmd_asm(args):
    from ..asm import AsmError, assemble
    from ..isa import INSTRUCTION_BYTES
    config = _config_from(args)
    source = _input_path(args.file, "assembly source")
    text = _read(source, text=True, what="assembly")
    try:
        program = assemble(text, filename=str(source), config=None if args.no_check else config)
    except (AsmError, ValueError, OverflowError, RecursionError) as error:
        message = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise CommandError(message if isinstance(error, AsmError) else f"{source}: {message}") \
            from None
    if args.output == "-":
        output = None
    elif args.output is not None:
        output = _output_path(args.output, [source], what="binary output")
    else:
        output = source.with_suffix(".bin")
        if output.resolve() == source.resolve():
            raise CommandError(f"the binary would overwrite the source {source}; name it with -o")
        if output.is_dir():
            raise CommandError(f"{output} is a directory; name the binary with -o")
    if not program:
        raise CommandError(f"{source} holds no instructions (only comments or blank lines)")
    if output is None:
        sys.stdout.buffer.write(program)
        sys.stdout.buffer.flush()
        return EXIT_OK
    _write(output, program)
    checked = "not range-checked" if args.no_check else f"range-checked for {config.name}"
    print(f"wrote {output} ({len(program) // INSTRUCTION_BYTES} instructions, {len(program)} bytes, "
          f"{checked})", file=sys.stderr)
    return EXIT_OK


def _asm_parser(commands):
    p = commands.add_parser("asm", help="assemble a program into its binary",
                            description="Assemble FILE (syntax: docs/isa.md). Every instruction is "
                                        "range-checked against the chip configuration given by the "
                                        "options (default: the default chip).")
    p.add_argument("file", metavar="FILE", help="assembly source")
    p.add_argument("-o", "--output", metavar="OUT",
                   help="binary to write, '-' for stdout (default: FILE with suffix .bin)")
    p.add_argument("--no-check", action="store_true",
                   help="do not range-check addresses against the configuration")
    _add_config_options(p)
    p.set_defaults(func=cmd_asm)


def _looks_like_text(data):
    printable = set(range(0x20, 0x7F)) | {0x09, 0x0A, 0x0D}
    return all(byte in printable for byte in data)


def cmd_disasm(args):
    from ..asm import disassemble
    from .model import cmd_disasm_model, is_model_file
    from ..isa import IllegalInstruction, INSTRUCTION_BYTES, decode
    if is_model_file(args.file):
        return cmd_disasm_model(args)
    path = _input_path(args.file, "binary program")
    data = _read(path, text=False, what="instructions")
    if _looks_like_text(data):
        def legal(i):
            try:
                decode(data[i:i + INSTRUCTION_BYTES])
                return True
            except (IllegalInstruction, ValueError):
                return False
        if not all(legal(i) for i in range(0, len(data) - len(data) % INSTRUCTION_BYTES,
                                           INSTRUCTION_BYTES)):
            raise CommandError(f"{path} is text, not a binary program; is it assembly? "
                               f"(try 'tpu asm {path}')")
    output = None if args.output in (None, "-") else _output_path(args.output, [path],
                                                                   what="text output")
    try:
        text = disassemble(data, strict=args.strict)
    except (IllegalInstruction, ValueError) as error:
        raise CommandError(f"{path}: {error}") from None
    if output is None:
        sys.stdout.write(text)
    else:
        _write(output, text.encode())
    return EXIT_OK


def _disasm_parser(commands):
    p = commands.add_parser("disasm", help="disassemble a binary program",
                            description="Print FILE, a binary program, as assembly that assembles "
                                        "back to the same bytes. Illegal instructions are shown as "
                                        "'.raw' words with a comment naming the fault.")
    p.add_argument("file", metavar="FILE", help="binary program (16 bytes per instruction)")
    p.add_argument("-o", "--output", metavar="OUT", help="text file to write (default: stdout)")
    p.add_argument("--strict", action="store_true", help="an illegal instruction is an error")
    p.set_defaults(func=cmd_disasm)


# The command line ----------------------------------------------------------------------

def _model_parsers(commands):
    from .model import add_model_commands
    add_model_commands(commands, _add_config_options)


def _bench_parser(commands):
    from .bench import add_bench_commands
    add_bench_commands(commands, _add_config_options)


def _fpga_parsers(commands):
    from .fpga import add_fpga_commands
    add_fpga_commands(commands, _add_config_options)


def _selftest_parser(commands):
    from .selftest import add_selftest_command
    add_selftest_command(commands)


def _serve_parser(commands):
    from .serve import add_serve_command
    add_serve_command(commands, _add_config_options)


_PARSERS = [_verilog_parser, _sim_parser, _exec_parser, _selftest_parser, _demo_parser, _model_parsers,
            _bench_parser, _fpga_parsers, _asm_parser, _disasm_parser, _serve_parser]


def _parser():
    parser = _Parser(prog="tpu", description="An open TPU-v1-class inference accelerator.",
                     epilog="Exit status: 0 success, 1 the chip reported an error (a fault, a "
                            "failed testcase), 2 a usage or input error.")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for add in _PARSERS:
        add(commands)
    return parser


def main(argv=None):
    from ..estimate import MachineTooSmall
    from ..sim.harness import SimulationError, SimulatorMissing
    parser = _parser()
    try:
        args = parser.parse_args(argv)
        if args.command is None:
            parser.print_help()
            return EXIT_USAGE
        return args.func(args)
    except (CommandError, ConfigError, SimulatorMissing, MachineTooSmall) as error:
        print(f"tpu: error: {error}", file=sys.stderr)
        return getattr(error, "exit_status", EXIT_USAGE)
    except BrokenPipeError:
        # The reader of stdout went away (tpu verilog | head): nothing to say,
        # and nothing more to flush at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
    except SimulationError as error:
        print(f"tpu: error: {error}", file=sys.stderr)
        return EXIT_CHIP_ERROR
    except MemoryError:
        print("tpu: error: out of memory: choose smaller sizes", file=sys.stderr)
        return EXIT_USAGE
    except OSError as error:
        # A file the command needs (the build directory, a scratch file).
        where = f"{error.filename}: " if error.filename else ""
        print(f"tpu: error: {where}{error.strerror or error}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("tpu: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
