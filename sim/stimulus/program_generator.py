"""Random programs for the chip: legal ones with every kind of data hazard,
and ones that fault on purpose."""

from ...isa import (Act, Cfg, Conv, Func, Halt, Int, Ldl, Ldq, Mmc, Nop, Pool, Reg, Rhm,
                   Rw, Sync, Whm, encode_program, ldl_rows, ldq_rows)
from ..models.chip_model import ALL_HOST_MEMORY, in_window


__all__ = ["random_program", "random_windows", "HOST_INPUT", "HOST_OUTPUT", "FAULT_KINDS",
           "OPEN_WINDOW"]

#: Host addresses of the random input data and of the output area.
HOST_INPUT = 0x10000
HOST_OUTPUT = 0x80000

FAULT_KINDS = ("illegal_opcode", "illegal_field", "ub_range", "acc_range", "weight_mem_range",
               "underflow", "overflow", "host_range")

#: The widest window the chip's registers hold: every host byte but the last.
OPEN_WINDOW = (0, (1 << 64) - 1)

# Host bytes the random programs' RHMs and WHMs can touch (see random_program).
_OUTPUT_ROWS = 256 + 8


def random_windows(config, rng, *, input_rows=64):
    """Random DMA windows (``config.dma_windows`` ``(base, size)`` pairs, 0
    size: closed) for the programs of `random_program`: one window open on
    (almost) all host memory; windows exactly on its input and output areas;
    the input area split between two adjacent windows at a random byte (a DMA
    across the split is in neither window alone: HOST_RANGE); or only part of
    the input area open. Unused windows are closed or open far away."""
    R = config.rows
    inputs = (HOST_INPUT, input_rows * R)
    outputs = (HOST_OUTPUT, _OUTPUT_ROWS * R)
    kind = rng.choices(["open", "exact", "split", "partial"], weights=[4, 3, 2, 1])[0]
    if kind == "open" or config.dma_windows < 2:
        windows = [OPEN_WINDOW]
    elif kind == "exact":
        windows = [inputs, outputs]
    elif kind == "split" and config.dma_windows >= 3:
        cut = rng.randrange(1, inputs[1])
        windows = [(inputs[0], cut), (inputs[0] + cut, inputs[1] - cut), outputs]
    else:
        windows = [(inputs[0] + rng.randrange(0, inputs[1] // 2), rng.randrange(1, inputs[1])),
                   outputs]
    while len(windows) < config.dma_windows:
        far = rng.randrange(1 << 40, 1 << 64)
        windows.append(rng.choice([(0, 0), (rng.getrandbits(64), 0),
                                   (far, rng.randrange(0, (1 << 64) - far))]))
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
    """
    cfg = config
    R = cfg.rows
    program = []
    pending = 0                 # tiles requested and not yet switched to
    fault_at = rng.randrange(1, length) if fault else None

    def span(size, limit):
        n = rng.randint(1, min(size, limit))
        return rng.randrange(0, limit - n + 1), n

    for i in range(length):
        if i == fault_at:
            program.extend(_faulting(cfg, rng, fault, pending, windows))
            continue
        kind = rng.choices(
            ["rhm", "whm", "rw", "mmc", "act", "cfg", "ldq", "ldl", "sync", "int", "nop"],
            weights=[8, 5, 5, 14, 8, 3, 2, 1, 1, 1, 1])[0]
        if kind == "rhm":
            ub, n = span(8, cfg.ub_rows)
            program.append(Rhm(ub, n, HOST_INPUT + R * rng.randrange(0, input_rows - n + 1)))
        elif kind == "whm":
            ub, n = span(8, cfg.ub_rows)
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
            n = rng.randint(1, min(3 * R, cfg.acc_rows))
            acc = rng.randrange(0, cfg.acc_rows - n + 1)
            switch = pending > 0 and rng.random() < 0.6
            conv = None
            if rng.random() < 0.3:
                conv = Conv(rng.randint(1, 4), rng.randint(0, 2), rng.randint(0, 6))
            probe = Mmc(0, n, acc, conv=conv)
            last = probe.last_ub_row
            if last >= cfg.ub_rows:
                conv = None
                last = n - 1
            ub = rng.randrange(0, cfg.ub_rows - last)
            program.append(Mmc(ub, n, acc, accumulate=rng.random() < 0.5, switch=switch,
                               unsigned=rng.random() < 0.5, conv=conv))
            pending -= switch
        elif kind == "act":
            program.append(_random_act(cfg, rng))
        elif kind == "cfg":
            reg = rng.choice(list(Reg))
            value = rng.choice([rng.randint(-300, 300), rng.randint(-128, 127), 0])
            program.append(Cfg(reg, value))
        elif kind == "ldq":
            program.append(Ldq(rng.randrange(0, cfg.ub_rows - ldq_rows(cfg) + 1)))
        elif kind == "ldl":
            program.append(Ldl(rng.randrange(0, cfg.ub_rows - ldl_rows(cfg) + 1)))
        elif kind == "sync":
            program.append(Sync())
        elif kind == "int":
            program.append(Int(rng.randrange(0, 1 << 16)))
        else:
            program.append(Nop())
    program.append(Halt())
    return program, encode_program(program)


def _random_act(cfg, rng):
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
    acc = rng.randrange(0, cfg.acc_rows - rows + 1)
    out = 1 if pool == Pool.GLOBAL_AVG else rows
    ub = rng.randrange(0, cfg.ub_rows - out + 1)
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
        if 0 <= host < 1 << 64 and not in_window(windows, host, nbytes):
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
        return [Rhm(cfg.ub_rows - 1, 2, HOST_INPUT)]
    if kind == "acc_range":
        return [Mmc(0, 2, cfg.acc_rows - 1)]
    if kind == "weight_mem_range":
        return [Rw(cfg.weight_mem_tiles - 1, 2)]
    if kind == "underflow":
        # Switch to every pending tile, then once more.
        return [Mmc(0, 1, 0, switch=True)] * (pending + 1)
    if kind == "overflow":
        return [Rw(0, cfg.weight_fifo_tiles + 3 - pending)]
    if kind == "host_range":
        return [_outside(cfg, rng, windows)]
    raise ValueError(f"unknown fault kind {kind!r}")
