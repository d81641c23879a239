"""Import a file of scripts/ as a module: the benchmark and tool scripts are
command lines, not a package, and their tests call their functions."""

import importlib.util
from pathlib import Path


SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"


def load_script(name):
    """The module of ``scripts/NAME.py``."""
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
