"""No import circles among the modules of the `tpu` package: the import graph,
read with `ast` from the source tree (every import, also those inside
functions), has no cycle, so that each module can be understood (and
imported) after the modules below it. The driver and the golden models are
below the simulation package: they never import it, and a golden run of the
driver does not load it."""

import ast
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _package_dirs():
    """Import name -> source directory, as pyproject.toml maps them."""
    setup = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    return {name: ROOT / folder for name, folder in setup["package-dir"].items()}


def _modules():
    """Module name -> source file, for every module of the `tpu` package."""
    dirs = _package_dirs()
    modules = {}
    for package, folder in dirs.items():
        for path in folder.rglob("*.py"):
            parts = list(path.relative_to(folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            name = ".".join([package, *parts])
            # A folder mapped to a package of its own (tpu/ holds no hdl/, but be sure).
            if any(name.startswith(other + ".") or name == other
                   for other in dirs if other != package and other.startswith(package + ".")):
                continue
            modules[name] = path
    return modules


def _known(name, modules):
    """The deepest module of `modules` that `name` is or lies in, or None."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def _imports(name, path, modules):
    """The modules of `modules` that module `name` imports."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = ".".join(base[:len(base) - node.level + 1])
                base = f"{base}.{node.module}" if node.module else base
            else:
                base = node.module
            # `from P import M` imports the module P.M when there is one, else a name of P.
            targets = [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        for target in targets:
            module = _known(target, modules)
            if module is not None and module != name:
                found.add(module)
    return found


def _cycles(graph):
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, components = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for succ in sorted(graph[node]):
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return components


def _path(graph, start, members):
    """One circle through `start` inside `members`, as a list of modules."""
    queue, came_from = [start], {start: None}
    while queue:
        node = queue.pop(0)
        for succ in sorted(graph[node] & members):
            if succ == start:
                path = [node]
                while came_from[path[-1]] is not None:
                    path.append(came_from[path[-1]])
                return [start, *reversed(path[:-1]), start]
            if succ not in came_from:
                came_from[succ] = node
                queue.append(succ)
    return [start]


def import_graph():
    modules = _modules()
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def test_the_graph_sees_the_modules():
    graph = import_graph()
    # The reader finds the package's modules and the imports between them.
    assert {"tpu", "tpu.config", "tpu.hdl.systolic_array", "tpu.sim.harness"} <= set(graph)
    assert "tpu.config" in graph["tpu"]
    assert all(not name.startswith("tpu.hdl.") for name in graph["tpu.config"])


def test_the_cycle_finder_finds_a_circle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [["a", "b", "c"]]
    assert _path(graph, "a", {"a", "b", "c"}) == ["a", "b", "c", "a"]
    assert _cycles({"a": {"b"}, "b": set()}) == []


#: Imports that close a circle still to be broken, each with why it is there.
KNOWN = set()


def test_known_circles_are_still_there():
    graph = import_graph()
    gone = sorted(edge for edge in KNOWN if edge[1] not in graph.get(edge[0], ()))
    assert not gone, f"no longer imported, so remove from KNOWN: {gone}"


def test_no_import_cycles():
    graph = import_graph()
    for source, target in KNOWN:
        graph[source] = graph[source] - {target}
    circles = [" -> ".join(_path(graph, members[0], set(members))) + f" (of {', '.join(members)})"
               for members in _cycles(graph)]
    assert not circles, "import circles:\n" + "\n".join(circles)


def _reaches(graph, start):
    """Every module `start` imports, directly or through others."""
    seen, todo = set(), [start]
    while todo:
        for succ in graph[todo.pop()]:
            if succ not in seen:
                seen.add(succ)
                todo.append(succ)
    return seen


@pytest.mark.parametrize("package", ["tpu.driver", "tpu.models"])
def test_below_the_simulation_package(package):
    # The driver (and the golden models it runs) sit below the simulation
    # package: the simulators' backends reach the driver by entry point,
    # not the other way round. Imports inside functions count too.
    graph = import_graph()
    found = {}
    for name in graph:
        if name == package or name.startswith(package + "."):
            for reached in _reaches(graph, name):
                if reached == "tpu.sim" or reached.startswith("tpu.sim."):
                    found.setdefault(name, set()).add(reached)
    assert not found, f"{package} reaches tpu.sim: {found}"


#: Run in a fresh interpreter: import the driver, run a program on its golden
#: backend, name the simulation backends, and list the loaded modules.
_GOLDEN_RUN = """
import sys
from tpu import TPUConfig
from tpu.driver import BACKENDS, GoldenLink, run

async def main(device):
    result = await device.run("nop\\nhalt", timeout=1e-3)
    return result.counters["cycles"]

assert run(main, backend="golden", config=TPUConfig()) > 0
assert {"icarus", "verilator"} <= set(BACKENDS), sorted(BACKENDS)
print("\\n".join(sorted(sys.modules)))
"""


def test_the_driver_runs_without_the_simulation_package():
    done = subprocess.run([sys.executable, "-c", _GOLDEN_RUN], capture_output=True, text=True,
                          timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    loaded = set(done.stdout.split())
    assert "tpu.models.chip_model" in loaded      # the golden backend did run its model
    unwanted = sorted(name for name in loaded
                      if name.split(".")[0] == "cocotb" or name == "tpu.sim"
                      or name.startswith("tpu.sim."))
    assert not unwanted, f"the driver's golden run loaded {unwanted}"
