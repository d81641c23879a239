import os
from pathlib import Path

import pytest

# The suite keeps its simulation models under the checkout's build/, apart
# from the per-user cache the tpu commands use (sim/harness.py): its models
# are built without C++ optimisation (below), and parallel checkouts on one
# machine then never share a run directory.
os.environ.setdefault("TPU_BUILD_DIR", str(Path(__file__).resolve().parent.parent / "build"))

from tpu import TPUConfig       # noqa: E402 -- after TPU_BUILD_DIR, which the harness reads
from tpu.sim.harness import SIMULATORS, missing_simulator, run_outcomes       # noqa: E402


# Test simulations are short: build Verilator models without C++ optimisation,
# which roughly halves their build time.
os.environ.setdefault("TPU_VERILATOR_OPT", "-O0")

# The configurations every RTL test runs on (rows x cols).
RTL_SHAPES = [(1, 1), (2, 2), (4, 4), (8, 8), (4, 8), (8, 4), (16, 16)]


def rtl_configs():
    return [TPUConfig(rows=r, cols=c, acc_rows=64) for r, c in RTL_SHAPES]


@pytest.fixture(params=SIMULATORS)
def simulator(request):
    reason = missing_simulator(request.param)
    if reason:
        pytest.skip(reason)
    return request.param


def mlas_fma_missing():
    """Why ONNX Runtime's QLinearAdd here may round otherwise than
    `reference_onnxruntime.qlinear_add`, which follows MLAS's x86-64 AVX2
    kernel (fused multiply-adds); None on such a machine. MLAS's SSE2 and
    ARM kernels multiply and add apart, or in fixed point."""
    import platform
    machine = platform.machine().lower()
    if machine not in ("x86_64", "amd64"):
        return f"ONNX Runtime's QLinearAdd on {machine} is not MLAS's x86-64 AVX2 kernel"
    try:
        flags = set(Path("/proc/cpuinfo").read_text().split())
    except OSError:
        return "this machine's CPU flags (AVX2, FMA) are not known"
    missing = {"avx2", "fma"} - flags
    if missing:
        return f"this CPU lacks {', '.join(sorted(missing))}: MLAS runs QLinearAdd's SSE2 kernel"
    return None


def base_seed():
    """TPU_SEED replays a run; otherwise every run draws new seeds."""
    return int(os.environ.get("TPU_SEED", "0")) or int.from_bytes(os.urandom(3), "little")


def run_testcases(config, simulator, test_module, testcases, **options):
    """Run the cocotb `testcases` of `test_module` in one simulation of
    `config`; fail naming each that did not run or did not pass."""
    seed = base_seed()
    print(f"seed {seed}: replay with TPU_SEED={seed}")
    outcomes = run_outcomes(config, simulator, test_module, testcase=testcases, seed=seed,
                            run_name="testcases" if len(testcases) > 1 else testcases[0], **options)
    assert sorted(o.name for o in outcomes) == sorted(testcases), \
        f"ran {[o.name for o in outcomes]}, not {testcases} (see the simulation log)"
    failed = [o.name for o in outcomes if not o.passed]
    assert not failed, f"{', '.join(failed)} failed with seed {seed} (replay with TPU_SEED={seed})"


def pytest_configure(config):
    # Tests are parametrized by seeds drawn at collection, and parallel test
    # processes (pytest-xdist) must collect the same tests: draw the session's
    # seed once, here, where the worker processes inherit it.
    if not hasattr(config, "workerinput") and not os.environ.get("TPU_SEED"):
        os.environ["TPU_SEED"] = str(int.from_bytes(os.urandom(3), "little"))


def pytest_report_header(config):
    scope = ("every case under both simulators (TPU_LONG=1)" if LONG_RUN else
             "the CI cut: Icarus runs one case of each RTL test, Verilator every case; "
             "TPU_LONG=1 runs all")
    return [f"random seeds drawn from TPU_SEED={os.environ.get('TPU_SEED')} (set it to replay this run)",
            f"cases: {scope}"]


# The suite as CI runs it is cut to fit its time (docs/testing.md, "The long
# run"): an RTL test parametrized beyond its simulator runs every case under
# Verilator but one under Icarus (the first collected, and any case marked
# `icarus`: a form of the RTL no other case builds), and cases marked `long`
# run only in the long run. TPU_LONG=1 (`make test-long`) runs everything.
LONG_RUN = bool(os.environ.get("TPU_LONG"))


def long_only(reason):
    """Skip the running case unless this is the long run (TPU_LONG=1): the
    in-test form of the `long` mark, for a case among stacked parameters."""
    __tracebackhide__ = True        # the skip is reported at the test's line
    if not LONG_RUN:
        pytest.skip(f"long run only: {reason}; TPU_LONG=1 runs it")


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    # trylast: after -k and -m have deselected, so that a case asked for by
    # name is the one its group keeps.
    if LONG_RUN:
        return
    # Without Verilator every case's one run is its Icarus run.
    cut_icarus = not missing_simulator("verilator")
    # An Icarus case is cut only where its Verilator twin is collected.
    verilator_cases = {item.nodeid for item in items if _params(item).get("simulator") == "verilator"}
    icarus_kept = {}
    for item in items:
        long = item.get_closest_marker("long")
        if long:
            reason = long.kwargs.get("reason") or (long.args[0] if long.args else "")
            assert reason, f"{item.nodeid}: a `long` mark says why the CI run leaves the case out"
            item.add_marker(pytest.mark.skip(reason=f"long run only: {reason}; TPU_LONG=1 runs it"))
            continue
        params = _params(item)
        if not cut_icarus or params.get("simulator") != "icarus" or len(params) < 2:
            continue
        if item.get_closest_marker("icarus_every_case") or item.get_closest_marker("icarus"):
            continue
        function = item.nodeid[:-len(item.callspec.id) - 2]      # the id is in [brackets]
        twin = f"{function}[{item.callspec.id.replace('icarus', 'verilator', 1)}]"
        if twin not in verilator_cases:
            continue
        group = (item.path, item.originalname)
        kept = icarus_kept.setdefault(group, item.callspec.id)
        if kept != item.callspec.id:
            item.add_marker(pytest.mark.skip(
                reason=f"CI runs this test under Icarus for [{kept}] only and under Verilator for "
                       "every case; TPU_LONG=1 runs every case under both"))


def _params(item):
    return getattr(getattr(item, "callspec", None), "params", {})


def replay_command(item):
    """The shell command that reruns test `item` with this session's seeds,
    with waveforms (WAVES=1) when it simulates RTL."""
    waves = "simulator" in getattr(item, "fixturenames", ()) or item.path.stem.endswith("_rtl")
    return (f"TPU_SEED={os.environ.get('TPU_SEED')} {'WAVES=1 ' if waves else ''}"
            f"PYTHONWARNINGS=error .venv/bin/python -m pytest '{item.nodeid}'")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.failed and report.when == "call":
        # Printed under the failure: the seed and, for RTL, the waves.
        report.sections.append(("replay", replay_command(item) + "\n"))
