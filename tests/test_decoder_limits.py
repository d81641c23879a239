"""Each limit the instruction decoder checks, at exactly its configured value
and one past it (Amaranth's simulator): the fault the RTL raises equals
`tpu.isa.check`'s, and the value at the limit passes while the one past it
faults. Random programs rarely land on a limit exactly; an off-by-one there
(``>`` for ``>=``) is the bug these catch. The core and chip tests run the
same decoder under both simulators."""

import random
from types import SimpleNamespace

import pytest
from amaranth import Elaboratable, Fragment
from amaranth.sim import Simulator

from conftest import base_seed
from tpu import TPUConfig
from tpu.hdl.decoder import InstructionDecoder
from tpu.isa import LAYOUTS, MAX_POOL_COUNT, Fault, Opcode, Pool, check, ldl_rows, ldq_rows

#: Accumulator and UB rows beyond MAX_POOL_COUNT, so that GLOBAL_AVG's limit
#: is not hidden by a range fault; a narrow pooling line buffer.
CONFIG = TPUConfig(rows=4, cols=4, acc_rows=8192, ub_rows=8192, weight_mem_tiles=16, pool_max_width=12)


def _word(opcode, **values):
    fields = {f.name: f for f in LAYOUTS[opcode]}
    word = int(opcode)
    for name, value in values.items():
        word |= fields[name].insert(value)
    return word


def _limits(cfg, rng):
    """``(name, word at the limit, word one past it)`` for every limit."""
    ub, acc, tiles, width = cfg.ub_rows, cfg.acc_rows, cfg.weight_mem_tiles, cfg.pool_max_width
    rows = rng.randint(1, 40)
    size = rng.randint(1, 4)
    cases = []
    for op in (Opcode.RHM, Opcode.WHM):
        cases.append((f"{op.name} UB rows", _word(op, ub=ub - rows, rows=rows),
                      _word(op, ub=ub - rows + 1, rows=rows)))
    count = rng.randint(1, tiles)
    cases.append(("RW tiles", _word(Opcode.RW, tile=tiles - count, count=count),
                  _word(Opcode.RW, tile=tiles - count + 1, count=count)))
    cases.append(("MMC UB rows", _word(Opcode.MMC, ub=ub - rows, rows=rows),
                  _word(Opcode.MMC, ub=ub - rows + 1, rows=rows)))
    cases.append(("MMC accumulator rows", _word(Opcode.MMC, acc=acc - rows, rows=rows),
                  _word(Opcode.MMC, acc=acc - rows + 1, rows=rows)))
    cases.append(("ACT accumulator rows", _word(Opcode.ACT, acc=acc - rows, rows=rows),
                  _word(Opcode.ACT, acc=acc - rows + 1, rows=rows)))
    cases.append(("ACT UB rows", _word(Opcode.ACT, ub=ub - rows, rows=rows),
                  _word(Opcode.ACT, ub=ub - rows + 1, rows=rows)))
    for pool in (Pool.MAX, Pool.AVG):
        def windowed(in_w):
            return _word(Opcode.ACT, rows=in_w * size, pool=pool, pool_size=size, pool_stride=size, in_w=in_w)
        cases.append((f"ACT {pool.name} in_w = pool_max_width", windowed(width), windowed(width + 1)))
    cases.append(("ACT GLOBAL_AVG rows", _word(Opcode.ACT, rows=MAX_POOL_COUNT, pool=Pool.GLOBAL_AVG),
                  _word(Opcode.ACT, rows=MAX_POOL_COUNT + 1, pool=Pool.GLOBAL_AVG)))
    cases.append(("LDQ UB rows", _word(Opcode.LDQ, ub=ub - ldq_rows(cfg)), _word(Opcode.LDQ, ub=ub - ldq_rows(cfg) + 1)))
    cases.append(("LDL UB rows", _word(Opcode.LDL, ub=ub - ldl_rows(cfg)), _word(Opcode.LDL, ub=ub - ldl_rows(cfg) + 1)))
    return cases


class _ElaboratedFor(Elaboratable):
    """`dut` elaborated as for a platform of `family`, in Amaranth's
    simulator: the decoder's geometry products are then what a board build
    makes of them (in logic on an iCE40, and on an ECP5 with `dsp_bands`)."""

    def __init__(self, dut, family):
        self.dut, self.family = dut, family

    def elaborate(self, platform):
        return Fragment.get(self.dut, SimpleNamespace(family=self.family))


