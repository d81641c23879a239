# amaranth: UnusedElaboratable=no
"""The requantizer with a narrow multiplier (the 32 x 32-bit product summed
over several cycles), bit for bit against the golden model, in Amaranth's
simulator: random and extreme operands, settings that change with every
value, every rounding (TFLite's two, one, and ONNX Runtime's float32 one
with ``mlas_round``)."""

import numpy as np
import pytest
from amaranth.sim import Simulator

from conftest import base_seed, long_only
from tpu.hdl.requantizer import Requantizer
from tpu.models.activation_model import (multiply_by_quantized_multiplier,
                                             multiply_by_quantized_multiplier_single_round,
                                             multiply_mlas_or_single_round, quantize_multiplier,
                                             wrap_int32)
from tpu.sim.stimulus.mlas_ties import conversion_ties, differing_ties


INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1
EDGES = [INT32_MIN, INT32_MIN + 1, -1, 0, 1, INT32_MAX]


#: rounding -> (single_round, mlas_round)
ROUNDINGS = {"double": (0, 0), "single": (1, 0), "mlas": (1, 1)}


def _expected(acc, bias, multiplier, shift, rounding, zero_point, low, high):
    x = int(wrap_int32(acc + bias))
    if rounding == "mlas":
        y = int(multiply_mlas_or_single_round(x, multiplier, shift))
    elif rounding == "single":
        y = int(multiply_by_quantized_multiplier_single_round(x, multiplier, shift))
        y = min(max(y, INT32_MIN), INT32_MAX)
    else:
        y = int(multiply_by_quantized_multiplier(x, multiplier, shift))
    return min(max(y + zero_point, low), high)


