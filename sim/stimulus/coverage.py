"""Functional coverage of chip programs: what a program exercised, as named bins.

Computed from the program and the golden model's run, so it needs no RTL
coverage tool. `program_bins` gives the bins one program hit; `ALL_BINS`
(per configuration: `all_bins`) is what a regression should hit, so
``all_bins(config) - hit`` is what the generator still misses.

Bins, by prefix:

``op:``      opcode x flags (MMC accumulate/switch/unsigned/conv; ACT
             unsigned/single_round), and ACT function x pooling mode
``hazard:``  memory, RAW/WAR/WAW, earlier unit -> later unit, and whether the
             two ranges share exactly one row, are equal, or overlap more.
             The earlier instruction is the last one of its unit since the
             last SYNC, INT or HALT: the one the interlock may still see
             running (whether it still ran is the RTL's business)
``edge:``    an instruction that uses the last UB or accumulator row
``fault:``   every fault code, and for range faults the opcode that faulted
``fifo:``    the weight FIFO full (``weight_fifo_tiles + 2`` requested) and
             emptied by a switch; the instruction queue full (seen in the RTL)
``dma:``     every DMA read error kind of the DMA testbench (its `read_errors`)
"""

from ...isa import (Act, Cfg, Fault, Halt, IllegalInstruction, Int, Ldl, Ldq, Mmc, Pool, Func,
                    Rhm, Rw, Sync, Whm, check, decode, ldl_rows, ldq_rows, INSTRUCTION_BYTES)


__all__ = ["program_bins", "all_bins", "DMA_ERROR_KINDS", "unit_of"]

#: The read-error kinds of ``tb_dma.read_errors``.
DMA_ERROR_KINDS = ("status", "unexpected", "malformed_bc", "malformed_la", "malformed_long",
                   "malformed_words", "malformed_nodata", "drop", "flush")

# (memory, kind, earlier unit, later unit) pairs the interlocks must order.
_HAZARD_PAIRS = [
    ("ub", "raw", "rhm", "whm"), ("ub", "raw", "rhm", "mmc"), ("ub", "raw", "rhm", "act"),
    ("ub", "raw", "act", "whm"), ("ub", "raw", "act", "mmc"),
    ("ub", "war", "whm", "rhm"), ("ub", "war", "mmc", "rhm"), ("ub", "war", "act", "rhm"),
    ("ub", "war", "whm", "act"), ("ub", "war", "mmc", "act"),
    ("ub", "waw", "rhm", "act"), ("ub", "waw", "act", "rhm"),
    ("acc", "raw", "mmc", "act"), ("acc", "war", "act", "mmc"),
    ("host", "raw", "whm", "rhm"), ("host", "war", "rhm", "whm"),
]
_OVERLAPS = ("one-row", "equal", "overlap")
_RANGE_FAULTS = [("UB_RANGE", op) for op in ("RHM", "WHM", "MMC", "ACT", "LDQ", "LDL")] + \
    [("ACC_RANGE", "MMC"), ("ACC_RANGE", "ACT"), ("WEIGHT_MEM_RANGE", "RW"),
     ("HOST_RANGE", "RHM"), ("HOST_RANGE", "WHM")]
_PLAIN_FAULTS = ("ILLEGAL_OPCODE", "ILLEGAL_FIELD", "WEIGHT_FIFO_UNDERFLOW", "WEIGHT_FIFO_OVERFLOW")


def _flag_names(flags):
    return "+".join(flags) if flags else "-"


def _combos(names):
    out = []
    for bits in range(1 << len(names)):
        out.append(_flag_names([n for i, n in enumerate(names) if bits >> i & 1]))
    return out


_MMC_FLAGS = ("accumulate", "switch", "unsigned", "conv")
_ACT_FLAGS = ("unsigned", "single_round")


def all_bins(config=None):
    """Every bin a regression should hit (the same for every configuration)."""
    bins = {f"op:{op}" for op in ("NOP", "HALT", "SYNC", "INT", "RHM", "WHM", "RW", "CFG", "LDQ", "LDL")}
    bins |= {f"op:MMC:{c}" for c in _combos(_MMC_FLAGS)}
    bins |= {f"op:ACT:{c}" for c in _combos(_ACT_FLAGS)}
    bins |= {f"op:ACT:{f.name}:{p.name}" for f in Func for p in Pool}
    bins |= {f"hazard:{mem}:{kind}:{a}->{b}:{o}" for mem, kind, a, b in _HAZARD_PAIRS for o in _OVERLAPS}
    bins |= {f"edge:ub-last:{op}" for op in ("RHM", "WHM", "MMC", "ACT", "LDQ", "LDL")}
    bins |= {"edge:acc-last:MMC", "edge:acc-last:ACT"}
    bins |= {f"fault:{name}:{op}" for name, op in _RANGE_FAULTS}
    bins |= {f"fault:{name}" for name in _PLAIN_FAULTS}
    bins |= {"fifo:weights:full", "fifo:weights:empty", "fifo:instructions:full"}
    bins |= {f"dma:{kind}" for kind in DMA_ERROR_KINDS}
    return bins


