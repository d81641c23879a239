"""The wheel holds every package of the source tree.

pyproject.toml lists the packages by hand (three of them live outside
`tpu/`), so a new sub-package is easy to forget: an editable install still
imports it, and only a user's `pip install .` finds it missing.
"""

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_every_package_directory_is_listed():
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(setuptools["packages"])
    package_dirs = setuptools["package-dir"]
    found = set()
    for name, folder in package_dirs.items():
        base = ROOT / folder
        for init in base.rglob("__init__.py"):
            relative = init.parent.relative_to(base).parts
            if any(part.startswith(".") or part == "build" for part in relative):
                continue
            found.add(".".join((name, *relative)))
    assert found - listed == set(), f"packages missing from pyproject.toml: {sorted(found - listed)}"
    assert listed - found == set(), f"pyproject.toml lists packages that do not exist: {sorted(listed - found)}"
