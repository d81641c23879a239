"""The CI run's cut of the suite (conftest.py, docs/testing.md "The long
run"): which cases it skips, and that TPU_LONG=1 skips none of them."""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Collects and writes the cases marked to skip, with the reasons.
LISTER = '''
import json, os

def pytest_collection_finish(session):
    skipped = {}
    for item in session.items:
        mark = item.get_closest_marker("skip")
        if mark:
            skipped[item.nodeid] = mark.kwargs.get("reason", "")
    with open(os.environ["SKIPPED_OUT"], "w") as f:
        json.dump({"collected": [i.nodeid for i in session.items], "skipped": skipped}, f)
'''


def _collect(tmp_path, *args, long=False):
    (tmp_path / "cut_lister.py").write_text(LISTER)
    out = tmp_path / "skipped.json"
    env = {k: v for k, v in os.environ.items() if k != "TPU_LONG"}
    env.update(SKIPPED_OUT=str(out), PYTHONPATH=str(tmp_path))
    if long:
        env["TPU_LONG"] = "1"
    result = subprocess.run([sys.executable, "-m", "pytest", "--co", "-q", "-p", "cut_lister",
                             "-p", "no:cacheprovider", *args], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    found = json.loads(out.read_text())
    return found["collected"], found["skipped"]


ACT = "tests/test_activation_pipeline_rtl.py::test_activation_pipeline"


def test_icarus_runs_the_first_case_and_the_marked_forms(tmp_path):
    collected, skipped = _collect(tmp_path, "tests/test_activation_pipeline_rtl.py")
    icarus = [n for n in collected if n.startswith(ACT + "[icarus-")]
    verilator = [n for n in collected if n.startswith(ACT + "[verilator-")]
    assert len(icarus) == len(verilator) > 3
    ran = [n for n in icarus if n not in skipped]
    # The first, and the UP5K profile's two forms (marked `icarus`).
    assert ran == [ACT + "[icarus-cols1]",
                   ACT + "[icarus-cols2_requantizers1_multiplier16_serial]",
                   ACT + "[icarus-cols2_requantizers1_multiplier16]"]
    for n in set(icarus) - set(ran):
        reason = skipped[n]
        assert "long run only" in reason if "cols16" in n else \
            reason.startswith("CI runs this test under Icarus for [icarus-cols1] only"), (n, reason)
    # Verilator runs every case but the one marked `long`.
    assert [n for n in verilator if n in skipped] == [ACT + "[verilator-cols16]"]
    assert "TPU_LONG=1" in skipped[ACT + "[verilator-cols16]"]


def test_the_long_run_skips_nothing(tmp_path):
    collected, skipped = _collect(tmp_path, "tests/test_activation_pipeline_rtl.py",
                                  "tests/test_cli_sim.py", long=True)
    assert collected and not skipped


def test_a_case_asked_for_alone_runs(tmp_path):
    """-k deselects before the cut: an Icarus case asked for by name runs,
    and so does any Icarus case whose Verilator twin is not collected."""
    collected, skipped = _collect(tmp_path, "tests/test_activation_pipeline_rtl.py",
                                  "-k", "icarus and cols8")
    assert ACT + "[icarus-cols8]" in collected and not skipped
    collected, skipped = _collect(tmp_path, "tests/test_activation_pipeline_rtl.py",
                                  "-k", "not verilator")
    assert {n for n in collected if "[icarus-" in n}
    assert list(skipped) == [ACT + "[icarus-cols16]"]       # marked `long`


def test_icarus_only_tests_keep_every_case(tmp_path):
    """The serial link's checks (Verilator leaves them to TPU_SERIAL_ALL=1)
    keep every Icarus case."""
    collected, skipped = _collect(tmp_path, "tests/test_serial_link_rtl.py")
    icarus = [n for n in collected if "[icarus" in n]
    assert len(icarus) > 3 and not [n for n in icarus if n in skipped]