def unit_of(instruction):
    """The execution unit an instruction runs in (None: none, or a barrier)."""
    match instruction:
        case Rhm():
            return "rhm"
        case Whm():
            return "whm"
        case Mmc():
            return "mmc"
        case Act() | Cfg() | Ldq() | Ldl():
            return "act"
    return None


def _accesses(ins, cfg):
    """``{(memory, "r"|"w"): (first, last)}`` of one instruction."""
    R = cfg.rows

    def rows(first, n):
        return (first, first + n - 1) if n else None

    match ins:
        case Rhm():
            out = {("ub", "w"): rows(ins.ub, ins.rows), ("host", "r"): rows(ins.host, ins.rows * R)}
        case Whm():
            out = {("ub", "r"): rows(ins.ub, ins.rows), ("host", "w"): rows(ins.host, ins.rows * R)}
        case Mmc():
            out = {("ub", "r"): (ins.ub, ins.last_ub_row) if ins.rows else None,
                   ("acc", "w"): rows(ins.acc, ins.rows)}
        case Act():
            out = {("acc", "r"): rows(ins.acc, ins.rows), ("ub", "w"): rows(ins.ub, ins.output_rows)}
        case Ldq():
            out = {("ub", "r"): rows(ins.ub, ldq_rows(cfg))}
        case Ldl():
            out = {("ub", "r"): rows(ins.ub, ldl_rows(cfg))}
        case _:
            out = {}
    return {k: v for k, v in out.items() if v is not None}


def _overlap(a, b, row=1):
    """How ranges `a` and `b` meet (None: not at all); `row`: units per row."""
    lo, hi = max(a[0], b[0]), min(a[1], b[1])
    if lo > hi:
        return None
    if a == b:
        return "equal"
    return "one-row" if hi - lo < row else "overlap"


def _op_bin(ins):
    name = ins.mnemonic.upper()
    if isinstance(ins, Mmc):
        fields = ins.fields()
        return [f"op:MMC:{_flag_names([f for f in _MMC_FLAGS if fields[f]])}"]
    if isinstance(ins, Act):
        flags = [f for f in _ACT_FLAGS if getattr(ins, f)]
        return [f"op:ACT:{_flag_names(flags)}", f"op:ACT:{Func(ins.func).name}:{Pool(ins.pool).name}"]
    return [f"op:{name}"]


def program_bins(config, program, model):
    """The bins `program` (encoded bytes) hit, run on `model` (a `ChipModel`
    that has run it): a set of names from `all_bins`."""
    cfg = config
    bins = set()
    words = [bytes(program[i:i + INSTRUCTION_BYTES])
             for i in range(0, len(program) - INSTRUCTION_BYTES + 1, INSTRUCTION_BYTES)]
    stop = model.fault_index if model.fault != Fault.NONE else len(words)
    last_of_unit = {}           # unit -> its last instruction since the last barrier
    pending = 0
    for index, word in enumerate(words[:stop + 1]):
        try:
            ins = decode(word)
        except IllegalInstruction:
            ins = None
        if index == stop:
            if model.fault != Fault.NONE and model.fault != Fault.DMA_ERROR:
                name = model.fault.name
                bins.add(f"fault:{name}:{ins.mnemonic.upper()}" if ins is not None and
                         name not in _PLAIN_FAULTS else f"fault:{name}")
            break
        bins.update(_op_bin(ins))
        if isinstance(ins, Halt):
            break
        if isinstance(ins, (Sync, Int)):
            last_of_unit.clear()
            continue
        if isinstance(ins, Rw):
            pending += ins.count
            if pending == cfg.weight_fifo_tiles + 2:
                bins.add("fifo:weights:full")
        if isinstance(ins, Mmc) and ins.switch and ins.rows:
            pending -= 1
            if pending == 0:
                bins.add("fifo:weights:empty")
        mine = _accesses(ins, cfg)
        for mem, op in (("ub", "r"), ("ub", "w"), ("acc", "r"), ("acc", "w")):
            span = mine.get((mem, op))
            if span and span[1] == (cfg.ub_rows if mem == "ub" else cfg.acc_rows) - 1:
                bins.add(f"edge:{mem}-last:{ins.mnemonic.upper()}")
        unit = unit_of(ins)
        for other, earlier in last_of_unit.items():
            if other == unit:
                continue
            theirs = _accesses(earlier, cfg)
            for (mem, op), span in mine.items():
                for (mem2, op2), span2 in theirs.items():
                    if mem2 != mem or (op == "r" and op2 == "r"):
                        continue
                    kind = {("w", "r"): "raw", ("r", "w"): "war", ("w", "w"): "waw"}[(op2, op)]
                    how = _overlap(span2, span, cfg.rows if mem == "host" else 1)
                    if how:
                        bins.add(f"hazard:{mem}:{kind}:{other}->{unit}:{how}")
        if unit:
            last_of_unit[unit] = ins
    return bins & all_bins(cfg) | {b for b in bins if b.startswith("fault:")}
