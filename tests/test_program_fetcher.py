"""The program fetcher's queue of the narrow host side (`_WordQueue`) against
`SyncFIFOBuffered`, which it replaces, in Amaranth's simulator: the same
writes, reads and flushes give the same ``r_rdy`` and the same word at the
output in every cycle, so the fetcher's instructions come in the same
cycles as before."""

import random

import pytest
from amaranth import Module, ResetInserter, Signal
from amaranth.lib import fifo
from amaranth.sim import Simulator

from conftest import base_seed
from tpu.hdl.program_fetcher import _WordQueue


DEPTH = 128


@pytest.mark.parametrize("fill", ["trickle", "burst"])
def test_word_queue_matches_sync_fifo_buffered(fill):
    rng = random.Random(base_seed() + (fill == "burst"))
    m = Module()
    flush = Signal()
    m.submodules.new = new = ResetInserter(flush)(_WordQueue(width=32, depth=DEPTH))
    m.submodules.old = old = ResetInserter(flush)(fifo.SyncFIFOBuffered(width=32, depth=DEPTH))
    sim = Simulator(m)
    sim.add_clock(1e-8)

    async def bench(ctx):
        held = 0            # words written and not yet read, as the fetcher's `committed` bounds
        word = 0
        for cycle in range(6000):
            # Phases that fill the queue to its depth and drain it.
            phase = (cycle // 700) % 2
            write_p = (0.9 if phase == 0 else 0.2) if fill == "burst" else 0.5
            read_p = (0.1 if phase == 0 else 0.9) if fill == "burst" else 0.5
            w_en = held < DEPTH and rng.random() < write_p
            r_en = rng.random() < read_p
            do_flush = rng.random() < 0.002
            ctx.set(flush, do_flush)
            for q in (new, old):
                ctx.set(q.w_en, w_en)
                ctx.set(q.w_data, word)
                ctx.set(q.r_en, r_en)
            assert ctx.get(old.w_rdy) or not w_en
            assert ctx.get(new.r_rdy) == ctx.get(old.r_rdy), cycle
            ready = ctx.get(old.r_rdy)
            if ready:
                assert ctx.get(new.r_data) == ctx.get(old.r_data), cycle
            held += w_en - (r_en and ready)
            if do_flush:
                held = 0
            word = rng.getrandbits(32)
            await ctx.tick()

    sim.add_testbench(bench)
    sim.run()
