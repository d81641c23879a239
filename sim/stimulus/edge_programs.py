"""Directed programs at the edges random programs reach only by luck: every
interlocked pair of units on ranges that share exactly one row (at either
end) or are equal, RHM and WHM on the same host bytes, and every
instruction at the last UB or accumulator row and one row past it, and CFG
values above their range."""

from ...isa import (Act, Cfg, Conv, Func, Halt, Ldl, Ldq, Mmc, Reg, Rhm, Rw, Sync, Whm, ldl_rows,
                   ldq_rows)
from .program_generator import HOST_INPUT, HOST_OUTPUT


__all__ = ["edge_programs"]


def _hazard_pairs(cfg):
    """``(name, [earlier, later])`` for every interlocked pair of units, the
    two ranges sharing exactly one row at one end, at the other, or equal.
    The earlier instruction is long (8 rows, or as many as fit) so it still
    runs when the later one is ready to issue; the memories the pair does not
    meet in are kept apart, so only the range under test can hold it back."""
    R = cfg.rows
    n = min(8, cfg.ub_rows // 6, cfg.acc_rows // 6)
    base = cfg.ub_rows // 2 - n          # room on both sides
    acc_mid = cfg.acc_rows // 2 - n
    acc_low, acc_high = 0, cfg.acc_rows - n
    host = HOST_INPUT

    def ub_span(ins):
        match ins:
            case Rhm() | Whm():
                return ins.ub, ins.ub + ins.rows - 1
            case Mmc():
                return ins.ub, ins.last_ub_row
            case Ldq():
                return ins.ub, ins.ub + ldq_rows(cfg) - 1
            case Act():
                return ins.ub, ins.ub + ins.output_rows - 1

    def acc_span(ins):
        return ins.acc, ins.acc + ins.rows - 1

    # Instructions touching UB rows from `lo` on, in the role named.
    ub_writers = {
        "rhm": lambda lo: Rhm(lo, n, host + R * (lo % 16)),
        "act": lambda lo: Act(acc_low, lo, n),
    }
    ub_readers = {
        "whm": lambda lo: Whm(lo, n, HOST_OUTPUT + R * lo),
        "mmc": lambda lo: Mmc(lo, n, acc_high),
        "act": lambda lo: Ldq(lo),
    }
    pairs = []

    def add(name, first, second_at, span=ub_span):
        lo, hi = span(first)
        probe_lo, probe_hi = span(second_at(0))
        length = probe_hi - probe_lo + 1
        for how, start in (("one row above", hi), ("one row below", lo - length + 1),
                           ("equal", lo)):
            if (how != "equal" or length == hi - lo + 1) and start >= 0:
                pairs.append((f"{name}, {how}", [first, second_at(start)]))

    for a, make_w in ub_writers.items():
        for b, make_r in ub_readers.items():
            if a != b:
                add(f"UB RAW {a}->{b}", make_w(base), make_r)
    for a, make_r in ub_readers.items():
        for b, make_w in ub_writers.items():
            if a != b:
                add(f"UB WAR {a}->{b}", make_r(base), make_w)
    add("UB WAW rhm->act", ub_writers["rhm"](base), ub_writers["act"])
    add("UB WAW act->rhm", ub_writers["act"](base), ub_writers["rhm"])
    # Accumulators: MMC writes, ACT reads (UB rows far apart).
    add("ACC RAW mmc->act", Mmc(0, n, acc_mid), lambda lo: Act(lo, cfg.ub_rows - n, n), acc_span)
    add("ACC WAR act->mmc", Act(acc_mid, cfg.ub_rows - n, n), lambda lo: Mmc(0, n, lo), acc_span)
    # Host bytes: WHM writes what an RHM reads, and the other way round.
    for how, offset in (("equal", 0), ("one row above", n - 1), ("one row below", 1 - n)):
        at = host + R * (16 + offset)
        pairs.append((f"HOST RAW whm->rhm, {how}", [Whm(base, n, host + R * 16), Rhm(0, n, at)]))
        pairs.append((f"HOST WAR rhm->whm, {how}", [Rhm(0, n, host + R * 16), Whm(base, n, at)]))
    return pairs


def edge_programs(cfg):
    """``[(name, instructions)]``, each ending with HALT."""
    R = cfg.rows
    programs = []
    # The interlocks: a program for each pair, so nothing later overwrites
    # what an early read got. Weights first: with the reset's zero weights
    # every MMC computes zeros, whatever rows it read too early.
    for name, pair in _hazard_pairs(cfg):
        programs.append((name, [Rw(1, 1), Mmc(0, 1, 0, switch=True), Sync(), *pair, Halt()]))
    # The last UB and accumulator rows: in range, and one row past (a fault).
    last_ub, last_acc = cfg.ub_rows - 1, cfg.acc_rows - 1
    conv = Conv(2, 1, 3)
    conv_rows = 4
    conv_last = Mmc(0, conv_rows, 0, conv=conv).last_ub_row
    at_end = [
        ("RHM", lambda past: Rhm(last_ub - 1 + past, 2, HOST_INPUT)),
        ("WHM", lambda past: Whm(last_ub - 1 + past, 2, HOST_OUTPUT)),
        ("MMC", lambda past: Mmc(last_ub - 1 + past, 2, 0)),
        ("MMC conv", lambda past: Mmc(last_ub - conv_last + past, conv_rows, 0, conv=conv)),
        ("ACT", lambda past: Act(0, last_ub - 1 + past, 2)),
        ("LDQ", lambda past: Ldq(cfg.ub_rows - ldq_rows(cfg) + past)),
        ("LDL", lambda past: Ldl(cfg.ub_rows - ldl_rows(cfg) + past)),
        ("MMC acc", lambda past: Mmc(0, 2, last_acc - 1 + past)),
        ("ACT acc", lambda past: Act(last_acc - 1 + past, 0, 2)),
    ]
    for name, make in at_end:
        for past in (0, 1):
            what = "one row past the last" if past else "at the last"
            programs.append((f"{name} {what} row",
                             [Rhm(0, 4, HOST_INPUT), Mmc(0, 4, 0), make(past),
                              Whm(0, 4, HOST_OUTPUT + 64 * R), Halt()]))
    # An MMC waiting for its weight tile backs its rows up into the UB
    # reader, so the next MMC is ready before the last row is read: one pair
    # for each length from 1 to 6 rows, so that one of them fills the reader
    # exactly when its last row is due, whatever the reader's depth.
    pairs = []
    for rows in range(1, 7):
        acc = (rows - 1) * 12 % max(1, cfg.acc_rows - 12)
        pairs += [Rw(rows % cfg.weight_mem_tiles, 1), Mmc(0, rows, acc, switch=True),
                  Mmc(6, rows, acc + 6)]
    programs.append(("MMC right behind an MMC waiting for its weights", [*pairs, Halt()]))
    # CFG values past the top of their range: ACT must use them saturated
    # to the top, which random values reach only now and then.
    too_large = 1000
    programs.append(("CFG values above their range", [
        Rhm(0, 4, HOST_INPUT), Rw(1, 1), Mmc(0, 4, 0, switch=True),
        Cfg(Reg.OUT_ZERO_POINT, too_large), Act(0, 8, 4),
        Cfg(Reg.OUT_ZERO_POINT, 0), Cfg(Reg.CLAMP_MAX, too_large), Act(0, 12, 4, func=Func.CLAMP),
        Cfg(Reg.CLAMP_MIN, too_large), Act(0, 16, 4, func=Func.CLAMP), Halt()]))
    return programs