def _decoded(cfg, words, family=None, out_rows=None):
    """The decoder's fault for each of `words` (and each ACT's output rows
    into `out_rows`, a list, when given)."""
    dut = InstructionDecoder(cfg)
    faults = []

    async def testbench(ctx):
        # One window over all host memory: only the instruction's own ranges matter.
        ctx.set(dut.windows[0].base, 0)
        ctx.set(dut.windows[0].size, (1 << cfg.host_addr_bits) - 1)
        for word in words:
            ctx.set(dut.word, word)
            ctx.set(dut.start, 1)
            await ctx.tick()
            ctx.set(dut.start, 0)
            await ctx.tick().until(dut.done)
            faults.append(Fault(ctx.get(dut.fault)))
            if out_rows is not None:
                out_rows.append(ctx.get(dut.out_rows))

    sim = Simulator(dut if family is None else _ElaboratedFor(dut, family))
    sim.add_clock(1e-8)
    sim.add_testbench(testbench)
    sim.run()
    return faults


SMALL = TPUConfig(rows=2, cols=3, acc_rows=64, ub_rows=256, weight_mem_tiles=4, pool_max_width=16)


#: The small decoder (`serial_decode`: products a bit a cycle; `serial_issue`:
#: no ranges registered) on the same limits.
@pytest.mark.parametrize("cfg", [CONFIG, SMALL, SMALL.replace(serial_issue=1, serial_decode=1)],
                         ids=["4x4", "2x3", "2x3-serial"])
def test_every_limit_at_and_one_past(cfg):
    seed = base_seed()
    print(f"seed {seed}: replay with TPU_SEED={seed}")
    cases = _limits(cfg, random.Random(seed))
    words = [w for _, at, past in cases for w in (at, past)]
    faults = _decoded(cfg, words)
    wrong = []
    for (name, at, past), got_at, got_past in zip(cases, faults[0::2], faults[1::2]):
        want_at, want_past = check(at.to_bytes(16, "little"), cfg), check(past.to_bytes(16, "little"), cfg)
        # The cases are built so that the limit, and only it, decides.
        if name.startswith("ACT GLOBAL") and cfg.acc_rows <= MAX_POOL_COUNT:
            assert want_at == Fault.ACC_RANGE
        else:
            assert want_at == Fault.NONE and want_past != Fault.NONE, (name, want_at, want_past)
        if (got_at, got_past) != (want_at, want_past):
            wrong.append(f"{name}: decoder {got_at.name}/{got_past.name}, check {want_at.name}/{want_past.name}")
    assert not wrong, f"seed {seed}: " + "; ".join(wrong)


