"""`decode_cycles` is the decoder's latency, start to done, cycle for cycle
(Amaranth's simulator; the core and chip tests compare the whole cycle model
with the RTL under both simulators): convolution MMCs and windowed ACTs, legal
and not, with small and large dividends, and words of every other opcode."""

import random

from amaranth.sim import Simulator

from conftest import base_seed
from tpu import TPUConfig
from tpu.hdl.decoder import InstructionDecoder, decode_cycles
from tpu.isa import LAYOUTS, Opcode, Pool, random_instruction


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


def test_decode_cycles_match_the_decoder():
    seed = base_seed()
    print(f"seed {seed}: replay with TPU_SEED={seed}")
    rng = random.Random(seed)
    words = _words(rng, 400)
    dut = InstructionDecoder(TPUConfig(rows=4, cols=4))
    wrong = []

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
            if cycles != decode_cycles(word):
                wrong.append((hex(word), cycles, decode_cycles(word)))
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(testbench)
    sim.run()
    assert not wrong, f"(word, decoder cycles, decode_cycles) differ: {wrong[:4]} (seed {seed})"
    # The cases above all occurred: short and long divisions, failed windows.
    counts = {decode_cycles(w) for w in words}
    assert 3 in counts and max(counts) > 32 and any(9 <= c <= 13 for c in counts), sorted(counts)