def _cases(rng, n):
    # The one product that saturates, divided by 2**32 (the largest right
    # shift), where its 2**31 and INT32_MAX round apart.
    cases = [dict(acc=INT32_MIN, bias=0, multiplier=INT32_MIN, shift=-32)]
    for k in range(n):
        edge = k < 2 * len(EDGES)
        if not edge and k % 2:
            # As a quantized network's: small sums, multipliers in [2**30,
            # 2**31) of either sign, right shifts; results near the bounds,
            # ties included (acc a multiple of a power of two).
            acc = int(rng.integers(-1 << 16, 1 << 16)) << int(rng.integers(0, 8))
            multiplier = int(rng.integers(1 << 30, 1 << 31)) * int(rng.choice([-1, 1]))
            shift = int(rng.integers(-24, 2))
            if k % 7 == 1:
                # Ties: x * 2**30 is a half for odd x; small x and shifts
                # keep the result inside the clamp.
                multiplier = (1 << 30) * int(rng.choice([-1, 1]))
                acc, shift = int(rng.integers(-600, 600)), int(rng.integers(-3, 1))
            elif k % 7 == 3:
                # Tiny products with shift 31 (no rounding when rounded once).
                acc, multiplier, shift = (int(rng.integers(-20, 21)), int(rng.integers(-20, 21)),
                                          31)
            cases.append(dict(acc=acc, bias=0 if k % 7 in (1, 3) else int(rng.integers(-500, 500)),
                              multiplier=multiplier, shift=shift))
            continue
        cases.append(dict(
            acc=EDGES[k % len(EDGES)] if edge else int(rng.integers(INT32_MIN, INT32_MAX + 1)),
            bias=0 if edge else int(rng.integers(-5000, 5000)),
            multiplier=EDGES[(k // 2) % len(EDGES)] if edge else int(rng.integers(INT32_MIN, INT32_MAX + 1)),
            shift=int(rng.integers(-32, 32)),
        ))
    return cases


def _mlas_cases(rng, n):
    """For the MLAS rounding: products at and next to the half, exactly or
    within float32's rounding (`differing_ties`, with ``|x|`` past
    2**24), float32 scales of every size with large and small sums, and a
    few multipliers that are not float32 significands (one rounding)."""
    x, m, shift = differing_ties(rng, n // 2)
    # A tenth of the ties with a multiplier whose low bits are set (not a
    # float32 significand: one rounding, which differs there).
    low_bits = np.where(np.arange(x.size) % 10 == 9, rng.integers(1, 128, x.size), 0)
    cases = [dict(acc=int(a), bias=0, multiplier=((int(b) << 7) + int(e)) * int(rng.choice([-1, 1])),
                  shift=int(c)) for a, b, c, e in zip(x, m, shift, low_bits)]
    # float32(x)'s own ties, where rounding x up instead of to even shows,
    # and those that round up, where rounding down shows.
    for odd in (False, True):
        x, m, shift = conversion_ties(rng, max(n // 10, 4), odd)
        cases += [dict(acc=int(a), bias=0, multiplier=(int(b) << 7) * int(rng.choice([-1, 1])),
                       shift=int(c)) for a, b, c in zip(x, m, shift)]
    # float32(x) of 25 or 26 bits rounded up through bit 15 (bits d - 1
    # to 15 set: a shared lane's low 16-bit piece is then 2**16) and, in
    # every fourth, into a new bit (a power of two); results of -200 to
    # -250 (a zero point of 200 passes them), where an error of 2**16 in
    # float32(x) (2**-9 of it at 25 bits) moves about half of them.
    for k in range(12):
        d = 2 if k % 3 == 2 else 1
        high = (1 << (d + 8)) - 1 if k % 4 == 3 else int(rng.integers(1 << (d + 7), 1 << (d + 8)))
        acc = (high << 16) + (1 << 16) - (1 << (d - 1)) + int(rng.integers(0, 1 << (d - 1)))
        scale = float(np.float32(int(rng.integers(200, 251)) / acc))
        multiplier, shift = quantize_multiplier(scale)
        cases.append(dict(acc=acc, bias=0, multiplier=-multiplier, shift=shift))
    while len(cases) < n:
        k = len(cases)
        if k % 5 == 1:
            # float32(x) for |x| > 2**24 at, below and above its half, with
            # results in the 8-bit range.
            bits = int(rng.integers(25, 32))
            d = bits - 24
            half = 1 << (d - 1)
            acc = (int(rng.integers(1 << 23, 1 << 24)) << d) + half + int(rng.integers(-1, 2))
            shift = max(-bits + int(rng.integers(-8, 8)), -32)
            cases.append(dict(acc=min(acc, INT32_MAX) * int(rng.choice([-1, 1])), bias=0,
                              multiplier=int(rng.integers(1 << 23, 1 << 24)) << 7, shift=shift))
            continue
        if k % 5 == 0:
            cases.append(dict(acc=int(rng.integers(INT32_MIN, INT32_MAX + 1)),
                              bias=int(rng.integers(-5000, 5000)),
                              multiplier=int(rng.integers(INT32_MIN, INT32_MAX + 1)),
                              shift=int(rng.integers(-32, 32))))
            continue
        scale = float(np.float32(np.exp(rng.uniform(np.log(2.0 ** -31), np.log(4.0)))))
        multiplier, shift = quantize_multiplier(scale)
        if not -32 <= shift <= 31:
            continue
        big = k % 2 == 0
        acc = int(rng.integers(INT32_MIN, INT32_MAX + 1)) if big else \
            int(round(float(rng.integers(-300, 300)) / scale)) + int(rng.integers(-3, 4))
        cases.append(dict(acc=int(np.clip(acc, INT32_MIN, INT32_MAX)), bias=0,
                          multiplier=multiplier * int(rng.choice([-1, 1])), shift=shift))
    return cases


#: The rounding CI runs each compact form at (the others in the long run).
COMPACT_ROUNDING_IN_CI = {8: "mlas", 16: "double"}


@pytest.mark.parametrize("rounding", list(ROUNDINGS))
@pytest.mark.parametrize("width,compact", [(8, False), (16, False), (32, False),
                                           (8, True), (16, True)])
def test_narrow_multiplier_matches_the_model(width, compact, rounding):
    if compact and rounding != COMPACT_ROUNDING_IN_CI[width]:
        long_only("the compact forms take 20-30 s a rounding; CI runs each width at one rounding, "
                  "and the activation pipeline's RTL tests run them")
    seed = base_seed()
    print(f"seed {seed}: replay with TPU_SEED={seed}")
    rng = np.random.default_rng(seed)
    dut = Requantizer(per_value_settings=True, multiplier_width=width, compact=compact)
    cycles = dut.multiply_cycles
    assert cycles == (32 // width) ** 2 and dut.latency == 4 + cycles
    # A zero point far from 0 lets results of 256..511 in magnitude through
    # (compact); in the full forms, 200 puts the drawn values near the
    # bounds (within 256) between the upper bound and it less the zero point.
    zero_point, low, high = (int(rng.choice([-200, 200])) if compact else 200), -256, 255
    # The compact forms simulate about 1,200 cycles each: 300 values of 4
    # cycles, 75 of 16 (300 of the 8-bit form's took 75 s of Amaranth's
    # simulator a rounding; the activation pipeline's RTL tests run that
    # form, 3x3 with `serial_act`, under both simulators besides).
    count = 1200 // cycles if compact else 60
    cases = _mlas_cases(rng, count) if rounding == "mlas" else _cases(rng, count)
    single_round, mlas_round = ROUNDINGS[rounding]
    results = {}

    async def bench(ctx):
        ctx.set(dut.zero_point, zero_point)
        ctx.set(dut.low, low)
        ctx.set(dut.high, high)
        ctx.set(dut.single_round, single_round)     # a setting of the whole operation
        ctx.set(dut.mlas_round, mlas_round)
        # A value every `cycles` cycles, each with its own settings; the
        # inputs change between starts, as a shared requantizer's do.
        for t in range(len(cases) * cycles + dut.latency + 1):
            k, phase = divmod(t, cycles)
            if k < len(cases) and phase == 0:
                case = cases[k]
                if cycles > 1:
                    ctx.set(dut.start, 1)
            else:
                case = {name: int(rng.integers(-32, 32)) for name in cases[0]}
                if cycles > 1:
                    ctx.set(dut.start, 0)
            for name in ("acc", "bias", "multiplier", "shift"):
                ctx.set(getattr(dut, name), case[name])
            ready = t - dut.latency
            if ready >= 0 and ready % cycles == 0 and ready // cycles < len(cases):
                results[ready // cycles] = ctx.get(dut.value)
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    for k, case in enumerate(cases):
        want = _expected(**case, rounding=rounding, zero_point=zero_point, low=low, high=high)
        assert results[k] == want, f"value {k} {case}: got {results[k]}, expected {want} (seed {seed})"


@pytest.mark.parametrize("rounding", list(ROUNDINGS))
def test_shared_settings_match_the_model(rounding):
    # Without per-value settings the stages take what they derive from the
    # shift from registers a cycle behind the inputs: settings that change
    # while the pipeline is empty, then a value in every cycle (the first in
    # the cycle the settings change), as the activation pipeline drives it.
    seed = base_seed()
    print(f"seed {seed}: replay with TPU_SEED={seed}")
    rng = np.random.default_rng(seed)
    dut = Requantizer()
    zero_point, low, high = -7, -256, 255
    runs = []
    for k in range(24):
        shift = [-32, -31, -1, 0, 1, 30, 31][k] if k < 7 else int(rng.integers(-32, 32))
        multiplier = EDGES[k % len(EDGES)] if k < 12 else int(rng.integers(INT32_MIN, INT32_MAX + 1))
        values = [EDGES[j] if j < len(EDGES) else int(rng.integers(INT32_MIN, INT32_MAX + 1))
                  for j in range(int(rng.integers(1, 12)))]
        runs.append((int(rng.integers(-5000, 5000)), multiplier, shift, values))
    if rounding == "mlas":
        # Each run's settings those of a constructed tie, its values the
        # tie and its neighbours; and float32 scales with random values.
        x, m, shifts = differing_ties(rng, 40)
        x, m, shifts = (np.concatenate(parts) for parts in zip((x, m, shifts), conversion_ties(rng, 8),
                                                                  conversion_ties(rng, 8, odd=True)))
        for k in range(len(x)):
            values = [int(x[k]) + int(rng.integers(-1, 2)) for _ in range(int(rng.integers(1, 4)))]
            runs.append((0, (int(m[k]) << 7) * int(rng.choice([-1, 1])), int(shifts[k]),
                         [int(x[k])] + values))
    single_round, mlas_round = ROUNDINGS[rounding]
    results = []

    async def bench(ctx):
        ctx.set(dut.zero_point, zero_point)
        ctx.set(dut.low, low)
        ctx.set(dut.high, high)
        ctx.set(dut.single_round, single_round)
        ctx.set(dut.mlas_round, mlas_round)
        for bias, multiplier, shift, values in runs:
            ctx.set(dut.bias, bias)
            ctx.set(dut.multiplier, multiplier)
            ctx.set(dut.shift, shift)
            got = []
            for t in range(len(values) + dut.latency):
                if t < len(values):
                    ctx.set(dut.acc, values[t])
                else:
                    ctx.set(dut.acc, int(rng.integers(INT32_MIN, INT32_MAX + 1)))
                if t >= dut.latency:
                    got.append(ctx.get(dut.value))
                await ctx.tick()
            results.append(got)

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    for (bias, multiplier, shift, values), got in zip(runs, results):
        want = [_expected(acc=v, bias=bias, multiplier=multiplier, shift=shift, rounding=rounding,
                          zero_point=zero_point, low=low, high=high) for v in values]
        assert got == want, f"bias {bias} multiplier {multiplier} shift {shift} {values}: got {got}, " \
                            f"expected {want} (seed {seed})"


def test_bad_multiplier_width_is_named():
    with pytest.raises(ValueError, match="multiplier_width must be 8, 16 or 32, not 12"):
        Requantizer(multiplier_width=12)
    with pytest.raises(ValueError, match="compact requantizer needs a multiplier_width of 8 or 16"):
        Requantizer(multiplier_width=32, compact=True)
