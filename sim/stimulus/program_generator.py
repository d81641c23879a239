"""Random programs for the chip: legal ones with every kind of data hazard,
and ones that fault on purpose."""

import random

from ...isa import (Act, Cfg, Conv, Func, Halt, Int, Ldl, Ldq, Mmc, Nop, Pool, Reg, Rhm,
                   Rw, Sync, Whm, encode_program, ldl_rows, ldq_rows)
from ...models.chip_model import ALL_HOST_MEMORY, in_window


__all__ = ["random_program", "random_windows", "seeded_program", "HOST_INPUT", "HOST_OUTPUT", "FAULT_KINDS",
           "OPEN_WINDOW", "open_window"]

#: Host addresses of the random input data and of the output area.
HOST_INPUT = 0x10000
HOST_OUTPUT = 0x80000

FAULT_KINDS = ("illegal_opcode", "illegal_field", "ub_range", "acc_range", "weight_mem_range",
               "underflow", "overflow", "host_range")

#: The widest window the chip's registers hold with 64-bit host addresses:
#: every host byte but the last.
OPEN_WINDOW = (0, (1 << 64) - 1)


def open_window(config):
    """The widest window `config`'s registers hold: every byte below
    ``2**host_addr_bits`` but the last (`OPEN_WINDOW` for 64 bits)."""
    return (0, (1 << config.host_addr_bits) - 1)

# Host bytes the random programs' RHMs and WHMs can touch (see random_program).
_OUTPUT_ROWS = 256 + 8


