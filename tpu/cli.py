"""The ``tpu`` command line.

Commands
--------
tpu verilog   write the Verilog of a configuration
tpu sim       run the cocotb testbenches of a configuration under a simulator
tpu demo      the main job on the default configuration
tpu asm       assemble a program (docs/isa.md) into its binary
tpu disasm    disassemble a binary program
"""

import argparse
import re
import sys
import time
from pathlib import Path

from .config import TPUConfig, ConfigError


__all__ = ["main"]


class CommandError(Exception):
    """A user-facing error: printed as one line, exit status 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        # One line, naming what was wrong, instead of usage plus message.
        raise CommandError(f"{message} (see '{self.prog} --help')")


def _add_config_options(parser):
    group = parser.add_argument_group("chip configuration")
    for name in TPUConfig.field_names():
        group.add_argument(f"--{name.replace('_', '-')}", dest=name, type=int, metavar="N",
                           help=f"{TPUConfig.describe(name)}; default {getattr(TPUConfig(), name)}")


def _config_from(args):
    values = {name: getattr(args, name) for name in TPUConfig.field_names()
              if getattr(args, name, None) is not None}
    try:
        return TPUConfig(**values)
    except (ConfigError, TypeError) as error:
        raise CommandError(str(error)) from None


def _verilog_summary(text, module):
    """The ports of `module` in `text`, as (direction, bits, name)."""
    body = re.search(rf"^module {module}\b(.*?)^endmodule", text, re.M | re.S).group(1)
    return [(direction, int(msb) + 1 if msb else 1, name) for direction, msb, name in
            re.findall(r"^\s*(input|output)\s*(?:\[(\d+):0\])?\s*(\w+)\s*;", body, re.M)]


def cmd_verilog(args):
    from .hdl.verilog import generate_verilog
    config = _config_from(args)
    text = generate_verilog(config, top=args.top)
    if args.output in (None, "-"):
        sys.stdout.write(text)
    else:
        path = Path(args.output)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        except OSError as error:
            raise CommandError(f"cannot write {path}: {error.strerror}") from None
        print(f"wrote {path} ({len(text.splitlines())} lines) for {config.name}", file=sys.stderr)
    return 0


def cmd_sim(args):
    from .sim.harness import missing_simulator, run
    config = _config_from(args)
    reason = missing_simulator(args.sim)
    if reason:
        raise CommandError(reason)
    seed = args.seed if args.seed is not None else int(time.time()) % 1000000
    print(f"{config.name} under {args.sim}, seed {seed}")
    tests, failures = run(config, args.sim, "tpu.sim.tb_matrix_engine",
                          testcase=args.testcase, seed=seed)
    print(f"{tests - failures} passed, {failures} failed")
    return 1 if failures or not tests else 0


def cmd_demo(args):
    import numpy as np
    from .hdl.verilog import generate_verilog, CORE_NAME
    from .sim.matrix_engine_model import MatMul, MatrixEngineModel
    config = _config_from(args)
    started = time.perf_counter()
    text = generate_verilog(config, top="core")
    elapsed = time.perf_counter() - started
    path = Path(args.output)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    module = CORE_NAME
    ports = _verilog_summary(text, module)
    print(f"configuration: {config}")
    print(f"module {module}: {len(text.splitlines())} lines of Verilog in {path} "
          f"(generated in {elapsed:.2f} s)")
    print(f"  {'port':<24} {'dir':<6} {'bits':>5}")
    for direction, width, name in ports:
        print(f"  {name:<24} {direction:<6} {width:>5}")
    latency = config.rows + config.cols + 2
    print(f"array: {config.rows}x{config.cols} int8 MACs, peak {config.peak_macs_per_cycle} "
          f"MAC/cycle, row latency {latency} cycles, accumulators {config.acc_rows}x{config.cols} int32")

    rng = np.random.default_rng(0)
    model = MatrixEngineModel(config)
    x = rng.integers(0, 256, size=(4, config.rows))
    w = rng.integers(-128, 128, size=(config.rows, config.cols))
    model.push_tile(w)
    model.matmul(MatMul(x, 0, unsigned=True, switch=True))
    ok = np.array_equal(model.acc[:4], x @ w)
    print(f"golden model: 4 uint8 rows x one tile {'matches' if ok else 'DIFFERS FROM'} numpy")
    return 0 if ok and _demo_mlp() and _demo_driver() else 1


def _demo_driver():
    """The same MLP through the host driver: weights by DMA, the program by
    doorbell, the result read back from host memory (golden backend)."""
    from .driver import run
    from .driver.checks import check_mlp
    try:
        result = run(check_mlp, backend="golden", config=TPUConfig())
    except AssertionError as error:
        print(f"host driver: the MLP through the driver FAILED: {error}")
        return False
    print(f"host driver (golden backend): the MLP submitted by doorbell halts with the reference "
          f"output; counters {result.counters['cycles']} cycles, "
          f"{result.counters['useful_macs']} useful MACs "
          f"(run the same on the RTL with backend=\"icarus\" or \"verilator\")")
    return True


def _demo_mlp():
    """A two-layer int8 MLP, assembled and run on the golden model of the chip."""
    from .sim.chip_model import ChipModel
    from .sim.cycle_model import estimate_cycles
    from .sim.programs import mlp_program
    program = mlp_program()
    chip = ChipModel(program.config)
    chip.weight_memory[:len(program.weights)] = program.weights
    for addr, data in program.host.items():
        chip.host.write(addr, data)
    code = program.assemble()
    chip.run(code)
    ok = all(chip.host.read(addr, len(data)) == data for addr, data in program.expected_host.items())
    estimate = estimate_cycles(program.config, code)
    print(f"two-layer int8 MLP ({len(code) // 16} instructions, {program.config.name} chip): "
          f"output {'matches' if ok else 'DIFFERS FROM'} the numpy integer reference; "
          f"{estimate['cycles']} cycles, MXU utilisation {estimate['utilisation']['matrix_phase']:.0%} "
          f"while the matrix unit runs")
    return ok


def _read(path, text):
    try:
        data = path.read_bytes()
    except OSError as error:
        raise CommandError(f"cannot read {path}: {error.strerror}") from None
    if not text:
        return data
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise CommandError(f"{path}: not UTF-8 text (byte 0x{data[error.start]:02x} at offset "
                           f"{error.start}); is it a binary? (try 'tpu disasm')") from None


def _write(path, data):
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    except OSError as error:
        raise CommandError(f"cannot write {path}: {error.strerror}") from None


def cmd_asm(args):
    from .asm import AsmError, assemble
    from .isa import INSTRUCTION_BYTES
    config = _config_from(args)
    source = Path(args.file)
    text = _read(source, text=True)
    try:
        program = assemble(text, filename=str(source), config=None if args.no_check else config)
    except AsmError as error:
        raise CommandError(str(error)) from None
    if args.output == "-":
        sys.stdout.buffer.write(program)
        sys.stdout.buffer.flush()
        return 0
    output = Path(args.output) if args.output else source.with_suffix(".bin")
    if output.resolve() == source.resolve():
        raise CommandError(f"the output would overwrite the source {source}; name it with -o")
    _write(output, program)
    checked = "not range-checked" if args.no_check else f"range-checked for {config.name}"
    print(f"wrote {output} ({len(program) // INSTRUCTION_BYTES} instructions, {len(program)} bytes, "
          f"{checked})", file=sys.stderr)
    return 0


def cmd_disasm(args):
    from .asm import disassemble
    from .isa import IllegalInstruction
    path = Path(args.file)
    data = _read(path, text=False)
    try:
        text = disassemble(data, strict=args.strict)
    except (IllegalInstruction, ValueError) as error:
        raise CommandError(f"{path}: {error}") from None
    if args.output in (None, "-"):
        sys.stdout.write(text)
    else:
        _write(Path(args.output), text.encode())
    return 0


def _parser():
    parser = _Parser(prog="tpu", description="An open TPU-v1-class inference accelerator.")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    p = commands.add_parser("verilog", help="write the Verilog of a configuration")
    _add_config_options(p)
    p.add_argument("-o", "--output", metavar="FILE", help="output file (default: stdout)")
    p.add_argument("--top", choices=["chip", "core", "engine"], default="core",
                   help="the core behind row-level DMA ports (default), the chip with its "
                        "PCIe-style host interface, or the matrix engine alone")
    p.set_defaults(func=cmd_verilog)

    p = commands.add_parser("sim", help="run the RTL testbenches of a configuration")
    _add_config_options(p)
    p.add_argument("--sim", choices=["icarus", "verilator"], default="icarus",
                   help="simulator (default icarus)")
    p.add_argument("--seed", type=int, help="random seed (default: new each run)")
    p.add_argument("--testcase", help="run one testcase only")
    p.set_defaults(func=cmd_sim)

    p = commands.add_parser("demo", help="generate the default chip and summarise it")
    _add_config_options(p)
    p.add_argument("-o", "--output", metavar="FILE", default="build/tpu_core.v",
                   help="where to write the Verilog (default build/tpu_core.v)")
    p.set_defaults(func=cmd_demo)

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

    p = commands.add_parser("disasm", help="disassemble a binary program",
                            description="Print FILE, a binary program, as assembly that assembles "
                                        "back to the same bytes. Illegal instructions are shown as "
                                        "'.raw' words with a comment naming the fault.")
    p.add_argument("file", metavar="FILE", help="binary program (16 bytes per instruction)")
    p.add_argument("-o", "--output", metavar="OUT", help="text file to write (default: stdout)")
    p.add_argument("--strict", action="store_true", help="an illegal instruction is an error")
    p.set_defaults(func=cmd_disasm)
    return parser


def main(argv=None):
    parser = _parser()
    try:
        args = parser.parse_args(argv)
        if args.command is None:
            parser.print_help()
            return 2
        return args.func(args)
    except CommandError as error:
        print(f"tpu: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("tpu: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
