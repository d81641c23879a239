"""`decode_cycles` is the decoder's latency, start to done, cycle for cycle
(Amaranth's simulator; the core and chip tests compare the whole cycle model
with the RTL under both simulators): convolution MMCs and windowed ACTs, legal
and not, with small and large dividends, and words of every other opcode."""

import random

import pytest
from amaranth.sim import Simulator

from conftest import base_seed
from tpu import TPUConfig
from tpu.hdl.decoder import InstructionDecoder, decode_cycles, product_cycles
from tpu.isa import LAYOUTS, Act, Conv, Fault, Mmc, Opcode, Pool, check, random_instruction


def _words(rng, count):
    words = []
    for _ in range(count):
        kind = rng.random()
        if kind < 0.4:
            op = rng.choice([Opcode.MMC, Opcode.ACT])
            words.append(int.from_bytes(random_instruction(rng, op).encode(), "little"))
        elif kind < 0.8:
            # Any field values, reserved bits and all, with small image
            # sizes so that the windowed checks pass as well as fail.
            op = rng.choice([Opcode.MMC, Opcode.ACT])
            word = rng.getrandbits(128) & ~0xFF | op
            f = {f.name: f for f in LAYOUTS[op]}
            if op == Opcode.MMC:
                word = word & ~f["rows"].mask | f["rows"].insert(rng.choice(
                    [0, 1, 2, rng.randint(1, 300), rng.getrandbits(24)]))
                word |= f["conv"].insert(rng.random() < 0.8)
            else:
                in_w, k = rng.randint(0, 9), rng.randint(0, 5)
                rows = in_w * rng.randint(0, 9) + (rng.random() < 0.2)
                for name, value in (("in_w", in_w), ("pool_size", k), ("rows", rows),
                                    ("pool", rng.choice([Pool.MAX, Pool.AVG, Pool.AVG, Pool.NONE]))):
                    word = word & ~f[name].mask | f[name].insert(value)
            words.append(word)
        else:
            words.append(rng.getrandbits(128))
    return words


def _near_the_ub_end(rng, count, ub_rows):
    """Convolution MMCs and windowed ACTs whose last UB row is about the UB's last."""
    words = []
    for _ in range(count):
        if rng.random() < 0.6:
            ins = Mmc(rng.randrange(ub_rows), rng.randint(1, 300), 0,
                      conv=Conv(out_w=rng.randint(1, 20), col_step=rng.randint(0, 4),
                                row_step=rng.randint(0, 40)))
        else:
            k = rng.randint(1, 3)
            in_w = rng.randint(k, 16)
            ins = Act(0, rng.randrange(ub_rows), in_w * rng.randint(k, 20), pool=rng.choice([Pool.MAX, Pool.AVG]),
                      pool_size=k, pool_stride=rng.randint(1, 3), in_w=in_w)
        words.append(int.from_bytes(ins.encode(), "little"))
    return words


def _zero_widths():
    """Windowed ACTs with `in_w` zero (and `pool_size` zero, which would not
    stop them) over rows a multiple of 2**16: their remainder by zero is
    not zero, so the geometry ends after the first division."""
    words = []
    for rows in (1 << 16, 3 << 16, 1 << 20):
        for pool in (Pool.MAX, Pool.AVG):
            for k in (0, 1):
                f = {f.name: f for f in LAYOUTS[Opcode.ACT]}
                word = int(Opcode.ACT)
                for name, value in (("rows", rows), ("pool", pool), ("pool_size", k), ("pool_stride", 1)):
                    word |= f[name].insert(value)
                words.append(word)
    return words


#: The decoder with its products in one cycle, and a small one multiplying a
#: bit a cycle (`serial_decode`).
CONFIGS = [TPUConfig(rows=4, cols=4), TPUConfig(rows=4, cols=4, ub_rows=256, serial_decode=1)]


@pytest.mark.parametrize("config", CONFIGS, ids=["parallel", "serial"])
def test_decode_cycles_match_the_decoder(config):
    """Cycles for every word, and for MMCs and ACTs the fault `tpu.isa.check`
    gives (the serial products are clamped at the UB's size: words near the
    UB's end must fault exactly as the exact products say)."""
    seed = base_seed()
    print(f"seed {seed}: replay with TPU_SEED={seed}")
    rng = random.Random(seed)
    words = _words(rng, 400) + _near_the_ub_end(rng, 150, config.ub_rows) + _zero_widths()
    dut = InstructionDecoder(config)
    wrong = []
    faults = []

    async def testbench(ctx):
        for word in words:
            ctx.set(dut.word, word)
            ctx.set(dut.start, 1)
            await ctx.tick()
            ctx.set(dut.start, 0)
            cycles = 1
            while not ctx.get(dut.done):
                await ctx.tick()
                cycles += 1
                assert cycles < 200, f"word {word:#x} not decoded in 200 cycles"
            if cycles != decode_cycles(word, config):
                wrong.append((hex(word), cycles, decode_cycles(word, config)))
            if word & 0xFF in (Opcode.MMC, Opcode.ACT):
                want = check(word.to_bytes(16, "little"), config)
                if Fault(ctx.get(dut.fault)) != want:
                    faults.append((hex(word), Fault(ctx.get(dut.fault)).name, want.name))
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(testbench)
    sim.run()
    assert not wrong, f"(word, decoder cycles, decode_cycles) differ: {wrong[:4]} (seed {seed})"
    assert not faults, f"(word, decoder fault, check) differ: {faults[:4]} (seed {seed})"
    # The cases above all occurred: short and long divisions, failed windows.
    counts = {decode_cycles(w) for w in words}
    assert 3 in counts and max(counts) > 32 and any(9 <= c <= 13 for c in counts), sorted(counts)
    # Near the UB's end, words that fit and words that fault.
    near = [check(w.to_bytes(16, "little"), config) for w in words[400:]]
    assert Fault.NONE in near and Fault.UB_RANGE in near, set(near)


def test_serial_products_cost_their_bits():
    """With `serial_decode` a CONV MMC takes 4 products of `product_cycles`
    cycles more, a windowed ACT 1, and each division 24 cycles whatever its
    dividend (the parallel decoder's take the dividend's bits); other words
    are unchanged."""
    small = CONFIGS[1]
    n = product_cycles(small)
    assert n == 10
    conv = Mmc(0, 12, 0, conv=Conv(out_w=4, col_step=1, row_step=6)).encode()
    pooled = Act(0, 0, 16, pool=Pool.MAX, pool_size=2, pool_stride=2, in_w=4).encode()
    plain = Mmc(0, 12, 0).encode()
    # 11 / 4; 16 / 4, (4 - 2) / 2 and (4 - 2) / 2
    assert decode_cycles(conv) == 8 + 4
    assert decode_cycles(conv, small) == 8 + 24 + 4 * n
    assert decode_cycles(pooled) == 8 + 5 + 4 + 2 + 2
    assert decode_cycles(pooled, small) == 8 + 24 + 4 + 24 + 24 + n
    assert decode_cycles(plain, small) == decode_cycles(plain) == 3
