"""The driver's simulation backends: ``tpu.driver.run(main, backend="icarus")``
and ``backend="verilator"`` run ``main(device)`` against the RTL of the whole
chip, behind cocotbext-pcie's root complex (`tpu.sim.host.pcie_host`).

cocotb owns the simulator's event loop, so `main` runs inside the simulation
process: it is named there by module and function (or script file and
function), and its return value comes back pickled. ``waves="run.fst"``
writes the simulation's waveforms to that file (``WAVES=1`` in the
environment: to ``waves.fst`` next to the simulation's log). By default the
host is awkward at random (drawn from ``seed``: idle cycles, back-pressure,
reordered and split completions); ``host_latency=N`` makes it deterministic
instead (`tpu.sim.bench.bench_host.open_bench_link`: every completion of
``max_payload`` bytes, in order, N cycles late), the host the cycle model's
link model (`tpu.models.cycle_model.HostLink`) describes.
"""

import os
import pickle
import sys
import tempfile
from pathlib import Path

from ..harness import SimulatorMissing, missing_simulator, run_outcomes, trace_format


__all__ = ["simulation_backend", "main_target", "icarus", "verilator"]


#: cocotb rewrites the assertions of every module imported after its test
#: module starts loading ("*.py"), through pytest's import hook: about a CPU
#: second of each run's start went to rewriting the driver, numpy's and
#: cocotbext-pcie's modules. Only the testbench's are rewritten here (unless
#: the environment says otherwise); `main`'s assertions keep plain messages.
_ASSERTION_REWRITING = {} if "COCOTB_REWRITE_ASSERTION_FILES" in os.environ \
    else {"COCOTB_REWRITE_ASSERTION_FILES": "tb_*.py"}


def main_target(main):
    """How the simulation process finds `main`: ``module:function`` or
    ``/path/file.py:function``."""
    module = getattr(main, "__module__", None)
    name = getattr(main, "__qualname__", "")
    if not callable(main) or not module or "<locals>" in name or "<lambda>" in name:
        raise ValueError(f"{main!r} cannot run on a simulation backend: the simulator runs it in "
                         f"another process, so it must be a module-level async function")
    if module == "tpu" or module.startswith("tpu."):
        return f"{module}:{name}"
    # Anything else (a script, a test module) is loaded from its file, which
    # need not be importable by name in the simulation process.
    path = getattr(sys.modules.get(module), "__file__", None)
    if path is None:
        raise ValueError(f"{name} is defined in an interactive session; a simulation backend "
                         f"needs it in a module or script file")
    return f"{Path(path).resolve()}:{name}"


def simulation_backend(simulator):
    """A `tpu.driver.register_backend` factory for `simulator`."""
    def factory(main, config, *, seed=1, waves=None, host_latency=None, **options):
        if options:
            raise TypeError(f"the {simulator} backend takes no options {', '.join(sorted(options))} "
                            f"(only seed, waves and host_latency)")
        if host_latency is not None and (not isinstance(host_latency, int)
                                         or isinstance(host_latency, bool) or host_latency < 0):
            raise ValueError(f"the {simulator} backend's host_latency must be an int >= 0 "
                             f"(or None: a random host), not {host_latency!r}")
        if not isinstance(seed, int) or isinstance(seed, bool):
            raise TypeError(f"the {simulator} backend's seed must be an int, not {seed!r}")
        if seed < 0:
            raise ValueError(f"the {simulator} backend's seed must be >= 0, not {seed}")
        if waves is not None and not isinstance(waves, (str, os.PathLike)):
            raise TypeError(f"the {simulator} backend's waves must be a file name, not {waves!r}")
        if config.narrow_host:
            raise ValueError(f"the {simulator} backend drives the chip's PCIe-style host interface, "
                             f"and this chip speaks the narrow host protocol (narrow_host 1): use "
                             f"narrow_host 0 (the same core) or the serial backend")
        reason = missing_simulator(simulator)
        if reason:
            raise SimulatorMissing(reason)
        if waves is not None:
            trace_format(simulator, waves)      # refuses FST that cannot be written here
        target = main_target(main)
        with tempfile.TemporaryDirectory() as scratch:
            result = Path(scratch) / "result.pickle"
            outcomes = run_outcomes(config, simulator, "tpu.sim.testbenches.tb_host", testcase="check",
                                    seed=seed, top="chip", waves=waves,
                                    extra_env={"TPU_HOST_CHECK": target,
                                               "TPU_SIMULATOR": simulator,
                                               "TPU_HOST_RESULT": str(result),
                                               **({"TPU_HOST_LATENCY": str(host_latency)}
                                                  if host_latency is not None else {}),
                                               **_ASSERTION_REWRITING})
            if len(outcomes) != 1 or not outcomes[0].passed:
                why = outcomes[0].message.splitlines()[0] if outcomes and outcomes[0].message \
                    else "it did not run"
                log = outcomes[0].log if outcomes else "the build directory"
                raise RuntimeError(f"{target} failed on the {simulator} simulation (seed {seed}): "
                                   f"{why}; the log is {log}")
            return pickle.loads(result.read_bytes())
    return factory


# The backends themselves, declared to `tpu.driver` as entry points of the
# group "tpu.driver.backends" in pyproject.toml.
icarus = simulation_backend("icarus")
verilator = simulation_backend("verilator")