def random_windows(config, rng, *, input_rows=64):
    """Random DMA windows (``config.dma_windows`` ``(base, size)`` pairs, 0
    size: closed) for the programs of `random_program`: one window open on
    (almost) all host memory; windows exactly on its input and output areas;
    the input area split between two adjacent windows at a random byte (a DMA
    across the split is in neither window alone: HOST_RANGE); or only part of
    the input area open. Unused windows are closed or open far away, all
    below ``2**host_addr_bits``."""
    R = config.rows
    top = 1 << config.host_addr_bits
    inputs = (HOST_INPUT, input_rows * R)
    outputs = (HOST_OUTPUT, _OUTPUT_ROWS * R)
    kind = rng.choices(["open", "exact", "split", "partial"], weights=[4, 3, 2, 1])[0]
    if kind == "open" or config.dma_windows < 2:
        windows = [open_window(config)]
    elif kind == "exact":
        windows = [inputs, outputs]
    elif kind == "split" and config.dma_windows >= 3:
        cut = rng.randrange(1, inputs[1])
        windows = [(inputs[0], cut), (inputs[0] + cut, inputs[1] - cut), outputs]
    else:
        windows = [(inputs[0] + rng.randrange(0, inputs[1] // 2), rng.randrange(1, inputs[1])),
                   outputs]
    while len(windows) < config.dma_windows:
        # Far: above the input and output areas (2**40 with 64-bit addresses).
        far = rng.randrange(max(top >> 24, 1 << 24), top)
        windows.append(rng.choice([(0, 0), (rng.getrandbits(config.host_addr_bits), 0),
                                   (far, rng.randrange(0, top - far))]))
    rng.shuffle(windows)
    return windows


def random_program(config, rng, *, length=40, fault=None, input_rows=64, windows=ALL_HOST_MEMORY):
    """A random program for `config`, ending with HALT.

    Addresses are random, so instructions often read what an earlier one is
    still writing, which the hardware must interlock. RHMs read host bytes
    from `HOST_INPUT` (`input_rows` UB rows' worth), WHMs write from
    `HOST_OUTPUT`; whether they fit the DMA `windows` is left to chance. With
    `fault` (one of `FAULT_KINDS`) an instruction that faults that way is
    placed at a random point (``host_range``: an RHM or WHM outside
    `windows`). Returns ``(instructions, encoded bytes)``.

    Bugs hide at range edges, so a range is often placed against one a recent
    instruction touched: sharing exactly its first or last row, equal to it,
    or just beside it; or at the first or last row of its memory. Some WHMs
    write into the input area, so RHMs and WHMs meet on the same host bytes.
    """
    cfg = config
    R = cfg.rows
    program = []
    pending = 0                 # tiles requested and not yet switched to
    fault_at = rng.randrange(1, length) if fault else None

    recent_ub, recent_acc = [], []          # ranges of the last few instructions
    recent_host = []

    def span(size, limit, recent=None):
        if recent and rng.random() < 0.15:
            lo, hi = rng.choice(recent)
            if hi - lo < max(size, 16):
                return lo, hi - lo + 1          # the very same rows
        n = rng.randint(1, min(size, limit))
        return _place(rng, n, limit, recent), n

    def touched(ranges, first, n):
        if n:
            ranges.append((first, first + n - 1))
            del ranges[:-4]

    for i in range(length):
        if i == fault_at:
            program.extend(_faulting(cfg, rng, fault, pending, windows))
            continue
        kind = rng.choices(
            ["rhm", "whm", "rw", "mmc", "act", "cfg", "ldq", "ldl", "sync", "int", "nop"],
            weights=[8, 5, 5, 14, 8, 3, 2, 1, 1, 1, 1])[0]
        if kind == "rhm":
            # Up to an LDQ table's rows: a table can come in with one RHM.
            ub, n = span(max(8, ldq_rows(cfg)), cfg.ub_rows, recent_ub)
            row = _place(rng, n, input_rows, recent_host)
            program.append(Rhm(ub, n, HOST_INPUT + R * row))
            touched(recent_ub, ub, n)
            touched(recent_host, row, n)
        elif kind == "whm":
            ub, n = span(8, cfg.ub_rows, recent_ub)
            touched(recent_ub, ub, n)
            if rng.random() < 0.3 and n <= input_rows:
                # Into the input area: later RHMs read it, earlier ones may still.
                row = _place(rng, n, input_rows, recent_host)
                program.append(Whm(ub, n, HOST_INPUT + R * row))
                touched(recent_host, row, n)
            else:
                program.append(Whm(ub, n, HOST_OUTPUT + R * rng.randrange(0, _OUTPUT_ROWS - 8)))
        elif kind == "rw":
            room = cfg.weight_fifo_tiles + 2 - pending
            if room <= 0:
                continue
            count = rng.randint(1, min(room, 3))
            tile = rng.randrange(0, cfg.weight_mem_tiles - count + 1)
            program.append(Rw(tile, count))
            pending += count
        elif kind == "mmc":
            acc, n = span(3 * R, cfg.acc_rows, recent_acc)
            switch = pending > 0 and rng.random() < 0.6
            conv = None
            if rng.random() < 0.3:
                conv = Conv(rng.randint(1, 4), rng.randint(0, 2), rng.randint(0, 6))
            probe = Mmc(0, n, acc, conv=conv)
            last = probe.last_ub_row
            if last >= cfg.ub_rows:
                conv = None
                last = n - 1
            ub = _place(rng, last + 1, cfg.ub_rows, recent_ub)
            program.append(Mmc(ub, n, acc, accumulate=rng.random() < 0.5, switch=switch,
                               unsigned=rng.random() < 0.5, conv=conv))
            touched(recent_ub, ub, last + 1)
            touched(recent_acc, acc, n)
            pending -= switch
        elif kind == "act":
            act = _random_act(cfg, rng, recent_acc, recent_ub)
            program.append(act)
            touched(recent_acc, act.acc, act.rows)
            touched(recent_ub, act.ub, act.output_rows)
        elif kind == "cfg":
            reg = rng.choice(list(Reg))
            value = rng.choice([rng.randint(-300, 300), rng.randint(-128, 127), 0])
            program.append(Cfg(reg, value))
        elif kind == "ldq":
            same = [lo for lo, hi in recent_ub if hi - lo + 1 == ldq_rows(cfg)]
            program.append(Ldq(rng.choice(same) if same and rng.random() < 0.5
                               else _place(rng, ldq_rows(cfg), cfg.ub_rows, recent_ub)))
            touched(recent_ub, program[-1].ub, ldq_rows(cfg))
        elif kind == "ldl":
            program.append(Ldl(_place(rng, ldl_rows(cfg), cfg.ub_rows, recent_ub)))
            touched(recent_ub, program[-1].ub, ldl_rows(cfg))
        elif kind == "sync":
            program.append(Sync())
        elif kind == "int":
            program.append(Int(rng.randrange(0, 1 << 16)))
        else:
            program.append(Nop())
    program.append(Halt())
    return program, encode_program(program)


def _place(rng, n, limit, recent=None):
    """The first row of `n` rows in ``0 .. limit - 1``: random, or (often,
    given `recent` ranges) sharing exactly the first or last row of a recent
    range, starting with it, just beside it, or at an end of the memory."""
    if recent and rng.random() < 0.5:
        lo, hi = rng.choice(recent)
        start = rng.choice([hi, lo - n + 1, lo, hi + 1, lo - n, limit - n, 0])
        if 0 <= start <= limit - n:
            return start
    return rng.randrange(0, limit - n + 1)


def _random_act(cfg, rng, recent_acc=None, recent_ub=None):
    func = rng.choice(list(Func))
    unsigned = rng.random() < 0.5
    single_round = rng.random() < 0.3
    pool = rng.choice([Pool.NONE, Pool.NONE, Pool.MAX, Pool.AVG, Pool.GLOBAL_AVG])
    if pool in (Pool.MAX, Pool.AVG):
        in_w = rng.randint(1, min(6, cfg.pool_max_width))
        k = rng.randint(1, min(3, in_w))
        max_h = max(k, min(cfg.acc_rows // in_w, 6))
        if k * in_w > cfg.acc_rows:
            pool = Pool.NONE
        else:
            in_h = rng.randint(k, max_h)
            rows = in_h * in_w
            acc = rng.randrange(0, cfg.acc_rows - rows + 1)
            probe = Act(acc, 0, rows, pool=pool, pool_size=k, pool_stride=rng.randint(1, 3), in_w=in_w)
            ub = rng.randrange(0, cfg.ub_rows - probe.output_rows + 1)
            return Act(acc, ub, rows, func=func, pool=pool, pool_size=k,
                       pool_stride=probe.pool_stride, in_w=in_w, unsigned=unsigned,
                       single_round=single_round)
    rows = rng.randint(1, min(12, cfg.acc_rows))
    acc = _place(rng, rows, cfg.acc_rows, recent_acc)
    if recent_acc and rng.random() < 0.15:
        acc, last = rng.choice(recent_acc)           # the very rows of a recent MMC or ACT
        rows = last - acc + 1
    out = 1 if pool == Pool.GLOBAL_AVG else rows
    ub = _place(rng, out, cfg.ub_rows, recent_ub)
    return Act(acc, ub, rows, func=func, pool=pool, unsigned=unsigned, single_round=single_round)


class _RawWord:
    """A 16-byte word that is not a legal instruction."""

    def __init__(self, word):
        self.word = word

    def encode(self):
        return self.word.to_bytes(16, "little")

    def __str__(self):
        return f".raw 0x{self.word:032x}"


def _outside(cfg, rng, windows):
    """An RHM or WHM whose host bytes are not inside one of `windows`."""
    ub, n = rng.randrange(0, cfg.ub_rows - 1), rng.randint(1, 2)
    nbytes = n * cfg.rows
    op = rng.choice([Rhm, Whm])
    # Across the start or the end of a window (or just past it), or anywhere.
    candidates = [host for base, size in windows if size
                  for host in (base - rng.randint(1, nbytes),
                               base + size - rng.randint(0, nbytes - 1))]
    candidates += [rng.getrandbits(64) for _ in range(4)]
    rng.shuffle(candidates)
    for host in candidates:
        if 0 <= host < 1 << 64 and not in_window(windows, host, nbytes, cfg.host_addr_bits):
            return op(ub, n, host)
    # Past the end of the address space: no window holds it.
    return op(ub, n, (1 << 64) - nbytes + 1)


def _faulting(cfg, rng, kind, pending, windows=ALL_HOST_MEMORY):
    """Instructions whose last one faults as `kind` says."""
    if kind == "illegal_opcode":
        return [_RawWord(rng.choice([0x04, 0x12, 0x31, 0x53, 0xFF]) | (rng.getrandbits(120) << 8))]
    if kind == "illegal_field":
        return [_RawWord(0x30 | (1 << rng.choice([12, 13, 14, 15, 120, 127])))]
    if kind == "ub_range":
        # One row past the end, by every opcode that addresses the UB.
        last = cfg.ub_rows - 1
        return [rng.choice([Rhm(last, 2, HOST_INPUT), Whm(last, 2, HOST_OUTPUT),
                            Mmc(last, 2, 0), Act(0, last, 2),
                            Ldq(cfg.ub_rows - ldq_rows(cfg) + 1),
                            Ldl(cfg.ub_rows - ldl_rows(cfg) + 1)])]
    if kind == "acc_range":
        last = cfg.acc_rows - 1
        return [rng.choice([Mmc(0, 2, last), Act(last, 0, 2)])]
    if kind == "weight_mem_range":
        return [Rw(cfg.weight_mem_tiles - 1, 2)]
    if kind == "underflow":
        # Switch to every pending tile, then once more (any row count: a
        # decoder that looked at the wrong field would miss some).
        rows = rng.randint(1, min(cfg.rows, cfg.acc_rows, cfg.ub_rows))
        return [Mmc(0, rows, 0, switch=True)] * (pending + 1)
    if kind == "overflow":
        return [Rw(0, cfg.weight_fifo_tiles + 3 - pending)]
    if kind == "host_range":
        return [_outside(cfg, rng, windows)]
    raise ValueError(f"unknown fault kind {kind!r}")


def seeded_program(config, seed, *, length=40):
    """The program of a regression's `seed`: half of them fault on purpose
    (each `FAULT_KINDS` kind alike), all against `random_windows`. Returns
    ``(instructions, encoded bytes, windows)``; the same for the same seed."""
    rng = random.Random(f"program {seed}")
    fault = rng.choice(FAULT_KINDS) if rng.random() < 0.5 else None
    windows = random_windows(config, rng)
    instructions, program = random_program(config, rng, length=length, fault=fault, windows=windows)
    return instructions, program, windows