def _geometry_cases(cfg, rng, count):
    """Convolution MMCs and windowed ACTs whose last UB row lands at, just
    before or just past the UB's end, or (large steps and images) far past
    it, where the decoder's bounded products saturate."""
    words = []
    for _ in range(count):
        out_w = rng.choice([1, rng.randint(1, 40), rng.randint(1, 1 << 16) - 1])
        col_step = rng.randint(0, 255)
        row_step = rng.choice([rng.randint(0, 64), rng.randint(0, (1 << 16) - 1)])
        rows = rng.choice([rng.randint(1, 64), rng.randint(1, 1 << 14), rng.randint(1, (1 << 24) - 1)])
        span = max((b // out_w) * row_step + (b % out_w) * col_step
                   for b in {rows - 1, max(rows - 1 - (rows - 1) % out_w - 1, 0),
                             min(out_w, rows) - 1})
        ub = max(0, min(cfg.ub_rows - 1 - span + rng.randint(-1, 1), (1 << 24) - 1))
        words.append(_word(Opcode.MMC, conv=1, ub=ub, rows=rows, out_w=out_w, col_step=col_step,
                           row_step=row_step))
        size = rng.randint(1, 4)
        stride = rng.randint(1, 4)
        in_w = rng.randint(size, cfg.pool_max_width)
        in_h = rng.choice([rng.randint(size, 64), rng.randint(size, (1 << 24) // in_w - 1)])
        pooled = ((in_h - size) // stride + 1) * ((in_w - size) // stride + 1)
        ub = max(0, min(cfg.ub_rows - pooled + rng.randint(-1, 1), (1 << 24) - 1))
        words.append(_word(Opcode.ACT, ub=ub, rows=in_w * in_h, pool=rng.choice([Pool.MAX, Pool.AVG]),
                           pool_size=size, pool_stride=stride, in_w=in_w))
    return words


#: The decoder's products as a board build makes them: the bounded products
#: in logic, in registered terms (an iCE40's, an ECP5's with the array in DSP
#: bands), and on the platform's multipliers (an ECP5 without).
@pytest.mark.parametrize("family, cfg", [("ice40", CONFIG), ("ecp5", CONFIG.replace(dsp_bands=1)),
                                         ("ecp5", CONFIG),
                                         ("ice40", CONFIG.replace(serial_issue=1, serial_decode=1))],
                         ids=["ice40", "ecp5-dsp-bands", "ecp5", "ice40-serial"])
def test_geometry_products_as_built(family, cfg):
    seed = base_seed()
    print(f"seed {seed}: replay with TPU_SEED={seed}")
    words = _geometry_cases(cfg, random.Random(seed), 60)
    out_rows = []
    faults = _decoded(cfg, words, family, out_rows)
    wrong = []
    for word, got, rows in zip(words, faults, out_rows):
        want = check(word.to_bytes(16, "little"), cfg)
        if got != want:
            wrong.append(f"{word:#x}: decoder {got.name}, check {want.name}")
    assert not wrong, f"seed {seed}: " + "; ".join(wrong[:5])
    # Both sides of the UB's end are reached.
    assert {Fault.NONE, Fault.UB_RANGE} <= set(faults), faults


def _host_range_model(cfg, windows, host, rows):
    """HOST_RANGE of an RHM or WHM against `windows` ((base, size) pairs),
    as `tpu.driver.golden` and the decoder's docstring state it."""
    nbytes = rows * cfg.rows
    if nbytes == 0:
        return False
    end = host + nbytes
    if end > 1 << min(64, cfg.host_addr_bits):
        return True
    return not any(size and base <= host and end <= base + size for base, size in windows)


def _window_cases(cfg, rng, count):
    """(windows, host, rows) with spans at the windows' edges: exact fits, a
    byte over either end, windows that reach or pass the top of the address
    space, closed windows."""
    top = 1 << cfg.host_addr_bits
    cases = []
    for _ in range(count):
        windows = []
        for _ in range(cfg.dma_windows):
            kind = rng.choice(["closed", "low", "top", "past_top"])
            if kind == "closed":
                windows.append((rng.randrange(top), 0))
            elif kind == "low":
                windows.append((rng.randrange(1 << 20), rng.randrange(1, 1 << 16)))
            elif kind == "top":
                size = rng.randrange(1, 1 << 16)
                windows.append((top - size, size))
            else:
                base = top - rng.randrange(1, 1 << 12)
                windows.append((base, rng.randrange(top - base, top)))
        # Up to the whole UB: the small decoder's byte count is as wide as
        # the UB's bytes.
        rows = rng.choice([0, 1, rng.randrange(1, 64), rng.randrange(64, cfg.ub_rows + 1)])
        nbytes = rows * cfg.rows
        base, size = rng.choice(windows)
        host = rng.choice([base, base - 1, base + 1, base + size - nbytes, base + size - nbytes + 1,
                           base + size - nbytes - 1, top - nbytes, top - nbytes + cfg.rows,
                           rng.randrange(top)])
        host %= top
        # Bits above host_addr_bits, which no window reaches (the small
        # decoder keeps them as one bit beside the narrow span), mostly on a
        # span whose low bits lie inside the window.
        if cfg.host_addr_bits < 64 and rng.random() < 0.25:
            if size >= nbytes and rng.random() < 0.75:
                host = base
            host |= rng.randrange(1, 1 << (64 - cfg.host_addr_bits)) << cfg.host_addr_bits
        cases.append((windows, host, rows))
    if cfg.host_addr_bits < 64:
        # And spans that would be inside an open window by their low bits.
        for _ in range(3):
            base = rng.randrange(1 << 20)
            rows = rng.randrange(1, 64)
            high = rng.randrange(1, 1 << (64 - cfg.host_addr_bits)) << cfg.host_addr_bits
            cases.insert(rng.randrange(len(cases) + 1),
                         ([(base, rows * cfg.rows + rng.randrange(1 << 12))] * cfg.dma_windows,
                          high | (base + rng.randrange(2)), rows))
    return cases


@pytest.mark.parametrize("cfg", [CONFIG.replace(dma_windows=3),
                                 SMALL.replace(dma_windows=1, host_addr_bits=32, serial_issue=1,
                                               serial_decode=1)],
                         ids=["4x4-64bit", "2x3-32bit-serial"])
def test_host_range_with_windows_set_at_start(cfg):
    """RHM and WHM against random DMA windows at their edges, the windows
    changed in the very cycle of ``start`` (the earliest the decoder may
    sample them; each window's end is registered beside it)."""
    seed = base_seed()
    print(f"seed {seed}: replay with TPU_SEED={seed}")
    rng = random.Random(seed)
    cases = _window_cases(cfg, rng, 60)
    top = 1 << cfg.host_addr_bits
    if cfg.host_addr_bits < 64:
        # Some span above the windows' width would be inside one by its low bits.
        assert any(h >= top and r and not _host_range_model(cfg, w, h % top, r) for w, h, r in cases)
    dut = InstructionDecoder(cfg)
    got = []

    async def testbench(ctx):
        for windows, host, rows in cases:
            for i, (base, size) in enumerate(windows):
                ctx.set(dut.windows[i].base, base)
                ctx.set(dut.windows[i].size, size)
            ctx.set(dut.word, _word(rng.choice([Opcode.RHM, Opcode.WHM]), ub=0, rows=rows, host=host))
            ctx.set(dut.start, 1)
            await ctx.tick()
            ctx.set(dut.start, 0)
            await ctx.tick().until(dut.done)
            got.append(Fault(ctx.get(dut.fault)))
            # Half the time closed and moved away after the decode, half the
            # time left open to be resized at the next start: the next
            # case's windows must be taken from its own start either way.
            if rng.random() < 0.5:
                for i in range(cfg.dma_windows):
                    ctx.set(dut.windows[i].base, (1 << cfg.host_addr_bits) - 1)
                    ctx.set(dut.windows[i].size, 0)
            for _ in range(rng.randrange(3)):
                await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(testbench)
    sim.run()
    wrong = [f"windows {[(hex(b), hex(s)) for b, s in w]} host 0x{h:x} rows {r}: {f.name}"
             for (w, h, r), f in zip(cases, got)
             if f != (Fault.HOST_RANGE if _host_range_model(cfg, w, h, r) else Fault.NONE)]
    assert sum(f == Fault.HOST_RANGE for f in got) >= 10 and sum(f == Fault.NONE for f in got) >= 10
    assert not wrong, f"seed {seed}: " + "; ".join(wrong)


def _far_values(rng, width, bits):
    """Values of a `width`-bit field about the powers of two from ``2**(bits -
    1)`` up, where the small decoder's clamped sums must still fault."""
    top = (1 << width) - 1
    k = rng.randint(bits - 1, width)
    near = [(1 << k) - 1, 1 << k, (1 << k) + 1, (1 << k) + rng.randint(0, 1 << k)]
    return min(top, rng.choice([0, 1, rng.randint(0, 1 << bits), rng.randint(0, top), *near]))


@pytest.mark.parametrize("cfg", [SMALL.replace(serial_issue=1, serial_decode=1),
                                 SMALL.replace(ub_rows=200, acc_rows=40, serial_issue=1, serial_decode=1)],
                         ids=["2x3-serial", "2x3-serial-odd-sizes"])
def test_small_decoder_far_past_the_memories(cfg):
    """The small decoder's UB, accumulator and weight-memory spans and last
    UB rows are summed from operands clamped at a power of two: words with
    first rows and counts far past the memories, at and about each power
    of two up to the fields' widths, fault as `tpu.isa.check` says, and an
    ACT that passes has its output rows exact."""
    seed = base_seed()
    print(f"seed {seed}: replay with TPU_SEED={seed}")
    rng = random.Random(seed)
    bits = max(cfg.ub_rows, cfg.acc_rows, cfg.weight_mem_tiles).bit_length()
    spans = {Opcode.RHM: ("ub", "rows"), Opcode.WHM: ("ub", "rows"), Opcode.RW: ("tile", "count"),
             Opcode.MMC: ("ub", "acc", "rows"), Opcode.ACT: ("ub", "acc", "rows"),
             Opcode.LDQ: ("ub",), Opcode.LDL: ("ub",)}
    words = []
    for _ in range(300):
        op = rng.choice(list(spans))
        widths = {f.name: f.width for f in LAYOUTS[op]}
        values = {name: _far_values(rng, widths[name], bits) for name in spans[op]}
        # Half the time every field but one inside its memory.
        if rng.random() < 0.5:
            keep = rng.choice(spans[op])
            values = {name: v if name == keep else rng.randint(0, 7) for name, v in values.items()}
        words.append(_word(op, **values))
    out_rows = []
    faults = _decoded(cfg, words, out_rows=out_rows)
    wrong = [f"0x{w:032x}: decoder {got.name}, check {check(w.to_bytes(16, 'little'), cfg).name}"
             for w, got in zip(words, faults) if got != check(w.to_bytes(16, "little"), cfg)]
    wrong += [f"0x{w:032x}: out_rows {rows}" for w, got, rows in zip(words, faults, out_rows)
              if w & 0xFF == Opcode.ACT and got == Fault.NONE and rows != _field(w, Opcode.ACT, "rows")]
    assert sum(f == Fault.NONE for f in faults) >= 30 and sum(f != Fault.NONE for f in faults) >= 100
    assert not wrong, f"seed {seed}: " + "; ".join(wrong[:10])


def _field(word, opcode, name):
    f = {f.name: f for f in LAYOUTS[opcode]}[name]
    return (word >> f.lsb) & ((1 << f.width) - 1)


@pytest.mark.parametrize("cfg", [SMALL.replace(serial_issue=1, serial_decode=1),
                                 SMALL.replace(ub_rows=200, acc_rows=40, serial_issue=1, serial_decode=1)],
                         ids=["2x3-serial", "2x3-serial-odd-sizes"])
def test_small_decoder_tall_and_wide_convolutions(cfg):
    """Convolutions whose last output row or column (the small decoder keeps
    them clamped) lies at and about every power of two from the UB's up to
    the fields' widths, with steps of 0 and 1, so that only that row or
    column reaches past the UB: the fault `tpu.isa.check` gives (UB_RANGE,
    or ACC_RANGE where the span stays inside the UB)."""
    words = []
    for k in range(cfg.ub_rows.bit_length() - 1, 24):
        for last in ((1 << k) - 1, 1 << k, (1 << k) + 1):
            if last + 1 < 1 << 24:
                # The last row: one pixel a row, a row step of 1 or 0.
                for row_step in (0, 1):
                    words.append(_word(Opcode.MMC, conv=1, rows=last + 1, out_w=1, col_step=0,
                                       row_step=row_step))
            if last < (1 << 16) - 1:
                # The last column of one wide row.
                for col_step in (0, 1):
                    words.append(_word(Opcode.MMC, conv=1, rows=last + 1, out_w=(1 << 16) - 1,
                                       col_step=col_step, row_step=0))
    faults = _decoded(cfg, words)
    wrong = []
    for word, got in zip(words, faults):
        want = check(word.to_bytes(16, "little"), cfg)
        if got != want:
            wrong.append(f"rows {_field(word, Opcode.MMC, 'rows')} out_w {_field(word, Opcode.MMC, 'out_w')}: "
                         f"decoder {got.name}, check {want.name}")
    assert not wrong, "; ".join(wrong[:5])
    assert {Fault.UB_RANGE, Fault.ACC_RANGE} <= set(faults), set(faults)


#: ACT's mlas_round on chips with and without the MLAS rounding
#: (`TPUConfig.mlas_rounding`): legal on one, ILLEGAL_FIELD on the other,
#: as `tpu.isa.check` says, with or without single_round.
@pytest.mark.parametrize("cfg", [SMALL, SMALL.replace(mlas_rounding=0),
                                 SMALL.replace(serial_issue=1, serial_decode=1, mlas_rounding=0)],
                         ids=["2x3", "2x3-no-mlas", "2x3-serial-no-mlas"])
def test_mlas_round_only_where_built(cfg):
    words = [_word(Opcode.ACT, rows=4, **flags)
             for flags in ({}, {"single_round": 1}, {"mlas_round": 1},
                           {"mlas_round": 1, "single_round": 1})]
    want = [check(w.to_bytes(16, "little"), cfg) for w in words]
    bad = Fault.NONE if cfg.mlas_rounding else Fault.ILLEGAL_FIELD
    assert want == [Fault.NONE, Fault.NONE, bad, bad]
    assert _decoded(cfg, words) == want
