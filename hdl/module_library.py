"""Verilog modules emitted once and instantiated many times.

`generate_verilog` elaborates a design with a `ModuleLibrary` as its
platform. A component that repeats (a row of the systolic array) or whose
flat form is costly to emit (a large memory) is then added with
`add_submodule`, which in that case emits it once as a Verilog module of its
own and instantiates it by name, so Python and Yosys process one copy
instead of every copy. Under any other platform (Amaranth's simulator, an
FPGA build) `add_submodule` adds the component as an ordinary submodule.
"""

from amaranth import *
from amaranth.back import verilog
from amaranth.lib import wiring


__all__ = ["ModuleLibrary", "add_submodule", "instance_of"]


class ModuleLibrary:
    """The elaboration platform of `generate_verilog`: the Verilog text of
    every module emitted once, by module name. `family` names the FPGA
    family the Verilog is for (`tpu.hdl.device_family`), None for any."""

    def __init__(self, family=None):
        self._modules = {}
        self.family = family

    def define(self, module, text):
        """Add Verilog `text` defining `module`, unless `module` is defined already.
        `text` may be a callable, called only when the module is new."""
        if module not in self._modules:
            self._modules[module] = text() if callable(text) else text

    def verilog(self):
        """The text of every module defined, in order of definition."""
        return "".join(self._modules.values())


def instance_of(component, module, *, reset=True):
    """An `Instance` of Verilog `module` with the ports of `component`'s
    signature (flattened with ``__``, as `verilog.convert` names them),
    connected to `component`'s own port values, and ``clk`` (and ``rst``)."""
    ports = {"i_clk": ClockSignal()}
    if reset:
        ports["i_rst"] = ResetSignal()
    for path, member, value in component.signature.flatten(component):
        direction = "i" if member.flow == wiring.In else "o"
        ports[f"{direction}_{'__'.join(map(str, path))}"] = Value.cast(value)
    # The component itself is not elaborated here: only its ports are used.
    component._MustUse__silence = True
    return Instance(module, **ports)


def add_submodule(m, platform, name, component, module):
    """Add `component` to `m` as submodule `name`.

    With a `ModuleLibrary` platform it becomes an instance of Verilog module
    `module`, converted from the first component added under that module
    name; `module` must therefore name everything the component's
    elaboration depends on (its class and every parameter). Otherwise the
    component is elaborated in place.
    """
    if not isinstance(platform, ModuleLibrary):
        m.submodules[name] = component
        return
    platform.define(module, lambda: verilog.convert(component, name=module, emit_src=False,
                                                    platform=platform))
    m.submodules[name] = instance_of(component, module)
