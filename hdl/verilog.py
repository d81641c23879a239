"""Verilog generation for a configuration, and the map of its flattened ports."""

from amaranth.back import verilog
from amaranth.hdl import Shape
from amaranth.lib import data, wiring

from ..config import TPUConfig
from .module_library import ModuleLibrary


__all__ = ["generate_verilog", "generate_with_ports", "port_map", "format_port_map", "design", "DEFAULT_TOP",
           "ENGINE_NAME", "CORE_NAME", "CHIP_NAME", "SERIAL_NAME",
           "TOPS"]

ENGINE_NAME = "tpu_matrix_engine"
CORE_NAME = "tpu_core"
CHIP_NAME = "tpu_chip"
SERIAL_NAME = "tpu_serial_chip"

#: What can be generated: the chip with its host interface, the core behind
#: its row-level DMA ports, or the matrix engine alone; "serial" is the chip
#: behind its UART bridge (docs/serial_link.md).
TOPS = {"chip": CHIP_NAME, "core": CORE_NAME, "engine": ENGINE_NAME, "serial": SERIAL_NAME}

#: What "the chip" means everywhere (`tpu verilog`, `tpu demo`, `make verilog`).
DEFAULT_TOP = "chip"


def design(config=TPUConfig(), top=DEFAULT_TOP):
    """The Amaranth component of `top` ("chip", "core" or "engine") for `config`."""
    from .core import TPUCore
    from .host_interface import HostInterface
    from .matrix_engine import MatrixEngine
    from .serial_chip import SerialChip
    if top not in TOPS:
        raise ValueError(f"unknown top {top!r}: choose one of {', '.join(TOPS)}")
    return {"chip": HostInterface, "core": TPUCore, "engine": MatrixEngine,
            "serial": SerialChip}[top](config)


def generate_with_ports(config=TPUConfig(), *, top=DEFAULT_TOP, family=None):
    """(Verilog text, `port_map`) of `top` for `config`, from one elaboration."""
    component = design(config, top)
    return _convert(component, TOPS[top], family), port_map(component)


def generate_verilog(config=TPUConfig(), *, top=DEFAULT_TOP, name=None, family=None):
    """Verilog text of `top` ("chip", the default, "core" or "engine") built
    for `config`.

    The top module is `name` (by default ``tpu_chip``, ``tpu_core`` or
    ``tpu_matrix_engine``), with a clock ``clk`` and a synchronous
    active-high reset ``rst``. The file also holds the modules the design
    instantiates many times or that are large (a row of the systolic array,
    the big memories), each defined once after the top module's hierarchy.

    `family` ``"ice40"`` builds it as a board build for an iCE40 does, with
    that family's primitives instantiated (`tpu.hdl.device_family`); to
    simulate it, add their models (`tpu.fpga.gate_level.ice40_cell_models`).
    """
    return _convert(design(config, top), name or TOPS[top], family)


def _convert(component, name, family=None):
    library = ModuleLibrary(family)
    text = verilog.convert(component, name=name, emit_src=False, platform=library)
    return text + library.verilog()


def _fields(shape, offset, path):
    """(lsb, width, field path, shape text) of every leaf field of a layout."""
    if isinstance(shape, data.Layout):
        for key, field in shape:
            yield from _fields(field.shape, offset + field.offset,
                               f"{path}[{key}]" if isinstance(key, int) else f"{path}.{key}")
        return
    cast = Shape.cast(shape)
    kind = "signed" if cast.signed else "unsigned"
    name = f"{shape.__name__}, " if isinstance(shape, type) else ""
    yield offset, cast.width, path, f"{name}{kind}({cast.width})"


def port_map(component):
    """Every port of `component` as Verilog flattens it: a list of
    ``(port, direction, width, fields)``, where `fields` lists
    ``(lsb, width, field path, shape)`` for each leaf field of a port whose
    shape is a ``lib.data`` layout (empty for a plain signal).

    It reads the component's signature, the same layouts the RTL is built
    from, so it cannot disagree with the Verilog.
    """
    # Only the signature is read: the component need not be elaborated.
    component._MustUse__silence = True
    ports = [("clk", "input", 1, []), ("rst", "input", 1, [])]
    for path, member, _ in component.signature.flatten(component):
        name = "__".join(str(part) for part in path)
        direction = "input" if member.flow == wiring.In else "output"
        shape = member.shape
        width = Shape.cast(shape).width
        fields = list(_fields(shape, 0, "")) if isinstance(shape, data.Layout) else []
        ports.append((name, direction, width, fields))
    return ports


def format_port_map(ports, module):
    """A `port_map` (or the component to make it of) as text: one line per
    port, then one indented line per field with its bit range inside the port."""
    if not isinstance(ports, list):
        ports = port_map(ports)
    lines = [f"// ports of module {module}: 'port [msb:lsb] direction', then, for a port",
             f"// flattened from a lib.data layout, 'port[msb:lsb] = field (shape)' per field"]
    for name, direction, width, fields in ports:
        lines.append(f"{name} [{width - 1}:0] {direction}" if width > 1 else f"{name} {direction}")
        for lsb, bits, path, shape in fields:
            if bits == 0:
                continue
            span = f"[{lsb + bits - 1}:{lsb}]" if bits > 1 else f"[{lsb}]"
            lines.append(f"  {name}{span} = {path.lstrip('.') or '(whole)'} ({shape})")
    return "\n".join(lines) + "\n"
